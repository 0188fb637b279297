/**
 * Several locks at once (`POST /locks/batch`): all or none, for one owner
 * token, held as a `LockSet`.
 *
 * The gateway does not stream a batch: each of its locks is an ordinary
 * lease of the one token. The set keeps them alive itself, renewing every
 * lock (`PUT /locks/{key}/ttl`) every third of the lease, and counts as
 * lost, aborting its `signal`, when a renewal finds a lock gone (expired,
 * revoked, released with the token elsewhere) or when no renewal succeeded
 * before the lease could have ended (a gateway that fell silent). A set
 * taken in a `Session` is not renewed on its own: its lease is the
 * session's, and the session's loss is its loss.
 */

import { LockLostError, hasSlug } from "./errors.js";
import { LeaseWatchdog } from "./lease-watchdog.js";
import type { Leases } from "./leases.js";
import type { BatchBody, BatchGrant, BatchGrantLock, BatchLockSpec, LockMode } from "./types.js";

/** How to ask for several locks at once. */
export interface LockAllOptions {
  /** Lease length of every lock; the gateway's default is 30 000. Renewed by the set while held. */
  ttlMs?: number;
  /** How long the whole batch may wait (not each lock); 0 (the default) tries once. */
  waitMs?: number;
  /** A public string every reader of each lock sees. */
  value?: string;
  /** Stops waiting (nothing is granted); the call rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * A session to hang every lock on: they live as long as it (`ttlMs` is
   * ignored), unless released first, and its loss is theirs. Pass the
   * `Session`, whose `signal` the set follows.
   */
  session?: { readonly id: string; readonly signal: AbortSignal };
}

/** The body of `POST /locks/batch`, from the locks and the options. */
export function batchBody(locks: readonly (string | BatchLockSpec)[], options: LockAllOptions): BatchBody {
  if (locks.length === 0) throw new TypeError("lockAll: a batch needs at least one lock");
  const body: BatchBody = {
    locks: locks.map((lock) => {
      const spec = typeof lock === "string" ? { key: lock } : lock;
      const entry: BatchBody["locks"][number] = { key: spec.key };
      if (spec.mode !== undefined) entry.mode = spec.mode;
      if (spec.limit !== undefined) entry.limit = spec.limit;
      if (spec.permits !== undefined) entry.permits = spec.permits;
      return entry;
    }),
  };
  if (options.session !== undefined) body.session = options.session.id;
  else if (options.ttlMs !== undefined) body.ttl_ms = options.ttlMs;
  if (options.waitMs !== undefined) body.wait_ms = options.waitMs;
  if (options.value !== undefined) body.value = options.value;
  return body;
}

type State = "held" | "releasing" | "released" | "lost";

/** Several locks held together for one token. Release them all with `release()` or `await using`. */
export class LockSet implements AsyncDisposable {
  /** The owner's secret, the same for every lock of the set. */
  readonly token: string;
  /** Each lock: its key, mode and own fencing token, in the order asked for. */
  readonly locks: readonly BatchGrantLock[];
  readonly ttlMs: number;
  /** How long the batch waited for its locks. */
  readonly waitedMs: number;
  /** Aborts, with a `LockLostError` as its `reason`, when any lock of the set is lost. */
  readonly signal: AbortSignal;

  private state: State = "held";
  private readonly loss = new AbortController();
  private readonly leases: Leases;
  private readonly watchdog: LeaseWatchdog | undefined;
  private readonly renewals: ReturnType<typeof setInterval> | undefined;
  private renewing = false;
  private releasing: Promise<void> | undefined;
  private readonly session: { readonly signal: AbortSignal } | undefined;
  private readonly onSessionLost = () => this.lose("session-ended", this.session?.signal.reason);

