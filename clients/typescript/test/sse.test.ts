/**
 * The Server-Sent Events reader, rule by rule of the WHATWG standard
 * ("Parsing an event stream", "Interpreting an event stream"), and the same
 * events however the bytes are split.
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { EventStreamParser, readEvents, type ServerSentEvent } from "../dist/sse.js";

const encode = (text: string) => new TextEncoder().encode(text);

/** The events of `text` fed in one chunk. */
function parse(text: string, parser = new EventStreamParser()): ServerSentEvent[] {
  return parser.feed(encode(text));
}

/** The events of `bytes` fed in the chunks that cutting it at `cuts` makes. */
function parseInChunks(bytes: Uint8Array, cuts: number[]): ServerSentEvent[] {
  const parser = new EventStreamParser();
  const events: ServerSentEvent[] = [];
  let from = 0;
  for (const cut of [...cuts, bytes.length]) {
    events.push(...parser.feed(bytes.subarray(from, cut)));
    from = cut;
  }
  return events;
}

const message = (data: string, lastEventId = "", event = "message"): ServerSentEvent => ({ event, data, lastEventId });

describe("the event stream reader", () => {
  it("reads the event type, and calls an event without one `message`", () => {
    assert.deepEqual(parse("event: acquired\ndata: {}\n\ndata: plain\n\n"), [
      message("{}", "", "acquired"),
      message("plain"),
    ]);
  });

  it("joins the data lines with \\n, and drops one space after the colon only", () => {
    assert.deepEqual(parse("data: one\ndata:two\ndata\ndata:  three\n\n"), [message("one\ntwo\n\n three")]);
  });

  it("keeps the last event id across events until an id field changes it", () => {
    assert.deepEqual(parse("id: 1-0\ndata: a\n\ndata: b\n\nid: 2-0\ndata: c\n\nid\ndata: d\n\n"), [
      message("a", "1-0"),
      message("b", "1-0"),
      message("c", "2-0"),
      message("d", ""),
    ]);
  });

  it("ignores an id that contains NUL", () => {
    assert.deepEqual(parse("id: 1-0\ndata: a\n\nid: 2\u00000\ndata: b\n\n"), [message("a", "1-0"), message("b", "1-0")]);
  });

  it("takes the id to resume after at each blank line, with or without an event", () => {
    const parser = new EventStreamParser("7-0");
    assert.deepEqual(parse("data: a\n\n", parser), [message("a", "7-0")], "carries the id it resumed after");
    assert.deepEqual(parse("id: 8-0\n\n", parser), [], "a blank line without data dispatches nothing");
    assert.equal(parser.lastEventId, "8-0", "but takes the id");
    assert.deepEqual(parse("id: 9-0\ndata: cut", parser), []);
    assert.equal(parser.lastEventId, "8-0", "an id of an unfinished event is not yet the stream's");
  });

  it("reads retry as a whole number of milliseconds, and ignores any other value", () => {
    const parser = new EventStreamParser();
    assert.equal(parser.reconnectionTimeMs, undefined);
    parse("retry: 2500\n\n", parser);
    assert.equal(parser.reconnectionTimeMs, 2500);
    for (const value of ["1.5", "-1", "x", "", " 10", "10s"]) {
      parse(`retry: ${value}\n`, parser);
      assert.equal(parser.reconnectionTimeMs, 2500, `retry: ${value}`);
    }
    assert.deepEqual(parse("retry: 10\ndata: x\n\n", parser), [message("x")], "retry is no event of its own");
    assert.equal(parser.reconnectionTimeMs, 10);
  });

  it("skips comments and unknown fields, wherever they are", () => {
    assert.deepEqual(parse(": keep-alive\n\n:\ndata: a\n: between\nDATA: no\nfoo: bar\ndata: b\n\n"), [message("a\nb")]);
  });

  it("ends lines at CRLF, LF or CR alike", () => {
    const expected = [message("a\nb", "1", "x"), message("c", "1")];
    for (const end of ["\r\n", "\n", "\r"]) {
      const text = ["id: 1", "event: x", "data: a", "data: b", "", "data: c", "", ""].join(end);
      assert.deepEqual(parse(text), expected, JSON.stringify(end));
    }
    assert.deepEqual(parse("data: a\r\ndata: b\rdata: c\n\r\n"), [message("a\nb\nc")], "mixed in one stream");
  });

  it("takes a CR ending one chunk and an LF opening the next as one line end", () => {
    const parser = new EventStreamParser();
    assert.deepEqual(parser.feed(encode("data: a\r")), []);
    assert.deepEqual(parser.feed(encode("\ndata: b\r")), [], "no blank line between them");
    assert.deepEqual(parser.feed(new Uint8Array()), []);
    assert.deepEqual(parser.feed(encode("\n\r")), [message("a\nb")]);
    assert.deepEqual(parser.feed(encode("data: c\r")), [], "a CR then anything but LF is a line end of its own");
    assert.deepEqual(parser.feed(encode("\r")), [message("c")]);
  });

  it("drops one byte order mark at the start, and only there", () => {
    assert.deepEqual(parse("\uFEFFdata: a\n\n"), [message("a")]);
    // A second one belongs to the first field's name, which is then unknown.
    assert.deepEqual(parse("\uFEFF\uFEFFdata: a\n\ndata: b\n\n"), [message("b")]);
    assert.deepEqual(parse("data: \uFEFFa\n\n"), [message("\uFEFFa")]);
    const split = parseInChunks(encode("\uFEFFdata: a\n\n"), [1, 2]);
    assert.deepEqual(split, [message("a")], "a mark split between chunks");
  });

  it("dispatches on a blank line only, and never an event without data", () => {
    assert.deepEqual(parse("event: gap\n\nevent: lost\ndata: {}"), [], "no data; then no blank line yet");
    // The event type of an event without data is forgotten with it.
    assert.deepEqual(parse("event: gap\n\ndata: x\n\n"), [message("x")]);
    // A data field with an empty value is data: the empty string.
    assert.deepEqual(parse("data\n\ndata:\n\n"), [message(""), message("")]);
  });

  it("gives the same events however the bytes are split, inside a UTF-8 character or a CRLF", () => {
    const text =
      "\uFEFF: keep-alive\r\n\r\nid: 1-0\r\nevent: acquired\r\ndata: {\"value\":\"Grüße ✓ 𝄞\"}\r\n\r\n" +
      "event: renewed\rdata: x\r\rdata: one\ndata:two\n\nid: 2-0\nretry: 30\ndata: é\n\n";
    const bytes = encode(text);
    const expected = [
      message('{"value":"Grüße ✓ 𝄞"}', "1-0", "acquired"),
      message("x", "1-0", "renewed"),
      message("one\ntwo", "1-0"),
      message("é", "2-0"),
    ];
    assert.deepEqual(parse(text), expected);
    for (let first = 0; first <= bytes.length; first++) {
      for (let second = first; second <= bytes.length; second++) {
        assert.deepEqual(parseInChunks(bytes, [first, second]), expected, `cut at ${first} and ${second}`);
      }
    }
    const byteByByte = parseInChunks(bytes, Array.from(bytes.keys()));
    assert.deepEqual(byteByByte, expected, "one byte at a time");
  });
});

describe("readEvents", () => {
  /** A body that delivers `chunks`, then ends. */
  const body = (chunks: string[]) =>
    new ReadableStream<Uint8Array>({
      start(controller) {
        for (const chunk of chunks) controller.enqueue(encode(chunk));
        controller.close();
      },
    });

  it("reads a body's events in order, tells each chunk, and drops an event the end cuts short", async () => {
    const parser = new EventStreamParser();
    let chunks = 0;
    const events: ServerSentEvent[] = [];
    const stream = body(["id: 1\ndata: a", "\n\n: ping\n\n", "id: 2\ndata: b\n\nid: 3\ndata: cut"]);
    for await (const event of readEvents(stream, { parser, onChunk: () => chunks++ })) events.push(event);
    assert.deepEqual(events, [message("a", "1"), message("b", "2")]);
    assert.equal(chunks, 3);
    assert.equal(parser.lastEventId, "2");
  });

  it("cancels the body when the reader stops early", async () => {
    let cancelled = false;
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(encode("data: a\n\ndata: b\n\n"));
      },
      cancel() {
        cancelled = true;
      },
    });
    for await (const event of readEvents(stream)) {
      assert.equal(event.data, "a");
      break;
    }
    assert.equal(cancelled, true);
  });
});
