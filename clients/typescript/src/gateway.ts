/**
 * `Gateway`: the client of one lockgate address. Streamed locks
 * (`acquire`, `using`), the plain lease API (`leases`), reading locks
 * (`inspect`, `list`), watching (`watch`) and leader election (`election`).
 */

import { Election, type ElectionOptions } from "./election.js";
import { GatewayUnavailableError, LockgateError, errorFromProblem, hasSlug, type Problem } from "./errors.js";
import { Transport, lockPath, unreachable } from "./http.js";
import { parseGatewayJson, readGatewayJson } from "./json.js";
import { Leases, acquireBody } from "./leases.js";
import { Lock } from "./lock.js";
import { readEvents, type ServerSentEvent } from "./sse.js";
import type { Grant, LockOptions, LockPage, LockStatus, LockStreamEventName, QueuedData } from "./types.js";
import { LockWatch, type WatchOptions } from "./watch.js";

export interface GatewayOptions {
  /** Sent as `Authorization: Bearer <apiKey>`, for a gateway with API keys. */
  apiKey?: string;
  /**
   * How long any one call may take to be answered, in milliseconds, on top
   * of the wait it asks for (default 10 000).
   */
  timeoutMs?: number;
  /**
   * Told of errors that cannot be thrown without hiding another: a release
   * that failed after the routine of `using` threw, or an `onQueued`
   * callback that threw. By default they become a process warning
   * (`process.emitWarning`).
   */
  onError?: (error: unknown) => void;
}

/** A lockgate gateway, by its base URL (`http://127.0.0.1:8080`). */
export class Gateway {
  /** The plain lease API: acquire, extend and release with a token. */
  readonly leases: Leases;
  private readonly transport: Transport;
  private readonly onError: (error: unknown) => void;

  constructor(url: string, options: GatewayOptions = {}) {
    this.transport = new Transport(url, options.apiKey, options.timeoutMs ?? 10_000);
    this.leases = new Leases(this.transport);
    this.onError = options.onError ?? reportAsWarning;
  }

  /** The gateway's base URL. */
  get url(): string {
    return this.transport.baseUrl;
  }

  /**
   * Takes `key` as a streamed lock: the gateway renews it for as long as the
   * returned `Lock` is held, and `lock.signal` aborts if it is lost. Rejects
   * with `LockHeldError` when the lock is held and the wait (`waitMs`,
   * default 0) runs out.
   */
  async acquire(key: string, options: LockOptions = {}): Promise<Lock> {
    const stream = new AbortController();
    const waitMs = options.waitMs ?? 0;
    const limitMs = waitMs + this.transport.timeoutMs;
    let timedOut = false;
    // Until the grant, the caller's signal and our own timeout both close the
    // stream; a closed stream is granted nothing.
    const timer = setTimeout(() => {
      timedOut = true;
      stream.abort();
    }, limitMs);
    const cancel = () => stream.abort(options.signal?.reason);
    options.signal?.addEventListener("abort", cancel, { once: true });
    try {
      options.signal?.throwIfAborted();
      const sentAt = performance.now();
      const response = await this.transport.openStream("POST", "/locks", {
        body: acquireBody(key, options),
        signal: stream.signal,
      });
      const events = readEvents(response.body as ReadableStream<Uint8Array>);
      const grant = await this.awaitGrant(events, options);
      const timing = { sentAt, receivedAt: performance.now() };
      return new Lock(grant, { mode: options.mode ?? "exclusive", value: options.value }, timing, stream, events, {
        release: (lockKey, token) => this.leases.releaseAll(lockKey, token),
        setValue: async (lockKey, token, value) => {
          await this.leases.setValue(lockKey, token, value);
        },
      });
    } catch (error) {
      stream.abort();
      if (options.signal?.aborted) throw options.signal.reason;
      if (timedOut) {
        throw new GatewayUnavailableError(`no grant from the gateway at ${this.url} within ${limitMs} ms`, {
          cause: error,
        });
      }
      if (error instanceof LockgateError) throw error;
      throw unreachable(this.url, error);
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", cancel);
    }
  }

