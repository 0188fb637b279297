// k6 load test of the flash sale through nginx: an open model of buyers,
// with replays (also two at once), over-cap attempts and one hot user, that
// fails the run when any invariant of the sale breaks.
//
//   k6 run loadtest/seckill.js        (loadtest/run.sh sets the environment)
//
// Environment: BASE_URL, ADMIN_TOKEN, BUYER_JWT_SECRET (the gateways' HS256
// secret of buyer tokens: each buyer is a JWT's sub, signed here), SKU,
// STOCK, CAP, USERS, RATE (attempts
// per second), DURATION, INSTANCES (the X-Instance-Id values that must all
// serve), RECORD_REDIS (where the test records what it saw; keys k6:*),
// MAX_FAILED (unexpected answers tolerated: the chaos run's in-flight
// requests), SUMMARY_FILE, SEGMENTS (spread the sale over that many
// segments), INSTANCE_URLS (each instance's own URL, comma-separated).
//
// With SEGMENTS, the teardown also keeps buying, one unit per new buyer,
// until the sale answers sold-out: then no unit may be left stranded in a
// segment (sold == initial_stock, stock 0), and every instance, asked
// directly, must show the sale sold out.

import http from 'k6/http';
import { check } from 'k6';
import k6crypto from 'k6/crypto';
import encoding from 'k6/encoding';
import { Counter, Trend } from 'k6/metrics';
import redis from 'k6/experimental/redis';

const BASE = __ENV.BASE_URL || 'http://127.0.0.1:8090';
const ADMIN = __ENV.ADMIN_TOKEN || 'cluster-admin';
const BUYER_SECRET = __ENV.BUYER_JWT_SECRET || 'cluster-buyers';
const SKU = __ENV.SKU || 'k6-phone';
const STOCK = Number(__ENV.STOCK || 1500);
const CAP = Number(__ENV.CAP || 2);
const USERS = Number(__ENV.USERS || 3000);
const RATE = Number(__ENV.RATE || 300);
const DURATION = __ENV.DURATION || '10s';
const INSTANCES = (__ENV.INSTANCES || 'gw-1,gw-2,gw-3').split(',');
const MAX_FAILED = Number(__ENV.MAX_FAILED || 0);
const SEGMENTS = __ENV.SEGMENTS ? Number(__ENV.SEGMENTS) : null;
const INSTANCE_URLS = (__ENV.INSTANCE_URLS || '').split(',').filter((url) => url);
const CREATED = `k6:seckill:${SKU}:created`;

const record = new redis.Client(__ENV.RECORD_REDIS || 'redis://127.0.0.1:6380');

const outcomes = new Counter('seckill_outcomes');
const servedBy = new Counter('seckill_served_by');
const violations = new Counter('invariant_violations');
const unexpected = new Counter('unexpected_responses');
const purchaseTime = new Trend('purchase_duration', true);

// 409 and 429 are answers the sale is meant to give, not failures.
// 403 is the answer to an impostor (a body naming another buyer than the token).
http.setResponseCallback(http.expectedStatuses(200, 201, 403, 409, 429));

export const options = {
  scenarios: {
    buyers: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: DURATION,
      preAllocatedVUs: 64,
      maxVUs: 400,
    },
  },
  thresholds: {
    invariant_violations: ['count==0'],
    unexpected_responses: [`count<=${MAX_FAILED}`],
    // Every instance served traffic.
    ...Object.fromEntries(INSTANCES.map((id) => [`seckill_served_by{instance:${id}}`, ['count>0']])),
    // The run did what it is meant to: bought, replayed, hit the rate limit.
    'seckill_outcomes{outcome:buy-201}': ['count>0'],
    'seckill_outcomes{outcome:replay-200}': ['count>0'],
    'seckill_outcomes{outcome:hot-429}': ['count>0'],
    'seckill_outcomes{outcome:impostor-403}': ['count>0'],
    // Listed so the summary counts them.
    ...Object.fromEntries(
      ['buy-409-sold-out', 'buy-409-limit-exceeded', 'over-cap-409-limit-exceeded', 'over-cap-409-sold-out',
        'hot-201', 'hot-409-limit-exceeded', 'hot-409-sold-out', 'replay-429', 'twins-one-order',
        'twins-refused'].map((outcome) => [
        `seckill_outcomes{outcome:${outcome}}`,
        ['count>=0'],
      ]),
    ),
  },
  summaryTrendStats: ['avg', 'p(50)', 'p(90)', 'p(99)', 'max'],
  // The teardown may buy what the load left, one unit at a time.
  teardownTimeout: '180s',
};

