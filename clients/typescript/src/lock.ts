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

import { LockLostError } from "./errors.js";
import { readGatewayJson } from "./json.js";
import { LeaseWatchdog } from "./lease-watchdog.js";
import type { ServerSentEvent } from "./sse.js";
import type { Grant, LockMode, LockStreamEventName, LostData, ModeChange, RenewedData } from "./types.js";

/** What a `Lock` needs from the gateway that granted it. */
export interface LockLink {
  /** Gives every hold back with the token (resolves once the lock is free or no longer ours). */
  release(key: string, token: string): Promise<void>;
  /** Replaces the holder's public value. */
  setValue(key: string, token: string, value: string): Promise<void>;
  /** Upgrades or downgrades the hold. */
  changeMode(key: string, token: string, mode: LockMode, waitMs: number): Promise<ModeChange>;
  /** Told once when the lock is released or lost (a session forgets it then). */
  ended?(lock: Lock): void;
}

/** What a lock that hangs on a session knows of the session's lease. */
export interface SessionLease {
  /** When the session's lease ends (Unix ms, Redis clock), as its last renewal said. */
  readonly expiresAtMs: number;
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

/** When the grant's request was sent and its answer arrived, by `performance.now()`. */
export interface GrantTiming {
  sentAt: number;
  receivedAt: number;
}

type State = "held" | "releasing" | "released" | "lost";

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

  private state: State = "held";
  private fencingTokenNow: bigint;
  private modeNow: LockMode;
  private valueNow: string | undefined;
  private expiresAt: number;
  private readonly loss = new AbortController();
  private readonly stream: AbortController;
  private readonly link: LockLink;
  private releasing: Promise<void> | undefined;
  /** The session's lease, for a lock that hangs on a `Session`. */
  private readonly sessionLease: SessionLease | undefined;
  /** None for a lock in a session: nothing renews it on its own. */
  private readonly watchdog: LeaseWatchdog | undefined;

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
    this.expiresAt = grant.expiresAtMs;
    this.signal = this.loss.signal;
    this.stream = stream;
    this.link = link;
    this.sessionLease = terms.session?.lease;
    if (!terms.session) {
      // The grant cannot have been made before the request was sent plus
      // the time it waited, nor after its answer arrived.
      const earliestEnd = Math.min(timing.sentAt + grant.waitedMs, timing.receivedAt) + grant.ttlMs;
      this.watchdog = new LeaseWatchdog(grant.ttlMs, earliestEnd, grant.expiresAtMs, () => this.lose("lease-expired"));
    }
    // `follow` handles every failure itself; the catch is a backstop so that
    // nothing it does can become an unhandled rejection.
    this.follow(events).catch((error: unknown) => this.lose("connection-lost", error));
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
    return this.sessionLease?.expiresAtMs ?? this.expiresAt;
  }

  /** True once the lock was lost (`signal` has aborted). */
  get lost(): boolean {
    return this.state === "lost";
  }

  /** True once `release()` gave the lock back. */
  get released(): boolean {
    return this.state === "released";
  }

  /** Throws the `LockLostError` if the lock was lost; a cheap check between steps of work. */
  check(): void {
    if (this.state === "lost") throw this.signal.reason;
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
    if (this.releasing) return this.releasing.catch(() => {});
    this.releasing = this.giveBack();
    return this.releasing;
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

  private async giveBack(): Promise<void> {
    if (this.state !== "held") {
      this.close();
      return;
    }
    this.state = "releasing";
    try {
      await this.link.release(this.key, this.token);
    } finally {
      this.settleReleased();
    }
  }

  /**
   * @internal Its session is being ended (`DELETE /sessions/{id}` releases
   * every lock on it): what the stream says from now on is no loss.
   */
  sessionEnding(): void {
    if (this.state === "held") this.state = "releasing";
  }

  /** @internal Its session was ended: the lock was released with it. */
  sessionEnded(): void {
    this.settleReleased();
  }

  /** @internal Its session was lost (`cause` says how): so is the lock. */
  sessionLost(cause: LockLostError): void {
    this.lose("session-ended", cause);
  }

  private settleReleased(): void {
    if (this.state === "held" || this.state === "releasing") {
      this.state = "released";
      this.link.ended?.(this);
    }
    this.close();
  }

  private async follow(events: AsyncIterator<ServerSentEvent>): Promise<void> {
    try {
      for (;;) {
        const next = await events.next();
        if (next.done) break;
        if (this.onEvent(next.value)) return;
      }
      this.lose("connection-lost");
    } catch (error) {
      this.lose("connection-lost", error);
    }
  }

  /** Handles one event of the stream; true when the stream has ended. */
  private onEvent(event: ServerSentEvent): boolean {
    switch (event.event as LockStreamEventName) {
      case "renewed": {
        const { expiresAtMs } = readGatewayJson<RenewedData>(event.data);
        this.expiresAt = expiresAtMs;
        this.watchdog?.renewed(expiresAtMs);
        return false;
      }
      case "released":
        if (this.state === "releasing") this.settleReleased();
        else this.lose("released-elsewhere");
        return true;
      case "lost": {
        const { reason } = readGatewayJson<LostData>(event.data);
        this.lose(reason ?? "lock-gone");
        return true;
      }
      default:
        return false;
    }
  }

  /** Marks the lock lost (once), closes the stream and aborts `signal`. */
  private lose(reason: string, cause?: unknown): void {
    if (this.state === "lost" || this.state === "released") return;
    if (this.state === "releasing") {
      // Released by us while it broke: not a loss anyone needs to hear of.
      this.settleReleased();
      return;
    }
    this.state = "lost";
    this.close();
    this.link.ended?.(this);
    const why = cause instanceof LockLostError ? `${describe(reason)} (${cause.message})` : describe(reason);
    const error = new LockLostError(reason, `lost the lock ${this.key}: ${why}`, cause === undefined ? {} : { cause });
    this.loss.abort(error);
  }

  private close(): void {
    this.watchdog?.stop();
    // Closing the connection makes the gateway release whatever it still holds for us.
    this.stream.abort();
  }
}

/** Why the gateway ended a streamed lock: the `reason` of its `lost` event. */
export type GatewayLossReason =
  | "lock-gone"
  | "held-by-another"
  | "backend-unavailable"
  | "revoked"
  | "shutting-down"
  | "session-ended";

/** Why the client itself counts a lock as lost. */
type ClientLossReason = "released-elsewhere" | "connection-lost" | "lease-expired";

const LOSSES: Record<GatewayLossReason | ClientLossReason, string> = {
  "lock-gone": "a renewal found no lock (its lease ran out, or it was deleted)",
  "held-by-another": "another owner holds it",
  "backend-unavailable": "no renewal reached Redis before the lease would end",
  revoked: "an operator revoked it",
  "shutting-down": "the gateway released it as it shut down",
  "session-ended": "the session it hung on ended",
  "released-elsewhere": "it was released with its token by someone else",
  "connection-lost": "the stream to the gateway broke, so nothing renews the lease",
  "lease-expired": "no renewal was heard before the lease could have ended",
};

function describe(reason: string): string {
  return Object.hasOwn(LOSSES, reason) ? LOSSES[reason as keyof typeof LOSSES] : reason;
}
