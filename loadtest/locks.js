// k6 load test of the locks through nginx: many clients contend for a few
// keys with server-side waiting, as plain locks, as read-write locks (shared
// readers and exclusive writers on one key) and as counting locks; the run
// fails if a key was ever held against its rules (an exclusive hold beside
// any other, a shared hold beside an exclusive one, more holders of a
// counting lock than its limit), or if fencing tokens ever went backwards.
//
//   k6 run loadtest/locks.js          (loadtest/run.sh sets the environment)
//
// Environment: BASE_URL, VUS (per scenario), DURATION, KEYS (how many keys
// per scenario), LIMIT (places of the counting locks), RECORD_REDIS (where
// holders record their hold intervals; keys k6:locks:*), MAX_FAILED,
// SUMMARY_FILE.

import http from 'k6/http';
import { sleep } from 'k6';
import { Counter, Trend } from 'k6/metrics';
import redis from 'k6/experimental/redis';
import { summaryText } from './seckill.js';

const BASE = __ENV.BASE_URL || 'http://127.0.0.1:8090';
const VUS = Number(__ENV.VUS || 20);
const DURATION = __ENV.DURATION || '10s';
const KEYS = Number(__ENV.KEYS || 4);
const LIMIT = Number(__ENV.LIMIT || 3);
const MAX_FAILED = Number(__ENV.MAX_FAILED || 0);
const RUN = `k6:locks:${__ENV.RUN_ID || 'run'}`;

const record = new redis.Client(__ENV.RECORD_REDIS || 'redis://127.0.0.1:6380');

const acquisitions = new Counter('lock_acquisitions');
const timeouts = new Counter('lock_wait_timeouts');
const violations = new Counter('invariant_violations');
const unexpected = new Counter('unexpected_responses');
const releaseRetries = new Counter('release_retries');
const waited = new Trend('lock_wait', true);

// A wait that runs out is an answer (409), not a failure.
http.setResponseCallback(http.expectedStatuses(200, 201, 204, 409));

const scenario = (exec) => ({ executor: 'constant-vus', vus: VUS, duration: DURATION, exec });

export const options = {
  scenarios: {
    mutex: scenario('mutex'),
    readers_writers: scenario('readersWriters'),
    counting: scenario('counting'),
  },
  thresholds: {
    invariant_violations: ['count==0'],
    unexpected_responses: [`count<=${MAX_FAILED}`],
    // Every kind of hold happened (k6 tags each with its scenario), writers
    // among the readers too.
    'lock_acquisitions{scenario:mutex,kind:exclusive}': ['count>0'],
    'lock_acquisitions{scenario:readers_writers,kind:shared}': ['count>0'],
    'lock_acquisitions{scenario:readers_writers,kind:exclusive}': ['count>0'],
    'lock_acquisitions{scenario:counting,kind:counted}': ['count>0'],
  },
  summaryTrendStats: ['avg', 'p(50)', 'p(90)', 'p(99)', 'max'],
};

export async function setup() {
  await record.del(`${RUN}:holds`);
}

// The highest fencing token this VU was granted, per key.
const highest = {};

function violation(what) {
  violations.add(1);
  console.error(`invariant violated: ${what}`);
}

