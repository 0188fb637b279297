package lockgate;

import java.time.Duration;
import java.time.Instant;
import java.util.Optional;

/**
 * A granted lock: its key, its fencing token, its lease and its loss. What
 * {@link Gateway#withLock} hands to its work, {@link Gateway#acquire}
 * returns, and {@link DistributedLock} shows for the thread that holds it.
 */
public interface HeldLock extends Held {
    /** The lock's key. */
    String key();

    /**
     * This hold's fencing token: larger than that of every earlier grant of
     * the key (microseconds since 1970, so a {@code long}). Hand it to the
     * resource the lock protects, which remembers the largest it has seen and
     * refuses a write that brings a smaller one: that of a holder whose lease
     * ran out. {@link #upgrade} gives the hold a new, larger one.
     */
    long fencingToken();

    /** The owner's secret, needed to release or extend the lock through the HTTP API. Never log it. */
    String token();

    /** {@link LockMode#EXCLUSIVE} or {@link LockMode#SHARED} ({@link #upgrade} and {@link #downgrade} change it). */
    LockMode mode();

    /** The places of a counting lock this hold takes (1 for other kinds). */
    int permits();

    /** The holder's public value, as last set. */
    Optional<String> value();

    /** When the lease ends by the Redis server's clock, as the gateway last reported it (a session's, for a lock in one). */
    Instant expiresAt();

    /** How long the request waited in the lock's queue. */
    Duration waited();

    /** Replaces the holder's public value ({@code PUT /locks/{key}/value}). */
    void setValue(String value);

    /**
     * Makes this shared hold the exclusive one without letting go, waiting at
     * most {@code wait} for the other readers to leave, ahead of every request
     * that came after it. The hold gets a new, larger fencing token.
     *
     * @throws LockHeldException when the wait ran out (the shared hold is kept)
     * @throws DeadlockException when another reader is upgrading already
     */
    void upgrade(Duration wait) throws InterruptedException;

    /** Makes this exclusive hold a shared one (the fencing token stays); the readers waiting behind it come in. */
    void downgrade();
}
