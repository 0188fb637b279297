// The parts of the console that are plain logic: what a lock's page knows
// of the lock and how events change it, the list's paging, the sentences
// of the timeline, and rates out of sale counters. (The event stream and
// JSON readers are the TypeScript client's, tested there.)

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { importSource } from "./modules.mjs";

const lockState = await importSource("src/views/lock-state");
const { describeEvent } = await importSource("src/views/lock-timeline");
const paging = await importSource("src/views/lock-list-state");
const { SaleHistory, wasReset } = await importSource("src/sale-history");
const instanceText = await importSource("src/views/instance-text");

const lease = (fencing_token, over = {}) => ({
  fencing_token,
  value: null,
  holds: 1,
  acquired_at_ms: 1_000,
  expires_at_ms: 31_000,
  ...over,
});
const held = (over = {}) => ({
  key: "k",
  held: true,
  ttl_ms: 30_000,
  expires_at_ms: 31_000,
  fencing_token: 7n,
  holds: 1,
  mode: "exclusive",
  limit: 1,
  holders: 1,
  leases: [lease(7n)],
  waiters: [],
  ...over,
});
const event = (name, data, id = undefined) => ({ name, id, data });

describe("a lock's state", () => {
  const { applyEvent, fromAnswer, UNKNOWN_LOCK } = lockState;

  test("is unknown until the first answer, then what the answer says", () => {
    assert.equal(UNKNOWN_LOCK.known, false);
    const waiter = { position: 1, mode: "shared", waiting_since_ms: 2_000 };
    assert.deepEqual(fromAnswer(held({ waiters: [waiter] })), {
      known: true,
      held: true,
      mode: "exclusive",
      limit: 1,
      leases: [lease(7n)],
      waiters: [waiter],
      delayedUntilMs: undefined,
    });
    assert.deepEqual(fromAnswer({ key: "k", held: false, waiters: [waiter] }), {
      known: true,
      held: false,
      mode: undefined,
      limit: undefined,
      leases: [],
      waiters: [waiter],
      delayedUntilMs: undefined,
    });
    assert.equal(fromAnswer({ key: "k", held: false, waiters: [], delayed_until_ms: 50_000 }).delayedUntilMs, 50_000);
  });

  test("is delayed from a delayed event (or a delayed answer) until its end, and no longer once granted", () => {
    const { isDelayed } = lockState;
    let state = fromAnswer(held());
    state = applyEvent(state, event("expired", { key: "k", fencing_token: 7n }, "1-0"), 0);
    state = applyEvent(state, event("delayed", { key: "k", delayed_until_ms: 50_000 }, "2-0"), 0);
    assert.equal(state.delayedUntilMs, 50_000);
    assert.equal(isDelayed(state, 49_999), true);
    assert.equal(isDelayed(state, 50_000), false, "over at its end");
    const granted = applyEvent(
      state,
      event("acquired", { key: "k", fencing_token: 8n, value: null, mode: "exclusive", expires_at_ms: 90_000 }, "50001-0"),
      0,
    );
    assert.equal(granted.delayedUntilMs, undefined);
    assert.equal(isDelayed(granted, 0), false);
    assert.equal(isDelayed(fromAnswer(held()), 0), false, "a held lock is never delayed");
  });

  test("takes a snapshot as a fresh answer", () => {
    const state = applyEvent(UNKNOWN_LOCK, event("snapshot", held(), "100-0"), 5_000);
    assert.deepEqual(state, fromAnswer(held()));
  });

  test("adds a holder on acquired, granted at the event's time, and replaces one with the same fencing token", () => {
    const free = fromAnswer({ key: "k", held: false, waiters: [] });
    const acquired = (token, id) =>
      event("acquired", { key: "k", fencing_token: token, value: "host-1", mode: "counted", expires_at_ms: 40_000 }, id);
    let state = applyEvent(free, acquired(8n, "10000-3"), 99_000);
    assert.equal(state.held, true);
    assert.equal(state.mode, "exclusive", "a counting lock's places are exclusive");
    assert.deepEqual(state.leases, [lease(8n, { value: "host-1", acquired_at_ms: 10_000, expires_at_ms: 40_000 })]);
    state = applyEvent(state, acquired(8n, undefined), 99_000);
    assert.deepEqual(state.leases.map((l) => [l.fencing_token, l.acquired_at_ms]), [[8n, 99_000]], "no id: now");
    state = applyEvent(state, acquired(9n, "10001-0"), 99_000);
    assert.deepEqual(state.leases.map((l) => l.fencing_token), [8n, 9n]);
  });

  test("changes the value of the holder a value event names", () => {
    const state = fromAnswer(held({ leases: [lease(7n), lease(8n)] }));
    const next = applyEvent(state, event("value", { key: "k", fencing_token: 8n, value: "10.0.0.8" }, "1-0"), 0);
    assert.deepEqual(next.leases.map((l) => l.value), [null, "10.0.0.8"]);
    assert.deepEqual(state.leases.map((l) => l.value), [null, null], "the state before is left as it was");
  });

  test("removes the holder that left, and is free once none is left", () => {
    let state = fromAnswer(held({ leases: [lease(7n), lease(8n)] }));
    for (const [name, token, stillHeld] of [["released", 7n, true], ["revoked", 9n, true], ["expired", 8n, false]]) {
      state = applyEvent(state, event(name, { key: "k", fencing_token: token }, "1-0"), 0);
      assert.equal(state.held, stillHeld, `${name} #${token}`);
    }
    assert.deepEqual(state.leases, []);
  });

  test("is left as it was by a gap (a snapshot follows)", () => {
    const state = fromAnswer(held());
    assert.equal(lockState.applyEvent(state, event("gap", {}), 0), state);
  });

  test("is worth reading while a lease has time left, or none is known", () => {
    const { worthReading } = lockState;
    assert.equal(worthReading(fromAnswer({ key: "k", held: false, waiters: [] }), 0), false, "free");
    assert.equal(worthReading(fromAnswer(held({ leases: [] })), 0), true);
    assert.equal(worthReading(fromAnswer(held()), 30_000), true, "1 s left");
    assert.equal(worthReading(fromAnswer(held()), 30_800), false, "200 ms left");
  });

  test("moves the queue on a grant or a holder leaving, not on a value or a snapshot", () => {
    const moves = ["snapshot", "acquired", "value", "released", "expired", "revoked", "delayed", "gap"].filter((name) =>
      lockState.movesQueue(event(name, {})),
    );
    assert.deepEqual(moves, ["acquired", "released", "expired", "revoked"]);
  });

  test("reads as one sentence", () => {
    const { summary } = lockState;
    assert.equal(summary(UNKNOWN_LOCK, 0), "Reading the lock…");
    assert.equal(summary(fromAnswer({ key: "k", held: false }), 0), "Free: nobody holds it.");
    assert.equal(summary(fromAnswer(held()), 0), "Held, exclusive: 1 holder, nobody waiting.");
    const until = new Date(2026, 0, 1, 12, 0, 5, 7).getTime();
    const delayed = fromAnswer({ key: "k", held: false, waiters: [], delayed_until_ms: until });
    assert.equal(summary(delayed, until - 1), "Free, delayed until 12:00:05.007.");
    assert.equal(summary(delayed, until), "Free: nobody holds it.", "once the delay is over");
    const waiters = [1, 2].map((position) => ({ position, mode: "shared", waiting_since_ms: 0 }));
    assert.equal(
      summary(fromAnswer(held({ limit: 3, leases: [lease(7n), lease(8n)], waiters })), 0),
      "Held, counting, up to 3: 2 holders, 2 waiting.",
    );
  });
});

