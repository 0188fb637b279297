/**
 * A session: one liveness lease that any number of locks hang on, as in
 * etcd, Consul and ZooKeeper. It is held through a streamed session (one
 * `POST /sessions` whose answer stays open while the gateway keeps the
 * session alive), and every lock taken through it is a streamed lock (every
 * set, a streamed batch) with `"session"`: the session's lease is theirs, so
 * one keepalive keeps them all, and when the session is lost they are lost
 * with it.
 *
 * The client aborts `session.signal`, and the `signal` of every lock and
 * set taken through the session, the moment the session may be gone: on
 * its `ended` event, when its stream breaks (the gateway then ends it), and
 * when no renewal was heard before its lease could have ended.
 */

import { LockSet, type LockAllOptions } from "./batch.js";
import { SessionNotFoundError, type LockLostError } from "./errors.js";
import { Hold, type GrantTiming, type HoldState } from "./hold.js";
import { holding, type Routine } from "./holding.js";
import { readGatewayJson } from "./json.js";
import type { Lock, SessionLease } from "./lock.js";
import type { ServerSentEvent } from "./sse.js";
import type { BatchLockSpec, LockOptions, SessionEndedData, SessionGrant, SessionRenewedData, SessionStreamEventName } from "./types.js";

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

/** How to ask for several locks at once through a session: as `gw.lockAll`, less the lease. */
export type SessionLockAllOptions = Omit<LockAllOptions, "ttlMs" | "session">;

/** What a `Session` needs from the gateway that opened it. */
export interface SessionLink {
  /** Takes a streamed lock on the session `id`, whose lease is `lease`; `ended` hears when the lock is released or lost. */
  acquire(key: string, options: LockOptions, lease: SessionLease, ended: (hold: Hold) => void): Promise<Lock>;
  /** Takes a streamed batch on the session `id`, as `acquire` takes one lock. */
  lockAll(
    locks: readonly (string | BatchLockSpec)[],
    options: LockAllOptions & { session: string },
    lease: SessionLease,
    ended: (hold: Hold) => void,
  ): Promise<LockSet>;
  /** Ends the session (`DELETE /sessions/{id}`); resolves when it is over, or was already. */
  end(id: string): Promise<void>;
  /** Errors that cannot be thrown without hiding another (the gateway's `onError`). */
  report(error: unknown): void;
}

