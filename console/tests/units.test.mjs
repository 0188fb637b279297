// The parts of the console that are plain logic: exact fencing tokens out
// of JSON text, the event-stream parser, and rates out of sale counters.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { importSource } from "./modules.mjs";

const { parseExact } = await importSource("json");
const { EventStreamParser } = await importSource("sse");
const { SaleHistory, wasReset } = await importSource("sale-history");

describe("parseExact", () => {
  test("keeps every digit of a fencing token above 2^53", () => {
    // 2^53 + 1 is the first integer a double cannot hold; u64::MAX the last token.
    for (const token of ["9007199254740993", "1795627866648480", "18446744073709551615"]) {
      const parsed = parseExact(`{"key":"a","fencing_token":${token},"leases":[{"fencing_token":${token}}]}`);
      assert.equal(parsed.fencing_token, token);
      assert.equal(parsed.leases[0].fencing_token, token);
    }
  });

  test("gives a small fencing token as a string too", () => {
    assert.equal(parseExact('{"fencing_token":42}').fencing_token, "42");
  });

  test("leaves numbers inside strings and ordinary numbers alone", () => {
    const text = '{"value":"say \\"9007199254740993\\" and \\\\","ttl_ms":29412,"ratio":-1.5e3,"big":[-9007199254740993]}';
    assert.deepEqual(parseExact(text), {
      value: 'say "9007199254740993" and \\',
      ttl_ms: 29412,
      ratio: -1500,
      big: ["-9007199254740993"],
    });
  });
});

describe("EventStreamParser", () => {
  const stream =
    ": keep-alive\r\n\r\nid: 1-0\r\nevent: snapshot\r\ndata: {\"held\":false}\r\n\r\n" +
    "event: gap\ndata: {}\n\n" +
    "id: 2-0\nevent: acquired\ndata: line one\ndata:line two\n\n" +
    "event: nothing\n\n" +
    "data: plain\r\r: end\n";

  const expected = [
    { event: "snapshot", data: '{"held":false}', lastEventId: "1-0" },
    { event: "gap", data: "{}", lastEventId: "1-0" },
    { event: "acquired", data: "line one\nline two", lastEventId: "2-0" },
    { event: "message", data: "plain", lastEventId: "2-0" },
  ];

  test("parses events, comments, ids and multi-line data", () => {
    assert.deepEqual(new EventStreamParser().feed(stream), expected);
  });

  test("gives the same events whatever the chunk boundaries, CRLF split included", () => {
    for (let cut = 0; cut <= stream.length; cut++) {
      const parser = new EventStreamParser();
      const events = [...parser.feed(stream.slice(0, cut)), ...parser.feed(stream.slice(cut))];
      assert.deepEqual(events, expected, `cut at ${cut}`);
    }
  });

  test("starts from the id it resumes after", () => {
    const parser = new EventStreamParser("7-1");
    assert.deepEqual(parser.feed("event: gap\ndata: {}\n\n"), [{ event: "gap", data: "{}", lastEventId: "7-1" }]);
    assert.equal(parser.lastEventId, "7-1");
  });
});

describe("SaleHistory", () => {
  const reading = (over) => ({
    stock: 100,
    initial_stock: 100,
    sold: 0,
    orders: 0,
    sold_out: 0,
    limit_exceeded: 0,
    rate_limited: 0,
    ...over,
  });

  test("turns counters into rates per second over the last readings", () => {
    const history = new SaleHistory(60_000, 2_000);
    history.add(0, reading({}));
    assert.equal(history.latest("orders"), null, "one reading makes no rate");
    history.add(500, reading({ stock: 95, sold: 5, orders: 5 }));
    assert.equal(history.latest("orders"), 10);
    history.add(1000, reading({ stock: 90, sold: 10, orders: 10, sold_out: 0, rate_limited: 3 }));
    assert.equal(history.latest("orders"), 10);
    assert.equal(history.latest("rate_limited"), 3);
    // Past the rate window, the oldest readings no longer count.
    history.add(3000, reading({ stock: 90, sold: 10, orders: 10, rate_limited: 3 }));
    assert.equal(history.latest("orders"), 0);
    assert.equal(history.peak("orders"), 10);
    assert.deepEqual(history.stockSpan(), { first: 100, last: 90 });
  });

  test("starts again after a reset, with a gap instead of a negative rate", () => {
    const history = new SaleHistory(60_000, 2_000);
    history.add(0, reading({ stock: 10, sold: 90, orders: 90, sold_out: 40 }));
    history.add(500, reading({ stock: 0, sold: 100, orders: 100, sold_out: 50 }));
    history.add(1000, reading({ stock: 50, initial_stock: 50 }));
    assert.equal(history.latest("orders"), null);
    assert.equal(history.latest("sold_out"), null);
    assert.equal(history.resets.length, 1);
    history.add(1500, reading({ stock: 45, initial_stock: 50, sold: 5, orders: 5 }));
    assert.equal(history.latest("orders"), 10);
    for (const series of history.chartData().slice(2)) assert.ok(series.every((value) => value === null || value >= 0));
  });

  test("sees a reset in any counter that went down or a stock that went up", () => {
    const before = reading({ stock: 50, sold: 50, orders: 50, rate_limited: 7 });
    assert.equal(wasReset(before, reading({ stock: 40, sold: 60, orders: 60, rate_limited: 7 })), false);
    assert.equal(wasReset(before, reading({ stock: 50, sold: 50, orders: 50, rate_limited: 0 })), true);
    assert.equal(wasReset(before, reading({ stock: 100, sold: 50, orders: 50, rate_limited: 7 })), true);
  });

  test("keeps only the readings of its window", () => {
    const history = new SaleHistory(10_000, 2_000);
    for (let at = 0; at <= 30_000; at += 500) history.add(at, reading({}));
    assert.ok(history.times.length <= 21 && history.times.length >= 20, String(history.times.length));
    assert.equal(history.times[0], 20);
    for (const series of history.chartData()) assert.equal(series.length, history.times.length);
  });
});
