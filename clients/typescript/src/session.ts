/**
 * A session: one liveness lease that any number of locks hang on, as in
 * etcd, Consul and ZooKeeper. It is held through a streamed session (one
 * `POST /sessions` whose answer stays open while the gateway keeps the
 * session alive), and every lock taken through it is a streamed lock with
 * `"session"`: the session's lease is theirs, so one keepalive keeps them
 * all, and when the session is lost they are lost with it.
 *
 * The client aborts `session.signal`, and the `signal` of every lock taken
 * through the session, the moment the session may be gone: on its `ended`
 * event, when its stream breaks (the gateway then ends it), and when no
 * renewal was heard before its lease could have ended.
 */

import { LockLostError, SessionNotFoundError } from "./errors.js";
import { routineArguments, runHolding } from "./holding.js";
import { readGatewayJson } from "./json.js";
import { LeaseWatchdog } from "./lease-watchdog.js";
import type { Lock, SessionLease } from "./lock.js";
import type { ServerSentEvent } from "./sse.js";
import type {
  LockOptions,
  SessionEndedData,
  SessionEndReason,
  SessionGrant,
  SessionRenewedData,
  SessionStreamEventName,
} from "./types.js";

/** Node's `util.inspect` calls the method under this key, if an object has one. */
const INSPECT: unique symbol = Symbol.for("nodejs.util.inspect.custom");

/** How to open a session. */
export interface SessionOptions {
  /** The session's lease; the gateway keeps it alive every third of it (gateway default 10 000, at least 1 000). */
  ttlMs?: number;
  /**
   * When the session expires (not when it is ended), each of its locks
   * stays unavailable this much longer (0 to 60 000, default 0), so that a
   * holder that lost its session but is still writing has time to notice.
   */
  lockDelayMs?: number;
  /** A public string, such as the holder's host name (`GET /sessions/{id}` shows it). */
  value?: string;
  /** Gives up opening it; the call rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** How to ask for a lock through a session: as any streamed lock, less the lease, which is the session's. */
export type SessionLockOptions = Omit<LockOptions, "ttlMs" | "session">;

/** What a `Session` needs from the gateway that opened it. */
export interface SessionLink {
  /** Takes a streamed lock on the session `id`, whose lease is `lease`; `ended` hears when the lock is released or lost. */
  acquire(key: string, options: LockOptions, lease: SessionLease, ended: (lock: Lock) => void): Promise<Lock>;
  /** Ends the session (`DELETE /sessions/{id}`); resolves when it is over, or was already. */
  end(id: string): Promise<void>;
  /** Errors that cannot be thrown without hiding another (the gateway's `onError`). */
  report(error: unknown): void;
}

/** When the session's request was sent and its answer arrived, by `performance.now()`. */
export interface SessionTiming {
  sentAt: number;
  receivedAt: number;
}

type State = "open" | "ending" | "ended" | "lost";

/** A session: end it with `end()`, `await using`, or let `gateway.session(...)` do it. */
export class Session implements AsyncDisposable, SessionLease {
  readonly ttlMs: number;
  readonly lockDelayMs: number;
  /**
   * Aborts when the session is lost, with a `LockLostError` whose `reason`
   * says why: `expired`, `deleted` (ended by someone else with its id),
   * `shutting-down`, `connection-lost` or `lease-expired`.
   */
  readonly signal: AbortSignal;

  // A private field, not a property: the id is a secret like an owner
  // token, and must not show in `JSON.stringify`, `util.inspect` or logs.
  readonly #id: string;
  #state: State = "open";
  #expiresAt: number;
  readonly #loss = new AbortController();
  /** Aborted when the session is ended by us: stops the waits of its acquisitions. */
  readonly #ending = new AbortController();
  readonly #stream: AbortController;
  readonly #link: SessionLink;
  readonly #locks = new Set<Lock>();
  readonly #watchdog: LeaseWatchdog;
  #endingDone: Promise<void> | undefined;