// Takes `key` as `fields` say, holds it a few ms, releases it, and records
// the hold: `key kind start end fence` (kind: exclusive, shared, or counted).
async function hold(key, kind, fields) {
  const asked = Date.now();
  const response = http.post(`${BASE}/locks`, JSON.stringify({ key, ttl_ms: 10000, wait_ms: 5000, ...fields }), {
    headers: { 'Content-Type': 'application/json' },
    tags: { name: 'acquire', kind },
  });
  if (response.status === 409) {
    timeouts.add(1, { kind });
    return;
  }
  if (response.status !== 201) {
    unexpected.add(1);
    console.warn(`unexpected ${response.status}: ${response.body}`);
    return;
  }
  const start = Date.now();
  waited.add(start - asked, { kind });
  acquisitions.add(1, { kind });
  const grant = response.json();
  if (highest[key] !== undefined && grant.fencing_token <= highest[key]) {
    violation(`${key}: fencing token ${grant.fencing_token} after ${highest[key]}`);
  }
  highest[key] = grant.fencing_token;
  sleep(0.002 + Math.random() * 0.003);
  const end = Date.now();
  // As the clients release: with an Idempotency-Key, retried on a 503
  // (an instance draining while nginx sent it the release: nginx tries a
  // DELETE once), so a retry of a release that did happen is answered as
  // it was, never as a second release.
  const release = () => http.del(`${BASE}/locks/${key}`, null, {
    headers: { 'Lock-Token': grant.token, 'Idempotency-Key': `${grant.token}-release` },
    tags: { name: 'release', kind },
  });
  let released = release();
  for (let retry = 1; released.status === 503 && retry <= 3; retry++) {
    releaseRetries.add(1);
    sleep(0.05 * retry);
    released = release();
  }
  if (released.status !== 204) {
    // A 10 s lease cannot lapse in a few ms: anything else is a lost lock.
    violation(`${key}: release answered ${released.status} ${released.body}`);
  }
  await record.rpush(`${RUN}:holds`, `${key} ${kind} ${start} ${end} ${grant.fencing_token}`);
}

const pick = (prefix) => `${prefix}-${Math.floor(Math.random() * KEYS)}`;

export async function mutex() {
  await hold(pick('k6-lock'), 'exclusive', {});
}

// Mostly readers, and a writer now and then.
export async function readersWriters() {
  if (Math.random() < 0.2) {
    await hold(pick('k6-rw'), 'exclusive', {});
  } else {
    await hold(pick('k6-rw'), 'shared', { mode: 'shared' });
  }
}

export async function counting() {
  await hold(pick('k6-pool'), 'counted', { limit: LIMIT });
}

// Whether holders of these kinds, this many at once, break a lock's rules.
function broken(active) {
  const { exclusive, shared, counted } = active;
  if (exclusive > 0 && exclusive + shared + counted > 1) return 'an exclusive hold beside another';
  if (shared > 0 && counted > 0) return 'shared and counted holds at once';
  if (counted > LIMIT) return `${counted} holders of a counting lock of ${LIMIT}`;
  return null;
}

export async function teardown() {
  const holds = (await record.lrange(`${RUN}:holds`, 0, -1)).map((line) => {
    const [key, kind, start, end, fence] = line.split(' ');
    return { key, kind, start: Number(start), end: Number(end), fence: Number(fence) };
  });
  const byKey = {};
  for (const hold of holds) (byKey[hold.key] = byKey[hold.key] || []).push(hold);
  for (const [key, list] of Object.entries(byKey)) {
    // A sweep over the recorded intervals (each inside the real hold, which
    // began before the grant reached the client and ended after the release
    // left it): ends before starts at the same millisecond, since a hold
    // that ended then and one that began then did not overlap.
    const events = [];
    for (const hold of list) {
      events.push({ at: hold.start, step: 1, kind: hold.kind });
      events.push({ at: hold.end, step: -1, kind: hold.kind });
    }
    events.sort((a, b) => a.at - b.at || a.step - b.step);
    const active = { exclusive: 0, shared: 0, counted: 0 };
    for (const event of events) {
      active[event.kind] += event.step;
      const fault = event.step > 0 && broken(active);
      if (fault) {
        violation(`${key} at ${event.at}: ${fault}`);
        break;
      }
    }
  }
  const kinds = {};
  for (const hold of holds) kinds[hold.kind] = (kinds[hold.kind] || 0) + 1;
  console.log(`locks: ${holds.length} holds (${JSON.stringify(kinds)}) over ${Object.keys(byKey).length} keys checked`);
}

export function handleSummary(data) {
  const out = {};
  if (__ENV.SUMMARY_FILE) out[__ENV.SUMMARY_FILE] = JSON.stringify(data, null, 2);
  out.stdout = summaryText('locks', data);
  return out;
}
