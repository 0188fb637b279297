// k6 load test of the locks through nginx: many clients contend for a few
// keys with server-side waiting; the run fails if two clients ever held one
// key at once, or if fencing tokens ever went backwards.
//
//   k6 run loadtest/locks.js          (loadtest/run.sh sets the environment)
//
// Environment: BASE_URL, VUS, DURATION, KEYS (how many keys), RECORD_REDIS
// (where holders record their hold intervals; keys k6:locks:*),
// MAX_FAILED, SUMMARY_FILE.

import http from 'k6/http';
import { sleep } from 'k6';
import { Counter, Trend } from 'k6/metrics';
import redis from 'k6/experimental/redis';
import { summaryText } from './seckill.js';

const BASE = __ENV.BASE_URL || 'http://127.0.0.1:8090';
const VUS = Number(__ENV.VUS || 50);
const DURATION = __ENV.DURATION || '10s';
const KEYS = Number(__ENV.KEYS || 4);
const MAX_FAILED = Number(__ENV.MAX_FAILED || 0);
const RUN = `k6:locks:${__ENV.RUN_ID || 'run'}`;

const record = new redis.Client(__ENV.RECORD_REDIS || 'redis://127.0.0.1:6380');

const acquisitions = new Counter('lock_acquisitions');
const timeouts = new Counter('lock_wait_timeouts');
const violations = new Counter('invariant_violations');
const unexpected = new Counter('unexpected_responses');
const waited = new Trend('lock_wait', true);

// A wait that runs out is an answer (409), not a failure.
http.setResponseCallback(http.expectedStatuses(200, 201, 204, 409));

export const options = {
  scenarios: { contenders: { executor: 'constant-vus', vus: VUS, duration: DURATION } },
  thresholds: {
    invariant_violations: ['count==0'],
    unexpected_responses: [`count<=${MAX_FAILED}`],
    lock_acquisitions: ['count>0'],
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

export default async function () {
  const key = `k6-lock-${Math.floor(Math.random() * KEYS)}`;
  const asked = Date.now();
  const response = http.post(`${BASE}/locks`, JSON.stringify({ key, ttl_ms: 10000, wait_ms: 5000 }), {
    headers: { 'Content-Type': 'application/json' },
    tags: { name: 'acquire' },
  });
  if (response.status === 409) {
    timeouts.add(1);
    return;
  }
  if (response.status !== 201) {
    unexpected.add(1);
    console.warn(`unexpected ${response.status}: ${response.body}`);
    return;
  }
  const start = Date.now();
  waited.add(start - asked);
  acquisitions.add(1);
  const grant = response.json();
  if (highest[key] !== undefined && grant.fencing_token <= highest[key]) {
    violation(`${key}: fencing token ${grant.fencing_token} after ${highest[key]}`);
  }
  highest[key] = grant.fencing_token;
  sleep(0.002 + Math.random() * 0.003);
  const end = Date.now();
  const released = http.del(`${BASE}/locks/${key}`, null, {
    headers: { 'Lock-Token': grant.token },
    tags: { name: 'release' },
  });
  if (released.status !== 204) {
    // A 10 s lease cannot lapse in a few ms: anything else is a lost lock.
    violation(`${key}: release answered ${released.status} ${released.body}`);
  }
  await record.rpush(`${RUN}:holds`, `${key} ${start} ${end} ${grant.fencing_token}`);
}

export async function teardown() {
  const holds = (await record.lrange(`${RUN}:holds`, 0, -1)).map((line) => {
    const [key, start, end, fence] = line.split(' ');
    return { key, start: Number(start), end: Number(end), fence: Number(fence) };
  });
  const byKey = {};
  for (const hold of holds) (byKey[hold.key] = byKey[hold.key] || []).push(hold);
  for (const [key, list] of Object.entries(byKey)) {
    // Fencing order is grant order; each hold must end before the next starts.
    list.sort((a, b) => a.fence - b.fence);
    for (let i = 1; i < list.length; i++) {
      const [before, after] = [list[i - 1], list[i]];
      if (after.start < before.end) {
        violation(`${key}: held [${before.start}, ${before.end}] and [${after.start}, ${after.end}] at once`);
      }
    }
  }
  console.log(`locks: ${holds.length} holds over ${Object.keys(byKey).length} keys checked for overlaps`);
}

export function handleSummary(data) {
  const out = {};
  if (__ENV.SUMMARY_FILE) out[__ENV.SUMMARY_FILE] = JSON.stringify(data, null, 2);
  out.stdout = summaryText('locks', data);
  return out;
}