  /** @internal Made by `Gateway.openSession`. */
  constructor(
    grant: SessionGrant,
    timing: SessionTiming,
    stream: AbortController,
    events: AsyncIterator<ServerSentEvent>,
    link: SessionLink,
  ) {
    this.#id = grant.id;
    this.ttlMs = grant.ttlMs;
    this.lockDelayMs = grant.lockDelayMs;
    this.#expiresAt = grant.expiresAtMs;
    this.signal = this.#loss.signal;
    this.#stream = stream;
    this.#link = link;
    // The session was opened after the request was sent: its lease cannot
    // have ended before the sending time plus the lease.
    this.#watchdog = new LeaseWatchdog(grant.ttlMs, Math.min(timing.sentAt, timing.receivedAt) + grant.ttlMs, grant.expiresAtMs, () =>
      this.#lose("lease-expired"),
    );
    // `#follow` handles every failure itself; the catch is a backstop so
    // that nothing it does can become an unhandled rejection.
    this.#follow(events).catch((error: unknown) => this.#lose("connection-lost", error));
  }

  /**
   * The session's id: a secret like an owner token (whoever has it can hang
   * locks on the session and end it). Hand it only to what must use the
   * session; it is kept out of `toString`, `toJSON` and `util.inspect`.
   */
  get id(): string {
    return this.#id;
  }

  /** When the session's lease ends (Unix ms, Redis clock), as its last renewal said. */
  get expiresAtMs(): number {
    return this.#expiresAt;
  }

  /** True once the session was lost (`signal` has aborted). */
  get lost(): boolean {
    return this.#state === "lost";
  }

  /** True once `end()` ended it. */
  get ended(): boolean {
    return this.#state === "ended";
  }

  /** How many locks taken through it are held now. */
  get locks(): number {
    return this.#locks.size;
  }

