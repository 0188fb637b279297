/**
 * Revoking locks with the admin token (`gw.revoke`): every hold of a key,
 * or only the hold with a fencing token, never another holder's; the
 * holders' loss; refusals without the admin token, or by a gateway that has
 * none. Against a real gateway and Redis.
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Gateway, InvalidRequestError, LockLostError, type WatchEvent } from "lockgate";
import { ADMIN_ARGS, ADMIN_TOKEN, GatewayServer, Stack, abortTime, eventually, heldStatus, stackForTheFile, uniqueKey, within } from "./harness.js";

let stack: Stack;
let gw: Gateway;

stackForTheFile((started) => {
  [stack, gw] = [started, new Gateway(started.url)];
}, ADMIN_ARGS);

/** The `LockLostError` a lock's signal aborted with. */
async function lossOf(signal: AbortSignal): Promise<LockLostError> {
  await within(abortTime(signal), 5_000, "the loss");
  assert.ok(signal.reason instanceof LockLostError, `aborted with ${String(signal.reason)}`);
  return signal.reason;
}

describe("revoking a lock", () => {
  it("ends every hold at once: each holder loses it, watchers see it, and the next grant's fencing token is larger", async () => {
    const key = uniqueKey("revoke-all");
    const first = await gw.acquire(key, { mode: "shared", ttlMs: 10_000 });
    const second = await gw.acquire(key, { mode: "shared", ttlMs: 10_000 });
    const watch = gw.watch(key);
    const seen: WatchEvent[] = [];
    const watching = (async () => {
      for await (const event of watch) {
        seen.push(event);
        if (event.type === "revoked" && seen.filter((e) => e.type === "revoked").length === 2) break;
      }
    })();
    // The watch must be open (its snapshot seen) before the revocation it is to report.
    await eventually(() => seen.length > 0, 5_000, "the watch's snapshot");
    assert.equal(seen[0]!.type, "snapshot");

    assert.equal(await gw.revoke(key, ADMIN_TOKEN), true);
    for (const lock of [first, second]) assert.equal((await lossOf(lock.signal)).reason, "revoked");
    assert.equal(await gw.inspect(key), null);
    await within(watching, 5_000, "the watchers' revoked events");
    const revoked = seen.filter((event) => event.type === "revoked").map((event) => (event.data as { fencingToken: bigint }).fencingToken);
    assert.deepEqual(revoked.sort(), [first.fencingToken, second.fencingToken].sort());

    const next = await gw.acquire(key);
    assert.ok(next.fencingToken > second.fencingToken);
    await next.release();
  });

  it("with a fencing token ends only that hold, and never another holder's", async () => {
    const key = uniqueKey("revoke-one");
    const stuck = await gw.acquire(key, { mode: "shared", ttlMs: 10_000 });
    const other = await gw.acquire(key, { mode: "shared", ttlMs: 10_000 });
    // As an operator would: the fencing token seen in `inspect`, as a bigint, or a number.
    const shown = (await heldStatus(gw, key))?.leases.find((lease) => lease.fencingToken === stuck.fencingToken);
    assert.ok(shown, "the stuck hold is not shown");
    assert.equal(await gw.revoke(key, ADMIN_TOKEN, { fencingToken: shown.fencingToken }), true);
    assert.equal((await lossOf(stuck.signal)).reason, "revoked");
    other.check();
    assert.equal((await heldStatus(gw, key))?.holders, 1);

    // That hold is gone: revoking it again ends nothing, and the other holder keeps its lock.
    assert.equal(await gw.revoke(key, ADMIN_TOKEN, { fencingToken: Number(stuck.fencingToken) }), false);
    other.check();
    assert.equal((await heldStatus(gw, key))?.leases[0]?.fencingToken, other.fencingToken);
    await other.release();
  });

  it("of a free lock ends nothing", async () => {
    assert.equal(await gw.revoke(uniqueKey("revoke-free"), ADMIN_TOKEN), false);
  });

  it("sends the admin token instead of the gateway's API key", async () => {
    const key = uniqueKey("revoke-key");
    const lock = await gw.acquire(key, { ttlMs: 10_000 });
    const withKey = new Gateway(stack.url, { apiKey: "not-the-admin-token" });
    assert.equal(await withKey.revoke(key, ADMIN_TOKEN), true);
    assert.equal((await lossOf(lock.signal)).reason, "revoked");
  });

  it("is refused without the admin token, or by a gateway that has none, and the lock is kept", async () => {
    const key = uniqueKey("revoke-refused");
    const lock = await gw.acquire(key, { ttlMs: 10_000 });
    const wrong = await gw.revoke(key, "not-the-admin-token").catch((error: unknown) => error);
    assert.ok(wrong instanceof InvalidRequestError, `got ${String(wrong)}`);
    assert.ok(["unauthorized", "forbidden"].includes(wrong.slug ?? ""), `slug ${wrong.slug}`);

    const unadministered = await GatewayServer.start(stack.redis);
    try {
      const refused = await new Gateway(unadministered.url).revoke(key, ADMIN_TOKEN).catch((error: unknown) => error);
      assert.ok(refused instanceof InvalidRequestError, `got ${String(refused)}`);
      assert.equal(refused.slug, "administration-disabled");
    } finally {
      await unadministered.stop();
    }
    lock.check();
    assert.equal((await heldStatus(gw, key))?.fencingToken, lock.fencingToken);
    await lock.release();
    await assert.rejects(gw.revoke(key, ADMIN_TOKEN, { fencingToken: 0n }), RangeError);
  });
});
