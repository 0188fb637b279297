/**
 * The shapes of what the gateway answers, as this library hands them out:
 * member names in camelCase, durations in milliseconds, times in Unix epoch
 * milliseconds by the Redis server's clock, fencing tokens as `bigint`; and
 * the bodies of the requests it sends. Each is checked against
 * `openapi/openapi.json` by the tests (`test/contract.test.ts`).
 */

/** `exclusive` (the default: one holder, or up to `limit`) or `shared` (readers). */
export type LockMode = "exclusive" | "shared";

/** How to ask for a lock, streamed or plain. */
export interface AcquireOptions {
  /** Lease length; the gateway's default is 30 000. */
  ttlMs?: number;
  /** How long to wait on the server while another owner holds it; 0 (the default) tries once. */
  waitMs?: number;
  /** `shared` for a read lock beside other readers. */
  mode?: LockMode;
  /** Up to this many exclusive holders at once (a counting lock); 1 by default. */
  limit?: number;
  /** How many of a counting lock's `limit` places this holder takes (1 ..= limit, default 1). */
  permits?: number;
  /** A public string every reader of the lock sees, such as the holder's address. */
  value?: string;
  /** Stops waiting (nothing is granted); the call rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * The id of a session to hang the lock on: the lock lives as long as the
   * session (its `ttlMs` is ignored) unless released first. `Session.acquire`
   * sets it; give it yourself only for a session kept alive elsewhere.
   */
  session?: string;
}

/** How to ask for a streamed lock. */
export interface LockOptions extends AcquireOptions {
  /** Called with the request's place in the lock's queue while it waits (1 is next). */
  onQueued?: (position: number) => void;
}

/** A grant, as `POST /locks` answers it. */
export interface Grant {
  key: string;
  /** The owner's secret: needed to extend, release or re-enter. Never logged by the gateway. */
  token: string;
  /**
   * Strictly increasing with every new acquisition of the key: hand it to
   * the resource you write to, which refuses writes with a smaller one.
   */
  fencingToken: bigint;
  ttlMs: number;
  expiresAtMs: number;
  /** Re-entrant hold count. */
  holds: number;
  /** How long the request waited in the queue. */
  waitedMs: number;
}

/** A plain lease: a grant held by its token, renewed by its holder. */
export interface Lease extends Grant {
  /**
   * True when this grant was answered to an earlier attempt of the same
   * acquisition whose answer was lost, and the retry got it again
   * (`Idempotent-Replayed: true`).
   */
  replayed: boolean;
}

/** A lease after `extend` or `setValue`. */
export interface LeaseState {
  key: string;
  ttlMs: number;
  expiresAtMs: number;
  fencingToken: bigint;
  holds: number;
}

/** One holder's lease, as readers see it (never its token). */
export interface LeaseView {
  fencingToken: bigint;
  value: string | null;
  holds: number;
  acquiredAtMs: number;
  /** When its lease ends; a session's holder's is its session's. */
  expiresAtMs: number;
  /**
   * The public handle (32 hex digits) of the session the hold hangs on,
   * when it does: the same for every lock of one session, and never the
   * session's secret id.
   */
  session?: string | null;
  /** The places of a counting lock it takes (absent for other kinds). */
  permits?: number | null;
}

/** A request waiting for the lock, on any gateway instance. */
export interface Waiter {
  /** 1 is served next. */
  position: number;
  mode: LockMode;
  waitingSinceMs: number;
}

/** A held lock, as `GET /locks/{key}` shows it. */
export interface LockStatus {
  key: string;
  held: true;
  ttlMs: number;
  expiresAtMs: number;
  fencingToken: bigint;
  holds: number;
  mode: LockMode;
  /** Absent for shared locks. */
  limit?: number;
  holders: number;
  /** One per holder, oldest grant first. */
  leases: LeaseView[];
  waiters: Waiter[];
}

/**
 * A lock nobody holds: as a watch's `snapshot` shows it, and as
 * `GET /locks/{key}` shows a lock that a lock-delay keeps unavailable.
 */
