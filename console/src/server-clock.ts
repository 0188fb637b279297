/**
 * The Redis server's clock, as seen from the page.
 *
 * Leases end at `expires_at_ms` on the Redis clock, which need not agree
 * with the browser's. Every held lock the gateway describes carries both
 * `expires_at_ms` and `ttl_ms`, read at the same moment, so their
 * difference is the Redis time of the answer; the offset from the local
 * clock lets a lease count down between answers without drifting.
 */

export class ServerClock {
  private offsetMs = 0;

  /** Records that the Redis clock read `serverNowMs` just now. */
  observe(serverNowMs: number): void {
    this.offsetMs = serverNowMs - Date.now();
  }

  /** Records the moment of a lock answer (`expires_at_ms - ttl_ms`). */
  observeLock(lock: { expires_at_ms: number; ttl_ms: number }): void {
    this.observe(lock.expires_at_ms - lock.ttl_ms);
  }

  /** Now, on the Redis clock. */
  now(): number {
    return Date.now() + this.offsetMs;
  }
}
