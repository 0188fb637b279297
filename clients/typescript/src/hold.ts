/**
 * What a held thing knows of itself, written once for `Lock`, `LockSet`
 * and `Session`, each of which owns one `Hold`: whether it is held, being
 * given back, given back or lost; why it was lost (the `LockLostError` its
 * `signal` aborts with); how long its lease is sure to last; and what to
 * cancel when it ends (the stream it is held through, the lease's timer).
 *
 * Each is held through a stream of events (a streamed lock, a streamed
 * batch, a streamed session) that `follow` reads: a stream that breaks, or
 * ends without saying why, is a loss (`connection-lost`), and so is a lease
 * whose renewal was not heard before it could have ended (`lease-expired`,
 * the `LeaseWatchdog`). Once lost or given back, the stream is closed, and
 * the gateway gives back whatever it still holds for it.
 */

import { LockLostError } from "./errors.js";
import { readGatewayJson } from "./json.js";
import { LeaseWatchdog } from "./lease-watchdog.js";
import type { ServerSentEvent } from "./sse.js";
import type { LockStreamEventName, LostData, ReleasedData, RenewedData, SessionEndReason } from "./types.js";

/** Where a hold is: `releasing` while its holder gives it back (an end of its stream then is no loss). */
export type HoldState = "held" | "releasing" | "released" | "lost";

/** When a grant's request was sent and its answer arrived, by `performance.now()`. */
export interface GrantTiming {
  sentAt: number;
  receivedAt: number;
}

/** A lease for the client's own watchdog: its length, and its end by the local and by the Redis clock. */
export interface WatchedLease {
  ttlMs: number;
  /** The lease's end by `performance.now()`, placed as early as it can have been. */
  earliestEnd: number;
  /** The same end by the Redis clock, as the grant said. */
  expiresAtMs: number;
}

/**
 * The lease of a grant: it cannot have been made before the request was
 * sent plus the time the gateway says it waited, nor after its answer
 * arrived.
 */
export function grantedLease(grant: { ttlMs: number; expiresAtMs: number; waitedMs: number }, timing: GrantTiming): WatchedLease {
  const earliestEnd = Math.min(timing.sentAt + grant.waitedMs, timing.receivedAt) + grant.ttlMs;
  return { ttlMs: grant.ttlMs, earliestEnd, expiresAtMs: grant.expiresAtMs };
}

/** What a hold is told by its owner when it is made. */
export interface HoldTerms {
  /** How a loss names it (`the lock k`, `the locks a, b`, `the session`); `key`: the lock the gateway named. */
  name: (key: string | undefined) => string;
  /** The request its stream answers: aborting it closes the stream. */
  stream: AbortController;
  /** When its lease ends (Unix ms, Redis clock), as granted. */
  expiresAtMs: number;
  /** The lease to watch; none for a lock that hangs on a session, whose lease is the session's. */
  lease: WatchedLease | undefined;
  /** For a hold whose lease is not watched here: how long it is sure to last (the session's); unknown by default. */
  remainingMs?: () => number;
  /** Told once, when it is given back or lost (then with the loss's error). */
  ended?: (hold: Hold, error: LockLostError | undefined) => void;
}

export class Hold {
  /** Aborts, with a `LockLostError` as its `reason`, when the hold is lost. */
  readonly signal: AbortSignal;
  #state: HoldState = "held";
  #expiresAtMs: number;
  #givingBack: Promise<void> | undefined;
  readonly #loss = new AbortController();
  readonly #terms: HoldTerms;
  readonly #watchdog: LeaseWatchdog | undefined;

  constructor(terms: HoldTerms) {
    this.#terms = terms;
    this.#expiresAtMs = terms.expiresAtMs;
    this.signal = this.#loss.signal;
    const lease = terms.lease;
    if (lease) {
      this.#watchdog = new LeaseWatchdog(lease.ttlMs, lease.earliestEnd, lease.expiresAtMs, () => this.lose("lease-expired"));
    }
  }

  get state(): HoldState {
    return this.#state;
  }

  /** True once lost (`signal` has aborted). */
  get lost(): boolean {
    return this.#state === "lost";
  }

  /** True once given back. */
  get released(): boolean {
    return this.#state === "released";
  }

