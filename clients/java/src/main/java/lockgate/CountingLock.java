package lockgate;

import java.time.Duration;
import java.util.Optional;

/**
 * A counting lock of {@code limit} places, as Redisson's {@code
 * RPermitExpirableSemaphore} (and, mostly, {@code RSemaphore}): each {@link
 * #acquire} takes one or more places and returns them as a {@link HeldLock}
 * with its own token and fencing token, given back by closing it (no one
 * else's {@code release()} can give back a holder's places). Waiters are
 * served in arrival order; a request for many places at the head of the queue
 * holds back smaller ones behind it, so none starves.
 */
public final class CountingLock {
    private final Gateway gateway;
    private final String key;
    private final int limit;
    private final LockOptions options;
    private final Session session;

    CountingLock(Gateway gateway, String key, int limit, LockOptions options, Session session) {
        this.gateway = gateway;
        this.key = key;
        this.limit = limit;
        this.options = options.withLimit(limit).withMode(LockMode.EXCLUSIVE);
        this.session = session;
    }

    public String key() {
        return key;
    }

    /** Its number of places; every holder asks with the same ({@link LimitMismatchException} otherwise). */
    public int limit() {
        return limit;
    }

    /** Waits as long as it takes for one place. */
    public HeldLock acquire() throws InterruptedException {
        return acquire(1);
    }

    /** Waits as long as it takes for {@code permits} places (1 to the limit). */
    public HeldLock acquire(int permits) throws InterruptedException {
        return gateway.acquire(key, options.withPermits(permits), session, null, true);
    }

    /** Takes {@code permits} places if they are free now. */
    public Optional<HeldLock> tryAcquire(int permits) {
        try {
            return tryAcquire(permits, Duration.ZERO);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return Optional.empty();
        }
    }

    /** Waits at most {@code wait} for {@code permits} places; empty when they are not free by then. */
    public Optional<HeldLock> tryAcquire(int permits, Duration wait) throws InterruptedException {
        try {
            return Optional.of(gateway.acquire(key, options.withPermits(permits), session, wait, true));
        } catch (LockHeldException e) {
            return Optional.empty();
        }
    }

    /** The places free now ({@code GET /locks/{key}}); they may be taken the next moment. */
    public int availablePermits() {
        Optional<LockStatus> status = gateway.inspect(key);
        if (status.isEmpty() || !status.get().held()) {
            return status.map(s -> s.delayedUntil().isPresent() ? 0 : limit).orElse(limit);
        }
        long taken = 0;
        for (LeaseInfo lease : status.get().leases()) {
            taken += lease.permits();
        }
        return (int) Math.max(0, status.get().limit() - taken);
    }

    @Override
    public String toString() {
        return "CountingLock(" + key + ", " + limit + " places)";
    }
}
