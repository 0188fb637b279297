/**
 * Real processes for the tests: a `redis-server` on a free port (no
 * persistence) and the lockgate binary serving in front of it, each with its
 * log in a temporary directory, stopped when the test file ends (and killed
 * if the test process exits first).
 *
 * The binary is `$LOCKGATE_BIN`, or the repository's release build.
 */

import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, connect } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before } from "node:test";
import { fileURLToPath } from "node:url";

import type { Gateway, LockStatus } from "lockgate";

/** The package's root: this file runs from `build/`. */
export const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const repositoryRoot = resolve(packageRoot, "..", "..");
export const lockgateBin = process.env.LOCKGATE_BIN || join(repositoryRoot, "target", "release", "lockgate");

const running = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

/** Where the processes' logs go; kept after the run when LOCKGATE_TEST_KEEP_LOGS is set. */
const workDir = mkdtempSync(join(tmpdir(), "lockgate-ts-"));
process.on("exit", () => {
  if (process.env.LOCKGATE_TEST_KEEP_LOGS) console.error(`test logs kept in ${workDir}`);
  else rmSync(workDir, { recursive: true, force: true });
});

export function sleep(ms: number): Promise<void> {
  return new Promise((done) => setTimeout(done, ms));
}

/** A port nobody listens on now. */
export function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => done(port));
    });
  });
}

/** Resolves once something accepts connections on `port`. */
async function waitForPort(port: number, child: ChildProcess, what: string): Promise<void> {
  const started = performance.now();
  while (performance.now() - started < 10_000) {
    if (child.exitCode !== null) throw new Error(`${what} exited with ${child.exitCode}`);
    const open = await new Promise<boolean>((done) => {
      const socket = connect(port, "127.0.0.1");
      socket.once("connect", () => {
        socket.destroy();
        done(true);
      });
      socket.once("error", () => done(false));
    });
    if (open) return;
    await sleep(25);
  }
  throw new Error(`${what} did not listen on ${port} within 10 s`);
}

function launch(command: string, args: string[], logName: string): { child: ChildProcess; log: string } {
  const log = join(workDir, logName);
  const out = openSync(log, "a");
  const child = spawn(command, args, { stdio: ["ignore", out, out] });
  running.add(child);
  child.once("exit", () => running.delete(child));
  return { child, log };
}

async function terminate(child: ChildProcess, signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((done) => child.once("exit", done));
  child.kill(signal);
  const timer = setTimeout(() => child.kill("SIGKILL"), 3_000);
  await exited;
  clearTimeout(timer);
}

let instances = 0;

export class RedisServer {
  private constructor(
    readonly port: number,
    private readonly child: ChildProcess,
  ) {}

  static async start(): Promise<RedisServer> {
    for (let attempt = 0; ; attempt++) {
      const port = await freePort();
      const { child } = launch(
        "redis-server",
        ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        `redis-${port}.log`,
      );
      try {
        await waitForPort(port, child, "redis-server");
        return new RedisServer(port, child);
      } catch (error) {
        // Another process may have taken the port in between: try another.
        await terminate(child, "SIGKILL");
        if (attempt >= 3) throw error;
      }
    }
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Runs `redis-cli` against this server. */
  cli(...args: string[]): string {
    const result = spawnSync("redis-cli", ["-p", String(this.port), ...args], { encoding: "utf8", timeout: 5_000 });
    if (result.status !== 0) throw new Error(`redis-cli ${args.join(" ")}: ${result.stderr}`);
    return result.stdout.trim();
  }

  /** Stops the process in its tracks (SIGSTOP): it holds its connections and answers nothing. */
  freeze(): void {
    this.child.kill("SIGSTOP");
  }

  thaw(): void {
    this.child.kill("SIGCONT");
  }

  async stop(): Promise<void> {
    this.thaw();
    await terminate(this.child, "SIGKILL");
  }
}

export class GatewayServer {
  private constructor(
    readonly port: number,
    private readonly child: ChildProcess,
    readonly log: string,
    /** `https` for a gateway started with `--tls-cert`. */
    readonly scheme: "http" | "https" = "http",
  ) {}

  /** Starts `lockgate serve` on a port of its own choosing, in front of `redis`. */
  static async start(redis: RedisServer, extraArgs: string[] = []): Promise<GatewayServer> {
    const name = `gateway-${++instances}`;
    const { child, log } = launch(
      lockgateBin,
      ["serve", "--listen", "127.0.0.1:0", "--redis-url", redis.url, "--instance-id", name, ...extraArgs],
      `${name}.log`,
    );
    const started = performance.now();
    while (performance.now() - started < 10_000) {
      if (child.exitCode !== null) throw new Error(`${lockgateBin} exited with ${child.exitCode}: ${readFileSync(log, "utf8")}`);
      const serving = /lockgate serving addr=127\.0\.0\.1:(\d+)/.exec(readFileSync(log, "utf8"));
      if (serving) {
        return new GatewayServer(Number(serving[1]), child, log, extraArgs.includes("--tls-cert") ? "https" : "http");
      }
      await sleep(25);
    }
    throw new Error(`${lockgateBin} did not start within 10 s: ${readFileSync(log, "utf8")}`);
  }

  get url(): string {
    return `${this.scheme}://127.0.0.1:${this.port}`;
  }

  /** Stops the process in its tracks (SIGSTOP): its connections stay open and say nothing. */
  freeze(): void {
    this.child.kill("SIGSTOP");
  }

  thaw(): void {
    this.child.kill("SIGCONT");
  }

  /** Ends the process at once, as a crash would: it releases nothing. */
  async kill(): Promise<void> {
    this.thaw();
    await terminate(this.child, "SIGKILL");
  }

