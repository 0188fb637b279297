/**
 * Streamed locks and the plain lease API against a real gateway and Redis:
 * grants, waits, renewal past the lease, release on success and on error,
 * kinds of locks, values, listing, and the errors each refusal becomes.
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import {
  Gateway,
  GatewayUnavailableError,
  InvalidRequestError,
  LockHeldError,
  LockLostError,
  NotOwnerError,
  type Lock,
} from "lockgate";
import { GatewayServer, Stack, eventually, freePort, heldStatus, sleep, stackForTheFile, uniqueKey } from "./harness.js";
import { FaultyProxy } from "./proxy.js";

let stack: Stack;
let gw: Gateway;

stackForTheFile((started) => {
  [stack, gw] = [started, new Gateway(started.url)];
});

/** The raw text of `GET /locks/{key}`, to compare fencing tokens digit for digit. */
async function rawStatus(key: string): Promise<string> {
  return (await fetch(`${stack.url}/locks/${key}`)).text();
}

describe("a streamed lock", () => {
  it("is granted with its exact fencing token, and is free again once released", async () => {
    const key = uniqueKey("grant");
    const lock = await gw.acquire(key, { ttlMs: 5_000 });
    assert.equal(lock.key, key);
    assert.match(lock.token, /^[0-9a-f-]{36}$/);
    assert.equal(typeof lock.fencingToken, "bigint");
    // Digit for digit what the gateway says, not a double's rounding of it.
    assert.match(await rawStatus(key), new RegExp(`"fencing_token":${lock.fencingToken}[,}]`));
    assert.equal(lock.signal.aborted, false);

    await lock.release();
    assert.equal(lock.released, true);
    assert.equal(await gw.inspect(key), null);
    await lock.release(); // idempotent
    assert.equal(lock.signal.aborted, false, "a release is not a loss");
  });

  it("is released at the end of an `await using` scope", async () => {
    const key = uniqueKey("dispose");
    {
      await using lock = await gw.acquire(key);
      assert.ok((await gw.inspect(key))?.held);
      assert.equal(lock.lost, false);
    }
    assert.equal(await gw.inspect(key), null);
  });

  it("gets a larger fencing token with every new grant", async () => {
    const key = uniqueKey("fencing");
    const first = await gw.acquire(key);
    await first.release();
    const second = await gw.acquire(key);
    await second.release();
    assert.ok(second.fencingToken > first.fencingToken);
  });

  it("waits for a held lock and gives up with LockHeldError when the wait runs out", async () => {
    const key = uniqueKey("held");
    const holder = await gw.acquire(key, { ttlMs: 10_000 });
    try {
      await assert.rejects(gw.acquire(key), LockHeldError, "no wait: refused at once");
      const started = performance.now();
      const error = await gw.acquire(key, { waitMs: 400 }).catch((thrown: unknown) => thrown);
      const waited = performance.now() - started;
      assert.ok(error instanceof LockHeldError, `got ${String(error)}`);
      assert.equal(error.slug, "lock-held");
      assert.ok(error.retryAfterMs !== undefined && error.retryAfterMs > 0);
      assert.ok(waited >= 350, `waited ${waited} ms`);
    } finally {
      await holder.release();
    }
  });

  it("is granted to a waiter in the queue as soon as the holder releases it", async () => {
    const key = uniqueKey("queue");
    const holder = await gw.acquire(key);
    const positions: number[] = [];
    const waiting = gw.acquire(key, { waitMs: 10_000, onQueued: (position) => positions.push(position) });
    await eventually(() => positions.length > 0, 5_000, "queued");
    await holder.release();
    const lock = await waiting;
    assert.deepEqual(positions, [1]);
    assert.ok(lock.fencingToken > holder.fencingToken);
    await lock.release();
  });

  it("stops waiting, granted nothing, when the caller's signal aborts", async () => {
    const key = uniqueKey("abort");
    const holder = await gw.acquire(key);
    const controller = new AbortController();
    const waiting = gw.acquire(key, { waitMs: 10_000, signal: controller.signal });
    await sleep(200);
    controller.abort(new Error("no longer needed"));
    await assert.rejects(waiting, /no longer needed/);
    await holder.release();
    // The abandoned request left the queue: the lock is free for anyone.
    const next = await gw.acquire(key, { waitMs: 2_000 });
    await next.release();
  });

  it("is held past its lease while the gateway renews it", async () => {
    const key = uniqueKey("renewed");
    const lock = await gw.acquire(key, { ttlMs: 600 });
    const firstExpiry = lock.expiresAtMs;
    await sleep(2_000);
    assert.equal(lock.lost, false);
    assert.ok(lock.expiresAtMs > firstExpiry + 1_000, "renewed events moved the lease on");
    const status = await heldStatus(gw, key);
    assert.equal(status?.fencingToken, lock.fencingToken);
    await lock.release();
  });

  it("counts as lost when released with its token by someone else", async () => {
    const key = uniqueKey("stolen");
    const lock = await gw.acquire(key);
    await gw.leases.release(key, lock.token);
    await eventually(() => lock.lost, 2_000, "lost");
    assert.ok(lock.signal.reason instanceof LockLostError);
    assert.equal(lock.signal.reason.reason, "released-elsewhere");
    assert.throws(() => lock.check(), LockLostError);
    await lock.release(); // nothing to give back: resolves
  });
});

