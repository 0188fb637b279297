/**
 * Losing a held lock: its key deleted in Redis, Redis frozen past the lease,
 * the gateway killed mid-hold. Each must abort `lock.signal` with a
 * `LockLostError` within about a lease, and nothing (no timer, no stream)
 * may end in an unhandled rejection.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { Gateway, LockLostError } from "lockgate";
import { GatewayServer, Stack, abortTime, sleep, uniqueKey, unhandledRejections, untilAborted } from "./harness.js";

const unhandled = unhandledRejections();

let stack: Stack;

before(async () => {
  stack = await Stack.start();
});
after(() => stack.stop());

const TTL_MS = 1_000;

describe("a held lock is lost", () => {
  it("when its key is deleted in Redis", async () => {
    const gw = new Gateway(stack.url);
    const lock = await gw.acquire(uniqueKey("flushed"), { ttlMs: TTL_MS });
    const deleted = performance.now();
    stack.redis.cli("FLUSHALL");
    const aborted = await abortTime(lock.signal);
    assert.ok(aborted - deleted < TTL_MS * 1.5, `lost after ${aborted - deleted} ms`);
    const reason = lock.signal.reason;
    assert.ok(reason instanceof LockLostError);
    assert.equal(reason.reason, "lock-gone");
    assert.throws(() => lock.check(), LockLostError);
    await lock.release(); // nothing to give back
  });

  it("when Redis is frozen past the lease", async () => {
    const gw = new Gateway(stack.url);
    const lock = await gw.acquire(uniqueKey("frozen"), { ttlMs: TTL_MS });
    const frozen = performance.now();
    stack.redis.freeze();
    try {
      const aborted = await abortTime(lock.signal);
      // The last renewal before the freeze was at most a third of the lease
      // before it: the lease ends within a lease of the freeze.
      assert.ok(aborted - frozen <= TTL_MS * 1.5, `lost after ${aborted - frozen} ms`);
      assert.ok(lock.signal.reason instanceof LockLostError);
    } finally {
      stack.redis.thaw();
    }
    await lock.release();
  });

  it("when the gateway falls silent, by the client's own clock at the lease's end", async () => {
    const silent = await GatewayServer.start(stack.redis);
    try {
      const lock = await new Gateway(silent.url).acquire(uniqueKey("silent"), { ttlMs: TTL_MS });
      await sleep(100);
      const frozen = performance.now();
      silent.freeze(); // the stream stays open, and nothing comes through it
      const aborted = await abortTime(lock.signal);
      // The last renewal came at most a third of the lease before the freeze.
      const after = aborted - frozen;
      assert.ok(after >= TTL_MS * 0.6 && after <= TTL_MS * 1.2, `lost after ${after} ms`);
      assert.equal((lock.signal.reason as LockLostError).reason, "lease-expired");
      await lock.release();
    } finally {
      await silent.kill();
    }
  });

  it("when the gateway is killed while the routine holds it, with no unhandled rejection", async () => {
    const doomed = await GatewayServer.start(stack.redis);
    const gw = new Gateway(doomed.url, { timeoutMs: 1_000 });
    const key = uniqueKey("killed");
    let killedAt = 0;
    const outcome = await gw
      .using(key, { ttlMs: TTL_MS }, async (lock) => {
        killedAt = performance.now();
        await doomed.kill();
        // Work that honours the signal: it stops when the lock is lost.
        await untilAborted(lock.signal);
      })
      .catch((error: unknown) => error);
    assert.ok(outcome instanceof LockLostError, `got ${String(outcome)}`);
    assert.ok(performance.now() - killedAt < TTL_MS, "a broken stream is a loss at once");
    // Let every timer the lock had set run out before counting.
    await sleep(TTL_MS * 1.5);
    assert.deepEqual(unhandled, []);
  });

  it("when the gateway is killed while nobody awaits the lock, with no unhandled rejection", async () => {
    const doomed = await GatewayServer.start(stack.redis);
    const gw = new Gateway(doomed.url, { timeoutMs: 1_000 });
    const lock = await gw.acquire(uniqueKey("killed-idle"), { ttlMs: TTL_MS });
    await doomed.kill();
    await abortTime(lock.signal);
    assert.ok(lock.signal.reason instanceof LockLostError);
    await sleep(TTL_MS * 1.5);
    await lock.release();
    assert.deepEqual(unhandled, []);
  });
});