  async stop(): Promise<void> {
    this.thaw();
    await terminate(this.child, "SIGTERM");
  }
}

/** A Redis and a gateway in front of it. */
export class Stack {
  private constructor(
    readonly redis: RedisServer,
    readonly gateway: GatewayServer,
  ) {}

  static async start(gatewayArgs: string[] = []): Promise<Stack> {
    const redis = await RedisServer.start();
    try {
      return new Stack(redis, await GatewayServer.start(redis, gatewayArgs));
    } catch (error) {
      await redis.stop();
      throw error;
    }
  }

  get url(): string {
    return this.gateway.url;
  }

  async stop(): Promise<void> {
    await this.gateway.stop();
    await this.redis.stop();
  }
}

/**
 * The unhandled rejections of the test file's run, from its start: none
 * may happen (its end fails the file otherwise). What the library starts
 * (stream readers, lease timers) must never end in one.
 */
export function unhandledRejections(): readonly unknown[] {
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => unhandled.push(reason);
  before(() => {
    process.on("unhandledRejection", onUnhandled);
  });
  after(() => {
    process.off("unhandledRejection", onUnhandled);
    assert.deepEqual(unhandled, [], "no unhandled rejection");
  });
  return unhandled;
}

/** The admin token of a gateway started with `ADMIN_ARGS`, for revoking locks. */
export const ADMIN_TOKEN = "lockgate-test-admin-token";
export const ADMIN_ARGS = ["--admin-token", ADMIN_TOKEN];

/**
 * A stack for the whole test file: started before its first test (then
 * `started` is told of it), stopped after its last; and no unhandled
 * rejection meanwhile (`unhandledRejections`).
 */
export function stackForTheFile(started: (stack: Stack) => void, gatewayArgs: string[] = []): void {
  unhandledRejections();
  let stack: Stack | undefined;
  before(async () => {
    stack = await Stack.start(gatewayArgs);
    started(stack);
  });
  after(() => stack?.stop());
}

/** A fresh lock key, so that tests sharing a gateway never meet. */
export function uniqueKey(name: string): string {
  return `ts-test:${name}:${crypto.randomUUID()}`;
}

/** Polls `condition` until it holds, or fails after `ms`. */
export async function eventually(condition: () => boolean | Promise<boolean>, ms: number, what: string): Promise<void> {
  const started = performance.now();
  while (!(await condition())) {
    if (performance.now() - started > ms) throw new Error(`not within ${ms} ms: ${what}`);
    await sleep(20);
  }
}

/** Resolves with the time (performance.now()) at which `signal` aborts. */
export function abortTime(signal: AbortSignal): Promise<number> {
  return new Promise((done) => {
    if (signal.aborted) done(performance.now());
    else signal.addEventListener("abort", () => done(performance.now()), { once: true });
  });
}

/** `promise`, or a rejection naming `what` after `ms`: a wait that must end, and fails the test instead of hanging it. */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`not within ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** Work that runs until `signal` aborts, then rejects with its reason (as work given a lock's signal does). */
export function untilAborted(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    else signal.addEventListener("abort", () => reject(signal.reason), { once: true });
  });
}

/** `gw.inspect(key)` of a lock that is held or free, never under a lock-delay (that fails the test). */
export async function heldStatus(gw: Gateway, key: string): Promise<LockStatus | null> {
  const status = await gw.inspect(key);
  if (status && !status.held) throw new Error(`${key} is under a lock-delay: ${JSON.stringify(status)}`);
  return status;
}

/** Whether the gateway binary serves TLS (`serve --tls-cert`). */
export function gatewayServesTls(): boolean {
  const usage = spawnSync(lockgateBin, ["serve", "--help"], { encoding: "utf8", timeout: 30_000 });
  return usage.status === 0 && usage.stdout.includes("--tls-cert");
}

/** PEM files of a private CA and the certificates it signed, made by `makeCertificates`. */
export interface Certificates {
  dir: string;
  ca: string;
  server: string;
  serverKey: string;
  client: string;
  clientKey: string;
}

/**
 * A private CA, a server certificate for 127.0.0.1 and localhost, and a
 * client certificate (CN `lockgate-test-client`), made with openssl in a
 * fresh temporary directory.
 */
export function makeCertificates(): Certificates {
  const dir = mkdtempSync(join(tmpdir(), "lockgate-certs-"));
  const path = (name: string) => join(dir, name);
  const openssl = (...args: string[]) => {
    const run = spawnSync("openssl", args, { encoding: "utf8", timeout: 60_000 });
    if (run.status !== 0) throw new Error(`openssl ${args.join(" ")}: ${run.stderr}`);
  };
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  openssl("req", "-x509", ...ec, "-keyout", path("ca.key"), "-out", path("ca.pem"), "-days", "2", "-subj", "/CN=lockgate test CA");
  const sign = (name: string, subject: string, extensions: string) => {
    writeFileSync(path(`${name}.ext`), extensions);
    openssl("req", ...ec, "-keyout", path(`${name}.key`), "-out", path(`${name}.csr`), "-subj", subject);
    openssl("x509", "-req", "-in", path(`${name}.csr`), "-CA", path("ca.pem"), "-CAkey", path("ca.key"), "-CAcreateserial",
      "-out", path(`${name}.pem`), "-days", "2", "-extfile", path(`${name}.ext`));
  };
  sign("server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
  sign("client", "/CN=lockgate-test-client", "subjectAltName=DNS:lockgate-test-client\nextendedKeyUsage=clientAuth\n");
  return {
    dir,
    ca: path("ca.pem"),
    server: path("server.pem"),
    serverKey: path("server.key"),
    client: path("client.pem"),
    clientKey: path("client.key"),
  };
}
