/**
 * The Server-Sent Events reader of lockgate's TypeScript: the WHATWG
 * `text/event-stream` format, parsed incrementally from the bytes of a
 * `fetch` body. The client reads streamed locks and lock watches with it,
 * and the console (which imports this file) a lock's events.
 *
 * Not `EventSource`: it cannot send a POST body or an `Authorization`
 * header. The parsing follows the HTML standard's "Parsing an event stream"
 * and "Interpreting an event stream" to the letter; reconnecting is left to
 * the callers, which know what a lost stream means for them.
 */

/** One dispatched event. */
export interface ServerSentEvent {
  /** The `event` field; `message` when there was none. */
  event: string;
  /** The `data` fields' values, joined with `\n`. */
  data: string;
  /**
   * The stream's last event id when this event was dispatched: set by an
   * `id` field, it persists across events until another `id` changes it
   * (`MessageEvent.lastEventId`). Empty when no id was ever set.
   */
  lastEventId: string;
}

const LINE_FEED = 0x0a;
const CARRIAGE_RETURN = 0x0d;
const BYTE_ORDER_MARK = "\uFEFF";

/**
 * Incremental parser: feed it the stream's bytes as they arrive, split
 * anywhere (inside a line, a CRLF or a UTF-8 character); it hands back the
 * events completed so far.
 */
export class EventStreamParser {
  // The BOM is the parser's to drop, exactly one, wherever the chunks split it.
  private readonly decoder = new TextDecoder("utf-8", { ignoreBOM: true });
  /** The text after the last line end seen. */
  private pending = "";
  private atStart = true;
  /** The last chunk ended in `\r`: a `\n` opening the next one ends no second line. */
  private afterCarriageReturn = false;
  private eventType = "";
  private dataLines: string[] = [];
  private idBuffer: string;
  private lastId: string;
  private retryMs: number | undefined;

  /** `lastEventId`: the id a reconnection resumed after, which events carry until the stream sets another. */
  constructor(lastEventId = "") {
    this.idBuffer = lastEventId;
    this.lastId = lastEventId;
  }

  /**
   * The id to resume after (`Last-Event-ID`): the one in force at the last
   * blank line, whether or not that dispatched an event. Empty for none.
   */
  get lastEventId(): string {
    return this.lastId;
  }

  /** The last valid `retry` field: the reconnection time the server asks for, in milliseconds. */
  get reconnectionTimeMs(): number | undefined {
    return this.retryMs;
  }

  /** The events that `chunk` completes. */
  feed(chunk: Uint8Array): ServerSentEvent[] {
    let text = this.pending + this.decoder.decode(chunk, { stream: true });
    if (text === "") return [];
    if (this.atStart) {
      this.atStart = false;
      if (text.startsWith(BYTE_ORDER_MARK)) text = text.slice(1);
    }
    let start = 0;
    if (this.afterCarriageReturn && text.charCodeAt(0) === LINE_FEED) start = 1;
    this.afterCarriageReturn = false;
    const events: ServerSentEvent[] = [];
    for (let at = start; at < text.length; at++) {
      const c = text.charCodeAt(at);
      if (c !== LINE_FEED && c !== CARRIAGE_RETURN) continue;
      const event = this.line(text.slice(start, at));
      if (event) events.push(event);
      if (c === CARRIAGE_RETURN) {
        if (at + 1 === text.length) this.afterCarriageReturn = true;
        else if (text.charCodeAt(at + 1) === LINE_FEED) at++;
      }
      start = at + 1;
    }
    this.pending = text.slice(start);
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
        this.eventType = value;
        break;
      case "data":
        this.dataLines.push(value);
        break;
      case "id":
        if (!value.includes("\0")) this.idBuffer = value;
        break;
      case "retry":
        if (/^[0-9]+$/.test(value)) this.retryMs = Number(value);
        break;
      // Any other field is ignored.
    }
    return undefined;
  }

  private dispatch(): ServerSentEvent | undefined {
    this.lastId = this.idBuffer;
    const event =
      this.dataLines.length === 0
        ? undefined
        : { event: this.eventType || "message", data: this.dataLines.join("\n"), lastEventId: this.lastId };
    this.eventType = "";
    this.dataLines = [];
    return event;
  }
}

export interface ReadOptions {
  /** The parser to read with; pass your own to read its `lastEventId` once the stream ends or breaks. */
  parser?: EventStreamParser;
  /** Hears of every chunk read, keep-alive comments included: a sign of life. */
  onChunk?: () => void;
}

/**
 * The events of a response body, in order. Ends when the body ends; throws
 * what reading throws (a broken connection, an abort: give `fetch` a signal
 * to stop a read that waits).
 */
export async function* readEvents(
  body: ReadableStream<Uint8Array>,
  options: ReadOptions = {},
): AsyncGenerator<ServerSentEvent, void, undefined> {
  const parser = options.parser ?? new EventStreamParser();
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      options.onChunk?.();
      yield* parser.feed(value);
    }
    // An event not closed by a blank line when the stream ends is dropped
    // (the standard's rule): it may be cut short.
  } finally {
    // Stops the body when the consumer stops early; a no-op once it ended.
    reader.cancel().catch(() => {});
  }
}
