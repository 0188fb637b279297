package lockgate;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;

/**
 * Something held on the gateway (a lock, a set of locks, a session) until it
 * is closed or lost. Closing it gives it back; its loss is told.
 */
public interface Held extends AutoCloseable {
    /**
     * Completes with the reason once it is lost (on a client thread, never
     * the one that reads its stream); cancelled once it is released, since it
     * will never be lost then. Completing or cancelling it yourself is
     * refused.
     */
    CompletableFuture<LossReason> lost();

    /** True until it is released or lost. */
    boolean isHeld();

    /** Returns while it is held; throws {@link LockLostException} once lost, {@link IllegalStateException} once released. */
    void check();

    /**
     * How long it is sure to last by this process's clock unless a renewal
     * comes first (a safety margin before the lease could end); zero once not
     * held. For a lock in a session, the session's.
     */
    Duration remaining();

    /**
     * Gives it back, so that the next holder may have it as soon as this
     * returns, and closes its stream. Safe to call more than once.
     *
     * @throws LockLostException when it had been lost: the work done under it
     *     was not protected all along (in try-with-resources, added to the
     *     body's own exception as a suppressed one)
     */
    @Override
    void close();
}