describe("gateway.using", () => {
  it("runs the routine under the lock and releases it", async () => {
    const key = uniqueKey("using");
    const result = await gw.using(key, { ttlMs: 5_000 }, async (lock) => {
      assert.equal((await heldStatus(gw, key))?.fencingToken, lock.fencingToken);
      return 42;
    });
    assert.equal(result, 42);
    assert.equal(await gw.inspect(key), null);
  });

  it("releases on the routine's error and rethrows that very error", async () => {
    const key = uniqueKey("using-error");
    const failure = new RangeError("the routine failed");
    const thrown = await gw
      .using(key, async () => {
        throw failure;
      })
      .catch((error: unknown) => error);
    assert.equal(thrown, failure);
    assert.equal(await gw.inspect(key), null);
  });

  it("reports a failed release to onError and still throws the routine's error", async () => {
    const proxy = await FaultyProxy.start(stack.gateway.port);
    const reported: unknown[] = [];
    const viaProxy = new Gateway(proxy.url, { timeoutMs: 2_000, onError: (error) => reported.push(error) });
    const key = uniqueKey("using-release-fails");
    const failure = new Error("the routine failed");
    try {
      const thrown = await viaProxy
        .using(key, async () => {
          proxy.refuseNew = true; // the release's DELETE cannot get through
          throw failure;
        })
        .catch((error: unknown) => error);
      assert.equal(thrown, failure);
      assert.equal(reported.length, 1);
      assert.ok(reported[0] instanceof GatewayUnavailableError, `reported ${String(reported[0])}`);
      // The stream was closed all the same, and that released the lock.
      await eventually(async () => (await gw.inspect(key)) === null, 2_000, "released by closing the stream");
    } finally {
      await proxy.close();
    }
  });

  it("throws LockLostError when the lock was lost while the routine ran", async () => {
    const key = uniqueKey("using-lost");
    await assert.rejects(
      gw.using(key, async (lock: Lock) => {
        await gw.leases.release(key, lock.token);
        await eventually(() => lock.lost, 2_000, "lost");
        return "done without the lock";
      }),
      LockLostError,
    );
  });
});

