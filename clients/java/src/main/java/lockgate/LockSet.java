package lockgate;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeoutException;

/**
 * Several locks held at once for one owner token, all or none: a streamed
 * batch ({@code POST /locks/batch} with {@code Accept: text/event-stream}),
 * held as one lock is. The gateway renews every lock of it while the response
 * stays open, and the set is lost as one lock is: when any of its locks is
 * lost ({@link LockLostException#key()} names it), released elsewhere, its
 * stream breaks, no renewal came in time, or the session it hangs on ends;
 * the gateway then lets go of the others. Each lock has its own fencing
 * token. Closing it releases them all.
 */
public final class LockSet extends AbstractHeld {
    /** One lock of the set, with its own fencing token. */
    public record Entry(String key, LockMode mode, long fencingToken) {}

    private final Gateway gateway;
    private final String token;
    private final List<Entry> locks;
    private final Duration waited;
    private final Session session;
    private final long grantedExpiresAtMs;
    private final EventStream stream;

    private LockSet(Gateway gateway, Api.BatchGrant grant, Holding holding, Session session, EventStream stream) {
        super(holding);
        this.gateway = gateway;
        this.stream = stream;
        this.token = grant.token();
        List<Entry> entries = new ArrayList<>();
        for (Api.BatchGrantLock lock : grant.locks()) {
            entries.add(new Entry(lock.key(), lock.mode(), lock.fencingToken()));
        }
        this.locks = List.copyOf(entries);
        this.waited = Duration.ofMillis(grant.waitedMs());
        this.session = session;
        this.grantedExpiresAtMs = grant.expiresAtMs();
    }

    static LockSet acquire(Gateway gateway, List<BatchLock> locks, LockOptions options, Session session)
            throws InterruptedException {
        if (locks.isEmpty()) {
            throw new InvalidRequestException("a batch needs at least one lock");
        }
        String sessionId = session != null ? session.id() : options.session();
        List<Api.BatchLockBody> bodies = new ArrayList<>();
        locks.forEach(lock -> bodies.add(lock.body()));
        Duration wait = options.waitOrNull() == null ? Duration.ZERO : options.waitOrNull();
        Api.BatchBody body = new Api.BatchBody(bodies, sessionId == null ? LockOptions.millis(options.ttl()) : null,
                wait.toMillis(), sessionId, options.value());
        Batch batch = new Batch(gateway, options, session);
        EventStream stream = gateway.transport().stream("POST", "/locks/batch", body, Map.of(), wait, batch, null);
        return batch.open(stream, wait.plus(gateway.transport().timeout()), true);
    }

    /** A gateway that answered the batch without streaming it: its locks are given back at once. */
    private static LockgateException notStreamed(Gateway gateway, Transport.Answer answer) {
        try {
            Api.BatchGrant grant = answer.decode(Api.BatchGrant.class);
            for (Api.BatchGrantLock lock : grant.locks()) {
                gateway.releaseAll(lock.key(), grant.token());
            }
        } catch (LockgateException e) {
            // What is not given back ends with its lease.
        }
        return new LockgateException("lockgate: " + gateway.transport().base()
                + " does not stream a batch of locks (it answered " + answer.status()
                + "); a gateway that does is needed for lockAll", Problem.ofClient("Batch not streamed",
                        answer.status(), "the gateway does not stream POST /locks/batch"), null);
    }

    /** The owner's secret, the same for every lock of the set. Never log it. */
    public String token() {
        return token;
    }

    /** The set's locks, in the order asked for, each with its fencing token. */
    public List<Entry> locks() {
        return locks;
    }

    /** The fencing token of the set's lock on {@code key}: pass it to the resource of that key. */
    public long fencingToken(String key) {
        for (Entry entry : locks) {
            if (entry.key().equals(key)) {
                return entry.fencingToken();
            }
        }
        throw new IllegalArgumentException("the set has no lock " + key);
    }

    /** How long the batch waited for its locks. */
    public Duration waited() {
        return waited;
    }

    /** When the earliest lease among its locks ends, by the Redis clock, as last reported (a session's, in one). */
    public Instant expiresAt() {
        return holding.expiresAt(session, grantedExpiresAtMs);
    }

    @Override
    public Duration remaining() {
        return holding.remaining(session, grantedExpiresAtMs);
    }

    Holding holding() {
        return holding;
    }

    /**
     * Releases every lock: {@code DELETE} of one with the token, after which
     * the gateway releases the others and ends the stream (waited for, at most
     * the gateway's timeout), then the stream is closed, which releases
     * whatever is left. Safe to call more than once.
     *
     * @throws LockLostException when the set had been lost
     */
    @Override
    public void close() {
        if (session != null) {
            session.forget(holding);
        }
        if (!beginClose()) {
            return;
        }
        String first = locks.get(0).key();
        try {
            gateway.releaseAll(first, token);
            Waits.await(stream.ended(), gateway.transport().timeout().toNanos(), false);
        } catch (LockLostException | NotOwnerException e) {
            throw lostOnRelease(first, e);
        } catch (LockgateException | TimeoutException | ExecutionException e) {
            Gateway.LOG.log(System.Logger.Level.WARNING, "the release of " + holding.what()
                    + " was not confirmed; its closed stream releases them, or their lease ends them", e);
        } catch (InterruptedException e) {
            throw new AssertionError("an uninterruptible wait was interrupted", e);
        }
        holding.released();
    }

    @Override
    public String toString() {
        return "LockSet(" + locks.stream().map(Entry::key).toList() + ")";
    }

    /** A streamed {@code POST /locks/batch}, read up to its grant and then for as long as the set is held. */
    private static final class Batch extends LockOpening<LockSet> {
        Batch(Gateway gateway, LockOptions options, Session session) {
            super(gateway, options, session);
        }

        @Override
        void acquired(String data) {
            Api.BatchGrant grant = Wire.decode(data, Api.BatchGrant.class);
            LeaseClock clock = inSession() ? null : new LeaseClock(grant.ttlMs(), grant.expiresAtMs(), sentNanos,
                    System.nanoTime(), grant.waitedMs());
            List<String> keys = grant.locks().stream().map(Api.BatchGrantLock::key).toList();
            opened(new LockSet(gateway, grant, new Holding("the locks " + keys, null, clock), session, stream));
        }

        @Override
        RuntimeException failed(ExecutionException e) {
            if (e.getCause() instanceof EventStream.NotAStream) {
                return notStreamed(gateway, ((EventStream.NotAStream) e.getCause()).answer);
            }
            return super.failed(e);
        }
    }
}
