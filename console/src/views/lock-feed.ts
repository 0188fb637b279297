/**
 * What one lock's page hears of the lock: its events, live, and while it
 * is held a read of `GET /locks/{key}` once a second, because the queue of
 * waiters is not an event.
 *
 * It does not read the lock while it is free (the answer would be a 404,
 * which the browser reports in its console as a failed request): the next
 * `acquired` event says when to look again. A read sent before an event
 * and answered after it describes the lock as it was, and is dropped.
 */

import type { Context } from "../context";
import { type FreeLock, type HeldLock, type Problem, Refusal } from "../gateway";
import { followLockEvents, type LockEvent, type StreamState } from "../lock-events";
import { poll, Waker } from "../poll";
import { movesQueue } from "./lock-state";

const EVERY_MS = 1000;

export interface LockFeedHandlers {
  onEvent(event: LockEvent): void;
  onStreamState(state: StreamState): void;
  /** The lock as read, newer than every event handed on so far. */
  onAnswer(lock: HeldLock | FreeLock): void;
  /** A refusal of the reads, or `null` once one succeeds again. */
  onProblem(problem: Problem | null): void;
  /** Whether the lock is worth reading now (it is held, as far as the page knows). */
  worthReading(): boolean;
}

/** Follows `key` until `signal` aborts. */
export function followLock(key: string, context: Context, signal: AbortSignal, handlers: LockFeedHandlers): void {
  const reader = new Waker();
  let eventsApplied = 0;
  const onEvent = (event: LockEvent) => {
    eventsApplied += 1;
    handlers.onEvent(event);
    // The queue moved: read it now rather than at the next tick.
    if (movesQueue(event)) reader.wake();
  };
  const read = async (tickSignal: AbortSignal) => {
    if (!handlers.worthReading()) return;
    const before = eventsApplied;
    const answer = await readLock(key, context, tickSignal);
    if (before === eventsApplied) handlers.onAnswer(answer);
    else reader.wake();
  };
  void followLockEvents(key, context, signal, { onEvent, onStreamState: handlers.onStreamState });
  void poll(read, { everyMs: EVERY_MS, signal, token: context.token, waker: reader, onProblem: handlers.onProblem });
}

/** `GET /locks/{key}`, with a 404 read as the lock being free. */
async function readLock(key: string, context: Context, signal: AbortSignal): Promise<HeldLock | FreeLock> {
  try {
    return (await context.gateway.lock(key, signal)).body;
  } catch (error) {
    // Released between the last event and this read: the event is on its way.
    if (error instanceof Refusal && error.problem.status === 404) return { key, held: false };
    throw error;
  }
}
