package lockgate;

/**
 * A lease's end (by the Redis server's clock, as the gateway reports it)
 * mapped to this process's monotonic clock, never later than the real end,
 * less a safety margin: the deadline by which the holder counts the lease as
 * lost unless a renewal (or an extension) moved it. Its owner ({@link
 * Holding}) guards it.
 *
 * <p>The margin is a tenth of the lease, at least 1 s, at most a third of it
 * (1 s for leases of 3 to 10 s, 3 s for 30 s): what the holder has to stop its
 * work before anyone else can hold the lock, absorbing the renewal's time on
 * the way, clocks that run apart and a thread that wakes late. The third keeps
 * the gateway's renewals, due every third of the lease, from being outrun.
 */
final class LeaseClock {
    private long ttlMs;
    private long expiresAtMs;
    /** The lease was granted at {@code grantedAtMs} by Redis, and no earlier than {@code anchorNanos} here. */
    private final long anchorNanos;
    private final long grantedAtMs;
    private long deadlineNanos;

    /**
     * A lease granted for {@code ttlMs} until {@code expiresAtMs} by a request
     * sent at {@code sentNanos}, answered at {@code receivedNanos}, that
     * waited {@code waitedMs} on the gateway: the grant was made no earlier
     * than the sending plus the wait, and no later than the answer, so the
     * lease is timed from the earlier of the two.
     */
    LeaseClock(long ttlMs, long expiresAtMs, long sentNanos, long receivedNanos, long waitedMs) {
        this.ttlMs = ttlMs;
        this.expiresAtMs = expiresAtMs;
        this.grantedAtMs = expiresAtMs - ttlMs;
        long earliest = sentNanos + waitedMs * 1_000_000L;
        this.anchorNanos = receivedNanos - earliest < 0 ? receivedNanos : earliest;
        this.deadlineNanos = anchorNanos + (ttlMs - marginMs(ttlMs)) * 1_000_000L;
    }

    static long marginMs(long ttlMs) {
        return Math.min(ttlMs / 3, Math.max(1000, ttlMs / 10));
    }

    long ttlMs() {
        return ttlMs;
    }

    long expiresAtMs() {
        return expiresAtMs;
    }

    long deadlineNanos() {
        return deadlineNanos;
    }

    /**
     * A renewal reported {@code expiresAtMs}: it was made before now, so its
     * lease ends by now plus the lease at the latest; mapped through the
     * grant, the Redis clock may place it earlier still.
     */
    void renewed(long expiresAtMs, long nowNanos) {
        this.expiresAtMs = expiresAtMs;
        long margin = marginMs(ttlMs) * 1_000_000L;
        long end = anchorNanos + (expiresAtMs - grantedAtMs) * 1_000_000L - margin;
        long latest = nowNanos + ttlMs * 1_000_000L - margin;
        if (latest - end < 0) {
            end = latest;
        }
        if (end - deadlineNanos > 0) {
            deadlineNanos = end;
        }
    }

    /** A new lease of {@code ttlMs} until {@code expiresAtMs}, made by a request sent at {@code sentNanos}. */
    void extended(long ttlMs, long expiresAtMs, long sentNanos) {
        this.ttlMs = ttlMs;
        this.expiresAtMs = expiresAtMs;
        this.deadlineNanos = sentNanos + (ttlMs - marginMs(ttlMs)) * 1_000_000L;
    }

    /** How long, from {@code nowNanos}, the lease is sure to last here (0 once past). */
    long remainingNanos(long nowNanos) {
        return Math.max(0, deadlineNanos - nowNanos);
    }
}
