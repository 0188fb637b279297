/**
 * The client over HTTPS: an undici `Agent` with a private CA and a client
 * certificate as the gateway's `dispatcher`, against a gateway that serves
 * TLS and requires client certificates. Runs only when the gateway binary
 * serves TLS (`serve --tls-cert`); the certificates are made with openssl.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { after, before, describe, it } from "node:test";

import { Gateway, GatewayUnavailableError } from "lockgate";
import { Agent } from "undici";
import { Stack, gatewayServesTls, makeCertificates, uniqueKey, type Certificates } from "./harness.js";

const skip = spawnSync("openssl", ["version"]).status !== 0
  ? "needs openssl to make the certificates"
  : !gatewayServesTls()
    ? "the gateway binary has no `serve --tls-cert`"
    : false;

describe("over TLS", { skip }, () => {
  let stack: Stack;
  let certs: Certificates;
  const agents: Agent[] = [];
  /** An undici agent with these TLS options (a CA bundle, a client certificate and key). */
  const agent = (connect: { ca?: Buffer; cert?: Buffer; key?: Buffer }) => {
    const made = new Agent({ connect });
    agents.push(made);
    return made;
  };

  before(async () => {
    certs = makeCertificates();
    stack = await Stack.start(["--tls-cert", certs.server, "--tls-key", certs.serverKey, "--tls-client-ca", certs.ca]);
  });
  after(async () => {
    await Promise.all(agents.map((made) => made.close()));
    await stack?.stop();
    rmSync(certs.dir, { recursive: true, force: true });
  });

  it("holds a lock and several at once with a CA bundle and a client certificate", async () => {
    assert.match(stack.url, /^https:/);
    const gw = new Gateway(stack.url, {
      dispatcher: agent({ ca: readFileSync(certs.ca), cert: readFileSync(certs.client), key: readFileSync(certs.clientKey) }),
    });
    const key = uniqueKey("tls");
    await gw.using(key, { ttlMs: 3_000 }, async (lock) => {
      assert.ok(lock.fencingToken > 0n);
      assert.equal((await gw.inspect(key))?.held, true);
    });
    const locks = await gw.lockAll([`${key}:a`, `${key}:b`]);
    assert.equal(locks.fencingTokens.size, 2);
    await locks.release();
  });

  it("is refused with an unknown CA, or without a client certificate", async () => {
    const key = uniqueKey("tls-refused");
    const untrusting = new Gateway(stack.url, {
      dispatcher: agent({ cert: readFileSync(certs.client), key: readFileSync(certs.clientKey) }),
    });
    await assert.rejects(untrusting.leases.acquire(key, { retries: 0 }), GatewayUnavailableError);
    const anonymous = new Gateway(stack.url, { dispatcher: agent({ ca: readFileSync(certs.ca) }) });
    await assert.rejects(anonymous.leases.acquire(key, { retries: 0 }), GatewayUnavailableError);
  });
});
