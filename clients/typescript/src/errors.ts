/**
 * The client's errors: one hierarchy under `LockgateError`, each carrying the
 * gateway's RFC 9457 problem document when the gateway answered with one.
 *
 * The gateway names every problem with a stable slug (`/problems/<slug>`);
 * `errorFromProblem` maps the slug, not the HTTP status, to a class, so a
 * 409 `lock-held` and a 409 `not-owner` become different errors.
 */

/** An `application/problem+json` body as the gateway sends it. */
export interface Problem {
  /** `/problems/<slug>`. */
  type: string;
  title: string;
  status: number;
  detail?: string;
  /** The lock key, where the problem concerns one. */
  key?: string;
  /** For `lock-held`: when a place may free (the earliest holder's remaining lease). */
  retry_after_ms?: number;
  /** For `invalid-field`: the field at fault. */
  field?: string;
  /** For `deadlock`: the keys of the cycle of session waits, in order. */
  cycle?: string[];
  [member: string]: unknown;
}

/** The base of every error this client throws. */
export class LockgateError extends Error {
  /** The gateway's problem document, when it answered with one. */
  readonly problem: Problem | undefined;

  constructor(message: string, options: { problem?: Problem; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.problem = options.problem;
  }

  /** The problem's stable slug (`lock-held`, `not-owner`, ...), if any. */
  get slug(): string | undefined {
    return this.problem ? problemSlug(this.problem) : undefined;
  }

  /** The HTTP status the gateway answered with, if it answered. */
  get status(): number | undefined {
    return this.problem?.status;
  }
}

/** The lock is held by another owner and the wait (if any) ran out. */
export class LockHeldError extends LockgateError {
  /** How long until a place may free, as the gateway estimates it. */
  get retryAfterMs(): number | undefined {
    const value = this.problem?.retry_after_ms;
    return typeof value === "number" ? value : undefined;
  }
}

/**
 * The lock is no longer held: its lease ended, it was deleted or revoked, the
 * stream to the gateway broke, or no renewal was heard before the lease could
 * have ended. Work done under the lock must stop.
 */
export class LockLostError extends LockgateError {
  /**
   * Why: the gateway's reason (`lock-gone`, `held-by-another`,
   * `backend-unavailable`, `revoked`, `shutting-down`, `session-ended`), or
   * the client's own (`released-elsewhere`, `connection-lost`,
   * `lease-expired`, `lock-not-found`); a `LockSet`'s are the same. A lost
   * session's own error (its
   * `signal`'s reason, and the `cause` of its locks' errors) says why the
   * session was lost: `expired`, `deleted`, `shutting-down`,
   * `connection-lost` or `lease-expired`.
   */
  readonly reason: string;
  /**
   * The lock that ended, when the gateway named it: of a `LockSet`, the one
   * whose end lost the set (the gateway then gave back the others).
   */
  readonly key: string | undefined;

  constructor(reason: string, message: string, options: { problem?: Problem; cause?: unknown; key?: string } = {}) {
    super(message, options);
    this.reason = reason;
    this.key = options.key;
  }
}

/** The token given does not hold the lock. */
export class NotOwnerError extends LockgateError {}

/**
 * Waiting for the lock would have closed a cycle of session waits (this
 * session holds a lock that another session waits for, and so on round to
 * the lock asked for): the gateway refused this wait, the youngest of the
 * cycle, and the others go on waiting. Release what the session holds (or
 * end it) and try again, or take locks in one order.
 */
export class DeadlockError extends LockgateError {
  /** The keys of the cycle, in order, as the gateway names them. */
  get cycle(): string[] {
    const cycle = this.problem?.cycle;
    return Array.isArray(cycle) ? cycle.filter((key): key is string => typeof key === "string") : [];
  }
}

/**
 * The session named does not exist: it was never opened, or it ended
 * (it was ended, or it expired because nobody kept it alive). Locks cannot
 * hang on it; open a new one.
 */
export class SessionNotFoundError extends LockgateError {}

/**
 * The gateway could not be reached, did not answer in time, or answered that
 * it (or Redis behind it) cannot serve now. Retrying later may succeed.
 */
export class GatewayUnavailableError extends LockgateError {
  /** The gateway's `Retry-After`, in milliseconds, when it sent one. */
  readonly retryAfterMs: number | undefined;

  constructor(message: string, options: { problem?: Problem; cause?: unknown; retryAfterMs?: number } = {}) {
    super(message, options);
    this.retryAfterMs = options.retryAfterMs;
  }
}

/**
 * The gateway refused the request as asked: a malformed key or field, a
 * limit or mode that does not match how the lock is held, a reused
 * idempotency key, or missing or wrong credentials. Retrying unchanged fails
 * the same way.
 */
export class InvalidRequestError extends LockgateError {}

/** The slug of a problem document: `lock-held` for `/problems/lock-held`. */
export function problemSlug(problem: Problem): string {
  const type = typeof problem.type === "string" ? problem.type : "";
  return type.slice(type.lastIndexOf("/") + 1);
}

/**
 * The problem slugs this client tells apart (`/problems/<slug>`); any other
 * is an `InvalidRequestError`, or a `GatewayUnavailableError` when its
 * status is 5xx (`internal` among them).
 */
export type ProblemSlug =
  | "lock-held"
  | "lock-not-found"
  | "not-owner"
  | "deadlock"
  | "session-not-found"
  | "backend-unavailable"
  | "shutting-down"
  | "too-many-waiters"
  | "request-timeout"
  | "not-replicated";

/** Whether `error` is this client's error for the problem `slug`. */
export function hasSlug(error: unknown, slug: ProblemSlug): boolean {
  return error instanceof LockgateError && error.slug === slug;
}

/** Slugs that mean "the lock is taken": the wait (if any) ran out. */
const HELD = new Set<string>(["lock-held"] satisfies ProblemSlug[]);
/** Slugs that mean the lease the caller held is gone. */
const LOST = new Set<string>(["lock-not-found"] satisfies ProblemSlug[]);
const NOT_OWNER = new Set<string>(["not-owner"] satisfies ProblemSlug[]);
const DEADLOCK = new Set<string>(["deadlock"] satisfies ProblemSlug[]);
const SESSION_NOT_FOUND = new Set<string>(["session-not-found"] satisfies ProblemSlug[]);
/** Slugs of the gateway's temporary refusals: retry later, elsewhere. */
const UNAVAILABLE = new Set<string>([
  "backend-unavailable",
  "shutting-down",
  "too-many-waiters",
  "request-timeout",
  "not-replicated",
] satisfies ProblemSlug[]);

/**
 * The error a problem document stands for. `retryAfterMs` is the gateway's
 * `Retry-After` header, when the answer had one.
 */
export function errorFromProblem(problem: Problem, retryAfterMs?: number): LockgateError {
  const slug = problemSlug(problem);
  const message = problem.detail ? `${problem.title}: ${problem.detail}` : problem.title || slug;
  if (HELD.has(slug)) return new LockHeldError(message, { problem });
  if (LOST.has(slug)) return new LockLostError(slug, message, { problem });
  if (NOT_OWNER.has(slug)) return new NotOwnerError(message, { problem });
  if (DEADLOCK.has(slug)) return new DeadlockError(message, { problem });
  if (SESSION_NOT_FOUND.has(slug)) return new SessionNotFoundError(message, { problem });
  if (UNAVAILABLE.has(slug) || problem.status >= 500) {
    return new GatewayUnavailableError(message, {
      problem,
      ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
    });
  }
  return new InvalidRequestError(message, { problem });
}