const JSON_HEADERS = { 'Content-Type': 'application/json' };
const ADMIN_HEADERS = { Authorization: `Bearer ${ADMIN}` };

// A buyer's token: an HS256 JWT whose sub is the user, signed with the
// gateways' secret (k6's own crypto), valid for an hour. One per user per VU.
const JWT_HEADER = encoding.b64encode(JSON.stringify({ alg: 'HS256', typ: 'JWT' }), 'rawurl');
const tokens = {};
function buyerToken(user) {
  if (!tokens[user]) {
    const claims = { sub: user, exp: Math.floor(Date.now() / 1000) + 3600 };
    const unsigned = `${JWT_HEADER}.${encoding.b64encode(JSON.stringify(claims), 'rawurl')}`;
    tokens[user] = `${unsigned}.${k6crypto.hmac('sha256', BUYER_SECRET, unsigned, 'base64rawurl')}`;
  }
  return tokens[user];
}

export async function setup() {
  await record.del(CREATED);
  const body = { stock: STOCK, per_user_limit: CAP, ...(SEGMENTS ? { segments: SEGMENTS } : {}) };
  const reset = http.put(`${BASE}/seckill/${SKU}`, JSON.stringify(body), {
    headers: { ...JSON_HEADERS, ...ADMIN_HEADERS },
  });
  const sale = reset.status === 200 ? reset.json() : null;
  if (!sale || sale.stock !== STOCK || sale.sold !== 0 || sale.orders !== 0 ||
    (SEGMENTS && sale.segments !== SEGMENTS)) {
    throw new Error(`the sale was not reset: ${reset.status} ${reset.body}`);
  }
}

// What this VU has seen: its orders (for replays) and what its users bought.
const mine = [];
const bought = {};

function violation(what) {
  violations.add(1);
  console.error(`invariant violated: ${what}`);
}

// The request of a purchase by the holder of `user`'s token; the body names `named`.
function purchaseRequest(user, quantity, key, named = user, base = BASE) {
  return {
    method: 'POST',
    url: `${base}/seckill/${SKU}/orders`,
    body: JSON.stringify({ user_id: named, quantity }),
    params: {
      headers: { ...JSON_HEADERS, 'Idempotency-Key': key, Authorization: `Bearer ${buyerToken(user)}` },
      tags: { name: 'purchase' },
    },
  };
}

// A purchase by the holder of `user`'s token; the body names `named`.
function buy(user, quantity, key, named = user) {
  const started = Date.now();
  const request = purchaseRequest(user, quantity, key, named);
  const response = http.post(request.url, request.body, request.params);
  purchaseTime.add(Date.now() - started);
  const instance = response.headers['X-Instance-Id'];
  if (instance) {
    servedBy.add(1, { instance });
  }
  return response;
}

function slug(response) {
  try {
    return response.json('type');
  } catch (_) {
    return '';
  }
}

export default async function () {
  const roll = Math.random();
  if (roll < 0.1 && mine.length > 0) {
    // A replay of one of this VU's orders: the original order, nothing bought.
    const order = mine[Math.floor(Math.random() * mine.length)];
    const response = buy(order.user_id, order.quantity, order.key);
    outcomes.add(1, { outcome: `replay-${response.status}` });
    if (response.status === 200) {
      if (response.json('order_id') !== order.order_id) violation(`replay of ${order.key} got another order`);
    } else if (response.status !== 429) {
      unexpectedAnswer(response);
    }
    return;
  }
  if (roll < 0.14 && roll >= 0.12) {
    await twins();
    return;
  }
  if (roll < 0.12) {
    // An impostor: a buyer's token, and a body naming someone else.
    const response = buy(`user-${Math.floor(Math.random() * USERS)}`, 1, crypto.randomUUID(), 'someone-else');
    outcomes.add(1, { outcome: `impostor-${response.status}` });
    if (response.status === 201 || response.status === 200) violation(`an impostor bought: ${response.body}`);
    else if (response.status !== 403) unexpectedAnswer(response);
    return;
  }
  const capped = Object.keys(bought).filter((user) => bought[user] >= CAP);
  // One user sends a fifth of the load, past the per-user rate (20/s, burst
  // 40) within the first second, so the limit shows before any sell-out
  // (after which purchases are answered from memory, unlimited).
  const hot = roll < 0.3;
  const overCap = !hot && roll < 0.35 && capped.length > 0;
  const user = hot ? 'hot-user' : overCap ? capped[0] : `user-${Math.floor(Math.random() * USERS)}`;
  const quantity = Math.random() < 0.2 ? 2 : 1;
  const key = crypto.randomUUID();
  const response = buy(user, quantity, key);
  const kind = hot ? 'hot' : overCap ? 'over-cap' : 'buy';

  if (response.status === 201) {
    outcomes.add(1, { outcome: `${kind}-201` });
    const order = response.json();
    check(response, {
      'a 201 carries RateLimit': (r) => r.headers['Ratelimit'] !== undefined,
      'a 201 carries RateLimit-Policy': (r) => r.headers['Ratelimit-Policy'] !== undefined,
    });
    if (overCap) violation(`${user} bought past the cap of ${CAP}`);
    if (order.quantity !== quantity || order.user_id !== user || order.stock_left < 0) {
      violation(`201 with a wrong order: ${response.body}`);
    }
    bought[user] = (bought[user] || 0) + quantity;
    mine.push({ key, order_id: order.order_id, user_id: user, quantity });
    await record.sadd(CREATED, order.order_id);
  } else if (response.status === 409) {
    const problem = slug(response);
    outcomes.add(1, { outcome: `${kind}-409-${problem.replace('/problems/', '')}` });
    const allowed = ['/problems/sold-out', '/problems/limit-exceeded', '/problems/lock-held'];
    if (!allowed.includes(problem)) unexpectedAnswer(response);
  } else if (response.status === 429) {
    outcomes.add(1, { outcome: `${kind}-429` });
    check(response, {
      'a 429 says when to retry': (r) => Number(r.headers['Retry-After']) >= 1,
      'a 429 carries RateLimit': (r) => /^"seckill";r=0;t=\d+$/.test(r.headers['Ratelimit'] || ''),
    }) || violation(`a 429 without its headers: ${JSON.stringify(response.headers)}`);
  } else {
    outcomes.add(1, { outcome: `${kind}-${response.status}` });
    unexpectedAnswer(response);
  }
}

