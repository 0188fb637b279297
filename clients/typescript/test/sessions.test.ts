/**
 * Sessions against a real gateway and Redis: locks that hang on one
 * session's lease and are released when the session ends; a session that
 * expires (its gateway stalled, or its record gone) takes the work of its
 * locks down with it; the lock-delay as readers, watchers and waiters meet
 * it; a deadlock between two sessions; unknown and ended sessions; the id
 * kept out of what a session prints.
 */

import assert from "node:assert/strict";
import { inspect } from "node:util";
import { describe, it } from "node:test";

import {
  DeadlockError,
  Gateway,
  LockHeldError,
  LockLostError,
  SessionNotFoundError,
  type Lock,
  type Session,
  type WatchEvent,
} from "lockgate";
import { GatewayServer, Stack, abortTime, eventually, heldStatus, sleep, stackForTheFile, uniqueKey, untilAborted, within } from "./harness.js";

let stack: Stack;
let gw: Gateway;

stackForTheFile((started) => {
  [stack, gw] = [started, new Gateway(started.url)];
});

/** `GET /sessions/{id}`: its status and body. */
async function sessionView(id: string): Promise<{ status: number; body: { locks?: { key: string }[]; value?: string | null } }> {
  const response = await fetch(`${stack.url}/sessions/${id}`);
  return { status: response.status, body: (await response.json()) as { locks?: { key: string }[]; value?: string | null } };
}

/** Collects a watch's events until it ends. */
function collect(events: AsyncIterable<WatchEvent>): { seen: WatchEvent[]; done: Promise<void> } {
  const seen: WatchEvent[] = [];
  const done = (async () => {
    for await (const event of events) seen.push(event);
  })();
  return { seen, done };
}

