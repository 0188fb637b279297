// The redlock load of the anchors benchmark: npm's redlock on one Redis, driven the way lockbench drives lockgate, reporting its own CPU.
//
//   node bench.mjs cycles --redis redis://127.0.0.1:6379 --clients 50 --seconds 5
//   node bench.mjs relay  --redis redis://127.0.0.1:6379 --clients 50 --seconds 5
//
// Every client has a connection and a Redlock of its own (as separate
// application instances would). redlock's own retry settings (200 ms apart,
// 100 ms of jitter), except that a client retries until it has the lock.
// cycles: a key per client, lock + unlock as fast as it can. relay: one key,
// each client unlocking as soon as it is granted and asking again; the time
// from each unlock to the next grant. Prints one JSON line with lockbench's fields.
import Redis from 'ioredis';
import Redlock from 'redlock';

const [mode, ...options] = process.argv.slice(2);
const option = (name, fallback) => {
  const at = options.indexOf(`--${name}`);
  return at >= 0 ? options[at + 1] : fallback;
};
const redisUrl = option('redis', 'redis://127.0.0.1:6379');
const clients = Number(option('clients', '50'));
const seconds = Number(option('seconds', '5'));
if (mode !== 'cycles' && mode !== 'relay') {
  throw new Error(`mode is cycles or relay, not ${mode}`);
}
const relay = mode === 'relay';
const ttlMs = 30000;

const connections = [];
const lockers = [];
for (let i = 0; i < clients; i++) {
  const connection = new Redis(redisUrl);
  connections.push(connection);
  lockers.push(new Redlock([connection], { retryCount: -1 }));
}
await Promise.all(connections.map((connection) => connection.ping()));
// One cycle each before the clock starts, so the scripts are loaded.
await Promise.all(
  lockers.map(async (locker, i) => (await locker.lock(`bench:warm:${i}`, ttlMs)).unlock()),
);

// When the lock was last released (null: not yet) and by which client, and
// each hand-off's delay after it, in µs. The lock is exclusive, so grants and
// releases alternate. A grant to the client that released last is a
// re-grant, not a hand-off: the others went on waiting.
let released = null;
let releasedBy = -1;
let regrants = 0;
const delays = [];
// Each grant's wait from asking, in µs.
const waits = [];
let done = 0;
const cpuStart = process.cpuUsage();
const start = process.hrtime.bigint();
const deadline = start + BigInt(seconds) * 1_000_000_000n;
await Promise.all(
  lockers.map(async (locker, i) => {
    const resource = relay ? 'bench:relay' : `bench:cycle:${i}`;
    while (process.hrtime.bigint() < deadline) {
      const asked = process.hrtime.bigint();
      const lock = await locker.lock(resource, ttlMs);
      waits.push(Number(process.hrtime.bigint() - asked) / 1000);
      if (relay && released !== null) {
        if (releasedBy === i) regrants++;
        else delays.push(Number(process.hrtime.bigint() - released) / 1000);
      }
      released = process.hrtime.bigint();
      releasedBy = i;
      await lock.unlock();
      done++;
    }
  }),
);
const elapsed = Number(process.hrtime.bigint() - start) / 1e9;
const cpu = process.cpuUsage(cpuStart);
await Promise.all(connections.map((connection) => connection.quit()));

const percentile = (sorted, p) =>
  sorted.length ? sorted[Math.max(Math.ceil(sorted.length * p) - 1, 0)] : 0;
const result = {
  mode: `redlock-${mode}`,
  done,
  seconds: Number(elapsed.toFixed(2)),
  per_second: Math.round(done / elapsed),
  generator_cpu_ms: Math.round((cpu.user + cpu.system) / 1000),
};
if (relay) {
  delays.sort((a, b) => a - b);
  result.handoffs = delays.length;
  result.handoffs_per_second = Math.round(delays.length / elapsed);
  result.regrants = regrants;
  result.handoff_p50_ms = Number((percentile(delays, 0.5) / 1000).toFixed(2));
  result.handoff_p99_ms = Number((percentile(delays, 0.99) / 1000).toFixed(2));
  waits.sort((a, b) => a - b);
  result.wait_p50_ms = Number((percentile(waits, 0.5) / 1000).toFixed(2));
  result.wait_p99_ms = Number((percentile(waits, 0.99) / 1000).toFixed(2));
  result.wait_max_ms = Number((percentile(waits, 1) / 1000).toFixed(2));
}
console.log(JSON.stringify(result));
