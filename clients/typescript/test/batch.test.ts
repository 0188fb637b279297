/**
 * Several locks at once (`lockAll`: all or none, one token, a wait for the
 * last lock) held through a streamed batch: renewed by the gateway past
 * their lease with no renewal sent by the client, released together, lost
 * together when one of them goes (the gateway giving back the rest), in a
 * session and with it; and the upgrade and downgrade of a held lock, and
 * the permits of a counting lock, against a real gateway and Redis.
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { DeadlockError, Gateway, GatewayUnavailableError, LockHeldError, LockLostError, type LockSet } from "lockgate";
import { ADMIN_ARGS, ADMIN_TOKEN, GatewayServer, Stack, abortTime, eventually, heldStatus, sleep, stackForTheFile, uniqueKey, untilAborted, within } from "./harness.js";
import { FaultyProxy } from "./proxy.js";

let stack: Stack;
let gw: Gateway;

stackForTheFile((started) => {
  [stack, gw] = [started, new Gateway(started.url)];
}, ADMIN_ARGS);

/** Whether every key is free, as `GET` says. */
async function allFree(keys: readonly string[]): Promise<boolean> {
  const statuses = await Promise.all(keys.map((key) => gw.inspect(key)));
  return statuses.every((status) => status === null);
}

/** The set's loss, once its signal aborted. */
async function lossOf(locks: LockSet, ms: number): Promise<LockLostError> {
  await within(abortTime(locks.signal), ms, "the set's loss");
  const reason: unknown = locks.signal.reason;
  assert.ok(reason instanceof LockLostError, `aborted with ${String(reason)}`);
  assert.equal(locks.lost, true);
  assert.throws(() => locks.check(), LockLostError);
  return reason;
}

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
    assert.equal(locks.released, true);
    assert.equal(locks.lost, false, "a release is not a loss");
    assert.equal(locks.remainingMs, 0);
    await locks.release(); // idempotent
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

  it("is kept past its lease by the gateway, the client sending no renewal, and released when the block ends", async () => {
    const [a, b] = [uniqueKey("keep-a"), uniqueKey("keep-b")];
    const proxy = await FaultyProxy.start(stack.gateway.port);
    try {
      const viaProxy = new Gateway(proxy.url);
      await viaProxy.usingAll([a, b], { ttlMs: 600 }, async (locks) => {
        const granted = locks.expiresAtMs;
        await sleep(1_500); // over two leases: only the gateway's renewals keep them
        locks.check();
        assert.ok(locks.expiresAtMs > granted + 500, "renewed events moved the lease on");
        assert.ok(locks.remainingMs > 0 && locks.remainingMs <= 600, `remaining ${locks.remainingMs} ms`);
        for (const key of [a, b]) assert.equal((await heldStatus(gw, key))?.fencingToken, locks.fencingTokens.get(key));
      });
      assert.equal(await gw.inspect(a), null);
      assert.equal(await gw.inspect(b), null);
      const sent = proxy.requests.join("\n");
      assert.match(sent, /^POST \/locks\/batch /m);
      assert.doesNotMatch(sent, /^PUT /m, "the client renewed a lock itself");
    } finally {
      await proxy.close();
    }
  });

  it("is released at the end of an `await using` scope, and by the gateway when its stream closes", async () => {
    const [a, b] = [uniqueKey("scope-a"), uniqueKey("scope-b")];
    {
      await using locks = await gw.lockAll([a, b], { ttlMs: 10_000 });
      assert.equal(locks.lost, false);
    }
    assert.ok(await allFree([a, b]));

    // The connection alone, cut: the gateway gives both back at once, long before their lease.
    const proxy = await FaultyProxy.start(stack.gateway.port);
    try {
      const locks = await new Gateway(proxy.url).lockAll([a, b], { ttlMs: 30_000 });
      proxy.cutAll();
      assert.equal((await lossOf(locks, 5_000)).reason, "connection-lost");
      await eventually(() => allFree([a, b]), 2_000, "the gateway to release a closed stream's locks");
    } finally {
      await proxy.close();
    }
  });

  it("is lost when one lock is revoked, and the gateway gives back the rest", async () => {
    const [a, b, c] = [uniqueKey("revoke-a"), uniqueKey("revoke-b"), uniqueKey("revoke-c")];
    const outcome = await gw
      .usingAll([a, b, c], { ttlMs: 10_000 }, async (locks) => {
        assert.equal(await gw.revoke(b, ADMIN_TOKEN), true);
        await untilAborted(locks.signal);
      })
      .catch((error: unknown) => error);
    assert.ok(outcome instanceof LockLostError, `got ${String(outcome)}`);
    assert.equal(outcome.reason, "revoked");
    assert.equal(outcome.key, b);
    assert.ok(outcome.message.includes(b), outcome.message);

    const locks = await gw.lockAll([a, b, c], { ttlMs: 10_000 });
    await gw.revoke(c, ADMIN_TOKEN);
    const loss = await lossOf(locks, 5_000);
    assert.equal(loss.reason, "revoked");
    assert.equal(loss.key, c);
    // Not released by the client: the gateway gave the others back.
    await eventually(() => allFree([a, b]), 2_000, "the gateway to release the rest of a lost set");
    assert.equal(locks.released, false);
  });

  it("is lost when one lock is released with its token elsewhere, and the gateway gives back the rest", async () => {
    const [a, b] = [uniqueKey("elsewhere-a"), uniqueKey("elsewhere-b")];
    const locks = await gw.lockAll([a, b], { ttlMs: 10_000 });
    await gw.leases.release(b, locks.token);
    const loss = await lossOf(locks, 5_000);
    assert.equal(loss.reason, "released-elsewhere");
    assert.equal(loss.key, b);
    await eventually(() => allFree([a]), 2_000, "the gateway to release the rest");
    await locks.release(); // a lost set: what is left is given back, and it resolves
    assert.equal(locks.released, false, "a lost set stays lost");
  });

  it("is lost when its gateway falls silent, by the client's own clock", async () => {
    const [a, b] = [uniqueKey("silent-a"), uniqueKey("silent-b")];
    const silent = await GatewayServer.start(stack.redis);
    try {
      const locks = await new Gateway(silent.url).lockAll([a, b], { ttlMs: 1_000 });
      await sleep(100);
      const frozen = performance.now();
      silent.freeze(); // the stream stays open, and nothing comes through it
      const loss = await lossOf(locks, 5_000);
      const after = performance.now() - frozen;
      assert.equal(loss.reason, "lease-expired");
      assert.ok(after >= 600 && after <= 1_300, `lost after ${after} ms`);
      await locks.release().catch(() => {}); // the frozen gateway answers nothing
    } finally {
      await silent.kill();
    }
  });

  it("hangs on a session, is renewed by it, and ends with it", async () => {
    const [a, b, c] = [uniqueKey("session-a"), uniqueKey("session-b"), uniqueKey("session-c")];
    const session = await gw.openSession({ ttlMs: 1_500 });
    const locks = await session.lockAll([a, b]);
    const old = await gw.lockAll([c], { session }); // the older spelling: the same
    assert.equal(session.locks, 3);
    await sleep(2_000); // past the session's lease: its keepalives hold the locks
    locks.check();
    assert.equal(locks.expiresAtMs, session.expiresAtMs);
    const status = await heldStatus(gw, a);
    assert.ok(status?.leases[0]?.session, "the lock does not hang on the session");
    assert.equal(status?.leases[0]?.expiresAtMs, (await heldStatus(gw, c))?.leases[0]?.expiresAtMs);
    await session.end();
    assert.ok(await allFree([a, b, c]));
    for (const set of [locks, old]) {
      assert.equal(set.released, true);
      assert.equal(set.lost, false, "ending the session is no loss");
    }
  });

  it("in a session is lost when the session ends under it", async () => {
    const [a, b] = [uniqueKey("ended-a"), uniqueKey("ended-b")];
    const session = await gw.openSession({ ttlMs: 5_000 });
    try {
      const locks = await session.lockAll([a, b]);
      // Someone else ends the session with its id.
      assert.equal((await fetch(`${stack.url}/sessions/${session.id}`, { method: "DELETE" })).status, 204);
      const loss = await lossOf(locks, 5_000);
      assert.equal(loss.reason, "session-ended");
      assert.equal(session.locks, 0);
      assert.ok(await allFree([a, b]));
    } finally {
      await session.end();
    }

    // A session kept alive elsewhere, by its id: the gateway's stream tells its end.
    const elsewhere = await new Gateway(stack.url).openSession({ ttlMs: 5_000 });
    const locks = await gw.lockAll([a, b], { session: elsewhere.id });
    assert.ok((await heldStatus(gw, a))?.leases[0]?.session);
    assert.equal(locks.remainingMs, Number.POSITIVE_INFINITY, "nothing here watches that session");
    await elsewhere.end();
    assert.equal((await lossOf(locks, 5_000)).reason, "session-ended");

    // Any `{ id, signal }`: its signal aborting is the session's loss, before the gateway tells it.
    const kept = await gw.openSession({ ttlMs: 5_000 });
    const told = new AbortController();
    const followed = await gw.lockAll([a, b], { session: { id: kept.id, signal: told.signal } });
    told.abort(new Error("the keeper saw the session go"));
    const loss = await lossOf(followed, 1_000);
    assert.equal(loss.reason, "session-ended");
    assert.equal((loss.cause as Error).message, "the keeper saw the session go");
    await followed.release();
    assert.ok(await allFree([a, b]));
    await kept.end();
  });

  it("is refused, and given back, by a gateway that answers it unstreamed", async () => {
    const [a, b] = [uniqueKey("plain-a"), uniqueKey("plain-b")];
    // A gateway from before streamed batches reads no Accept on a batch: so does this one, through the proxy.
    const proxy = await FaultyProxy.start(stack.gateway.port);
    proxy.rewrite = (request) => request.replace(/^accept: text\/event-stream\r$/im, "accept: application/json\r");
    try {
      const refused = await new Gateway(proxy.url).lockAll([a, b], { ttlMs: 30_000 }).catch((error: unknown) => error);
      assert.ok(refused instanceof GatewayUnavailableError, `got ${String(refused)}`);
      assert.match(refused.message, /does not stream batches/);
      assert.ok(await allFree([a, b]), "the unstreamed batch's locks were left held");
    } finally {
      await proxy.close();
    }
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