  /** Throws the `LockLostError` if it was lost. */
  check(): void {
    if (this.#state === "lost") throw this.signal.reason;
  }

  /** When the lease ends (Unix ms, Redis clock), as the grant or the last renewal said. */
  get expiresAtMs(): number {
    return this.#expiresAtMs;
  }

  /**
   * How long the lease is sure to last, by this process's clock, unless a
   * renewal comes first: 0 once it is not held, `Infinity` when nothing
   * here can tell (a lock on a session kept alive elsewhere).
   */
  get remainingMs(): number {
    if (this.#state !== "held") return 0;
    return this.#watchdog?.remainingMs ?? this.#terms.remainingMs?.() ?? Number.POSITIVE_INFINITY;
  }

  /** A renewal was heard: the lease now ends at `expiresAtMs` (Redis clock). */
  renewed(expiresAtMs: number): void {
    this.#expiresAtMs = expiresAtMs;
    if (this.#state === "held") this.#watchdog?.renewed(expiresAtMs);
  }

  /**
   * Gives it back with `giveBack`, once: later calls wait for the first and
   * resolve, whatever it came to.
   */
  release(giveBack: () => Promise<void>): Promise<void> {
    if (this.#givingBack) return this.#givingBack.catch(() => {});
    this.#givingBack = giveBack();
    return this.#givingBack;
  }

  /** Its holder starts giving it back: what the stream says from now on is no loss. False when it is not held. */
  beginRelease(): boolean {
    if (this.#state !== "held") return false;
    this.#state = "releasing";
    return true;
  }

  /** It was given back (told once); the stream is closed. */
  settleReleased(): void {
    this.close();
    if (this.#state === "held" || this.#state === "releasing") {
      this.#state = "released";
      this.#terms.ended?.(this, undefined);
    }
  }

  /**
   * It is lost for `reason` (once): the stream is closed and `signal`
   * aborts. `cause` is what told it (a broken stream, the session's own
   * loss); `key`, the lock the gateway named. Being given back, it is
   * given back instead: its holder let go while it broke.
   */
  lose(reason: string, cause?: unknown, key?: string): void {
    if (this.#state === "lost" || this.#state === "released") return;
    if (this.#state === "releasing") {
      this.settleReleased();
      return;
    }
    this.#state = "lost";
    this.close();
    const why = cause instanceof LockLostError ? `${describe(reason)} (${cause.message})` : describe(reason);
    const error = new LockLostError(reason, `lost ${this.#terms.name(key)}: ${why}`, {
      ...(cause === undefined ? {} : { cause }),
      ...(key === undefined ? {} : { key }),
    });
    this.#loss.abort(error);
    this.#terms.ended?.(this, error);
  }

  /** It is lost when `signal` aborts (a session kept by someone else), unless it ends first. */
  endsWith(signal: AbortSignal): void {
    const onAbort = () => this.lose("session-ended", signal.reason);
    if (signal.aborted) {
      queueMicrotask(onAbort);
      return;
    }
    signal.addEventListener("abort", onAbort, { once: true });
    // However it ends, its stream is closed: then it listens no more.
    this.#terms.stream.signal.addEventListener("abort", () => signal.removeEventListener("abort", onAbort), { once: true });
  }

  /**
   * Reads its stream to the end, each event to `onEvent` (true: the stream
   * ends with it). A stream that ends or breaks otherwise loses it.
   */
  follow(events: AsyncIterator<ServerSentEvent>, onEvent: (event: ServerSentEvent) => boolean): void {
    const read = async () => {
      for (;;) {
        const next = await events.next();
        if (next.done) break;
        if (onEvent(next.value)) return;
      }
      this.lose("connection-lost");
    };
    // Every failure of reading is a loss, never an unhandled rejection.
    read().catch((error: unknown) => this.lose("connection-lost", error));
  }

  /** Follows the stream of a streamed lock or batch after its grant: `renewed`, then `released` or `lost`. */
  followLockStream(events: AsyncIterator<ServerSentEvent>): void {
    this.follow(events, (event) => this.#onLockEvent(event));
  }

  /** Closes the stream (the gateway gives back what it still holds for it) and stops watching the lease. */
  close(): void {
    this.#watchdog?.stop();
    this.#terms.stream.abort();
  }

  #onLockEvent(event: ServerSentEvent): boolean {
    switch (event.event as LockStreamEventName) {
      case "renewed":
        this.renewed(readGatewayJson<RenewedData>(event.data).expiresAtMs);
        return false;
      case "released":
        if (this.#state === "releasing") this.settleReleased();
        else this.lose("released-elsewhere", undefined, readGatewayJson<ReleasedData>(event.data).key);
        return true;
      case "lost": {
        const { reason, key } = readGatewayJson<LostData>(event.data);
        this.lose(reason ?? "lock-gone", undefined, key ?? undefined);
        return true;
      }
      default:
        return false;
    }
  }
}

/** Why the gateway ended a streamed lock or batch: the `reason` of its `lost` event. */
export type GatewayLossReason =
  | "lock-gone"
  | "held-by-another"
  | "backend-unavailable"
  | "revoked"
  | "shutting-down"
  | "session-ended";

/** Why the client itself counts a hold as lost. */
type ClientLossReason = "released-elsewhere" | "connection-lost" | "lease-expired";

const LOSSES: Record<GatewayLossReason | SessionEndReason | ClientLossReason, string> = {
  "lock-gone": "a renewal found no lock (its lease ran out, or it was deleted)",
  "held-by-another": "another owner holds it",
  "backend-unavailable": "no renewal reached Redis before the lease would end",
  revoked: "an operator revoked it",
  "shutting-down": "the gateway let it go as it shut down",
  "session-ended": "the session it hung on ended",
  expired: "it expired (nobody kept it alive in time)",
  deleted: "it was ended with its id by someone else",
  "released-elsewhere": "it was released with its token by someone else",
  "connection-lost": "the stream to the gateway broke, so nothing renews the lease",
  "lease-expired": "no renewal was heard before the lease could have ended",
};

function describe(reason: string): string {
  return Object.hasOwn(LOSSES, reason) ? LOSSES[reason as keyof typeof LOSSES] : reason;
}