describe("kinds of locks and values", () => {
  it("holds shared locks side by side and keeps the writer out", async () => {
    const key = uniqueKey("shared");
    const reader1 = await gw.acquire(key, { mode: "shared" });
    const reader2 = await gw.acquire(key, { mode: "shared" });
    assert.equal(reader1.mode, "shared");
    await assert.rejects(gw.acquire(key), LockHeldError);
    const status = await heldStatus(gw, key);
    assert.equal(status?.mode, "shared");
    assert.equal(status?.holders, 2);
    await reader1.release();
    await reader2.release();
  });

  it("holds up to `limit` places of a counting lock", async () => {
    const key = uniqueKey("counting");
    const places = [await gw.acquire(key, { limit: 2 }), await gw.acquire(key, { limit: 2 })];
    await assert.rejects(gw.acquire(key, { limit: 2 }), LockHeldError);
    const mismatch = await gw.acquire(key, { limit: 3 }).catch((error: unknown) => error);
    assert.ok(mismatch instanceof InvalidRequestError);
    assert.equal(mismatch.slug, "limit-mismatch");
    for (const place of places) await place.release();
  });

  it("shows the holder's value to readers and lets the holder replace it", async () => {
    const key = uniqueKey("value");
    const lock = await gw.acquire(key, { value: "10.0.0.7:9000" });
    assert.equal((await heldStatus(gw, key))?.leases[0]?.value, "10.0.0.7:9000");
    await lock.setValue("10.0.0.7:9001");
    assert.equal(lock.value, "10.0.0.7:9001");
    assert.equal((await heldStatus(gw, key))?.leases[0]?.value, "10.0.0.7:9001");
    await lock.release();
  });

  it("lists the held locks under a prefix, a page at a time", async () => {
    const prefix = `${uniqueKey("list")}:`;
    const locks = await Promise.all([1, 2, 3].map((n) => gw.acquire(`${prefix}${n}`)));
    const listed = [];
    for await (const status of gw.list({ prefix, pageSize: 2 })) listed.push(status.key);
    assert.deepEqual(listed.sort(), [1, 2, 3].map((n) => `${prefix}${n}`));
    for (const lock of locks) await lock.release();
  });
});

describe("the plain lease API", () => {
  it("acquires, re-enters, extends and releases with a token", async () => {
    const key = uniqueKey("lease");
    const lease = await gw.leases.acquire(key, { ttlMs: 5_000 });
    assert.equal(lease.holds, 1);
    assert.equal(lease.replayed, false);
    const again = await gw.leases.reenter(key, lease.token);
    assert.equal(again.holds, 2);
    assert.equal(again.fencingToken, lease.fencingToken);
    const extended = await gw.leases.extend(key, lease.token, 20_000);
    assert.equal(extended.ttlMs, 20_000);
    assert.equal(await gw.leases.release(key, lease.token), 1);
    assert.equal(await gw.leases.release(key, lease.token), 0);
    assert.equal(await gw.inspect(key), null);
  });

  it("refuses another owner's token with NotOwnerError, and an ended lease with LockLostError", async () => {
    const key = uniqueKey("lease-refusals");
    const lease = await gw.leases.acquire(key, { ttlMs: 300 });
    await assert.rejects(gw.leases.release(key, crypto.randomUUID()), NotOwnerError);
    await sleep(500);
    const lost = await gw.leases.extend(key, lease.token, 1_000).catch((error: unknown) => error);
    assert.ok(lost instanceof LockLostError);
    assert.equal(lost.problem?.type, "/problems/lock-not-found");
  });

  it("turns a malformed request into InvalidRequestError with the problem document", async () => {
    const error = await gw.leases.acquire("not a valid key!").catch((thrown: unknown) => thrown);
    assert.ok(error instanceof InvalidRequestError);
    assert.equal(error.slug, "invalid-key");
    assert.equal(error.status, 422);
    const field = await gw.leases.acquire(uniqueKey("ttl"), { ttlMs: 1 }).catch((thrown: unknown) => thrown);
    assert.ok(field instanceof InvalidRequestError);
    assert.equal(field.problem?.field, "ttl_ms");
  });
});

describe("a gateway", () => {
  it("that nobody serves gives GatewayUnavailableError", async () => {
    const nowhere = new Gateway(`http://127.0.0.1:${await freePort()}`, { timeoutMs: 1_000 });
    await assert.rejects(nowhere.acquire(uniqueKey("nowhere")), GatewayUnavailableError);
    await assert.rejects(nowhere.leases.acquire(uniqueKey("nowhere"), { retries: 1 }), GatewayUnavailableError);
  });

  it("with API keys needs one", async () => {
    const guarded = await GatewayServer.start(stack.redis, ["--api-keys", "secret-key"]);
    try {
      const refused = await new Gateway(guarded.url).acquire(uniqueKey("guarded")).catch((error: unknown) => error);
      assert.ok(refused instanceof InvalidRequestError);
      assert.equal(refused.slug, "unauthorized");
      const lock = await new Gateway(guarded.url, { apiKey: "secret-key" }).acquire(uniqueKey("guarded"));
      await lock.release();
    } finally {
      await guarded.stop();
    }
  });
});
