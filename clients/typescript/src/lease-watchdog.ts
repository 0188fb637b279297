/**
 * The client's own watchdog on a lease that the gateway renews (a streamed
 * lock's, a streamed session's): it fires when no renewal was heard before
 * the lease could have ended, for a gateway or network that falls silent
 * without closing the connection.
 *
 * It runs on the monotonic clock (`performance.now()`), never on wall time,
 * and it is conservative: it places the first lease's end as early as it
 * can have been, and each renewal's end by the Redis clock's distance from
 * the first one's, but never later than the renewal's arrival plus the lease.
 */

export class LeaseWatchdog {
  /** The earliest moment, by `performance.now()`, at which the lease could have ended. */
  private deadline: number;
  private readonly anchor: { local: number; expiresAtMs: number };
  private timer: ReturnType<typeof setTimeout> | undefined;
  private stopped = false;

  /**
   * `earliestEnd`: the first lease's end by `performance.now()`, placed as
   * early as it can have been (the request's sending time, plus any time
   * it says it waited, plus the lease); `expiresAtMs`: the same end by the
   * Redis clock, as the grant said. `onExpired` is called once, at the
   * deadline, unless a renewal or `stop()` comes first.
   */
  constructor(
    private readonly ttlMs: number,
    earliestEnd: number,
    expiresAtMs: number,
    private readonly onExpired: () => void,
  ) {
    this.anchor = { local: earliestEnd, expiresAtMs };
    this.deadline = earliestEnd;
    this.arm();
  }

  /** A renewal was heard: the lease now ends at `expiresAtMs` (Redis clock). */
  renewed(expiresAtMs: number): void {
    // The renewal was made before now, so its lease ends by now + ttl at
    // the latest; the Redis clock may place it earlier still.
    this.deadline = Math.min(performance.now() + this.ttlMs, this.anchor.local + (expiresAtMs - this.anchor.expiresAtMs));
    this.arm();
  }

  /** How long the lease is sure to last, by this process's clock, unless a renewal comes first. */
  get remainingMs(): number {
    return this.stopped ? 0 : Math.max(0, this.deadline - performance.now());
  }

  /** No more watching: the lease was given back or is gone. */
  stop(): void {
    this.stopped = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private arm(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    if (this.stopped) return;
    this.timer = setTimeout(() => this.check(), Math.max(0, this.deadline - performance.now()) + 1);
    // What holds the lease keeps its stream open, and that keeps the process
    // running; this timer alone must not.
    this.timer.unref?.();
  }

  private check(): void {
    this.timer = undefined;
    if (this.stopped) return;
    if (performance.now() >= this.deadline) {
      this.stopped = true;
      this.onExpired();
    } else {
      this.arm();
    }
  }
}
