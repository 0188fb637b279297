/**
 * A Server-Sent Events reader (the WHATWG `text/event-stream` format) over a
 * `fetch` response body: the gateway's streamed locks and lock watches both
 * speak it.
 *
 * Small on purpose: `EventSource` cannot send a POST body or an
 * `Authorization` header, and the gateway needs only `event`, `data` and
 * `id`. Comments (the gateway's keep-alives) and `retry` are skipped.
 */

/** One dispatched event. */
export interface ServerSentEvent {
  /** The `event` field; `message` when there was none. */
  event: string;
  /** The `data` lines, joined with `\n`. */
  data: string;
  /** The `id` field of this event, if it had one. */
  id: string | undefined;
}

/**
 * Incremental parser: feed it decoded text as it arrives; it hands back the
 * events completed so far. Lines may end in `\n`, `\r\n` or `\r`, and may be
 * split anywhere between chunks.
 */
export class EventStreamParser {
  private buffer = "";
  /** A chunk ended in `\r`: a `\n` opening the next one belongs to it. */
  private pendingCarriageReturn = false;
  private event = "";
  private data: string[] = [];
  private id: string | undefined;

  feed(chunk: string): ServerSentEvent[] {
    if (this.pendingCarriageReturn && chunk.startsWith("\n")) chunk = chunk.slice(1);
    this.pendingCarriageReturn = false;
    this.buffer += chunk;
    const events: ServerSentEvent[] = [];
    let start = 0;
    for (;;) {
      const end = lineEnd(this.buffer, start);
      if (end < 0) break;
      const line = this.buffer.slice(start, end);
      if (this.buffer[end] === "\r") {
        if (end + 1 === this.buffer.length) this.pendingCarriageReturn = true;
        start = this.buffer[end + 1] === "\n" ? end + 2 : end + 1;
      } else {
        start = end + 1;
      }
      const event = this.line(line);
      if (event) events.push(event);
    }
    this.buffer = this.buffer.slice(start);
    return events;
  }

  private line(line: string): ServerSentEvent | undefined {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "event":
        this.event = value;
        break;
      case "data":
        this.data.push(value);
        break;
      case "id":
        if (!value.includes("\0")) this.id = value;
        break;
    }
    return undefined;
  }

  private dispatch(): ServerSentEvent | undefined {
    const hadData = this.data.length > 0;
    const event = { event: this.event || "message", data: this.data.join("\n"), id: this.id };
    this.event = "";
    this.data = [];
    this.id = undefined;
    // An event with no data field is not dispatched (the spec's rule).
    return hadData ? event : undefined;
  }
}

function lineEnd(text: string, from: number): number {
  for (let i = from; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x0a || c === 0x0d) return i;
  }
  return -1;
}

/**
 * The events of a response body, in order. Ends when the body ends; throws
 * what reading throws (a broken connection, an abort). `onChunk` hears of
 * every chunk read, keep-alive comments included: a sign of life.
 */
export async function* readEvents(
  body: ReadableStream<Uint8Array>,
  onChunk?: () => void,
): AsyncGenerator<ServerSentEvent, void, undefined> {
  const parser = new EventStreamParser();
  const decoder = new TextDecoder();
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      onChunk?.();
      yield* parser.feed(decoder.decode(value, { stream: true }));
    }
    // An event not closed by a blank line when the stream ends is dropped
    // (the spec's rule): it may be cut short.
  } finally {
    // Stops the body when the consumer stops early; a no-op once it ended.
    reader.cancel().catch(() => {});
  }
}
