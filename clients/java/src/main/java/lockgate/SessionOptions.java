package lockgate;

import java.time.Duration;
import java.util.Objects;

/** How to open a {@link Session}: its lease, its lock-delay, its public value. Immutable. */
public final class SessionOptions {
    private static final SessionOptions DEFAULTS = new SessionOptions(null, null, null);

    private final Duration ttl;
    private final Duration lockDelay;
    private final String value;

    private SessionOptions(Duration ttl, Duration lockDelay, String value) {
        this.ttl = ttl;
        this.lockDelay = lockDelay;
        this.value = value;
    }

    /** The gateway's defaults: a 10 s lease, no lock-delay. */
    public static SessionOptions defaults() {
        return DEFAULTS;
    }

    /** Defaults with a lease of {@code ttl} (at least 1 s). */
    public static SessionOptions ttl(Duration ttl) {
        return DEFAULTS.withTtl(ttl);
    }

    /** The session's lease: the gateway keeps it alive every third of it while the session's stream is open. */
    public SessionOptions withTtl(Duration ttl) {
        return new SessionOptions(Objects.requireNonNull(ttl, "ttl"), lockDelay, value);
    }

    /**
     * When the session expires (not when it is closed), each of its locks
     * stays free of holders this much longer (0 to 60 s; Chubby's and
     * Consul's lock-delay): a holder that lost its session has that long to
     * notice before anyone else holds its locks.
     */
    public SessionOptions withLockDelay(Duration lockDelay) {
        return new SessionOptions(ttl, Objects.requireNonNull(lockDelay, "lockDelay"), value);
    }

    /** A public string shown with the session ({@code GET /sessions/{id}}). */
    public SessionOptions withValue(String value) {
        return new SessionOptions(ttl, lockDelay, Objects.requireNonNull(value, "value"));
    }

    Api.SessionBody body() {
        return new Api.SessionBody(LockOptions.millis(ttl), LockOptions.millis(lockDelay), value);
    }
}
