/**
 * What one lock's page knows of the lock, and how each answer and each
 * event changes it: pure functions, no DOM, no requests.
 */

import * as format from "../format";
import type { FreeLock, HeldLock, Lease, Waiter } from "../gateway";
import type { LockEvent } from "../lock-events";

export interface LockState {
  /** False until the first answer or snapshot. */
  known: boolean;
  held: boolean;
  mode: string | undefined;
  limit: number | undefined;
  /** One per holder, oldest grant first. */
  leases: Lease[];
  waiters: Waiter[];
  /**
   * Until when a lock-delay keeps the free lock from anyone (Redis clock):
   * a session that held it expired. Undefined when none was heard of.
   */
  delayedUntilMs: number | undefined;
}

/** Before anything was read. */
export const UNKNOWN_LOCK: LockState = {
  known: false,
  held: false,
  mode: undefined,
  limit: undefined,
  leases: [],
  waiters: [],
  delayedUntilMs: undefined,
};

/** A lease this close to its end may be gone by the time a read arrives. */
const LEASE_MARGIN_MS = 300;

/** The lock as `GET /locks/{key}` or a `snapshot` describes it. */
export function fromAnswer(lock: HeldLock | FreeLock): LockState {
  if (!lock.held) return { ...UNKNOWN_LOCK, known: true, waiters: lock.waiters ?? [], delayedUntilMs: lock.delayed_until_ms ?? undefined };
  return {
    known: true,
    held: true,
    mode: lock.mode,
    limit: lock.limit,
    leases: lock.leases ?? [],
    waiters: lock.waiters ?? [],
    delayedUntilMs: undefined,
  };
}

/** The state after `event`, which happened at `now` (Redis clock) unless its id says when. */
export function applyEvent(state: LockState, event: LockEvent, now: number): LockState {
  switch (event.name) {
    case "snapshot":
      return fromAnswer(event.data);
    case "acquired": {
      const { fencing_token, value, mode, expires_at_ms } = event.data;
      const lease: Lease = { fencing_token, value, holds: 1, acquired_at_ms: eventTime(event) ?? now, expires_at_ms };
      const others = state.leases.filter((held) => held.fencing_token !== fencing_token);
      return {
        ...state,
        held: true,
        mode: mode === "counted" ? "exclusive" : mode,
        leases: [...others, lease],
        delayedUntilMs: undefined,
      };
    }
    case "value": {
      const { fencing_token, value } = event.data;
      const leases = state.leases.map((lease) => (lease.fencing_token === fencing_token ? { ...lease, value } : lease));
      return { ...state, leases };
    }
    case "released":
    case "expired":
    case "revoked": {
      const leases = state.leases.filter((lease) => lease.fencing_token !== event.data.fencing_token);
      return { ...state, leases, held: leases.length > 0 };
    }
    case "delayed":
      return { ...state, delayedUntilMs: event.data.delayed_until_ms };
    case "gap":
      // A snapshot follows.
      return state;
  }
}

/** Whether a lock-delay keeps the free lock unavailable at `now` (Redis clock). */
export function isDelayed(state: LockState, now: number): boolean {
  return !state.held && state.delayedUntilMs !== undefined && state.delayedUntilMs > now;
}

/** Whether `event` changes the queue of waiters, which no event tells: read the lock again at once. */
export function movesQueue(event: LockEvent): boolean {
  return ["acquired", "released", "expired", "revoked"].includes(event.name);
}

/** Whether `GET /locks/{key}` would find the lock held: some lease has time left (or none is known). */
export function worthReading(state: LockState, now: number): boolean {
  if (!state.held) return false;
  return state.leases.length === 0 || state.leases.some((lease) => lease.expires_at_ms - now > LEASE_MARGIN_MS);
}

/** The Redis time of an event, from its id (`<ms>-<seq>`). */
export function eventTime(event: LockEvent): number | undefined {
  const ms = Number(event.id?.split("-")[0]);
  return Number.isFinite(ms) && ms > 0 ? ms : undefined;
}

/** The lock in one sentence at `now` (Redis clock): held how and by how many, free, or free but delayed. */
export function summary(state: LockState, now: number): string {
  if (!state.known) return "Reading the lock…";
  if (isDelayed(state, now)) {
    return `Free, delayed until ${format.clockTime(state.delayedUntilMs ?? now)}.`;
  }
  if (!state.held) return "Free: nobody holds it.";
  const waiting = state.waiters.length === 0 ? "nobody waiting" : `${format.count(state.waiters.length)} waiting`;
  return `Held, ${format.modeLabel(state.mode ?? "exclusive", state.limit)}: ${format.plural(state.leases.length, "holder")}, ${waiting}.`;
}
