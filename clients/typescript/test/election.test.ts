/**
 * Leader election: two candidates, the leader killed, the other elected with
 * a larger term; observers follow every change of leader.
 */

import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { Gateway, type Leader } from "lockgate";
import { Stack, eventually, packageRoot, uniqueKey } from "./harness.js";

let stack: Stack;
let gw: Gateway;
const candidates: ChildProcess[] = [];

before(async () => {
  stack = await Stack.start();
  gw = new Gateway(stack.url);
});
after(async () => {
  for (const child of candidates) child.kill("SIGKILL");
  await stack.stop();
});

/** Starts a candidate process; resolves with its term once it is elected. */
function startCandidate(key: string, value: string): { process: ChildProcess; elected: Promise<bigint> } {
  const child = spawn(process.execPath, [join(packageRoot, "build", "candidate.js"), stack.url, key, value, "2000"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  candidates.push(child);
  const elected = new Promise<bigint>((resolve, reject) => {
    let output = "";
    child.stdout!.on("data", (chunk: Buffer) => {
      output += chunk.toString();
      const line = output.split("\n")[0];
      if (output.includes("\n")) resolve(BigInt((JSON.parse(line!) as { term: string }).term));
    });
    child.once("exit", (code) => reject(new Error(`candidate exited with ${code} before it was elected`)));
  });
  return { process: child, elected };
}

describe("an election", () => {
  it("elects the other candidate with a larger term when the leader is killed", async () => {
    const key = uniqueKey("election");
    const election = gw.election(key, { ttlMs: 2_000 });
    const stopObserving = new AbortController();
    const seen: (Leader | null)[] = [];
    const observing = (async () => {
      for await (const leader of election.observe({ signal: stopObserving.signal })) seen.push(leader);
    })();
    await eventually(() => seen.length === 1, 5_000, "the first snapshot");
    assert.equal(await election.leader(), null);

    const first = startCandidate(key, "10.0.0.7:9000");
    const firstTerm = await first.elected;
    assert.deepEqual(await election.leader(), { value: "10.0.0.7:9000", term: firstTerm });

    const positions: number[] = [];
    const campaigning = election.campaign({ value: "10.0.0.8:9000", onQueued: (position) => positions.push(position) });
    await eventually(() => positions.length > 0, 5_000, "the second candidate waits in the queue");
    assert.deepEqual(positions, [1]);

    first.process.kill("SIGKILL");
    const leadership = await campaigning;
    assert.ok(leadership.term > firstTerm, "a new term is larger");
    assert.equal(leadership.value, "10.0.0.8:9000");
    assert.deepEqual(await election.leader(), { value: "10.0.0.8:9000", term: leadership.term });

    await leadership.proclaim("10.0.0.8:9001");
    await leadership.resign();
    assert.equal(leadership.signal.aborted, false, "resigning is not losing");
    await eventually(() => seen.length === 6, 5_000, "observers saw every change");
    stopObserving.abort();
    await observing;
    assert.deepEqual(seen, [
      null,
      { value: "10.0.0.7:9000", term: firstTerm },
      null,
      { value: "10.0.0.8:9000", term: leadership.term },
      { value: "10.0.0.8:9001", term: leadership.term },
      null,
    ]);
  });

  it("gives up a campaign when its signal aborts, and is never elected after", async () => {
    const key = uniqueKey("election-abort");
    const election = gw.election(key);
    await using leader = await election.campaign({ value: "leader" });
    const giveUp = new AbortController();
    const queued: number[] = [];
    const campaigning = election.campaign({ value: "quitter", signal: giveUp.signal, onQueued: (p) => queued.push(p) });
    await eventually(() => queued.length > 0, 5_000, "queued");
    giveUp.abort(new Error("shutting down"));
    await assert.rejects(campaigning, /shutting down/);
    await leader.resign();
    assert.equal(await election.leader(), null, "the quitter left the queue");
  });
});