// The same purchase sent twice at once (a client retrying before the first
// answer): at most one 201, and every 200 or 201 names the same order.
async function twins() {
  const user = `user-${Math.floor(Math.random() * USERS)}`;
  const key = crypto.randomUUID();
  const request = purchaseRequest(user, 1, key);
  const responses = http.batch([request, request]);
  const orders = responses.filter((r) => r.status === 200 || r.status === 201);
  const created = responses.filter((r) => r.status === 201);
  for (const response of responses) {
    if (![200, 201, 409, 429].includes(response.status)) unexpectedAnswer(response);
  }
  if (created.length > 1) violation(`one Idempotency-Key made ${created.length} orders: ${key}`);
  const ids = new Set(orders.map((r) => r.json('order_id')));
  if (ids.size > 1) violation(`one Idempotency-Key answered orders ${[...ids].join(', ')}`);
  outcomes.add(1, { outcome: orders.length > 0 ? 'twins-one-order' : 'twins-refused' });
  if (created.length === 1) {
    const order = created[0].json();
    bought[user] = (bought[user] || 0) + 1;
    mine.push({ key, order_id: order.order_id, user_id: user, quantity: 1 });
    await record.sadd(CREATED, order.order_id);
  }
}

// After the load: new buyers take one unit each until the sale answers
// sold-out, which it may do only once the whole sale is sold. Returns the
// units they bought.
async function drain(sale) {
  let units = 0;
  // Every unit left, plus room for the retries a moving stock may ask for.
  for (let attempt = 0; attempt < sale.stock * 2 + 64; attempt++) {
    const response = buy(`drain-${attempt}`, 1, crypto.randomUUID());
    if (response.status === 201) {
      units += 1;
      await record.sadd(CREATED, response.json('order_id'));
    } else if (response.status === 409 && slug(response) === '/problems/sold-out') {
      return units;
    } else if (!(response.status === 409 && slug(response) === '/problems/lock-held')) {
      unexpectedAnswer(response);
    }
  }
  violation(`the sale never answered sold-out while ${units} more units sold`);
  return units;
}

// Once sold out, each instance, asked directly, shows it: stock 0, and a
// new buyer refused sold-out (the sold-out push reached every instance).
function everyInstanceSoldOut() {
  INSTANCE_URLS.forEach((base, index) => {
    const sale = http.get(`${base}/seckill/${SKU}`).json();
    if (sale.stock !== 0) violation(`${base} shows stock ${sale.stock} after the sell-out`);
    const request = purchaseRequest(`late-${index}`, 1, crypto.randomUUID(), `late-${index}`, base);
    const response = http.post(request.url, request.body, request.params);
    if (response.status !== 409 || slug(response) !== '/problems/sold-out') {
      violation(`${base} answered ${response.status} ${response.body} after the sell-out`);
    }
  });
}

