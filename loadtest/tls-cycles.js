// k6 load for the TLS benchmark: each iteration an uncontended lock cycle
// (acquire a key of its own, release it), against one gateway.
//
//   k6 run loadtest/tls-cycles.js     (loadtest/bench-tls.sh sets the environment)
//
// Environment: BASE_URL (http:// or https://; k6 trusts the run's CA by
// SSL_CERT_FILE), API_KEY (sent as a bearer token when set), VUS, DURATION,
// SUMMARY_FILE. With `--no-connection-reuse`
// every iteration opens a connection of its own (a TLS handshake each).

import http from 'k6/http';
import { Counter } from 'k6/metrics';

const BASE = __ENV.BASE_URL || 'http://127.0.0.1:8080';
const AUTH = __ENV.API_KEY ? { authorization: `Bearer ${__ENV.API_KEY}` } : {};
const cycles = new Counter('lock_cycles');
const failed = new Counter('failed_cycles');

export const options = {
  vus: Number(__ENV.VUS || 20),
  duration: __ENV.DURATION || '10s',
  thresholds: { failed_cycles: ['count<=0'] },
};

export default function () {
  const key = `bench:tls:${__VU}:${__ITER}`;
  const granted = http.post(`${BASE}/locks`, JSON.stringify({ key, ttl_ms: 30000 }), {
    headers: { 'content-type': 'application/json', ...AUTH },
  });
  if (granted.status !== 201) {
    failed.add(1);
    return;
  }
  const released = http.del(`${BASE}/locks/${key}`, null, {
    headers: { 'lock-token': granted.json('token'), ...AUTH },
  });
  if (released.status !== 204) {
    failed.add(1);
    return;
  }
  cycles.add(1);
}

export function handleSummary(data) {
  const rate = data.metrics.lock_cycles ? data.metrics.lock_cycles.values.rate : 0;
  const out = JSON.stringify({ cycles_per_second: rate });
  return __ENV.SUMMARY_FILE ? { [__ENV.SUMMARY_FILE]: out } : { stdout: out + '\n' };
}