  /** Throws the `LockLostError` if the session was lost. */
  check(): void {
    if (this.#state === "lost") throw this.signal.reason;
  }

  /**
   * Takes `key` as a streamed lock that hangs on this session: it is held
   * until released, or until the session ends or is lost (then its
   * `signal` aborts with a `LockLostError`, reason `session-ended`).
   * Rejects with `LockHeldError` when the wait runs out, `DeadlockError`
   * when waiting would close a cycle of session waits, the session's
   * `LockLostError` when the session is lost (also during the wait), and
   * `SessionNotFoundError` once the session was ended.
   */
  async acquire(key: string, options: SessionLockOptions = {}): Promise<Lock> {
    this.#assertOpen();
    // The wait stops when the caller's signal aborts, or the session is lost
    // or ended. (Not `AbortSignal.any`: the session's signals live long, and
    // each call would leave them one more dependant.)
    const stop = new AbortController();
    const stops = [options.signal, this.signal, this.#ending.signal];
    const onStop = (event: Event) => stop.abort((event.target as AbortSignal).reason);
    for (const signal of stops) {
      if (signal?.aborted) stop.abort(signal.reason);
      else signal?.addEventListener("abort", onStop, { once: true });
    }
    let lock: Lock;
    try {
      lock = await this.#link.acquire(key, { ...options, session: this.#id, signal: stop.signal }, this, (ended) =>
        this.#locks.delete(ended),
      );
    } catch (error) {
      if (options.signal?.aborted) throw options.signal.reason;
      this.#assertOpen();
      throw error;
    } finally {
      for (const signal of stops) signal?.removeEventListener("abort", onStop);
    }
    if (this.#state === "open") {
      this.#locks.add(lock);
    } else if (this.#state === "lost") {
      lock.sessionLost(this.signal.reason as LockLostError);
    } else {
      // Granted just as the session was being ended: it ends with the session.
      await lock.release().catch(() => {});
      this.#assertOpen();
    }
    return lock;
  }

  /**
   * Runs `routine` under a lock taken through this session and releases it
   * afterwards, as `gateway.using` does: resolves with the routine's
   * result, rejects with its own error if it threw, or with the lock's
   * `LockLostError` if the lock (or the session) was lost meanwhile.
   */
  async using<T>(key: string, options: SessionLockOptions, routine: (lock: Lock) => Promise<T> | T): Promise<T>;
  async using<T>(key: string, routine: (lock: Lock) => Promise<T> | T): Promise<T>;
  async using<T>(
    key: string,
    optionsOrRoutine: SessionLockOptions | ((lock: Lock) => Promise<T> | T),
    maybeRoutine?: (lock: Lock) => Promise<T> | T,
  ): Promise<T> {
    const [options, routine] = routineArguments<SessionLockOptions, (lock: Lock) => Promise<T> | T>(
      optionsOrRoutine,
      maybeRoutine,
      "using(key, options, routine)",
    );
    const lock = await this.acquire(key, options);
    return runHolding(lock, () => lock.release(), routine, (error) => this.#link.report(error));
  }

  /**
   * Ends the session (`DELETE /sessions/{id}`): every lock taken through it
   * is released at once, with no lock-delay, and is free for the next owner
   * when this resolves; then the session's stream is closed. Idempotent:
   * later calls wait for the first and resolve. A lost session has nothing
   * to give back. If the gateway cannot be reached the streams are closed
   * all the same (the gateway ends a session whose stream closes, and a
   * dead gateway's session lapses) and the first call rejects with
   * `GatewayUnavailableError`.
   */
  end(): Promise<void> {
    if (this.#endingDone) return this.#endingDone.catch(() => {});
    this.#endingDone = this.#finish();
    return this.#endingDone;
  }

  /** Ends the session: what `await using session = await gateway.openSession()` calls. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.end();
  }

  /** A description without the id. */
  toString(): string {
    return `Session(${this.#state}, ttl ${this.ttlMs} ms, lock-delay ${this.lockDelayMs} ms, ${this.#locks.size} locks)`;
  }

  /** What `JSON.stringify` shows: everything but the id. */
  toJSON(): { state: State; ttlMs: number; lockDelayMs: number; expiresAtMs: number; locks: number } {
    return { state: this.#state, ttlMs: this.ttlMs, lockDelayMs: this.lockDelayMs, expiresAtMs: this.#expiresAt, locks: this.#locks.size };
  }

  /** What Node's `util.inspect` (and so `console.log`) shows. */
  [INSPECT](): string {
    return this.toString();
  }

  #assertOpen(): void {
    this.check();
    if (this.#state !== "open") throw new SessionNotFoundError("the session was ended: open a new one");
  }

  async #finish(): Promise<void> {
    if (this.#state !== "open") {
      this.#close();
      return;
    }
    this.#state = "ending";
    this.#ending.abort(new SessionNotFoundError("the session was ended while the lock was awaited"));
    const locks = [...this.#locks];
    // The gateway ends their streams with `lost (session-ended)` as it
    // releases them: from here that is the release, not a loss.
    for (const lock of locks) lock.sessionEnding();
    try {
      await this.#link.end(this.#id);
    } finally {
      this.#state = "ended";
      this.#close();
      for (const lock of locks) lock.sessionEnded();
      this.#locks.clear();
    }
  }

  async #follow(events: AsyncIterator<ServerSentEvent>): Promise<void> {
    try {
      for (;;) {
        const next = await events.next();
        if (next.done) break;
        if (this.#onEvent(next.value)) return;
      }
      this.#lose("connection-lost");
    } catch (error) {
      this.#lose("connection-lost", error);
    }
  }

  /** Handles one event of the session's stream; true when the stream has ended. */
  #onEvent(event: ServerSentEvent): boolean {
    switch (event.event as SessionStreamEventName) {
      case "renewed": {
        const { expiresAtMs } = readGatewayJson<SessionRenewedData>(event.data);
        this.#expiresAt = expiresAtMs;
        this.#watchdog.renewed(expiresAtMs);
        return false;
      }
      case "ended": {
        const { reason } = readGatewayJson<SessionEndedData>(event.data);
        this.#lose(reason || "expired");
        return true;
      }
      default:
        return false;
    }
  }

  /** Marks the session lost (once), closes its stream, aborts `signal` and every lock taken through it. */
  #lose(reason: string, cause?: unknown): void {
    // Ending it ourselves, the stream's end is expected.
    if (this.#state !== "open") return;
    this.#state = "lost";
    this.#close();
    const error = new LockLostError(reason, `lost the session: ${describe(reason)}`, cause === undefined ? {} : { cause });
    this.#loss.abort(error);
    for (const lock of [...this.#locks]) lock.sessionLost(error);
    this.#locks.clear();
  }

  #close(): void {
    this.#watchdog.stop();
    // Closing the connection makes the gateway end the session, if it still lives.
    this.#stream.abort();
  }
}

/** Why the client counts a session as lost, besides the gateway's `ended` reasons. */
type ClientLossReason = "connection-lost" | "lease-expired";

const LOSSES: Record<SessionEndReason | ClientLossReason, string> = {
  expired: "it expired (nobody kept it alive in time)",
  deleted: "it was ended with its id by someone else",
  "shutting-down": "the gateway ended it as it shut down",
  "connection-lost": "the stream to the gateway broke, so nothing keeps it alive",
  "lease-expired": "no renewal was heard before its lease could have ended",
};

function describe(reason: string): string {
  return Object.hasOwn(LOSSES, reason) ? LOSSES[reason as keyof typeof LOSSES] : reason;
}
