/**
 * A streamed lock: held for as long as its `POST /locks` event stream stays
 * open, with the gateway as the watchdog (it renews the lease every third of
 * it and reports `renewed`, `released` or `lost`).
 *
 * The client's part is to notice, as early as it safely can, that the lock
 * is gone: on a `lost` or foreign `released` event, when the stream breaks,
 * and when no renewal was heard before the lease could have ended. Then it
 * aborts `lock.signal` with a `LockLostError`.
 */

import { LockLostError } from "./errors.js";
import { readGatewayJson } from "./json.js";
import type { ServerSentEvent } from "./sse.js";
import type { Grant, LockMode, LockStreamEventName, LostData, RenewedData } from "./types.js";

/** What a `Lock` needs from the gateway that granted it. */
export interface LockLink {
  /** Gives every hold back with the token (resolves once the lock is free or no longer ours). */
  release(key: string, token: string): Promise<void>;
  /** Replaces the holder's public value. */
  setValue(key: string, token: string, value: string): Promise<void>;
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
  /** This grant's fencing token, exact. Pass it to what you write to. */
  readonly fencingToken: bigint;
  readonly ttlMs: number;
  readonly mode: LockMode;
  /** How long the request waited in the lock's queue. */
  readonly waitedMs: number;
  /** Aborts, with a `LockLostError` as its `reason`, when the lock is lost. */
  readonly signal: AbortSignal;

  private state: State = "held";
  private valueNow: string | undefined;
  private expiresAt: number;
  private readonly loss = new AbortController();
  private readonly stream: AbortController;
  private readonly link: LockLink;
  private releasing: Promise<void> | undefined;
  /**
   * The earliest moment, by `performance.now()`, at which the lease could
   * have ended. Two local measurements anchor it: the grant cannot have been
   * made before the request was sent plus the time it waited, and a renewal's
   * new end lies as far after the grant's end as the Redis clock says.
   */
  private deadline: number;
  private readonly anchor: { local: number; expiresAtMs: number };
  private timer: ReturnType<typeof setTimeout> | undefined;

  /** @internal Made by `Gateway.acquire`. */
  constructor(
    grant: Grant,
    options: { mode: LockMode; value: string | undefined },
    timing: GrantTiming,
    stream: AbortController,
    events: AsyncIterator<ServerSentEvent>,
    link: LockLink,
  ) {
    this.key = grant.key;
    this.token = grant.token;
    this.fencingToken = grant.fencingToken;
    this.ttlMs = grant.ttlMs;
    this.waitedMs = grant.waitedMs;
    this.mode = options.mode;
    this.valueNow = options.value;
    this.expiresAt = grant.expiresAtMs;
    this.signal = this.loss.signal;
    this.stream = stream;
    this.link = link;
    const earliestEnd = Math.min(timing.sentAt + grant.waitedMs, timing.receivedAt) + grant.ttlMs;
    this.anchor = { local: earliestEnd, expiresAtMs: grant.expiresAtMs };
    this.deadline = earliestEnd;
    this.armWatchdog();
    // `follow` handles every failure itself; the catch is a backstop so that
    // nothing it does can become an unhandled rejection.
    this.follow(events).catch((error: unknown) => this.lose("connection-lost", error));
  }

  /** The holder's public value, as last set. */
  get value(): string | undefined {
    return this.valueNow;
  }

  /** When the lease ends (Unix ms, Redis clock), as the last renewal said. */
  get expiresAtMs(): number {
    return this.expiresAt;
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
      if (this.state === "releasing") this.state = "released";
      this.close();
    }
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
        const now = performance.now();
        // The renewal was made before now, so its lease ends by now + ttl at
        // the latest; the Redis clock may place it earlier still.
        this.deadline = Math.min(now + this.ttlMs, this.anchor.local + (expiresAtMs - this.anchor.expiresAtMs));
        this.armWatchdog();
        return false;
      }
      case "released":
        if (this.state === "releasing") {
          this.state = "released";
          this.close();
        } else {
          this.lose("released-elsewhere");
        }
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

  private armWatchdog(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    if (this.state !== "held" && this.state !== "releasing") return;
    this.timer = setTimeout(() => this.onWatchdog(), Math.max(0, this.deadline - performance.now()) + 1);
    // A lock that is held keeps its stream open, and that keeps the process
    // running; this timer alone must not.
    this.timer.unref?.();
  }

  private onWatchdog(): void {
    this.timer = undefined;
    if (performance.now() >= this.deadline) this.lose("lease-expired");
    else this.armWatchdog();
  }

  /** Marks the lock lost (once), closes the stream and aborts `signal`. */
  private lose(reason: string, cause?: unknown): void {
    if (this.state === "lost" || this.state === "released") return;
    if (this.state === "releasing") {
      // Released by us while it broke: not a loss anyone needs to hear of.
      this.state = "released";
      this.close();
      return;
    }
    this.state = "lost";
    this.close();
    const error = new LockLostError(reason, `lost the lock ${this.key}: ${describe(reason)}`, cause === undefined ? {} : { cause });
    this.loss.abort(error);
  }

  private close(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    // Closing the connection makes the gateway release whatever it still holds for us.
    this.stream.abort();
  }
}

/** Why the gateway ended a streamed lock: the `reason` of its `lost` event. */
export type GatewayLossReason = "lock-gone" | "held-by-another" | "backend-unavailable" | "revoked" | "shutting-down";

/** Why the client itself counts a lock as lost. */
type ClientLossReason = "released-elsewhere" | "connection-lost" | "lease-expired";

const LOSSES: Record<GatewayLossReason | ClientLossReason, string> = {
  "lock-gone": "a renewal found no lock (its lease ran out, or it was deleted)",
  "held-by-another": "another owner holds it",
  "backend-unavailable": "no renewal reached Redis before the lease would end",
  revoked: "an operator revoked it",
  "shutting-down": "the gateway released it as it shut down",
  "released-elsewhere": "it was released with its token by someone else",
  "connection-lost": "the stream to the gateway broke, so nothing renews the lease",
  "lease-expired": "no renewal was heard before the lease could have ended",
};

function describe(reason: string): string {
  return Object.hasOwn(LOSSES, reason) ? LOSSES[reason as keyof typeof LOSSES] : reason;
}