describe("a session", () => {
  it("holds two locks on one lease, kept alive past it, and releases both when the routine ends", async () => {
    const [first, second] = [uniqueKey("session-a"), uniqueKey("session-b")];
    let opened: Session | undefined;
    const locks: Lock[] = [];
    const result = await gw.session({ ttlMs: 1_500, value: "worker-7" }, async (session) => {
      opened = session;
      const firstLeaseEnd = session.expiresAtMs;
      locks.push(await session.acquire(first), await session.acquire(second, { value: "10.0.0.7" }));
      assert.equal(session.locks, 2);
      // Past the lease: the gateway keeps the session alive, and its locks with it.
      await sleep(2_500);
      session.check();
      assert.ok(session.expiresAtMs > firstLeaseEnd + 1_000, "renewed events moved the lease on");
      // Two reads between the same two keepalives (a keepalive between them would move one lease on).
      let [a, b] = [await heldStatus(gw, first), await heldStatus(gw, second)];
      for (let read = 0; read < 5 && a?.leases[0]?.expiresAtMs !== b?.leases[0]?.expiresAtMs; read++) {
        [a, b] = await Promise.all([heldStatus(gw, first), heldStatus(gw, second)]);
      }
      const handle = a?.leases[0]?.session;
      assert.match(handle ?? "", /^[0-9a-f]{32}$/, "a's lease names its session by a public handle");
      assert.equal(b?.leases[0]?.session, handle, "one session for both");
      assert.ok(!handle!.includes(session.id.replaceAll("-", "").slice(0, 8)), "the handle is not the id");
      assert.equal(a?.leases[0]?.expiresAtMs, b?.leases[0]?.expiresAtMs, "one lease for both");
      assert.equal(locks[0]!.expiresAtMs, session.expiresAtMs);
      const view = await sessionView(session.id);
      assert.equal(view.status, 200);
      assert.deepEqual(view.body.locks?.map((lock) => lock.key).sort(), [first, second].sort());
      assert.equal(view.body.value, "worker-7");
      return "done";
    });
    assert.equal(result, "done");
    assert.equal(opened?.ended, true);
    assert.equal(await gw.inspect(first), null);
    assert.equal(await gw.inspect(second), null);
    for (const lock of locks) {
      assert.equal(lock.released, true);
      assert.equal(lock.signal.aborted, false, "ending the session is no loss");
    }
    assert.equal((await sessionView(opened!.id)).status, 404);
  });

  it("is ended at the end of an `await using` scope; a lock released before is free at once", async () => {
    const [kept, early] = [uniqueKey("scoped"), uniqueKey("scoped-early")];
    let id = "";
    let lock: Lock;
    {
      await using session = await gw.openSession({ ttlMs: 2_000 });
      id = session.id;
      lock = await session.acquire(kept);
      const result = await session.using(early, async (held) => held.fencingToken);
      assert.equal(typeof result, "bigint");
      assert.equal(await gw.inspect(early), null, "released by using, the session still open");
      assert.equal(session.locks, 1);
      assert.ok((await heldStatus(gw, kept))?.held);
    }
    assert.equal(await gw.inspect(kept), null);
    assert.equal(lock.released, true);
    assert.equal((await sessionView(id)).status, 404);
  });

  it("keeps its id out of toString, JSON and util.inspect", async () => {
    const session = await gw.openSession();
    try {
      assert.match(session.id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      for (const shown of [String(session), JSON.stringify(session), inspect(session, { showHidden: true, depth: 5 }), inspect({ session })]) {
        assert.ok(!shown.includes(session.id), `the id shows in ${shown}`);
      }
      assert.equal(JSON.parse(JSON.stringify(session)).ttlMs, 10_000, "the gateway's default lease");
    } finally {
      await session.end();
    }
  });

  it("stops a wait of its own when it is ended", async () => {
    const key = uniqueKey("session-wait-ended");
    const holder = await gw.acquire(key);
    const session = await gw.openSession();
    const waiting = session.acquire(key, { waitMs: 10_000 }).catch((error: unknown) => error);
    await eventually(async () => ((await heldStatus(gw, key))?.waiters.length ?? 0) === 1, 5_000, "waiting");
    await session.end();
    const outcome = await waiting;
    assert.ok(outcome instanceof SessionNotFoundError, `got ${String(outcome)}`);
    await eventually(async () => ((await heldStatus(gw, key))?.waiters.length ?? 0) === 0, 5_000, "the wait left the queue");
    await holder.release();
  });
});

describe("a session's id", () => {
  it("unknown to the gateway is refused with SessionNotFoundError, streamed or plain", async () => {
    const key = uniqueKey("bogus-session");
    const bogus = crypto.randomUUID();
    const streamed = await gw.acquire(key, { session: bogus }).catch((error: unknown) => error);
    assert.ok(streamed instanceof SessionNotFoundError, `got ${String(streamed)}`);
    assert.equal(streamed.slug, "session-not-found");
    assert.equal(streamed.status, 404);
    const plain = await gw.leases.acquire(key, { session: bogus }).catch((error: unknown) => error);
    assert.ok(plain instanceof SessionNotFoundError, `got ${String(plain)}`);
    assert.equal(await gw.inspect(key), null, "nothing was granted");
  });

  it("of an ended session is refused, by the client and by the gateway", async () => {
    const key = uniqueKey("ended-session");
    const session = await gw.openSession();
    await session.end();
    await assert.rejects(session.acquire(key), SessionNotFoundError);
    const refused = await gw.acquire(key, { session: session.id }).catch((error: unknown) => error);
    assert.ok(refused instanceof SessionNotFoundError, `got ${String(refused)}`);
    assert.equal(refused.slug, "session-not-found", "the gateway's answer");
  });
});

describe("two sessions", () => {
  it("that wait for each other's locks: the youngest wait is refused with DeadlockError and its cycle, the other is granted", async () => {
    const [x, y] = [uniqueKey("cycle-x"), uniqueKey("cycle-y")];
    const a = await gw.openSession({ ttlMs: 5_000 });
    const b = await gw.openSession({ ttlMs: 5_000 });
    try {
      await a.acquire(x);
      await b.acquire(y);
      const aWaits = a.acquire(y, { waitMs: 20_000 });
      await eventually(async () => ((await heldStatus(gw, y))?.waiters.length ?? 0) === 1, 5_000, "a waits for y");

      const started = performance.now();
      const refused = await b.acquire(x, { waitMs: 20_000 }).catch((error: unknown) => error);
      assert.ok(refused instanceof DeadlockError, `got ${String(refused)}`);
      assert.ok(performance.now() - started < 10_000, "refused long before its wait ran out");
      assert.equal(refused.slug, "deadlock");
      assert.equal(refused.status, 409);
      assert.deepEqual([...refused.cycle].sort(), [x, y].sort());
      assert.equal(b.lost, false, "the session that was refused goes on");

      // The other wait goes on, and is granted once b lets go.
      await b.end();
      const granted = await aWaits;
      assert.equal(granted.key, y);
      assert.equal(a.locks, 2);
    } finally {
      await a.end();
      await b.end();
    }
  });
});

/** Long enough for any of these on a busy machine; a loss that is never heard fails instead of hanging. */
const LOSS_TEST = { timeout: 30_000 };

describe("a session that is lost", () => {
  it("when its gateway stalls past the lease: the work of its locks stops, and its locks are freed", LOSS_TEST, async () => {
    const doomed = await GatewayServer.start(stack.redis);
    const TTL_MS = 1_000;
    const key = uniqueKey("session-stalled");
    let stalledAt = 0;
    try {
      const outcome = await new Gateway(doomed.url, { timeoutMs: 1_000 })
        .session({ ttlMs: TTL_MS }, (session) =>
          session.using(key, async (lock) => {
            stalledAt = performance.now();
            doomed.freeze();
            // Work that honours the lock's signal: it stops when the lock is lost.
            await within(untilAborted(lock.signal), 10_000, "the lock's loss");
          }),
        )
        .catch((error: unknown) => error);
      const stoppedAfter = performance.now() - stalledAt;
      assert.ok(outcome instanceof LockLostError, `got ${String(outcome)}`);
      assert.equal(outcome.reason, "session-ended");
      assert.ok(outcome.cause instanceof LockLostError);
      assert.equal(outcome.cause.reason, "lease-expired", "the client's own watchdog on the session's lease");
      // The last renewal was at most a third of the lease before the stall.
      assert.ok(stoppedAfter <= TTL_MS * 1.5, `stopped after ${stoppedAfter} ms`);
      // And the session did expire: the other gateway frees its lock no later than a second after the lease.
      await eventually(async () => (await gw.inspect(key)) === null, TTL_MS + 3_000, "freed by the session's expiry");
    } finally {
      await doomed.kill();
    }
  });

  it("when the gateway ends it (expired): every lock's signal aborts at once, before the lease could have ended", LOSS_TEST, async () => {
    const own = await Stack.start();
    try {
      const TTL_MS = 3_000;
      const session = await new Gateway(own.url).openSession({ ttlMs: TTL_MS });
      const locks = [await session.acquire(uniqueKey("flushed-1")), await session.acquire(uniqueKey("flushed-2"))];
      const flushed = performance.now();
      own.redis.cli("FLUSHALL"); // the session's record is gone: its next keepalive finds none
      const aborted = await within(Promise.all(locks.map((lock) => abortTime(lock.signal))), 10_000, "the locks' loss");
      for (const at of aborted) assert.ok(at - flushed < TTL_MS, `lost after ${at - flushed} ms`);
      const sessionLoss = session.signal.reason as LockLostError;
      assert.ok(sessionLoss instanceof LockLostError);
      assert.equal(sessionLoss.reason, "expired", "told by the gateway's `ended`, not by the watchdog");
      for (const lock of locks) {
        assert.equal((lock.signal.reason as LockLostError).reason, "session-ended");
        assert.throws(() => lock.check(), LockLostError);
      }
      assert.equal(session.lost, true);
      await assert.rejects(session.acquire(uniqueKey("after")), LockLostError);
      await session.end(); // nothing to give back
    } finally {
      await own.stop();
    }
  });

  it("with a lock-delay: its locks stay unavailable for the delay, as readers, watchers and waiters see", LOSS_TEST, async () => {
    const doomed = await GatewayServer.start(stack.redis);
    const key = uniqueKey("session-delay");
    const DELAY_MS = 2_000;
    const watch = gw.watch(key);
    const { seen, done } = collect(watch);
    try {
      await eventually(() => seen.length === 1, 5_000, "snapshot");
      const session = await new Gateway(doomed.url, { timeoutMs: 1_000 }).openSession({ ttlMs: 1_000, lockDelayMs: DELAY_MS });
      const lock = await session.acquire(key);
      await eventually(() => seen.some((event) => event.type === "acquired"), 5_000, "acquired");
      doomed.freeze();
      await within(abortTime(lock.signal), 10_000, "the lock's loss");
      await eventually(() => seen.some((event) => event.type === "delayed"), 5_000, "a delayed event");

      const expired = seen.find((event) => event.type === "expired");
      assert.equal(expired?.type === "expired" && expired.data.fencingToken, lock.fencingToken);
      const delayed = seen.find((event) => event.type === "delayed");
      assert.ok(delayed?.type === "delayed");
      assert.equal(delayed.data.key, key);
      const until = delayed.data.delayedUntilMs;
      // The session expired at its last lease's end (or one keepalive later, if that one's event was cut off).
      const afterLease = until - session.expiresAtMs;
      assert.ok(afterLease >= DELAY_MS && afterLease <= DELAY_MS + 1_000, `delayed until ${afterLease} ms after the lease`);

      const status = await gw.inspect(key);
      assert.ok(status && !status.held, `inspect: ${JSON.stringify(status, (_, v: unknown) => (typeof v === "bigint" ? String(v) : v))}`);
      assert.equal(status.delayedUntilMs, until);
      const refused = await gw.acquire(key).catch((error: unknown) => error);
      assert.ok(refused instanceof LockHeldError, `got ${String(refused)}`);
      assert.ok((refused.retryAfterMs ?? 0) > 0 && (refused.retryAfterMs ?? 0) <= DELAY_MS, `retry after ${refused.retryAfterMs}`);

      const waiter = await gw.acquire(key, { waitMs: 10_000 });
      const granted = await heldStatus(gw, key);
      assert.ok((granted?.leases[0]?.acquiredAtMs ?? 0) >= until, "granted only once the delay was over");
      await waiter.release();
    } finally {
      watch.close();
      await done;
      await doomed.kill();
    }
  });
});
