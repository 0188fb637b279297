/**
 * Several locks at once (`POST /locks/batch`): all or none, for one owner
 * token, held as a `LockSet` through a streamed batch, as one lock is held
 * through a streamed lock.
 *
 * The gateway renews every lock of the batch every third of the lease for
 * as long as the batch's event stream stays open, and the set is one
 * thing: when any of its locks ends (released with the token elsewhere,
 * revoked, lost), the stream ends and the gateway gives back the others.
 * The set then aborts its `signal`, as a lock does, and also when the
 * stream breaks or no renewal was heard before the lease could have ended.
 * A set taken in a session hangs on the session's lease (no renewals), and
 * its stream ends with the session.
 */

import { Hold, grantedLease, type GrantTiming } from "./hold.js";
import type { LockLink, SessionLease } from "./lock.js";
import type { ServerSentEvent } from "./sse.js";
import type { BatchBody, BatchGrant, BatchGrantLock, BatchLockSpec, LockMode } from "./types.js";

/** How to ask for several locks at once. */
export interface LockAllOptions {
  /** Lease length of every lock; the gateway's default is 30 000. Renewed by the gateway while held. */
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
   * `Session` (as `session.lockAll` does); or the id of a session kept
   * alive elsewhere, whose end the gateway tells (`session-ended`); or any
   * `{ id, signal }`, whose `signal` aborting loses the set.
   */
  session?: string | { readonly id: string; readonly signal: AbortSignal };
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
  if (options.session !== undefined) body.session = typeof options.session === "string" ? options.session : options.session.id;
  else if (options.ttlMs !== undefined) body.ttl_ms = options.ttlMs;
  if (options.waitMs !== undefined) body.wait_ms = options.waitMs;
  if (options.value !== undefined) body.value = options.value;
  return body;
}

/** Several locks held together for one token. Release them all with `release()` or `await using`. */
export class LockSet implements AsyncDisposable {
  /** The owner's secret, the same for every lock of the set. */
  readonly token: string;
  /** Each lock: its key, mode and own fencing token, in the order asked for. */
  readonly locks: readonly BatchGrantLock[];
  readonly ttlMs: number;
  /** How long the batch waited for its locks. */
  readonly waitedMs: number;
  /**
   * Aborts, with a `LockLostError` as its `reason`, when any lock of the
   * set is lost (its `key` names it, when the gateway did).
   */
  readonly signal: AbortSignal;
  /** @internal Whether it is held, lost or given back: what a `Session` it hangs on ends with it. */
  readonly hold: Hold;

  private readonly link: Pick<LockLink, "release">;
  private readonly sessionLease: SessionLease | undefined;

  /** @internal Made by `Gateway.lockAll`. */
  constructor(
    grant: BatchGrant,
    session: { lease: SessionLease | undefined } | undefined,
    timing: GrantTiming,
    stream: AbortController,
    events: AsyncIterator<ServerSentEvent>,
    link: Pick<LockLink, "release" | "ended">,
  ) {
    this.token = grant.token;
    this.locks = grant.locks;
    this.ttlMs = grant.ttlMs;
    this.waitedMs = grant.waitedMs;
    this.link = link;
    this.sessionLease = session?.lease;
    const keys = grant.locks.map((lock) => lock.key).join(", ");
    const sessionLease = this.sessionLease;
    this.hold = new Hold({
      name: (key) => (key === undefined ? `the locks ${keys}` : `the locks ${keys} (${key} first)`),
      stream,
      expiresAtMs: grant.expiresAtMs,
      lease: session ? undefined : grantedLease(grant, timing),
      ...(sessionLease ? { remainingMs: () => sessionLease.remainingMs } : {}),
      ...(link.ended ? { ended: (hold: Hold) => link.ended?.(hold) } : {}),
    });
    this.signal = this.hold.signal;
    this.hold.followLockStream(events);
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

  /** When the leases end (the earliest; Unix ms, Redis clock), as the last renewal said: the session's, in a session. */
  get expiresAtMs(): number {
    return this.sessionLease?.expiresAtMs ?? this.hold.expiresAtMs;
  }

  /** True once the set was lost (`signal` has aborted). */
  get lost(): boolean {
    return this.hold.lost;
  }

  /** Throws the `LockLostError` if the set was lost. */
  check(): void {
    this.hold.check();
  }

  /** How long every lock is sure to last, as `Lock.remainingMs`. */
  get remainingMs(): number {
    return this.hold.remainingMs;
  }

  /** True once `release()` gave the locks back. */
  get released(): boolean {
    return this.hold.released;
  }

  /**
   * Gives every lock back (`DELETE` with the token, each lock at once, so
   * that all are free for their next owners when this resolves) and closes
   * the stream. Idempotent. A lost set gives back what the gateway may not
   * have yet, and resolves. Rejects with the first failure to release,
   * after trying every lock (the stream is closed all the same, and the
   * gateway releases what it still holds of a closed stream).
   */
  release(): Promise<void> {
    return this.hold.release(async () => {
      const held = this.hold.beginRelease();
      const releases = await Promise.allSettled(this.keys.map((key) => this.link.release(key, this.token)));
      this.hold.settleReleased();
      const failed = releases.find((release): release is PromiseRejectedResult => release.status === "rejected");
      if (held && failed) throw failed.reason;
    });
  }

  /** Releases the set: what `await using locks = await gateway.lockAll(...)` calls. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }
}
