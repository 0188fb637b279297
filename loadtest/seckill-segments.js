// k6 load of loadtest/bench-segments.sh: purchase attempts on one hot sale
// by CLIENTS closed-loop clients for DURATION, each attempt a new buyer
// (its own HS256 token) with a new Idempotency-Key and quantity 1, so on a
// sale with ample stock every attempt runs the whole purchase and answers 201.
//
// Environment: BASE_URL, BUYER_JWT_SECRET, SKU, CLIENTS, DURATION, RUN_ID
// (makes the buyers of each run new), SUMMARY_FILE (the figures as JSON:
// purchases, purchases_per_second, p50_ms, p99_ms, refused).

import http from 'k6/http';
import k6crypto from 'k6/crypto';
import encoding from 'k6/encoding';
import { Counter, Trend } from 'k6/metrics';

const BASE = __ENV.BASE_URL || 'http://127.0.0.1:8090';
const BUYER_SECRET = __ENV.BUYER_JWT_SECRET || 'cluster-buyers';
const SKU = __ENV.SKU || 'bench-segments';
const RUN_ID = __ENV.RUN_ID || 'run';

const purchases = new Counter('purchases');
const refused = new Counter('refused');
const purchaseTime = new Trend('purchase_duration', true);

export const options = {
  scenarios: {
    buyers: {
      executor: 'constant-vus',
      vus: Number(__ENV.CLIENTS || 64),
      duration: __ENV.DURATION || '10s',
    },
  },
  summaryTrendStats: ['p(50)', 'p(99)', 'max'],
  // An attempt that did not buy means the figures measure something else.
  thresholds: { refused: ['count==0'] },
};

const JWT_HEADER = encoding.b64encode(JSON.stringify({ alg: 'HS256', typ: 'JWT' }), 'rawurl');
function buyerToken(user) {
  const claims = { sub: user, exp: Math.floor(Date.now() / 1000) + 3600 };
  const unsigned = `${JWT_HEADER}.${encoding.b64encode(JSON.stringify(claims), 'rawurl')}`;
  return `${unsigned}.${k6crypto.hmac('sha256', BUYER_SECRET, unsigned, 'base64rawurl')}`;
}

export default function () {
  const user = `${RUN_ID}-${__VU}-${__ITER}`;
  const response = http.post(`${BASE}/seckill/${SKU}/orders`, JSON.stringify({ user_id: user, quantity: 1 }), {
    headers: {
      'Content-Type': 'application/json',
      'Idempotency-Key': crypto.randomUUID(),
      Authorization: `Bearer ${buyerToken(user)}`,
    },
  });
  if (response.status === 201) {
    purchases.add(1);
    purchaseTime.add(response.timings.duration);
  } else {
    refused.add(1);
    if (Math.random() < 0.01) console.warn(`unexpected ${response.status}: ${response.body}`);
  }
}

export function handleSummary(data) {
  const count = data.metrics.purchases ? data.metrics.purchases.values.count : 0;
  const seconds = data.state.testRunDurationMs / 1000;
  const times = data.metrics.purchase_duration ? data.metrics.purchase_duration.values : {};
  const figures = {
    purchases: count,
    purchases_per_second: Math.round(count / seconds),
    p50_ms: Number((times['p(50)'] || 0).toFixed(2)),
    p99_ms: Number((times['p(99)'] || 0).toFixed(2)),
    refused: data.metrics.refused ? data.metrics.refused.values.count : 0,
  };
  const out = { stdout: `${JSON.stringify(figures)}\n` };
  if (__ENV.SUMMARY_FILE) out[__ENV.SUMMARY_FILE] = JSON.stringify(figures);
  return out;
}
