/**
 * Several locks at once (`lockAll`: all or none, one token, a wait for the
 * last lock, all released together, lost when one is), the upgrade and
 * downgrade of a held lock, and the permits of a counting lock, against a
 * real gateway and Redis.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { DeadlockError, Gateway, LockHeldError, LockLostError } from "lockgate";
import { Stack, abortTime, eventually, heldStatus, sleep, uniqueKey, within } from "./harness.js";

let stack: Stack;
let gw: Gateway;

before(async () => {
  stack = await Stack.start();
  gw = new Gateway(stack.url);
});
after(() => stack.stop());

describe("several locks at once", () => {
  it("takes every lock for one token, with each key's fencing token, and releases them all", async () => {
    const [a, b, pool] = [uniqueKey("all-a"), uniqueKey("all-b"), uniqueKey("all-pool")];
    const locks = await gw.lockAll([a, { key: b, mode: "shared" }, { key: pool, limit: 3, permits: 2 }], { ttlMs: 5_000 });
    assert.deepEqual(locks.keys, [a, b, pool]);
    assert.equal(locks.modeOf(b), "shared");
    for (const key of [a, b, pool]) {
      const status = await heldStatus(gw, key);
      assert.equal(status?.fencingToken, locks.fencingTokens.get(key));
    }
    assert.equal((await heldStatus(gw, pool))?.leases[0]?.permits, 2);
    await assert.rejects(gw.leases.acquire(a), LockHeldError);
    await locks.release();
    for (const key of [a, b, pool]) assert.equal(await gw.inspect(key), null);
    assert.equal(locks.lost, false, "a release is not a loss");
  });

  it("is all or none, naming the held key", async () => {
    const [a, b] = [uniqueKey("none-a"), uniqueKey("none-b")];
    const other = await gw.leases.acquire(b, { ttlMs: 5_000 });
    const refused = await gw.lockAll([a, b]).then(
      () => assert.fail("granted over a held lock"),
      (error: unknown) => error,
    );
    assert.ok(refused instanceof LockHeldError);
    assert.equal(refused.problem?.key, b);
    assert.equal(await gw.inspect(a), null, "a refused batch left a lock held");
    await gw.leases.release(b, other.token);
  });

  it("waits for its last lock and takes all at once", async () => {
    const [a, b] = [uniqueKey("wait-a"), uniqueKey("wait-b")];
    const other = await gw.leases.acquire(b, { ttlMs: 10_000 });
    const waiting = gw.lockAll([a, b], { waitMs: 10_000 });
    await eventually(async () => ((await heldStatus(gw, b))?.waiters.length ?? 0) > 0, 5_000, "the batch to wait");
    assert.equal(await gw.inspect(a), null, "part of a waiting batch is held");
    await gw.leases.release(b, other.token);
    const locks = await within(waiting, 5_000, "the batch's grant");
    assert.ok((locks.fencingTokens.get(b) ?? 0n) > other.fencingToken);
    assert.ok(locks.waitedMs > 0);
    await locks.release();
  });

  it("keeps its locks past their lease, and is lost when one of them goes", async () => {
    const [a, b] = [uniqueKey("keep-a"), uniqueKey("keep-b")];
    await gw.usingAll([a, b], { ttlMs: 600 }, async (locks) => {
      await sleep(1_500); // over two leases: only the set's renewals keep them
      locks.check();
      assert.equal((await heldStatus(gw, a))?.fencingToken, locks.fencingTokens.get(a));
    });

    const locks = await gw.lockAll([a, b], { ttlMs: 1_500 });
    const started = performance.now();
    await gw.leases.release(b, locks.token); // someone with the token let one go
    const lostAt = await within(abortTime(locks.signal), 5_000, "the set's loss");
    assert.ok(lostAt - started < 5_000);
    assert.ok(locks.signal.reason instanceof LockLostError);
    assert.equal(locks.signal.reason.reason, "lock-gone");
    assert.throws(() => locks.check(), LockLostError);
    await locks.release();
    assert.equal(await gw.inspect(a), null, "the lost set's other lock was not released");
  });

  it("hangs on a session and ends with it", async () => {
    const [a, b] = [uniqueKey("session-a"), uniqueKey("session-b")];
    const session = await gw.openSession({ ttlMs: 2_000 });
    const locks = await gw.lockAll([a, b], { session });
    const status = await heldStatus(gw, a);
    assert.ok(status?.leases[0]?.session, "the lock does not hang on the session");
    await session.end();
    assert.equal(await gw.inspect(a), null);
    assert.equal(await gw.inspect(b), null);
    await locks.release();
  });
});

describe("changing a hold", () => {
  it("upgrades a streamed shared lock with a new fencing token, and downgrades it keeping it", async () => {
    const key = uniqueKey("rw");
    const lock = await gw.acquire(key, { mode: "shared", ttlMs: 3_000 });
    const sharedToken = lock.fencingToken;
    await lock.upgrade();
    assert.equal(lock.mode, "exclusive");
    assert.ok(lock.fencingToken > sharedToken);
    assert.equal((await heldStatus(gw, key))?.mode, "exclusive");
    await assert.rejects(gw.leases.acquire(key, { mode: "shared" }), LockHeldError);
    const upgraded = lock.fencingToken;
    await lock.downgrade();
    assert.equal(lock.mode, "shared");
    assert.equal(lock.fencingToken, upgraded);
    const reader = await gw.leases.acquire(key, { mode: "shared" });
    assert.equal((await heldStatus(gw, key))?.holders, 2);
    await gw.leases.release(key, reader.token);
    await sleep(1_200); // the stream still renews the changed hold
    lock.check();
    await lock.release();
  });

  it("refuses a second upgrader as a deadlock, and keeps a timed-out upgrader's shared place", async () => {
    const key = uniqueKey("up");
    const first = await gw.leases.acquire(key, { mode: "shared", ttlMs: 10_000 });
    const second = await gw.leases.acquire(key, { mode: "shared", ttlMs: 10_000 });
    const upgrading = gw.leases.changeMode(key, first.token, "exclusive", { waitMs: 10_000 });
    await sleep(300);
    const refused = await gw.leases.changeMode(key, second.token, "exclusive", { waitMs: 5_000 }).then(
      () => assert.fail("a second upgrade was granted"),
      (error: unknown) => error,
    );
    assert.ok(refused instanceof DeadlockError, String(refused));
    await gw.leases.release(key, second.token);
    const upgraded = await within(upgrading, 5_000, "the first upgrade");
    assert.equal(upgraded.mode, "exclusive");
    assert.ok(upgraded.fencingToken > second.fencingToken);
    await gw.leases.release(key, first.token);

    const third = await gw.acquire(key, { mode: "shared", ttlMs: 10_000 });
    const fourth = await gw.leases.acquire(key, { mode: "shared", ttlMs: 10_000 });
    await assert.rejects(third.upgrade({ waitMs: 200 }), LockHeldError);
    assert.equal(third.mode, "shared");
    assert.equal((await heldStatus(gw, key))?.holders, 2);
    await third.release();
    await gw.leases.release(key, fourth.token);
  });

  it("takes several permits of a counting lock, shown on the lock and its status", async () => {
    const key = uniqueKey("sem");
    const big = await gw.acquire(key, { limit: 5, permits: 3 });
    assert.equal(big.permits, 3);
    const status = await heldStatus(gw, key);
    assert.equal(status?.limit, 5);
    assert.equal(status?.leases[0]?.permits, 3);
    await assert.rejects(gw.leases.acquire(key, { limit: 5, permits: 3 }), LockHeldError);
    const rest = await gw.leases.acquire(key, { limit: 5, permits: 2 });
    const both = (await heldStatus(gw, key))?.leases.map((lease) => lease.permits).sort();
    assert.deepEqual(both, [2, 3]);
    await gw.leases.release(key, rest.token);
    await big.release();
  });
});