/** What a session calls its state (`toJSON`), by its hold's. */
const STATES = { held: "open", releasing: "ending", released: "ended", lost: "lost" } as const satisfies Record<HoldState, string>;

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
  readonly #hold: Hold;
  /** Aborted when the session is ended by us: stops the waits of its acquisitions. */
  readonly #ending = new AbortController();
  readonly #link: SessionLink;
  /** What was taken through it and is held: each lock's or set's hold, and how many locks that is. */
  readonly #members = new Map<Hold, number>();

  /** @internal Made by `Gateway.openSession`. */
  constructor(
    grant: SessionGrant,
    timing: GrantTiming,
    stream: AbortController,
    events: AsyncIterator<ServerSentEvent>,
    link: SessionLink,
  ) {
    this.#id = grant.id;
    this.ttlMs = grant.ttlMs;
    this.lockDelayMs = grant.lockDelayMs;
    this.#link = link;
    this.#hold = new Hold({
      name: () => "the session",
      stream,
      expiresAtMs: grant.expiresAtMs,
      // The session was opened after the request was sent: its lease cannot
      // have ended before the sending time plus the lease.
      lease: { ttlMs: grant.ttlMs, earliestEnd: Math.min(timing.sentAt, timing.receivedAt) + grant.ttlMs, expiresAtMs: grant.expiresAtMs },
      ended: (_, error) => {
        if (error) this.#loseMembers(error);
      },
    });
    this.signal = this.#hold.signal;
    this.#hold.follow(events, (event) => this.#onEvent(event));
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
    return this.#hold.expiresAtMs;
  }

  /** How long the session is sure to last, by this process's clock, unless a renewal comes first; 0 once it is not open. */
  get remainingMs(): number {
    return this.#hold.remainingMs;
  }

  /** True once the session was lost (`signal` has aborted). */
  get lost(): boolean {
    return this.#hold.lost;
  }

  /** True once `end()` ended it. */
  get ended(): boolean {
    return this.#hold.released;
  }

  /** How many locks taken through it are held now (each lock of a set counts). */
  get locks(): number {
    let count = 0;
    for (const size of this.#members.values()) count += size;
    return count;
  }

  /** Throws the `LockLostError` if the session was lost. */
  check(): void {
    this.#hold.check();
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
  acquire(key: string, options: SessionLockOptions = {}): Promise<Lock> {
    return this.#take(options.signal, (signal, ended) =>
      this.#link.acquire(key, { ...options, session: this.#id, signal }, this, ended),
    );
  }

  /**
   * Takes several locks at once, all or none, for one token, every one
   * hanging on this session (a streamed batch with `session`), as
   * `gw.lockAll` does; they are held until released, or until the session
   * ends or is lost (then the set's `signal` aborts, reason
   * `session-ended`). Rejects as `acquire` does.
   */
  lockAll(locks: readonly (string | BatchLockSpec)[], options: SessionLockAllOptions = {}): Promise<LockSet> {
    return this.#take(options.signal, (signal, ended) =>
      this.#link.lockAll(locks, { ...options, session: this.#id, signal }, this, ended),
    );
  }

  /**
   * Runs `routine` under a lock taken through this session and releases it
   * afterwards, as `gateway.using` does: resolves with the routine's
   * result, rejects with its own error if it threw, or with the lock's
   * `LockLostError` if the lock (or the session) was lost meanwhile.
   */
  async using<T>(key: string, options: SessionLockOptions, routine: Routine<Lock, T>): Promise<T>;
  async using<T>(key: string, routine: Routine<Lock, T>): Promise<T>;
  async using<T>(key: string, optionsOrRoutine: SessionLockOptions | Routine<Lock, T>, maybeRoutine?: Routine<Lock, T>): Promise<T> {
    return holding(optionsOrRoutine, maybeRoutine, {
      what: "using(key, options, routine)",
      take: (options) => this.acquire(key, options),
      giveBack: (lock) => lock.release(),
      report: (error) => this.#link.report(error),
    });
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
    return this.#hold.release(() => this.#finish());
  }

  /** Ends the session: what `await using session = await gateway.openSession()` calls. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.end();
  }

  /** A description without the id. */
  toString(): string {
    return `Session(${STATES[this.#hold.state]}, ttl ${this.ttlMs} ms, lock-delay ${this.lockDelayMs} ms, ${this.locks} locks)`;
  }

  /** What `JSON.stringify` shows: everything but the id. */
  toJSON(): { state: string; ttlMs: number; lockDelayMs: number; expiresAtMs: number; locks: number } {
    return { state: STATES[this.#hold.state], ttlMs: this.ttlMs, lockDelayMs: this.lockDelayMs, expiresAtMs: this.expiresAtMs, locks: this.locks };
  }

  /** What Node's `util.inspect` (and so `console.log`) shows. */
  [INSPECT](): string {
    return this.toString();
  }

  #assertOpen(): void {
    this.check();
    if (this.#hold.state !== "held") throw new SessionNotFoundError("the session was ended: open a new one");
  }

  /**
   * Takes a lock or a set through the session with `take`, whose wait
   * stops when `callerSignal` aborts, or the session is lost or ended, and
   * then makes it one of the session's.
   */
  async #take<T extends Lock | LockSet>(
    callerSignal: AbortSignal | undefined,
    take: (signal: AbortSignal, ended: (hold: Hold) => void) => Promise<T>,
  ): Promise<T> {
    this.#assertOpen();
    // Not `AbortSignal.any`: the session's signals live long, and each call
    // would leave them one more dependant.
    const stop = new AbortController();
    const stops = [callerSignal, this.signal, this.#ending.signal];
    const onStop = (event: Event) => stop.abort((event.target as AbortSignal).reason);
    for (const signal of stops) {
      if (signal?.aborted) stop.abort(signal.reason);
      else signal?.addEventListener("abort", onStop, { once: true });
    }
    let taken: T;
    try {
      taken = await take(stop.signal, (ended) => this.#members.delete(ended));
    } catch (error) {
      if (callerSignal?.aborted) throw callerSignal.reason;
      this.#assertOpen();
      throw error;
    } finally {
      for (const signal of stops) signal?.removeEventListener("abort", onStop);
    }
    const state = this.#hold.state;
    if (state === "held") {
      // Not one that ended already (lost at once): it would stay counted.
      if (taken.hold.state === "held") this.#members.set(taken.hold, taken instanceof LockSet ? taken.locks.length : 1);
    } else if (state === "lost") {
      taken.hold.lose("session-ended", this.signal.reason);
    } else {
      // Granted just as the session was being ended: it ends with the session.
      await taken.release().catch(() => {});
      this.#assertOpen();
    }
    return taken;
  }

  async #finish(): Promise<void> {
    if (!this.#hold.beginRelease()) {
      this.#hold.close();
      return;
    }
    this.#ending.abort(new SessionNotFoundError("the session was ended while the lock was awaited"));
    const members = [...this.#members.keys()];
    // The gateway ends their streams with `lost (session-ended)` as it
    // releases them: from here that is the release, not a loss.
    for (const member of members) member.beginRelease();
    try {
      await this.#link.end(this.#id);
    } finally {
      this.#hold.settleReleased();
      for (const member of members) member.settleReleased();
      this.#members.clear();
    }
  }

  /** Handles one event of the session's stream; true when the stream has ended. */
  #onEvent(event: ServerSentEvent): boolean {
    switch (event.event as SessionStreamEventName) {
      case "renewed":
        this.#hold.renewed(readGatewayJson<SessionRenewedData>(event.data).expiresAtMs);
        return false;
      case "ended": {
        const { reason } = readGatewayJson<SessionEndedData>(event.data);
        this.#hold.lose(reason || "expired");
        return true;
      }
      default:
        return false;
    }
  }

  /** The session is lost (`error` says how): so is every lock taken through it. */
  #loseMembers(error: LockLostError): void {
    const members = [...this.#members.keys()];
    this.#members.clear();
    for (const member of members) member.lose("session-ended", error);
  }
}
