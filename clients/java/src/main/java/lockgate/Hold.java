package lockgate;

import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * One grant of a streamed lock: {@code POST /locks} with {@code Accept:
 * text/event-stream}, held while its response stays open (the gateway renews
 * the lease every third of it, and releases the lock at once when the
 * connection closes). Its {@link Holding} turns the stream's news ({@code
 * lost}, {@code released}, a broken stream, no renewal in time) into its loss.
 */
final class Hold extends Grant {
    private final Session session;
    private final AtomicBoolean closed = new AtomicBoolean();
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
        if (session != null) {
            return session.expiresAt();
        }
        long ms = holding.expiresAtMs();
        return Instant.ofEpochMilli(ms == 0 ? grantedExpiresAtMs : ms);
    }

    @Override
    public Duration remaining() {
        Duration own = holding.remaining();
        if (own != null) {
            return own;
        }
        if (!holding.isHeld()) {
            return Duration.ZERO;
        }
        return session != null ? session.remaining()
                : Duration.ofMillis(Math.max(0, grantedExpiresAtMs - System.currentTimeMillis()));
    }

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
        try {
            gateway.releaseAll(key, token);
            holding.released();
        } catch (LockLostException | NotOwnerException e) {
            throw lostOnRelease(e);
        } catch (LockgateException e) {
            // The closed stream releases it (a live gateway at once), or its lease ends it.
            holding.released();
            Gateway.LOG.log(System.Logger.Level.WARNING, "the release of " + key
                    + " was not confirmed; its closed stream releases it, or its lease ends it", e);
        }
    }

    /** The session's close released it: its own close has nothing more to do. */
    void closedBySession() {
        closed.set(true);
    }

    /**
     * One streamed request, read up to its grant and then for as long as the
     * lock is held: {@code queued} while it waits, {@code acquired} (the
     * {@link Hold} is made on the stream's thread, before any later event),
     * or {@code refused}; then {@code renewed}, {@code released}, {@code lost}.
     */
    static final class Acquisition implements EventStream.Listener {
        private final Gateway gateway;
        private final LockOptions options;
        private final Session session;
        private final long sentNanos = System.nanoTime();
        final CompletableFuture<Hold> granted = new CompletableFuture<>();
        private EventStream stream;
        private volatile Hold hold;

        Acquisition(Gateway gateway, LockOptions options, Session session) {
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

        /** The caller gave up: nothing is held (a grant that came meanwhile ends with its closed stream). */
        void abandon() {
            granted.cancel(false);
            Hold made = granted.isCancelled() ? hold : granted.getNow(null);
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
                    granted(Wire.decode(event.data(), Api.LockGrant.class));
                    break;
                case "refused":
                    granted.completeExceptionally(Problems.refusal(409, event.data(), null));
                    break;
                case "renewed":
                    if (hold != null) {
                        hold.holding.renewed(Wire.decode(event.data(), Api.RenewedEvent.class).expiresAtMs());
                    }
                    break;
                case "released":
                    // The client's own release ends the stream this way too; then it is under way and this does nothing.
                    if (hold != null) {
                        hold.holding.lose(LossReason.RELEASED_ELSEWHERE, null);
                    }
                    break;
                case "lost":
                    if (hold != null) {
                        String code = Wire.decode(event.data(), Api.LostEvent.class).reason();
                        LossReason reason = LossReason.of(code);
                        Throwable cause = reason == LossReason.SESSION_ENDED && session != null ? session.loss() : null;
                        hold.holding.lose(reason, code, cause);
                    }
                    break;
                default:
                    break;
            }
        }

        private void granted(Api.LockGrant grant) {
            boolean inSession = session != null || options.session() != null;
            LeaseClock clock = inSession ? null
                    : new LeaseClock(grant.ttlMs(), grant.expiresAtMs(), sentNanos, System.nanoTime(), grant.waitedMs());
            Holding holding = new Holding("the lock " + grant.key(), grant.key(), clock);
            Hold made = new Hold(gateway, grant, options, session, holding);
            hold = made;
            holding.start(stream::close);
            if (session != null && !session.attach(holding, made::closedBySession)) {
                holding.lose(LossReason.SESSION_ENDED, session.loss());
            } else if (session != null) {
                holding.onLoss(loss -> session.forget(holding));
            }
            if (!granted.complete(made)) {
                // Given up meanwhile: let go of it.
                if (holding.beginRelease()) {
                    holding.released();
                }
            }
        }

        @Override
        public void onEnd(Throwable error) {
            Hold made = hold;
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
