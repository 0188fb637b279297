/**
 * A streamed lock: held for as long as its `POST /locks` event stream stays
 * open, with the gateway as the watchdog (it renews the lease every third of
 * it and reports `renewed`, `released` or `lost`).
 *
 * The client's part is to notice, as early as it safely can, that the lock
 * is gone: on a `lost` or foreign `released` event, when the stream breaks,
 * and when no renewal was heard before the lease could have ended. Then it
 * aborts `lock.signal` with a `LockLostError`. A lock that hangs on a
 * session is not renewed on its own: its lease is the session's, which the
 * `Session` watches, and the session's loss is the lock's.
 */

import { Hold, grantedLease, type GrantTiming } from "./hold.js";
import type { ServerSentEvent } from "./sse.js";
import type { Grant, LockMode, ModeChange } from "./types.js";

/** What a `Lock` (and a `LockSet`) needs from the gateway that granted it. */
export interface LockLink {
  /** Gives every hold back with the token (resolves once the lock is free or no longer ours). */
  release(key: string, token: string): Promise<void>;
  /** Replaces the holder's public value. */
  setValue(key: string, token: string, value: string): Promise<void>;
  /** Upgrades or downgrades the hold. */
  changeMode(key: string, token: string, mode: LockMode, waitMs: number): Promise<ModeChange>;
  /** Told once when it is released or lost (a session forgets it then). */
  ended?(hold: Hold): void;
}

/** What a lock that hangs on a session knows of the session's lease. */
export interface SessionLease {
  /** When the session's lease ends (Unix ms, Redis clock), as its last renewal said. */
  readonly expiresAtMs: number;
  /** How long the session is sure to last, by this process's clock. */
  readonly remainingMs: number;
}

/** How a `Lock` was asked for. */
export interface LockTerms {
  mode: LockMode;
  value: string | undefined;
  permits?: number | undefined;
  /**
   * Set when the lock hangs on a session (`"session"` in the request): the
   * gateway does not renew it, so the lock keeps no watchdog of its own.
   * `lease` is the session's, when a `Session` of this client holds it.
   */
  session?: { lease: SessionLease | undefined };
}

/** A lock held through a streamed lease. Release it with `release()` or `await using`. */
export class Lock implements AsyncDisposable {
  readonly key: string;
  /** The owner's secret (the plain lease API accepts it, for example to re-enter). */
  readonly token: string;
  readonly ttlMs: number;
  /** The places of a counting lock this holder takes, when asked for. */
  readonly permits: number | undefined;
  /** How long the request waited in the lock's queue. */
  readonly waitedMs: number;
  /** Aborts, with a `LockLostError` as its `reason`, when the lock is lost. */
  readonly signal: AbortSignal;
  /** @internal Whether it is held, lost or given back: what a `Session` it hangs on ends with it. */
  readonly hold: Hold;

  private fencingTokenNow: bigint;
  private modeNow: LockMode;
  private valueNow: string | undefined;
  private readonly link: LockLink;
  /** The session's lease, for a lock that hangs on a `Session`. */
  private readonly sessionLease: SessionLease | undefined;

  /** @internal Made by `Gateway.acquire`. */
  constructor(
    grant: Grant,
    terms: LockTerms,
    timing: GrantTiming,
    stream: AbortController,
    events: AsyncIterator<ServerSentEvent>,
    link: LockLink,
  ) {
    this.key = grant.key;
    this.token = grant.token;
    this.fencingTokenNow = grant.fencingToken;
    this.ttlMs = grant.ttlMs;
    this.waitedMs = grant.waitedMs;
    this.modeNow = terms.mode;
    this.permits = terms.permits;
    this.valueNow = terms.value;
    this.link = link;
    this.sessionLease = terms.session?.lease;
    const sessionLease = this.sessionLease;
    this.hold = new Hold({
      name: () => `the lock ${grant.key}`,
      stream,
      expiresAtMs: grant.expiresAtMs,
      // A lock in a session is not renewed on its own: nothing to watch here.
      lease: terms.session ? undefined : grantedLease(grant, timing),
      ...(sessionLease ? { remainingMs: () => sessionLease.remainingMs } : {}),
      ...(link.ended ? { ended: (hold: Hold) => link.ended?.(hold) } : {}),
    });
    this.signal = this.hold.signal;
    this.hold.followLockStream(events);
  }

  /**
   * This hold's fencing token, exact: pass it to what you write to. An
   * upgrade gives the hold a new, larger one.
   */
  get fencingToken(): bigint {
    return this.fencingTokenNow;
  }

  /** How the lock is held now (`upgrade` and `downgrade` change it). */
  get mode(): LockMode {
    return this.modeNow;
  }

  /**
   * Makes this shared hold the exclusive one without letting go, waiting up
   * to `waitMs` (default 0) for the other shared holders to leave; the hold
   * gets a new, larger `fencingToken`. Rejects with `LockHeldError` when the
   * wait ran out (the shared hold is kept) and `DeadlockError` when another
   * holder is upgrading already.
   */
  async upgrade(options: { waitMs?: number } = {}): Promise<void> {
    await this.changeMode("exclusive", options.waitMs ?? 0);
  }

  /** Makes this exclusive hold a shared one without letting go (the fencing token stays). */
  async downgrade(): Promise<void> {
    await this.changeMode("shared", 0);
  }

  private async changeMode(mode: LockMode, waitMs: number): Promise<void> {
    this.check();
    const changed = await this.link.changeMode(this.key, this.token, mode, waitMs);
    this.fencingTokenNow = changed.fencingToken;
    this.modeNow = changed.mode;
  }

  /** The holder's public value, as last set. */
  get value(): string | undefined {
    return this.valueNow;
  }

  /** When the lease ends (Unix ms, Redis clock), as the last renewal said: the session's, for a lock in a session. */
  get expiresAtMs(): number {
    return this.sessionLease?.expiresAtMs ?? this.hold.expiresAtMs;
  }

  /**
   * How long the lease is sure to last, by this process's clock, unless a
   * renewal comes first; 0 once the lock is not held. A lock in a `Session`
   * has the session's; one in a session kept alive elsewhere, `Infinity`
   * (nothing here hears that session's keepalives).
   */
  get remainingMs(): number {
    return this.hold.remainingMs;
  }

  /** True once the lock was lost (`signal` has aborted). */
  get lost(): boolean {
    return this.hold.lost;
  }

  /** True once `release()` gave the lock back. */
  get released(): boolean {
    return this.hold.released;
  }

  /** Throws the `LockLostError` if the lock was lost; a cheap check between steps of work. */
  check(): void {
    this.hold.check();
  }

  /**
   * Gives the lock back (`DELETE` with the token, so it is free for the next
   * owner when this resolves) and closes the stream. Idempotent: later calls
   * wait for the first and resolve. A lost lock has nothing to give back.
   * If the gateway cannot be reached the stream is closed all the same (the
   * gateway releases a lock whose stream closes, or its lease lapses), and
   * the first call rejects with `GatewayUnavailableError`.
   */
  release(): Promise<void> {
    return this.hold.release(async () => {
      if (!this.hold.beginRelease()) return this.hold.close();
      try {
        await this.link.release(this.key, this.token);
      } finally {
        this.hold.settleReleased();
      }
    });
  }

  /** Releases the lock: what `await using lock = await gateway.acquire(...)` calls. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }

  /** Replaces the public value readers and watchers see (`PUT /locks/{key}/value`). */
  async setValue(value: string): Promise<void> {
    this.check();
    await this.link.setValue(this.key, this.token, value);
    this.valueNow = value;
  }
}
