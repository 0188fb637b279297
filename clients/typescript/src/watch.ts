/**
 * Watching a lock without holding it: `GET /locks/{key}/events` as an async
 * iterator. Every event the gateway keeps has an id; after a dropped
 * connection (a gateway restart, a proxy timeout, a network fault) the watch
 * reconnects with `Last-Event-ID` and the gateway sends every event after
 * that one, none twice (or `gap` and a fresh `snapshot` when it no longer
 * keeps them).
 */

import { GatewayUnavailableError, LockgateError } from "./errors.js";
import { lockPath, type Transport } from "./http.js";
import { readGatewayJson } from "./json.js";
import { backoffMs, sleep } from "./sleep.js";
import { EventStreamParser, readEvents } from "./sse.js";
import type { FreeLock, LockMode, LockStatus } from "./types.js";

/** `acquired`: a holder was granted the lock. */
export interface AcquiredData {
  key: string;
  fencingToken: bigint;
  value: string | null;
  /** `exclusive`, `shared`, or `counted` for a counting lock. */
  mode: LockMode | "counted";
  expiresAtMs: number;
}

/** `value`: a holder replaced its public value. */
export interface ValueData {
  key: string;
  fencingToken: bigint;
  value: string | null;
}

/** `released`, `expired` or `revoked`: the place of the holder with this fencing token ended. */
export interface EndedData {
  key: string;
  fencingToken: bigint;
}

/**
 * `delayed`: the lock is free, but nobody is granted it until
 * `delayedUntilMs` (Unix ms, Redis clock): the lock-delay of a session that
 * held it and expired, or whose hold was revoked.
 */
export interface DelayedData {
  key: string;
  delayedUntilMs: number;
}

/**
 * An event of a watched lock. `id` is what a watch resumes after: the
 * stream's last event id, which is the event's own (a `gap` has none, and
 * carries the one before it).
 */
export type WatchEvent =
  | { type: "snapshot"; id: string | undefined; data: LockStatus | FreeLock }
  | { type: "acquired"; id: string | undefined; data: AcquiredData }
  | { type: "value"; id: string | undefined; data: ValueData }
  | { type: "released" | "expired" | "revoked"; id: string | undefined; data: EndedData }
  | { type: "delayed"; id: string | undefined; data: DelayedData }
  | { type: "gap"; id: string | undefined; data: Record<string, never> };

export interface WatchOptions {
  /** Ends the watch (the iteration finishes without an error). */
  signal?: AbortSignal;
  /** Resume after this event (an `id` a watch handed out earlier). */
  lastEventId?: string;
  /**
   * Reconnect when nothing, not even a keep-alive comment, arrived for this
   * long (default 45 000: three of the gateway's 15 s keep-alives).
   */
  idleTimeoutMs?: number;
}

/** The names of a watched lock's events. */
export type WatchEventName = WatchEvent["type"];

/** Every name once: the compiler checks this against `WatchEventName`, and the contract test that against the API. */
const EVENT_TYPES = new Set<string>(
  Object.keys({
    snapshot: true,
    acquired: true,
    value: true,
    released: true,
    expired: true,
    revoked: true,
    delayed: true,
    gap: true,
  } satisfies Record<WatchEventName, true>),
);

/**
 * A lock's events, for `for await`. Connection failures are retried with
 * backoff for as long as the watch runs; a refusal (an invalid key, missing
 * credentials) ends the iteration with its error. Stop it with `close()`,
 * the `signal`, or `break`.
 */
export class LockWatch implements AsyncIterable<WatchEvent> {
  readonly key: string;
  private lastId: string | undefined;
  private readonly closed = new AbortController();
  private started = false;

  /** @internal Made by `Gateway.watch`. */
  constructor(
    private readonly transport: Transport,
    key: string,
    private readonly options: WatchOptions,
  ) {
    this.key = key;
    this.lastId = options.lastEventId;
  }

  /** The id of the last event handed out: pass it as `lastEventId` to resume later. */
  get lastEventId(): string | undefined {
    return this.lastId;
  }

  /** Ends the watch: the iteration finishes. */
  close(): void {
    this.closed.abort();
  }

  [Symbol.asyncIterator](): AsyncIterator<WatchEvent> {
    if (this.started) throw new Error("a LockWatch can be iterated once; call watch() again for another");
    this.started = true;
    return this.run();
  }

  private async *run(): AsyncGenerator<WatchEvent, void, undefined> {
    const close = () => this.close();
    if (this.options.signal?.aborted) close();
    this.options.signal?.addEventListener("abort", close, { once: true });
    try {
      yield* this.follow();
    } finally {
      this.options.signal?.removeEventListener("abort", close);
      this.close();
    }
  }

  /** Connects, and reconnects after every drop, until the watch is closed. */
  private async *follow(): AsyncGenerator<WatchEvent, void, undefined> {
    let failures = 0;
    while (!this.closed.signal.aborted) {
      let retryAfterMs: number | undefined;
      try {
        for await (const event of this.connect()) {
          failures = 0;
          yield event;
        }
        // The stream ended: the gateway stopped; another may answer.
      } catch (error) {
        if (this.closed.signal.aborted) return;
        if (error instanceof LockgateError && !(error instanceof GatewayUnavailableError)) throw error;
        if (error instanceof GatewayUnavailableError) retryAfterMs = error.retryAfterMs;
      }
      try {
        await sleep(backoffMs(failures++, retryAfterMs, 100), this.closed.signal);
      } catch {
        return;
      }
    }
  }

  /** One connection's events, resuming after the last id seen. */
  private async *connect(): AsyncGenerator<WatchEvent, void, undefined> {
    const connection = new AbortController();
    // The id persists from one connection to the next, as in an EventSource:
    // a `gap`, which has no id of its own, carries the one resumed after.
    const parser = new EventStreamParser(this.lastId);
    const stop = () => connection.abort();
    this.closed.signal.addEventListener("abort", stop, { once: true });
    const idleMs = this.options.idleTimeoutMs ?? 45_000;
    let idle = setTimeout(stop, idleMs);
    const alive = () => {
      clearTimeout(idle);
      idle = setTimeout(stop, idleMs);
    };
    try {
      const response = await this.transport.openStream("GET", lockPath(this.key, "/events"), {
        headers: this.lastId === undefined ? {} : { "last-event-id": this.lastId },
        signal: connection.signal,
      });
      alive();
      for await (const sse of readEvents(response.body as ReadableStream<Uint8Array>, { parser, onChunk: alive })) {
        this.lastId = sse.lastEventId || undefined;
        if (!EVENT_TYPES.has(sse.event)) continue;
        yield { type: sse.event, id: this.lastId, data: readGatewayJson(sse.data) } as WatchEvent;
      }
    } finally {
      this.lastId = parser.lastEventId || undefined;
      clearTimeout(idle);
      this.closed.signal.removeEventListener("abort", stop);
      connection.abort();
    }
  }
}
