package lockgate;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;

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
public final class LockSet implements Held {
    /** One lock of the set, with its own fencing token. */
    public record Entry(String key, LockMode mode, long fencingToken) {}

    private final Gateway gateway;
    private final Holding holding;
    private final String token;
    private final List<Entry> locks;
    private final Duration waited;
    private final Session session;
    private final long grantedExpiresAtMs;
    private final AtomicBoolean closed = new AtomicBoolean();
    private EventStream stream;

    private LockSet(Gateway gateway, Api.BatchGrant grant, Holding holding, Session session) {
        this.gateway = gateway;
        this.holding = holding;
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
        batch.start(stream);
        try {
            return Waits.await(batch.granted, wait.plus(gateway.transport().timeout()).toNanos(), true);
        } catch (InterruptedException e) {
            batch.abandon();
            throw e;
        } catch (TimeoutException e) {
            batch.abandon();
            throw new GatewayUnavailableException("no grant from " + gateway.transport().base() + " within "
                    + wait.plus(gateway.transport().timeout()), e);
        } catch (ExecutionException e) {
            stream.close();
            if (e.getCause() instanceof EventStream.NotAStream) {
                throw notStreamed(gateway, ((EventStream.NotAStream) e.getCause()).answer);
            }
            throw Waits.unwrap(e);
        }
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
        if (session != null) {
            return session.expiresAt();
        }
        long ms = holding.expiresAtMs();
        return Instant.ofEpochMilli(ms == 0 ? grantedExpiresAtMs : ms);
    }

    @Override
    public CompletableFuture<LossReason> lost() {
        return holding.lost();
    }

    @Override
    public boolean isHeld() {
        return holding.isHeld();
    }

    @Override
    public void check() {
        holding.check();
    }

    @Override
    public Duration remaining() {
        Duration own = holding.remaining();
        if (own != null) {
            return own;
        }
        return !holding.isHeld() ? Duration.ZERO : session != null ? session.remaining()
                : Duration.ofMillis(Math.max(0, grantedExpiresAtMs - System.currentTimeMillis()));
    }

    Holding holding() {
        return holding;
    }

    private void closedBySession() {
        closed.set(true);
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
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        if (session != null) {
            session.forget(holding);
        }
        if (!holding.beginRelease()) {
            LockLostException loss = holding.loss();
            if (loss != null) {
                throw Holding.copyOf(loss);
            }
            return;
        }
        String first = locks.get(0).key();
        try {
            gateway.releaseAll(first, token);
            Waits.await(stream.ended(), gateway.transport().timeout().toNanos(), false);
        } catch (LockLostException | NotOwnerException e) {
            LossReason reason = e instanceof NotOwnerException ? LossReason.HELD_BY_ANOTHER : LossReason.LOCK_GONE;
            holding.lostOnRelease(new LockLostException(holding.what(), first, reason, reason.wire(), e));
            throw Holding.copyOf(holding.loss());
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

    /** A streamed batch's events: {@code acquired}, then {@code renewed}, {@code released}, {@code lost}. */
    private static final class Batch implements EventStream.Listener {
        private final Gateway gateway;
        private final LockOptions options;
        private final Session session;
        private final long sentNanos = System.nanoTime();
        final CompletableFuture<LockSet> granted = new CompletableFuture<>();
        private EventStream stream;
        private volatile LockSet set;

        Batch(Gateway gateway, LockOptions options, Session session) {
            this.gateway = gateway;
            this.options = options;
            this.session = session;
        }

        void start(EventStream stream) {
            this.stream = stream;
            stream.start();
            stream.head().whenComplete((ok, error) -> {
                if (error != null) {
                    granted.completeExceptionally(error);
                }
            });
        }

        void abandon() {
            granted.cancel(false);
            LockSet made = set;
            if (made != null && made.holding.beginRelease()) {
                made.holding.released();
            }
            stream.close();
        }

        @Override
        public void onEvent(EventStreamParser.Event event) {
            switch (event.type()) {
                case "queued":
                    if (options.queued() != null) {
                        options.queued().accept(Wire.decode(event.data(), Api.QueuedEvent.class).position());
                    }
                    break;
                case "acquired":
                    granted(Wire.decode(event.data(), Api.BatchGrant.class));
                    break;
                case "refused":
                    granted.completeExceptionally(Problems.refusal(409, event.data(), null));
                    break;
                case "renewed":
                    if (set != null) {
                        set.holding.renewed(Wire.decode(event.data(), Api.RenewedEvent.class).expiresAtMs());
                    }
                    break;
                case "released":
                    if (set != null) {
                        String key = Wire.decode(event.data(), Api.ReleasedEvent.class).key();
                        set.holding.lose(LossReason.RELEASED_ELSEWHERE, LossReason.RELEASED_ELSEWHERE.wire(), key,
                                null);
                    }
                    break;
                case "lost":
                    if (set != null) {
                        Api.LostEvent lost = Wire.decode(event.data(), Api.LostEvent.class);
                        LossReason reason = LossReason.of(lost.reason());
                        Throwable cause = reason == LossReason.SESSION_ENDED && session != null ? session.loss() : null;
                        set.holding.lose(reason, lost.reason(), lost.key(), cause);
                    }
                    break;
                default:
                    break;
            }
        }

        private void granted(Api.BatchGrant grant) {
            boolean inSession = session != null || options.session() != null;
            LeaseClock clock = inSession ? null : new LeaseClock(grant.ttlMs(), grant.expiresAtMs(), sentNanos,
                    System.nanoTime(), grant.waitedMs());
            List<String> keys = grant.locks().stream().map(Api.BatchGrantLock::key).toList();
            Holding holding = new Holding("the locks " + keys, null, clock);
            LockSet made = new LockSet(gateway, grant, holding, session);
            made.stream = stream;
            set = made;
            holding.start(stream::close);
            if (session != null && !session.attach(holding, made::closedBySession)) {
                holding.lose(LossReason.SESSION_ENDED, session.loss());
            } else if (session != null) {
                holding.onLoss(loss -> session.forget(holding));
            }
            if (!granted.complete(made) && holding.beginRelease()) {
                holding.released();
            }
        }

        @Override
        public void onEnd(Throwable error) {
            LockSet made = set;
            if (made == null) {
                granted.completeExceptionally(error instanceof LockgateException ? error
                        : new GatewayUnavailableException("the stream from " + gateway.transport().base()
                                + " ended before a grant", error));
                return;
            }
            made.holding.lose(LossReason.CONNECTION_LOST, error);
        }
    }
}
