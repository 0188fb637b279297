package lockgate;

import java.time.Duration;
import java.util.Map;
import java.util.UUID;

/**
 * A plain lease ({@code POST /locks} without a stream): nobody renews it but
 * its holder, with {@link #extend}, before its lease runs out. Use it when a
 * lock must outlive this process's connection or pass to another process by
 * its token; prefer a streamed lock ({@link Gateway#lock}) otherwise. It is
 * lost ({@link LossReason#LEASE_EXPIRED}) when its lease could have ended
 * without an extension, by this process's clock (a safety margin early), or
 * when the gateway answers that it is gone.
 *
 * <p>Its acquisition carries an {@code Idempotency-Key}: when the answer is
 * lost (no answer, a reset connection, a 503), the same request is sent again
 * with the same key, twice at most, and the gateway answers the grant the
 * lost answer carried ({@link #replayed()}) rather than making a second one.
 */
public final class Lease extends Grant {
    /** How many times an acquisition whose answer was lost is sent again. */
    static final int RETRIES = 2;

    private final boolean replayed;
    private volatile long holds;

    private Lease(Gateway gateway, Api.LockGrant grant, LockOptions options, Holding holding, boolean replayed) {
        super(gateway, grant, options, holding);
        this.replayed = replayed;
        this.holds = grant.holds();
    }

    static Lease acquire(Gateway gateway, String key, LockOptions options) throws InterruptedException {
        String idempotencyKey = options.idempotencyKey() != null ? options.idempotencyKey()
                : UUID.randomUUID().toString();
        Duration wait = options.waitOrNull() == null ? Duration.ZERO : options.waitOrNull();
        Api.AcquireBody body = options.body(key, wait.toMillis(), options.session(), null);
        // A grant answered again was made for the first attempt: its lease is timed from that one's sending.
        long firstSent = System.nanoTime();
        for (int attempt = 0; ; attempt++) {
            Transport.Answer answer;
            try {
                answer = gateway.transport().callInterruptibly("POST", "/locks", body,
                        Map.of("Idempotency-Key", idempotencyKey), wait);
            } catch (GatewayUnavailableException e) {
                if (attempt >= RETRIES) {
                    throw e;
                }
                Waits.sleep(Gateway.backoffNanos(attempt, 100, e), true);
                continue;
            }
            Api.LockGrant grant = answer.decode(Api.LockGrant.class);
            LeaseClock clock = options.session() != null ? null : new LeaseClock(grant.ttlMs(), grant.expiresAtMs(),
                    firstSent, System.nanoTime(), grant.waitedMs());
            Holding holding = new Holding("the lease " + grant.key(), grant.key(), clock);
            holding.start(() -> {});
            return new Lease(gateway, grant, options, holding, "true".equals(answer.header("Idempotent-Replayed")));
        }
    }

    /** Whether the grant was answered to an earlier attempt of this acquisition, whose answer was lost. */
    public boolean replayed() {
        return replayed;
    }

    /** The re-entrant holds of this token, as last reported. */
    public long holds() {
        return holds;
    }

    /** The lease's length, as last granted or extended. */
    public Duration ttl() {
        return Duration.ofMillis(holding.ttlMs());
    }

    /**
     * Makes the lease end {@code ttl} from now ({@code PUT /locks/{key}/ttl});
     * extend it again before then.
     *
     * @throws LockLostException when the lease had ended already
     */
    public void extend(Duration ttl) {
        check();
        long sent = System.nanoTime();
        Api.LeaseRenewal renewal;
        try {
            renewal = gateway.transport().call("PUT", Transport.lockPath(key, "/ttl"),
                    new Api.ExtendBody(token, ttl.toMillis()), Map.of(), Duration.ZERO).decode(Api.LeaseRenewal.class);
        } catch (LockLostException | NotOwnerException e) {
            throw lostBy(key, e);
        }
        holds = renewal.holds();
        if (!holding.extended(renewal.ttlMs(), renewal.expiresAtMs(), sent)) {
            check();
        }
    }

    /** One more hold of this token ({@code POST /locks} with the token): the lease starts again. Returns the holds. */
    public long reenter() {
        check();
        long sent = System.nanoTime();
        Api.LockGrant grant;
        try {
            grant = gateway.transport().call("POST", "/locks",
                    new Api.AcquireBody(key, holding.ttlMs() == 0 ? null : holding.ttlMs(), null, null, null, null,
                            null, null, token), Map.of(), Duration.ZERO).decode(Api.LockGrant.class);
        } catch (LockLostException | NotOwnerException e) {
            throw lostBy(key, e);
        }
        holds = grant.holds();
        holding.extended(grant.ttlMs(), grant.expiresAtMs(), sent);
        return holds;
    }

    /**
     * Gives one hold back ({@code DELETE /locks/{key}}) and returns the holds
     * left; at 0 the lock is free and the lease ended.
     */
    public long release() {
        check();
        long left;
        try {
            left = gateway.release(key, token);
        } catch (LockLostException | NotOwnerException e) {
            throw lostBy(key, e);
        }
        holds = left;
        if (left == 0 && holding.beginRelease()) {
            markClosed();
            holding.released();
        }
        return left;
    }

    /**
     * Gives back every hold of this token.
     *
     * @throws LockLostException when the lease had been lost
     */
    @Override
    public void close() {
        if (!beginClose()) {
            return;
        }
        try {
            gateway.releaseAll(key, token);
            holds = 0;
            holding.released();
        } catch (LockLostException | NotOwnerException e) {
            throw lostOnRelease(key, e);
        } catch (LockgateException e) {
            holding.released();
            Gateway.LOG.log(System.Logger.Level.WARNING,
                    "the release of " + key + " was not confirmed; its lease ends it", e);
        }
    }
}
