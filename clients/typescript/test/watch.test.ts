/**
 * Watching a lock: the snapshot, then every change; after a dropped
 * connection the watch resumes with Last-Event-ID, and gets the events it
 * missed, each once, in order.
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Gateway, type WatchEvent } from "lockgate";
import { Stack, eventually, stackForTheFile, uniqueKey } from "./harness.js";
import { FaultyProxy } from "./proxy.js";

let stack: Stack;
let gw: Gateway;

stackForTheFile((started) => {
  [stack, gw] = [started, new Gateway(started.url)];
});

/** Collects a watch's events until it ends. */
function collect(events: AsyncIterable<WatchEvent>): { seen: WatchEvent[]; done: Promise<void> } {
  const seen: WatchEvent[] = [];
  const done = (async () => {
    for await (const event of events) seen.push(event);
  })();
  return { seen, done };
}

describe("a lock watch", () => {
  it("starts with a snapshot of the holder, then tells each change", async () => {
    const key = uniqueKey("watch");
    const holder = await gw.acquire(key, { value: "first" });
    const watch = gw.watch(key);
    const { seen, done } = collect(watch);
    await eventually(() => seen.length === 1, 5_000, "snapshot");
    const snapshot = seen[0]!;
    assert.equal(snapshot.type, "snapshot");
    assert.ok(snapshot.type === "snapshot" && snapshot.data.held);
    assert.equal(snapshot.data.held && snapshot.data.leases[0]?.fencingToken, holder.fencingToken);
    await holder.release();
    await eventually(() => seen.length === 2, 5_000, "released");
    assert.deepEqual(seen[1]!.data, { key, fencingToken: holder.fencingToken });
    assert.equal(seen[1]!.type, "released");
    assert.equal(watch.lastEventId, seen[1]!.id);
    watch.close();
    await done;
  });

  it("resumes after a dropped connection with Last-Event-ID, missing nothing and repeating nothing", async () => {
    const proxy = await FaultyProxy.start(stack.gateway.port);
    try {
      const key = uniqueKey("resume");
      const stop = new AbortController();
      const { seen, done } = collect(new Gateway(proxy.url).watch(key, { signal: stop.signal }));
      await eventually(() => seen.length === 1, 5_000, "snapshot");
      const first = await gw.acquire(key, { value: "a" });
      await eventually(() => seen.length === 2, 5_000, "acquired");
      const lastSeen = seen[1]!.id;

      // The connection drops, and stays down while the lock changes hands.
      proxy.refuseNew = true;
      proxy.cutAll();
      await first.release();
      const second = await gw.acquire(key, { value: "b" });
      await second.setValue("c");
      await second.release();
      proxy.refuseNew = false;

      await eventually(() => seen.length === 6, 10_000, "the missed events");
      stop.abort();
      await done;
      assert.deepEqual(
        seen.map((event) => event.type),
        ["snapshot", "acquired", "released", "acquired", "value", "released"],
      );
      assert.deepEqual(
        seen.map((event) => (event.data as { fencingToken?: bigint }).fencingToken),
        [undefined, first.fencingToken, first.fencingToken, second.fencingToken, second.fencingToken, second.fencingToken],
      );
      const ids = seen.map((event) => event.id);
      assert.equal(new Set(ids).size, ids.length, "no event twice");
      const resumed = proxy.requests.filter((request) => /^last-event-id:/im.test(request));
      assert.ok(resumed.length > 0, "a reconnection was made");
      assert.match(resumed[0]!, new RegExp(`^last-event-id: *${lastSeen}\\r?$`, "im"));
    } finally {
      await proxy.close();
    }
  });

  it("reconnects when its connection falls silent", async () => {
    const proxy = await FaultyProxy.start(stack.gateway.port);
    try {
      const key = uniqueKey("silent");
      const watch = new Gateway(proxy.url).watch(key, { idleTimeoutMs: 300 });
      const { seen, done } = collect(watch);
      await eventually(() => seen.length === 1, 5_000, "snapshot");
      proxy.muteAll();
      const lock = await gw.acquire(key);
      await eventually(() => seen.length === 2, 5_000, "the acquired event, through a new connection");
      assert.equal(seen[1]!.type, "acquired");
      watch.close();
      await done;
      await lock.release();
    } finally {
      await proxy.close();
    }
  });
});