describe("the timeline's sentences", () => {
  test("say what each event did, with the exact fencing token", () => {
    const token = 18446744073709551615n;
    const sentences = [
      event("snapshot", { key: "k", held: false, waiters: [] }),
      event("snapshot", { key: "k", held: false, waiters: [], delayed_until_ms: new Date(2026, 0, 1, 12, 0, 9, 0).getTime() }),
      event("snapshot", held({ fencing_token: token, leases: [lease(token)], mode: "shared" })),
      event("acquired", { key: "k", fencing_token: token, value: "a", mode: "shared", expires_at_ms: new Date(2026, 0, 1, 12, 0, 5, 7).getTime() }),
      event("value", { key: "k", fencing_token: token, value: null }),
      event("released", { key: "k", fencing_token: token }),
      event("expired", { key: "k", fencing_token: token }),
      event("revoked", { key: "k", fencing_token: token }),
      event("delayed", { key: "k", delayed_until_ms: new Date(2026, 0, 1, 12, 0, 9, 0).getTime() }),
      event("gap", {}),
    ].map(describeEvent);
    assert.deepEqual(sentences, [
      "Free, nobody waiting.",
      "Free, delayed until 12:00:09.000, nobody waiting.",
      `Held (shared) by #${token}, nobody waiting.`,
      `#${token} (“a”) took it, shared, lease until 12:00:05.007.`,
      `#${token} now shows “”.`,
      `#${token} released it.`,
      `#${token}'s lease ran out.`,
      `#${token} was revoked by an admin.`,
      "Nobody is granted it until 12:00:09.000: the lock-delay of a session that held it.",
      "Some events were no longer kept; a fresh snapshot follows.",
    ]);
  });
});

