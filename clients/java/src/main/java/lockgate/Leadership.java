package lockgate;

import java.time.Duration;
import java.time.Instant;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;

/**
 * The office of an elected candidate: the streamed lock it holds, whose loss
 * is the loss of office. Close it (or {@link #resign()}) to step down: the
 * next candidate in the queue is elected at once.
 */
public final class Leadership implements HeldLock {
    private final Hold hold;

    Leadership(Hold hold) {
        this.hold = hold;
    }

    /** The leader's term: its lock's fencing token. Hand it to what the leader writes to. */
    public long term() {
        return hold.fencingToken();
    }

    /** Publishes a new value for the leader, in the same term. */
    public void proclaim(String value) {
        hold.setValue(value);
    }

    /** Steps down; {@link #close()}. */
    public void resign() {
        hold.close();
    }

    Hold hold() {
        return hold;
    }

    @Override
    public String key() {
        return hold.key();
    }

    @Override
    public long fencingToken() {
        return hold.fencingToken();
    }

    @Override
    public String token() {
        return hold.token();
    }

    @Override
    public LockMode mode() {
        return hold.mode();
    }

    @Override
    public int permits() {
        return hold.permits();
    }

    @Override
    public Optional<String> value() {
        return hold.value();
    }

    @Override
    public Instant expiresAt() {
        return hold.expiresAt();
    }

    @Override
    public Duration waited() {
        return hold.waited();
    }

    @Override
    public void setValue(String value) {
        hold.setValue(value);
    }

    @Override
    public void upgrade(Duration wait) {
        throw new UnsupportedOperationException("a leader holds its office alone already");
    }

    @Override
    public void downgrade() {
        throw new UnsupportedOperationException("a leader holds its office alone");
    }

    @Override
    public CompletableFuture<LossReason> lost() {
        return hold.lost();
    }

    @Override
    public boolean isHeld() {
        return hold.isHeld();
    }

    @Override
    public void check() {
        hold.check();
    }

    @Override
    public Duration remaining() {
        return hold.remaining();
    }

    @Override
    public void close() {
        hold.close();
    }

    @Override
    public String toString() {
        return "Leadership(" + key() + ", term " + term() + ")";
    }
}
