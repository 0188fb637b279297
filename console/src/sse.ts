/**
 * Server-Sent Events, parsed from a streamed `fetch` body.
 *
 * `EventSource` cannot send an `Authorization` header, and the lock routes
 * may need one, so the console reads `GET /locks/{key}/events` with `fetch`
 * and parses the event stream itself, as the HTML standard describes it:
 * lines end with CRLF, LF or CR; a blank line dispatches; `:` starts a
 * comment (the gateway's keep-alive); `id` persists across events and is
 * what a reconnection sends back as `Last-Event-ID`.
 */

export interface ServerSentEvent {
  /** The `event` field, `message` when none was given. */
  event: string;
  /** The `data` lines, joined by newlines. */
  data: string;
  /** The last event id seen so far (the stream's, not only this event's). */
  lastEventId: string | undefined;
}

/** Turns chunks of an event stream into events, whatever the chunk boundaries. */
export class EventStreamParser {
  private pending = "";
  private event = "";
  private data: string[] = [];
  private id: string | undefined;

  constructor(lastEventId?: string) {
    this.id = lastEventId;
  }

  /** The id a reconnection should send as `Last-Event-ID`. */
  get lastEventId(): string | undefined {
    return this.id;
  }

  /** The events completed by `chunk`. */
  feed(chunk: string): ServerSentEvent[] {
    const text = this.pending + chunk;
    const events: ServerSentEvent[] = [];
    let lineStart = 0;
    let at = 0;
    for (; at < text.length; at++) {
      const c = text[at];
      if (c !== "\n" && c !== "\r") continue;
      // A CR at the end of a chunk may be the first half of a CRLF.
      if (c === "\r" && at + 1 === text.length) break;
      const event = this.line(text.slice(lineStart, at));
      if (event) events.push(event);
      if (c === "\r" && text[at + 1] === "\n") at++;
      lineStart = at + 1;
    }
    this.pending = text.slice(lineStart);
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
      // `retry` and unknown fields: the console keeps its own back-off.
    }
    return undefined;
  }

  private dispatch(): ServerSentEvent | undefined {
    const event =
      this.data.length === 0
        ? undefined
        : { event: this.event || "message", data: this.data.join("\n"), lastEventId: this.id };
    this.event = "";
    this.data = [];
    return event;
  }
}