function unexpectedAnswer(response) {
  unexpected.add(1);
  console.warn(`unexpected ${response.status}: ${response.body}`);
}

// Every recorded order, a page at a time (the admin token sees every buyer's).
function allOrders() {
  const orders = [];
  let cursor = null;
  do {
    const query = `limit=1000${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
    const page = http.get(`${BASE}/seckill/${SKU}/orders?${query}`, { headers: ADMIN_HEADERS }).json();
    orders.push(...page.orders);
    cursor = page.next_cursor;
  } while (cursor);
  return orders;
}

export async function teardown() {
  let sale = http.get(`${BASE}/seckill/${SKU}`).json();
  if (SEGMENTS) {
    if (sale.segments !== SEGMENTS) violation(`the sale has ${sale.segments} segments, not ${SEGMENTS}`);
    const drained = await drain(sale);
    sale = http.get(`${BASE}/seckill/${SKU}`).json();
    // Demand has now asked for at least the stock: none may be stranded.
    if (sale.sold !== sale.initial_stock || sale.stock !== 0) {
      violation(`units stranded: sold ${sale.sold} of ${sale.initial_stock}, stock ${sale.stock}`);
    }
    everyInstanceSoldOut();
    console.log(`sale ${SKU}: ${drained} units bought after the load until sold-out`);
  }
  if (sale.sold > sale.initial_stock) violation(`oversold: ${JSON.stringify(sale)}`);
  if (sale.sold + sale.stock !== sale.initial_stock) violation(`sold + stock != initial: ${JSON.stringify(sale)}`);
  if (sale.stock < 0) violation(`stock below zero: ${sale.stock}`);
  if (sale.stored !== null && sale.stored !== undefined) {
    // An order hand-off stores the orders in a database and trims them from
    // Redis: loadtest/run.sh checks them there, once the hand-off drained.
    console.log(`sale ${SKU}: sold ${sale.sold} of ${sale.initial_stock} in ${sale.orders} orders; ` +
      `${sale.stored} stored so far; the database is checked after the run`);
    return;
  }
  const orders = allOrders();
  const sum = orders.reduce((total, order) => total + order.quantity, 0);
  if (sum !== sale.sold) violation(`orders sum to ${sum}, sold is ${sale.sold}`);
  if (orders.length !== sale.orders) violation(`${orders.length} orders recorded, the sale counts ${sale.orders}`);
  const perUser = {};
  for (const order of orders) perUser[order.user_id] = (perUser[order.user_id] || 0) + order.quantity;
  for (const [user, total] of Object.entries(perUser)) {
    if (total > CAP) violation(`${user} holds ${total}, the cap is ${CAP}`);
  }
  const recorded = new Set(orders.map((order) => order.order_id));
  const created = await record.smembers(CREATED);
  for (const id of created) {
    if (!recorded.has(id)) violation(`order ${id} was answered 201 but is not recorded`);
  }
  console.log(
    `sale ${SKU}: sold ${sale.sold} of ${sale.initial_stock} in ${orders.length} orders; ` +
      `${created.length} 201s seen; ${Object.keys(perUser).length} buyers`,
  );
}

export function handleSummary(data) {
  const out = {};
  if (__ENV.SUMMARY_FILE) out[__ENV.SUMMARY_FILE] = JSON.stringify(data, null, 2);
  out.stdout = summaryText('seckill', data);
  return out;
}

// A short text summary (k6's own needs a remote import).
export function summaryText(name, data) {
  const lines = [`\n${name}:`];
  const metric = (key) => data.metrics[key];
  const requests = metric('http_reqs');
  if (requests) lines.push(`  requests: ${requests.values.count} (${requests.values.rate.toFixed(0)}/s)`);
  const duration = metric('http_req_duration');
  if (duration) {
    const v = duration.values;
    lines.push(`  latency: p50 ${v['p(50)'].toFixed(1)} ms, p99 ${v['p(99)'].toFixed(1)} ms, max ${v.max.toFixed(1)} ms`);
  }
  for (const key of ['unexpected_responses', 'invariant_violations']) {
    lines.push(`  ${key}: ${metric(key) ? metric(key).values.count : 0}`);
  }
  for (const [key, value] of Object.entries(data.metrics).sort()) {
    if (key.includes('{') && value.values.count !== undefined) lines.push(`  ${key}: ${value.values.count}`);
  }
  for (const [key, value] of Object.entries(data.metrics).sort()) {
    for (const [threshold, result] of Object.entries(value.thresholds || {})) {
      lines.push(`  threshold ${key} ${threshold}: ${result.ok ? 'ok' : 'FAILED'}`);
    }
  }
  return `${lines.join('\n')}\n`;
}