describe("the list's paging", () => {
  const { firstPage, answered, nextPage, previousPage, pagerLinks, listSummary } = paging;

  test("goes forward by the answer's cursor and back by the ones it came through", () => {
    let page = firstPage("orders:");
    assert.deepEqual(pagerLinks(page), { earlier: false, later: false });
    assert.equal(nextPage(page), page, "no next page: nowhere to go");
    page = nextPage(answered(page, "c2"));
    assert.deepEqual([page.cursor, page.page], ["c2", 2]);
    page = nextPage(answered(page, "c3"));
    assert.deepEqual([page.cursor, page.page, page.previous], ["c3", 3, [null, "c2"]]);
    assert.deepEqual(pagerLinks(page), { earlier: true, later: true }, "the next cursor is the last answer's until a new one");
    page = previousPage(page);
    assert.deepEqual([page.cursor, page.page], ["c2", 2]);
    page = previousPage(previousPage(page));
    assert.deepEqual([page.cursor, page.page, page.previous], [null, 1, []]);
  });

  test("reads as one sentence", () => {
    assert.equal(listSummary(firstPage(""), 0), "No held lock.");
    assert.equal(listSummary(firstPage("orders:"), 1), "1 held lock starting with “orders:”.");
    assert.equal(listSummary(answered(firstPage("a"), "c2"), 50), "50 held locks starting with “a” (page 1).");
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

describe("an instance's sentences", () => {
  const { formatInUseText, formatsText, readsText, startedAgoText, utcText } = instanceText;

  test("name the formats a build reads and the highest it writes", () => {
    assert.equal(formatsText({ reads: [1], writes: 1 }), "reads 1, writes 1");
    assert.equal(formatsText({ reads: [1, 2], writes: 2 }), "reads 1, 2, writes 2");
    assert.equal(readsText({ reads: [], writes: 0 }), "none");
  });

  test("say when the format in use is not known yet", () => {
    assert.equal(formatInUseText(1), "format 1");
    assert.equal(formatInUseText(0), "format 0");
    assert.match(formatInUseText(null), /^not read yet/);
    assert.match(formatInUseText(undefined), /^not read yet/);
  });

  test("read a start as time ago, and one ahead of this clock as just now", () => {
    const start = Date.UTC(2025, 4, 4, 17, 31, 7, 268);
    assert.equal(startedAgoText(start, start + 14_900), "14 s ago");
    assert.equal(startedAgoText(start, start + 245_000), "4 min 05 s ago");
    assert.equal(startedAgoText(start, start + 300), "just now");
    assert.equal(startedAgoText(start, start - 2_000), "just now");
    assert.equal(utcText(start), "2025-05-04 17:31:07 UTC");
  });
});