  /** @internal Made by `Gateway.lockAll`. */
  constructor(
    grant: BatchGrant,
    timing: { sentAt: number; receivedAt: number },
    leases: Leases,
    session: { readonly signal: AbortSignal } | undefined,
  ) {
    this.token = grant.token;
    this.locks = grant.locks;
    this.ttlMs = grant.ttlMs;
    this.waitedMs = grant.waitedMs;
    this.signal = this.loss.signal;
    this.leases = leases;
    this.session = session;
    if (session) {
      if (session.signal.aborted) queueMicrotask(this.onSessionLost);
      else session.signal.addEventListener("abort", this.onSessionLost, { once: true });
      return;
    }
    const earliestEnd = Math.min(timing.sentAt + grant.waitedMs, timing.receivedAt) + grant.ttlMs;
    this.watchdog = new LeaseWatchdog(grant.ttlMs, earliestEnd, grant.expiresAtMs, () => this.lose("lease-expired"));
    this.renewals = setInterval(() => void this.renew(), Math.max(1, Math.floor(grant.ttlMs / 3)));
    // The holder's own work keeps the process running; the renewals alone must not.
    this.renewals.unref?.();
  }

  /** The keys, in the order asked for. */
  get keys(): string[] {
    return this.locks.map((lock) => lock.key);
  }

  /** Each key's fencing token: pass `fencingTokens.get(key)` to the resource of that key. */
  get fencingTokens(): Map<string, bigint> {
    return new Map(this.locks.map((lock) => [lock.key, lock.fencingToken]));
  }

  /** Each key's mode. */
  modeOf(key: string): LockMode | undefined {
    return this.locks.find((lock) => lock.key === key)?.mode;
  }

  /** True once the set was lost (`signal` has aborted). */
  get lost(): boolean {
    return this.state === "lost";
  }

  /** Throws the `LockLostError` if the set was lost. */
  check(): void {
    if (this.state === "lost") throw this.signal.reason;
  }

  /**
   * Gives every lock back (`DELETE` with the token) and stops renewing.
   * Idempotent. A lost set gives back what is left and resolves. Rejects
   * with the first failure to release, after trying every lock.
   */
  release(): Promise<void> {
    if (this.releasing) return this.releasing.catch(() => {});
    this.releasing = this.giveBack();
    return this.releasing;
  }

  /** Releases the set: what `await using locks = await gateway.lockAll(...)` calls. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }

  private async giveBack(): Promise<void> {
    const wasLost = this.state === "lost";
    if (this.state === "held") this.state = "releasing";
    this.stop();
    let failure: unknown;
    for (const key of this.keys) {
      try {
        await this.leases.releaseAll(key, this.token);
      } catch (error) {
        failure ??= error;
      }
    }
    if (!wasLost) this.state = "released";
    if (failure !== undefined) throw failure;
  }

  /** Renews every lock; a lock found gone loses the set, an unreachable gateway is left to the watchdog. */
  private async renew(): Promise<void> {
    if (this.renewing || this.state !== "held") return;
    this.renewing = true;
    try {
      let earliest = Number.POSITIVE_INFINITY;
      for (const key of this.keys) {
        const renewed = await this.leases.extend(key, this.token, this.ttlMs);
        earliest = Math.min(earliest, renewed.expiresAtMs);
      }
      if (this.state === "held") this.watchdog?.renewed(earliest);
    } catch (error) {
      if (hasSlug(error, "lock-not-found") || hasSlug(error, "not-owner")) this.lose("lock-gone", error);
    } finally {
      this.renewing = false;
    }
  }

  private lose(reason: string, cause?: unknown): void {
    if (this.state !== "held") return;
    this.state = "lost";
    this.stop();
    const why =
      reason === "lock-gone"
        ? "a renewal found one of its locks gone (its lease ran out, it was revoked or released)"
        : reason === "session-ended"
          ? "the session it hung on ended"
          : "no renewal succeeded before the lease could have ended";
    const error = new LockLostError(reason, `lost the locks ${this.keys.join(", ")}: ${why}`, cause === undefined ? {} : { cause });
    this.loss.abort(error);
  }

  private stop(): void {
    this.watchdog?.stop();
    if (this.renewals !== undefined) clearInterval(this.renewals);
    this.session?.signal.removeEventListener("abort", this.onSessionLost);
  }
}