export interface FreeLock {
  key: string;
  held: false;
  waiters: Waiter[];
  /**
   * Until when nobody is granted it (Unix ms, Redis clock): the lock-delay
   * of a session that held it and expired, or whose hold was revoked.
   * Absent when no delay is in force.
   */
  delayedUntilMs?: number;
}

/** A page of `GET /locks`. */
export interface LockPage {
  locks: LockStatus[];
  /** Where the next page begins; null on the last. */
  nextCursor: string | null;
}

/** `DELETE /locks/{key}` that leaves holds: how many. */
export interface HoldsLeft {
  holds: number;
}

/** The events of a streamed lock (`POST /locks` with `Accept: text/event-stream`). */
export type LockStreamEventName = "queued" | "refused" | "acquired" | "renewed" | "released" | "lost";

/** `queued`: the request's place in the lock's queue. */
export interface QueuedData {
  position: number;
}

/** `renewed`: the lease's new end. */
export interface RenewedData {
  expiresAtMs: number;
}

/** `lost`: why the lock is no longer held, and which (of a batch, the first lock lost; none at shutdown). */
export interface LostData {
  reason?: string;
  key?: string | null;
}

/** `released`: the lock (of a batch, the one) released with `DELETE` and the token. */
export interface ReleasedData {
  key: string;
}

/** The body of `POST /locks`: a new lock, or re-entry with `token`. */
export interface AcquireBody {
  key: string;
  token?: string;
  ttl_ms?: number;
  wait_ms?: number;
  mode?: LockMode;
  limit?: number;
  permits?: number;
  value?: string;
  session?: string;
}

/** One lock of a batch (`POST /locks/batch`): its key, and how to hold it. */
export interface BatchLockSpec {
  key: string;
  mode?: LockMode;
  /** The places of a counting lock. */
  limit?: number;
  /** How many of them to take. */
  permits?: number;
}

/** The body of `POST /locks/batch`. */
export interface BatchBody {
  locks: BatchLockBody[];
  ttl_ms?: number;
  wait_ms?: number;
  session?: string;
  value?: string;
}

/** One lock of `BatchBody`. */
export interface BatchLockBody {
  key: string;
  mode?: LockMode;
  limit?: number;
  permits?: number;
}

/** A batch's grant: one token for every lock. */
export interface BatchGrant {
  token: string;
  ttlMs: number;
  expiresAtMs: number;
  waitedMs: number;
  locks: BatchGrantLock[];
}

/** One lock of a batch's grant, with its own fencing token. */
export interface BatchGrantLock {
  key: string;
  mode: LockMode;
  fencingToken: bigint;
  expiresAtMs: number;
}

/** The body of `PUT /locks/{key}/mode`. */
export interface ModeBody {
  token: string;
  mode: LockMode;
  wait_ms?: number;
}

/** A hold after an upgrade or a downgrade: its lease, fencing token (new after an upgrade) and mode. */
export interface ModeChange extends LeaseState {
  mode: LockMode;
}

/** The body of `PUT /locks/{key}/ttl`. */
export interface ExtendBody {
  token: string;
  ttl_ms: number;
}

/** The body of `PUT /locks/{key}/value`. */
export interface ValueBody {
  token: string;
  value: string;
}

/** The body of `POST /sessions`. */
export interface SessionBody {
  ttl_ms?: number;
  lock_delay_ms?: number;
  value?: string;
}

/** A new session, as `POST /sessions` answers it (and a streamed session's `opened` event). */
export interface SessionGrant {
  /** The session's secret: whoever has it can hang locks on the session and end it. */
  id: string;
  ttlMs: number;
  lockDelayMs: number;
  expiresAtMs: number;
}

/** The events of a streamed session (`POST /sessions` with `Accept: text/event-stream`). */
export type SessionStreamEventName = "opened" | "renewed" | "ended";

/** A streamed session's `renewed`: the session's lease now ends then. */
export interface SessionRenewedData {
  expiresAtMs: number;
}

/** A streamed session's `ended`, its last event. */
export interface SessionEndedData {
  reason: string;
}

/** Why the gateway ended a session: the `reason` of a streamed session's `ended` event. */
export type SessionEndReason = "expired" | "deleted" | "shutting-down";
