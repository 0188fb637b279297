package lockgate;

import java.time.Duration;
import java.time.Instant;

/**
 * One grant of a streamed lock: {@code POST /locks} with {@code Accept:
 * text/event-stream}, held while its response stays open (the gateway renews
 * the lease every third of it, and releases the lock at once when the
 * connection closes). Its {@link Holding} turns the stream's news ({@code
 * lost}, {@code released}, a broken stream, no renewal in time) into its loss.
 */
final class Hold extends Grant {
    private final Session session;
    private final long grantedExpiresAtMs;

    Hold(Gateway gateway, Api.LockGrant grant, LockOptions options, Session session, Holding holding) {
        super(gateway, grant, options, holding);
        this.session = session;
        this.grantedExpiresAtMs = grant.expiresAtMs();
    }

    Holding holding() {
        return holding;
    }

    @Override
    public Instant expiresAt() {
        return holding.expiresAt(session, grantedExpiresAtMs);
    }

    @Override
    public Duration remaining() {
        return holding.remaining(session, grantedExpiresAtMs);
    }

    @Override
    public void close() {
        if (session != null) {
            session.forget(holding);
        }
        if (!beginClose()) {
            return;
        }
        try {
            gateway.releaseAll(key, token);
            holding.released();
        } catch (LockLostException | NotOwnerException e) {
            throw lostOnRelease(key, e);
        } catch (LockgateException e) {
            // The closed stream releases it (a live gateway at once), or its lease ends it.
            holding.released();
            Gateway.LOG.log(System.Logger.Level.WARNING, "the release of " + key
                    + " was not confirmed; its closed stream releases it, or its lease ends it", e);
        }
    }

    /** A streamed {@code POST /locks}, read up to its grant and then for as long as the lock is held. */
    static final class Acquisition extends LockOpening<Hold> {
        Acquisition(Gateway gateway, LockOptions options, Session session) {
            super(gateway, options, session);
        }

        @Override
        void acquired(String data) {
            Api.LockGrant grant = Wire.decode(data, Api.LockGrant.class);
            LeaseClock clock = inSession() ? null
                    : new LeaseClock(grant.ttlMs(), grant.expiresAtMs(), sentNanos, System.nanoTime(), grant.waitedMs());
            Holding holding = new Holding("the lock " + grant.key(), grant.key(), clock);
            opened(new Hold(gateway, grant, options, session, holding));
        }
    }
}
