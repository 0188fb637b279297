// The real things the browser tests run against: a redis-server and a
// lockgate gateway, each on a free loopback port, started by the test and
// stopped after it; and the plain HTTP clients (holders, waiters, buyers)
// that change what the console shows.

import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { importSource } from "./modules.mjs";

// The same readers as the console's: exact fencing tokens, the event stream.
const { parseGatewayJson } = await importSource("../clients/typescript/src/json");
const { readEvents } = await importSource("../clients/typescript/src/sse");

const here = path.dirname(fileURLToPath(import.meta.url));
export const repo = path.resolve(here, "..", "..");
export const lockgateBin = process.env.LOCKGATE_BIN ?? path.join(repo, "target", "release", "lockgate");

/** A port nobody listens on now. */
export async function freePort() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Waits until `check` returns something truthy, or fails after `timeoutMs`. */
export async function eventually(check, { timeoutMs = 5000, everyMs = 50, what = "the condition" } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${timeoutMs} ms${last ? `: ${last.message}` : ""}`);
    await sleep(everyMs);
  }
}

function started(child, name) {
  const output = [];
  child.stdout?.on("data", (chunk) => output.push(chunk));
  child.stderr?.on("data", (chunk) => output.push(chunk));
  child.output = () => Buffer.concat(output).toString();
  child.on("error", (error) => output.push(Buffer.from(`${name}: ${error.message}\n`)));
  return child;
}

async function stopped(child, signal = "SIGTERM") {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exit = new Promise((resolve) => child.once("exit", resolve));
  child.kill(signal);
  const late = setTimeout(() => child.kill("SIGKILL"), 5000);
  await exit;
  clearTimeout(late);
  // A grandchild that outlived it may still hold these pipes open, and an
  // open pipe would keep the test process alive.
  child.stdout?.destroy();
  child.stderr?.destroy();
}

/** A private redis-server: no persistence, its files in a temp dir. */
export class RedisServer {
  static async start() {
    const dir = mkdtempSync(path.join(tmpdir(), "lockgate-console-redis-"));
    const port = await freePort();
    const child = started(
      spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir], {
        stdio: ["ignore", "pipe", "pipe"],
      }),
      "redis-server",
    );
    const redis = new RedisServer(child, port, dir);
    await eventually(() => redis.ping(), { timeoutMs: 10_000, what: "redis-server answering PING" });
    return redis;
  }

  constructor(child, port, dir) {
    this.child = child;
    this.port = port;
    this.dir = dir;
    this.url = `redis://127.0.0.1:${port}`;
  }

  ping() {
    return new Promise((resolve) => {
      const socket = net.connect(this.port, "127.0.0.1");
      socket.on("connect", () => socket.write("PING\r\n"));
      socket.on("data", (data) => {
        socket.destroy();
        resolve(data.toString().startsWith("+PONG"));
      });
      socket.on("error", () => resolve(false));
    });
  }

  async stop() {
    await stopped(this.child);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A `lockgate serve` process; `restart` brings it back on the same port. */
export class Lockgate {
  static async start(redis, { adminToken, args = [] } = {}) {
    const gateway = new Lockgate(redis, await freePort(), adminToken, args);
    await gateway.run();
    return gateway;
  }

  constructor(redis, port, adminToken, args) {
    this.redis = redis;
    this.port = port;
    this.adminToken = adminToken;
    this.args = args;
    this.url = `http://127.0.0.1:${port}`;
  }

  async run() {
    const args = ["serve", "--listen", `127.0.0.1:${this.port}`, "--redis-url", this.redis.url, "--instance-id", `console-test-${this.port}`];
    if (this.adminToken) args.push("--admin-token", this.adminToken);
    this.child = started(
      spawn(lockgateBin, [...args, ...this.args], {
        stdio: ["ignore", "pipe", "pipe"],
        env: { ...process.env, RUST_LOG: "warn", NO_COLOR: "1" },
      }),
      "lockgate",
    );
    await eventually(
      async () => {
        if (this.child.exitCode !== null) throw new Error(`lockgate exited:\n${this.child.output()}`);
        return (await fetch(`${this.url}/healthz`)).ok;
      },
      { timeoutMs: 10_000, what: "lockgate answering /healthz" },
    );
  }

  /** Stops the process (SIGKILL: as if the host died). */
  async kill() {
    await stopped(this.child, "SIGKILL");
  }

  async stop() {
    await stopped(this.child);
  }

  /** `fetch` against the gateway; `admin` adds the admin token. */
  request(route, { admin = false, headers = {}, ...init } = {}) {
    const all = { ...headers };
    if (admin) all.authorization = `Bearer ${this.adminToken}`;
    return fetch(`${this.url}${route}`, { ...init, headers: all });
  }

  /** `POST /locks`; the answer with its fencing token exact (a `bigint`). */
  async acquire(body, init = {}) {
    const response = await this.request("/locks", {
      method: "POST",
      headers: { "content-type": "application/json", ...(init.headers ?? {}) },
      body: JSON.stringify(body),
      signal: init.signal,
    });
    const text = await response.text();
    if (response.status !== 201) throw new Error(`POST /locks answered ${response.status}: ${text}`);
    return parseGatewayJson(text);
  }

  async release(key, token) {
    const response = await this.request(`/locks/${key}`, { method: "DELETE", headers: { "lock-token": token } });
    if (response.status !== 204) throw new Error(`DELETE /locks/${key} answered ${response.status}`);
  }

  /** `GET /locks/{key}` (fencing tokens exact), or null when nobody holds it and no lock-delay is in force. */
  async inspect(key) {
    const response = await this.request(`/locks/${key}`);
    if (response.status === 404) return null;
    return parseGatewayJson(await response.text());
  }

  /**
   * `POST /sessions`, not streamed: a session that nobody keeps alive, so
   * it expires after its `ttl_ms` (with its locks, and their lock-delay).
   */
  async openSession(body) {
    const response = await this.request("/sessions", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const text = await response.text();
    if (response.status !== 201) throw new Error(`POST /sessions answered ${response.status}: ${text}`);
    return JSON.parse(text);
  }

  /**
   * A streamed lock (`POST /locks` with `Accept: text/event-stream`): the
   * events as they come, and `ended`, which resolves with them all when
   * the gateway closes the stream.
   */
  async holdStreamed(body) {
    const controller = new AbortController();
    const response = await this.request("/locks", {
      method: "POST",
      headers: { "content-type": "application/json", accept: "text/event-stream" },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (response.status !== 200) throw new Error(`streamed POST /locks answered ${response.status}: ${await response.text()}`);
    const events = [];
    const ended = (async () => {
      try {
        for await (const { event, data } of readEvents(response.body)) events.push({ event, data: parseGatewayJson(data) });
      } catch (error) {
        if (!controller.signal.aborted) throw error;
      }
      return events;
    })();
    return { events, ended, close: () => controller.abort() };
  }
}
