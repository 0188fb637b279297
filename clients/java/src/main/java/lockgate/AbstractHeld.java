package lockgate;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * What every held thing (a lock's grant, a lease, a lock set, a session)
 * does the same way through its {@link Holding}: its loss, its check, the
 * start of its close, and the loss a release or a change finds.
 */
abstract class AbstractHeld implements Held {
    final Holding holding;
    private final AtomicBoolean closed = new AtomicBoolean();

    AbstractHeld(Holding holding) {
        this.holding = holding;
    }

    @Override
    public final CompletableFuture<LossReason> lost() {
        return holding.lost();
    }

    @Override
    public final boolean isHeld() {
        return holding.isHeld();
    }

    @Override
    public final void check() {
        holding.check();
    }

    /** Someone else released it (its session's close, its last hold given back): its close has nothing to do. */
    final void markClosed() {
        closed.set(true);
    }

    /**
     * Begins a close: true when the release is to be sent; false when it was
     * closed or released already.
     *
     * @throws LockLostException when it had been lost
     */
    final boolean beginClose() {
        if (!closed.compareAndSet(false, true)) {
            return false;
        }
        if (!holding.beginRelease()) {
            LockLostException loss = holding.loss();
            if (loss != null) {
                throw Holding.copyOf(loss);
            }
            return false;
        }
        return true;
    }

    /** The loss an answer tells about the lock {@code key} ({@code lock-not-found}, {@code not-owner}), to throw. */
    final LockLostException lostBy(String key, LockgateException answer) {
        LossReason reason = reasonOf(answer);
        holding.lose(reason, reason.wire(), key, answer);
        return told(key, reason, answer);
    }

    /** Ends a close whose release was answered {@code lock-not-found} or {@code not-owner}: lost all along. */
    final LockLostException lostOnRelease(String key, LockgateException answer) {
        LossReason reason = reasonOf(answer);
        holding.lostOnRelease(new LockLostException(holding.what(), key, reason, reason.wire(), answer));
        return told(key, reason, answer);
    }

    private LockLostException told(String key, LossReason reason, LockgateException answer) {
        LockLostException loss = holding.loss();
        return Holding.copyOf(loss != null ? loss
                : new LockLostException(holding.what(), key, reason, reason.wire(), answer));
    }

    private static LossReason reasonOf(LockgateException answer) {
        return answer instanceof NotOwnerException ? LossReason.HELD_BY_ANOTHER : LossReason.LOCK_GONE;
    }
}