  /** Reads the stream up to its grant: `queued` events, then `acquired` or `refused`. */
  private async awaitGrant(events: AsyncGenerator<ServerSentEvent>, options: LockOptions): Promise<Grant> {
    for (;;) {
      const next = await events.next();
      if (next.done) throw new GatewayUnavailableError("the lock's stream ended before a grant");
      const { data } = next.value;
      const event = next.value.event as LockStreamEventName;
      if (event === "acquired") return readGatewayJson<Grant>(data);
      if (event === "refused") throw errorFromProblem(parseGatewayJson(data) as Problem);
      if (event === "queued" && options.onQueued) {
        const { position } = readGatewayJson<QueuedData>(data);
        try {
          options.onQueued(position);
        } catch (error) {
          // The caller's callback failing is no reason to give up the place in the queue.
          this.report(error);
        }
      }
    }
  }

  /**
   * Runs `routine` under the lock and releases it afterwards, whatever
   * happens. The routine gets the `Lock`: pass `lock.signal` to what it
   * awaits, and `lock.fencingToken` to what it writes.
   *
   * Resolves with the routine's result. Rejects with the routine's own error
   * if it threw (a release failure then goes to `onError`, never over it);
   * with `LockLostError` if the lock was lost while the routine ran (its
   * result was made without the lock); or with the release's error.
   */
  async using<T>(key: string, options: LockOptions, routine: (lock: Lock) => Promise<T> | T): Promise<T>;
  async using<T>(key: string, routine: (lock: Lock) => Promise<T> | T): Promise<T>;
  async using<T>(
    key: string,
    optionsOrRoutine: LockOptions | ((lock: Lock) => Promise<T> | T),
    maybeRoutine?: (lock: Lock) => Promise<T> | T,
  ): Promise<T> {
    const [options, routine] =
      typeof optionsOrRoutine === "function" ? [{}, optionsOrRoutine] : [optionsOrRoutine, maybeRoutine];
    if (typeof routine !== "function") throw new TypeError("using(key, options, routine): routine must be a function");
    const lock = await this.acquire(key, options);
    let result: T;
    try {
      result = await routine(lock);
    } catch (error) {
      try {
        await lock.release();
      } catch (releaseError) {
        this.report(releaseError);
      }
      throw error;
    }
    if (lock.lost) throw lock.signal.reason;
    await lock.release();
    return result;
  }

  /** The lock as `GET /locks/{key}` shows it; `null` when nobody holds it. */
  async inspect(key: string, options: { signal?: AbortSignal } = {}): Promise<LockStatus | null> {
    try {
      const answer = await this.transport.request("GET", lockPath(key), { signal: options.signal });
      return readGatewayJson<LockStatus>(answer.text);
    } catch (error) {
      if (hasSlug(error, "lock-not-found")) return null;
      throw error;
    }
  }

  /**
   * The held locks whose key starts with `prefix`, fetched a page
   * (`pageSize`, default 100) at a time as the iteration goes.
   */
  async *list(options: { prefix?: string; pageSize?: number; signal?: AbortSignal } = {}): AsyncGenerator<LockStatus> {
    let cursor: string | null = null;
    do {
      const query = new URLSearchParams({ prefix: options.prefix ?? "", limit: String(options.pageSize ?? 100) });
      if (cursor !== null) query.set("cursor", cursor);
      const answer = await this.transport.request("GET", `/locks?${query}`, { signal: options.signal });
      const page = readGatewayJson<LockPage>(answer.text);
      yield* page.locks;
      cursor = page.nextCursor;
    } while (cursor !== null);
  }

  /** Follows the lock's events (`GET /locks/{key}/events`), resuming after dropped connections. */
  watch(key: string, options: WatchOptions = {}): LockWatch {
    return new LockWatch(this.transport, key, options);
  }

  /** Leader election on `key`: campaign, resign, and observe who leads. */
  election(key: string, options: ElectionOptions = {}): Election {
    return new Election(this, key, options);
  }

  /** @internal */
  report(error: unknown): void {
    try {
      this.onError(error);
    } catch {
      // A failing error handler must not replace the error being thrown.
    }
  }
}

function reportAsWarning(error: unknown): void {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  if (typeof process !== "undefined" && typeof process.emitWarning === "function") {
    process.emitWarning(`lockgate: ${text}`, { code: "LOCKGATE_UNTHROWN_ERROR" });
  } else {
    console.warn(`lockgate: ${text}`);
  }
}
