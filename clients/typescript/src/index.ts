/**
 * lockgate: the TypeScript client of the lockgate HTTP gateway for
 * distributed locks on Redis.
 *
 * - `Gateway`: one gateway address; `acquire` and `using` hold streamed locks
 *   (the gateway renews them), `leases` is the plain lease API, `revoke` the
 *   operator's end of a stuck lock.
 * - `Lock`: a held streamed lock, with its fencing token and a `signal` that
 *   aborts when the lock is lost.
 * - `LockSet`: several locks taken at once for one token (`lockAll`,
 *   `usingAll`), held through one streamed batch: renewed together by the
 *   gateway and lost together.
 * - `Session`: one lease for many locks (`openSession`, `session`); its
 *   loss is the loss of every lock taken through it.
 * - `LockWatch`: a lock's events, resumable; `Election`: leader election.
 * - Errors: `LockgateError` and its subclasses, each with the gateway's
 *   problem document.
 */

export { Gateway, type GatewayOptions } from "./gateway.js";
export { Lock } from "./lock.js";
export { LockSet, type LockAllOptions } from "./batch.js";
export { Session, type SessionOptions, type SessionLockOptions, type SessionLockAllOptions } from "./session.js";
export { Leases, type LeaseOptions } from "./leases.js";
export {
  LockWatch,
  type WatchEvent,
  type WatchOptions,
  type AcquiredData,
  type ValueData,
  type EndedData,
  type DelayedData,
} from "./watch.js";
export { Election, Leadership, type ElectionOptions, type CampaignOptions, type Leader } from "./election.js";
export {
  LockgateError,
  LockHeldError,
  LockLostError,
  NotOwnerError,
  DeadlockError,
  SessionNotFoundError,
  GatewayUnavailableError,
  InvalidRequestError,
  type Problem,
} from "./errors.js";
export type {
  AcquireOptions,
  LockOptions,
  LockMode,
  BatchLockSpec,
  BatchGrantLock,
  ModeChange,
  Grant,
  Lease,
  LeaseState,
  LeaseView,
  Waiter,
  LockStatus,
  FreeLock,
  SessionGrant,
} from "./types.js";
