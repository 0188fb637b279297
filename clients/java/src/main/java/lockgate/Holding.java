package lockgate;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * The life of one thing held on the gateway (a lock's grant, a lock set, a
 * session): held, then released or lost, once. Written once and shared by
 * {@link Hold}, {@link LockSet}, {@link Session} and {@link Lease}: the state,
 * the loss and its future, the lease's deadline by this process's clock, and
 * the stream to close when it ends.
 *
 * <p>A loss that comes while a release is under way changes nothing: the
 * release decides how it ended.
 */
final class Holding {
    enum State { HELD, RELEASING, RELEASED, LOST }

    private final String what;
    private final String key;
    private final LeaseClock clock;
    private final LossFuture lost = new LossFuture();
    private final List<Consumer<LockLostException>> listeners = new ArrayList<>();
    private State state = State.HELD;
    private LockLostException loss;
    private ScheduledFuture<?> deadline;
    private Runnable closer = () -> {};

    /**
     * {@code what} names it in messages ("the lock inv:42"); {@code clock} is
     * its lease (null for none of its own: a lock in a session lives as long
     * as the session).
     */
    Holding(String what, String key, LeaseClock clock) {
        this.what = what;
        this.key = key;
        this.clock = clock;
    }

    /** Starts the deadline; {@code closer} ends what holds it (its stream) when it ends. */
    synchronized void start(Runnable closer) {
        this.closer = closer;
        arm();
    }

    String what() {
        return what;
    }

    synchronized State state() {
        return state;
    }

    synchronized boolean isHeld() {
        return state == State.HELD;
    }

    /** The loss, once lost; null otherwise. */
    synchronized LockLostException loss() {
        return loss;
    }

    /** Completes with the reason once lost; cancelled once released (it will never be lost then). */
    CompletableFuture<LossReason> lost() {
        return lost;
    }

    /** Throws the loss once lost, or {@link IllegalStateException} once released. */
    void check() {
        LockLostException e;
        synchronized (this) {
            if (state == State.HELD) {
                return;
            }
            e = loss;
        }
        if (e == null) {
            throw new IllegalStateException(what + " was released");
        }
        throw copyOf(e);
    }

    /** A fresh exception of the loss, so that each throw has the thrower's stack and the loss as its cause. */
    static LockLostException copyOf(LockLostException e) {
        return new LockLostException(e);
    }

    /** How long the lease is sure to last here; zero once not held, or null when it has no lease of its own. */
    synchronized Duration remaining() {
        if (clock == null) {
            return null;
        }
        if (state != State.HELD) {
            return Duration.ZERO;
        }
        return Duration.ofNanos(clock.remainingNanos(System.nanoTime()));
    }

    /**
     * How long the lease of a lock (or set) is sure to last: its own, or for
     * one without (a lock in a session) its session's, or else what its grant
     * said, by this process's wall clock.
     */
    Duration remaining(Session session, long grantedExpiresAtMs) {
        Duration own = remaining();
        if (own != null) {
            return own;
        }
        if (!isHeld()) {
            return Duration.ZERO;
        }
        return session != null ? session.remaining()
                : Duration.ofMillis(Math.max(0, grantedExpiresAtMs - System.currentTimeMillis()));
    }

    /** When the lease of a lock (or set) ends by the Redis clock: its own as last reported, its session's, or its grant's. */
    Instant expiresAt(Session session, long grantedExpiresAtMs) {
        if (session != null) {
            return session.expiresAt();
        }
        long ms = expiresAtMs();
        return Instant.ofEpochMilli(ms == 0 ? grantedExpiresAtMs : ms);
    }

    /** The lease's end by the Redis clock, as last reported (0 for none of its own). */
    synchronized long expiresAtMs() {
        return clock == null ? 0 : clock.expiresAtMs();
    }

    synchronized long ttlMs() {
        return clock == null ? 0 : clock.ttlMs();
    }

    /** A renewal reported the lease's end. */
    synchronized void renewed(long expiresAtMs) {
        if (clock != null && (state == State.HELD || state == State.RELEASING)) {
            clock.renewed(expiresAtMs, System.nanoTime());
        }
    }

    /** The holder extended its lease; false when it was lost meanwhile. */
    synchronized boolean extended(long ttlMs, long expiresAtMs, long sentNanos) {
        if (state != State.HELD) {
            return false;
        }
        clock.extended(ttlMs, expiresAtMs, sentNanos);
        arm();
        return true;
    }

