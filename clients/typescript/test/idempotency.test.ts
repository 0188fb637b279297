/**
 * The plain acquire's retry after a lost answer: a proxy forwards the first
 * request and drops the connection before the answer; the client retries
 * with the same Idempotency-Key and is given the same grant, so no lock is
 * left behind that nobody holds the token of.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { Gateway, LockHeldError } from "lockgate";
import { Stack, heldStatus, uniqueKey } from "./harness.js";
import { FaultyProxy } from "./proxy.js";

let stack: Stack;
let proxy: FaultyProxy;

before(async () => {
  stack = await Stack.start();
  proxy = await FaultyProxy.start(stack.gateway.port);
});
after(async () => {
  await proxy.close();
  await stack.stop();
});

/** The Idempotency-Key of every request the proxy saw, in order. */
function idempotencyKeys(requests: string[]): string[] {
  return requests.flatMap((text) => [...text.matchAll(/^idempotency-key: *(\S+)/gim)].map((match) => match[1]!));
}

describe("a plain acquire whose answer is lost", () => {
  it("is retried with the same Idempotency-Key and given the same grant", async () => {
    const direct = new Gateway(stack.url);
    const viaProxy = new Gateway(proxy.url);
    const key = uniqueKey("replayed");
    proxy.forgetRequests();
    proxy.dropAnswers = 1;

    const lease = await viaProxy.leases.acquire(key, { ttlMs: 10_000 });
    assert.equal(lease.replayed, true, "the gateway answered the first attempt's grant again");
    const sent = idempotencyKeys(proxy.requests);
    assert.equal(sent.length, 2);
    assert.ok(sent[0] && sent[0] === sent[1], "both attempts carried one Idempotency-Key");

    const status = await heldStatus(direct, key);
    assert.equal(status?.holders, 1, "one grant, not two");
    assert.equal(status?.fencingToken, lease.fencingToken);
    // Without the key the retry would have met its own lock.
    await assert.rejects(direct.leases.acquire(key), LockHeldError);

    assert.equal(await viaProxy.leases.release(key, lease.token), 0);
    assert.equal(await direct.inspect(key), null, "the token the client got frees the lock");
  });

  it("sends a fresh Idempotency-Key with every acquisition", async () => {
    const viaProxy = new Gateway(proxy.url);
    const key = uniqueKey("fresh");
    proxy.forgetRequests();
    for (let round = 0; round < 2; round++) {
      const lease = await viaProxy.leases.acquire(key);
      assert.equal(lease.replayed, false);
      await viaProxy.leases.release(key, lease.token);
    }
    const sent = idempotencyKeys(proxy.requests);
    assert.equal(sent.length, 2);
    assert.notEqual(sent[0], sent[1]);
  });
});
