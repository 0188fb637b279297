/**
 * A candidate for leadership in a process of its own, so that a test can
 * kill it as a crashed leader dies: `node candidate.js URL KEY VALUE TTL_MS`
 * campaigns, prints `{"term": "..."}` once elected, and leads until killed.
 */

import { Gateway } from "lockgate";

const [url, key, value, ttlMs] = process.argv.slice(2);
if (!url || !key || !value || !ttlMs) throw new Error("usage: candidate.js URL KEY VALUE TTL_MS");

const leadership = await new Gateway(url).election(key, { ttlMs: Number(ttlMs) }).campaign({ value });
process.stdout.write(`${JSON.stringify({ term: String(leadership.term) })}\n`);
// The open stream keeps the process, and so the office, alive.
