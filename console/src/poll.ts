/**
 * The console's heartbeat: run a read, wait, run it again, for as long as
 * the view is open.
 *
 * One request per tick, never two at once (the next tick is timed from the
 * previous one's end). A read that takes long (a listing that walks a large
 * keyspace) spaces the next one out, so that an open console never keeps
 * the gateway busy for more than a quarter of the time. Without an answer, or with Redis out of reach, the
 * ticks slow down by `Backoff` until the gateway answers again. A missing or
 * wrong token is not retried in a loop: the view says so, and the read runs
 * again once the token changes.
 */

import type { AdminToken } from "./admin-token";
import { GatewayUnreachable, type Problem, Refusal } from "./gateway";
import { Backoff, sleep } from "./link";

export interface PollOptions {
  everyMs: number;
  signal: AbortSignal;
  token: AdminToken;
  /** A refusal to show (null once a read succeeds again). */
  onProblem: (problem: Problem | null) => void;
  /** Lets the view ask for the next read at once (a new filter, another page). */
  waker?: Waker;
}

/** Cuts a poller's wait short. A wake that comes during a read cuts the next wait. */
export class Waker {
  private pending = false;
  private interrupt: (() => void) | undefined;

  wake(): void {
    this.pending = true;
    this.interrupt?.();
  }

  wait(ms: number, signal: AbortSignal): Promise<void> {
    if (this.pending) {
      this.pending = false;
      return Promise.resolve();
    }
    const cut = new AbortController();
    const interrupt = () => cut.abort();
    this.interrupt = interrupt;
    return sleep(ms, AbortSignal.any([signal, cut.signal])).then(() => {
      // A wait that lost a race may end after a newer one began: leave that one be.
      if (this.interrupt !== interrupt) return;
      this.interrupt = undefined;
      this.pending = false;
    });
  }
}

export async function poll(read: (signal: AbortSignal) => Promise<void>, options: PollOptions): Promise<void> {
  const { everyMs, signal, token, onProblem } = options;
  const waker = options.waker ?? new Waker();
  const backoff = new Backoff();
  while (!signal.aborted) {
    const started = performance.now();
    let waitMs: number;
    try {
      await read(signal);
      onProblem(null);
      backoff.reset();
      const tookMs = performance.now() - started;
      waitMs = Math.max(everyMs - tookMs, tookMs * 3);
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof Refusal && error.isAccessDenied) {
        onProblem(error.problem);
        await Promise.race([token.changed(signal), waker.wait(60_000, signal)]);
        continue;
      }
      if (error instanceof Refusal) onProblem(error.problem);
      else if (!(error instanceof GatewayUnreachable)) throw error;
      waitMs = backoff.next();
    }
    await waker.wait(Math.max(0, waitMs), signal);
  }
}