    /** Marks a held thing as being released; false (with nothing changed) when it is not held. */
    synchronized boolean beginRelease() {
        if (state != State.HELD) {
            return false;
        }
        state = State.RELEASING;
        return true;
    }

    /** Ends it as released: its deadline stops, its stream closes, {@link #lost()} is cancelled. */
    void released() {
        Runnable close;
        synchronized (this) {
            if (state == State.RELEASED || state == State.LOST) {
                return;
            }
            state = State.RELEASED;
            stopDeadline();
            close = closer;
        }
        close.run();
        Timers.notify(lost::end);
    }

    /** Ends a release that found it gone: lost after all, with {@code e}. */
    void lostOnRelease(LockLostException e) {
        end(e, State.RELEASING);
    }

    /** Marks it lost (once, while held): its stream closes, listeners run, {@link #lost()} completes. */
    boolean lose(LossReason reason, String code, Throwable cause) {
        return lose(reason, code, key, cause);
    }

    /** {@link #lose(LossReason, String, Throwable)}, naming the key that was lost (one of a set's). */
    boolean lose(LossReason reason, String code, String lostKey, Throwable cause) {
        return end(new LockLostException(what, lostKey != null ? lostKey : key, reason, code, cause), State.HELD);
    }

    boolean lose(LossReason reason, Throwable cause) {
        return lose(reason, reason.wire(), cause);
    }

    private boolean end(LockLostException e, State from) {
        Runnable close;
        List<Consumer<LockLostException>> told;
        synchronized (this) {
            if (state != from) {
                return false;
            }
            state = State.LOST;
            loss = e;
            stopDeadline();
            close = closer;
            told = new ArrayList<>(listeners);
            listeners.clear();
        }
        close.run();
        for (Consumer<LockLostException> listener : told) {
            listener.accept(e);
        }
        Timers.notify(() -> lost.tell(e.reason()));
        return true;
    }

    /** Runs {@code listener} once lost (at once, when it is already); never once released. */
    void onLoss(Consumer<LockLostException> listener) {
        LockLostException now;
        synchronized (this) {
            if (state == State.HELD || state == State.RELEASING) {
                listeners.add(listener);
                return;
            }
            now = loss;
        }
        if (now != null) {
            listener.accept(now);
        }
    }

    void removeListener(Consumer<LockLostException> listener) {
        synchronized (this) {
            listeners.remove(listener);
        }
    }

    private void arm() {
        if (clock == null || state != State.HELD) {
            return;
        }
        stopDeadline();
        deadline = Timers.after(clock.deadlineNanos() - System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(1),
                this::onDeadline);
    }

    private void stopDeadline() {
        if (deadline != null) {
            deadline.cancel(false);
            deadline = null;
        }
    }

    /** The deadline could have passed: lost, unless a renewal moved it meanwhile. */
    private void onDeadline() {
        synchronized (this) {
            if (state != State.HELD) {
                return;
            }
            if (clock.deadlineNanos() - System.nanoTime() > 0) {
                arm();
                return;
            }
        }
        lose(LossReason.LEASE_EXPIRED, null);
    }

    @Override
    public String toString() {
        return what;
    }

    /** {@link #lost()}: completed by the holding alone; a user's complete or cancel is refused. */
    static final class LossFuture extends CompletableFuture<LossReason> {
        void tell(LossReason reason) {
            super.complete(reason);
        }

        void end() {
            super.cancel(false);
        }

        private static UnsupportedOperationException refused() {
            return new UnsupportedOperationException("only the gateway's news completes a lock's loss");
        }

        @Override
        public <U> CompletableFuture<U> newIncompleteFuture() {
            return new CompletableFuture<>();
        }

        @Override
        public boolean complete(LossReason value) {
            throw refused();
        }

        @Override
        public boolean completeExceptionally(Throwable ex) {
            throw refused();
        }

        @Override
        public boolean cancel(boolean mayInterruptIfRunning) {
            throw refused();
        }

        @Override
        public void obtrudeValue(LossReason value) {
            throw refused();
        }

        @Override
        public void obtrudeException(Throwable ex) {
            throw refused();
        }

        @Override
        public CompletableFuture<LossReason> completeAsync(Supplier<? extends LossReason> supplier) {
            throw refused();
        }

        @Override
        public CompletableFuture<LossReason> orTimeout(long timeout, TimeUnit unit) {
            throw refused();
        }

        @Override
        public CompletableFuture<LossReason> completeOnTimeout(LossReason value, long timeout, TimeUnit unit) {
            throw refused();
        }
    }
}
