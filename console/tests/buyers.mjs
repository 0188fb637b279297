// A flash-sale crowd: many buyers at once, each purchase with its own
// Idempotency-Key, in three waves a second apart so that a chart read
// twice a second sees the stock fall. Each buyer tries one more time than
// the per-user cap allows, and one hot buyer hammers the sale until the
// rate limit refuses them.

import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

/** Runs the crowd against `sku`; returns how many answers of each status came. */
export async function buyOut(gateway, sku, { buyers = 40, tries = 3, hotBursts = 12, concurrency = 12 } = {}) {
  const statuses = {};
  const buy = async (userId) => {
    const response = await gateway.request(`/seckill/${sku}/orders`, {
      method: "POST",
      headers: { "content-type": "application/json", "idempotency-key": randomUUID() },
      body: JSON.stringify({ user_id: userId, quantity: 1 }),
    });
    await response.arrayBuffer();
    statuses[response.status] = (statuses[response.status] ?? 0) + 1;
  };
  for (let wave = 0; wave < tries; wave++) {
    const started = Date.now();
    const jobs = [];
    for (let user = 0; user < buyers; user++) jobs.push(`buyer-${user}`);
    for (let i = 0; i < hotBursts; i++) jobs.push("hot-buyer");
    await runAll(jobs, concurrency, buy);
    await sleep(Math.max(0, 1000 - (Date.now() - started)));
  }
  return statuses;
}

async function runAll(jobs, concurrency, work) {
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) await work(jobs[next++]);
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}
