package lockgate;

import java.time.Duration;
import java.util.Objects;
import java.util.function.LongConsumer;

/**
 * How to take a lock: its lease, how long to wait, its kind (shared, a
 * counting lock's limit and permits), its public value, the session it hangs
 * on. Immutable: each {@code with...} returns a copy.
 *
 * <pre>{@code
 * LockOptions.ttl(Duration.ofSeconds(30)).withWait(Duration.ofSeconds(10)).withValue("10.0.0.7:9000")
 * }</pre>
 */
public final class LockOptions {
    private static final LockOptions DEFAULTS = new LockOptions(null, null, LockMode.EXCLUSIVE, null, null, null,
            null, null, null);

    private final Duration ttl;
    private final Duration wait;
    private final LockMode mode;
    private final Integer limit;
    private final Integer permits;
    private final String value;
    private final String session;
    private final LongConsumer onQueued;
    private final String idempotencyKey;

    private LockOptions(Duration ttl, Duration wait, LockMode mode, Integer limit, Integer permits, String value,
            String session, LongConsumer onQueued, String idempotencyKey) {
        this.ttl = ttl;
        this.wait = wait;
        this.mode = mode;
        this.limit = limit;
        this.permits = permits;
        this.value = value;
        this.session = session;
        this.onQueued = onQueued;
        this.idempotencyKey = idempotencyKey;
    }

    /** The gateway's defaults: a 30 s lease, exclusive. */
    public static LockOptions defaults() {
        return DEFAULTS;
    }

    /** Defaults with a lease of {@code ttl}. */
    public static LockOptions ttl(Duration ttl) {
        return DEFAULTS.withTtl(ttl);
    }

    /** Defaults, shared: a reader of a read-write lock. */
    public static LockOptions shared() {
        return DEFAULTS.withMode(LockMode.SHARED);
    }

    /** Defaults, a counting lock of {@code limit} places. */
    public static LockOptions limit(int limit) {
        return DEFAULTS.withLimit(limit);
    }

    /**
     * The lease (default: the gateway's, 30 s): how long the lock outlives a
     * holder that vanished without a word. The gateway renews a held lock
     * every third of it; a {@link Lease} must be extended within it. A lock
     * in a session has the session's lease instead.
     */
    public LockOptions withTtl(Duration ttl) {
        return new LockOptions(positive(ttl, "ttl"), wait, mode, limit, permits, value, session, onQueued,
                idempotencyKey);
    }

    /**
     * How long to wait while others hold the lock, in the lock's queue (fair,
     * server-side); past it, {@link LockHeldException}. Used by {@link
     * Gateway#withLock}, {@link Gateway#acquire}, {@link Gateway#lockAll} and
     * {@link Gateway#lease} ({@link DistributedLock#tryLock(long,
     * java.util.concurrent.TimeUnit)} takes its own). Without it, {@code
     * withLock} and {@code acquire} wait as long as it takes, a batch and a
     * lease try once.
     */
    public LockOptions withWait(Duration wait) {
        Objects.requireNonNull(wait, "wait");
        if (wait.isNegative()) {
            throw new IllegalArgumentException("wait is negative");
        }
        return new LockOptions(ttl, wait, mode, limit, permits, value, session, onQueued, idempotencyKey);
    }

    /** {@link LockMode#SHARED} for a reader (many at once, or one writer), {@link LockMode#EXCLUSIVE} (default). */
    public LockOptions withMode(LockMode mode) {
        return new LockOptions(ttl, wait, Objects.requireNonNull(mode, "mode"), limit, permits, value, session,
                onQueued, idempotencyKey);
    }

    /** A counting lock (a semaphore) of {@code limit} places; every holder must ask with the same limit. */
    public LockOptions withLimit(int limit) {
        return new LockOptions(ttl, wait, mode, atLeastOne(limit, "limit"), permits, value, session, onQueued,
                idempotencyKey);
    }

    /** Takes {@code permits} of a counting lock's places for one holder (1 to the limit; default 1). */
    public LockOptions withPermits(int permits) {
        return new LockOptions(ttl, wait, mode, limit, atLeastOne(permits, "permits"), value, session, onQueued,
                idempotencyKey);
    }

    /** A public string anyone who reads or watches the lock sees (an address, a host name; never a secret). */
    public LockOptions withValue(String value) {
        return new LockOptions(ttl, wait, mode, limit, permits, Objects.requireNonNull(value, "value"), session,
                onQueued, idempotencyKey);
    }

    /**
     * Hangs the lock on a session opened elsewhere, by its id (a {@link
     * Session} opened here hangs its own locks on itself: {@link
     * Session#lock}). The lock then has the session's lease.
     */
    public LockOptions inSession(String sessionId) {
        return new LockOptions(ttl, wait, mode, limit, permits, value, Objects.requireNonNull(sessionId, "sessionId"),
                onQueued, idempotencyKey);
    }

    /** Called with the request's place in the lock's queue (1 is next) while it waits, from a client thread. */
    public LockOptions onQueued(LongConsumer listener) {
        return new LockOptions(ttl, wait, mode, limit, permits, value, session, Objects.requireNonNull(listener),
                idempotencyKey);
    }

    /**
     * For {@link Gateway#lease} only: the {@code Idempotency-Key} of the
     * acquisition (default: a fresh UUID each call). Give your own to go on
     * with one acquisition across calls or processes.
     */
    public LockOptions withIdempotencyKey(String key) {
        return new LockOptions(ttl, wait, mode, limit, permits, value, session, onQueued,
                Objects.requireNonNull(key, "key"));
    }

    Duration ttl() {
        return ttl;
    }

    Duration waitOrNull() {
        return wait;
    }

    LockMode mode() {
        return mode;
    }

    Integer limitOrNull() {
        return limit;
    }

    int permits() {
        return permits == null ? 1 : permits;
    }

    Integer permitsOrNull() {
        return permits;
    }

    String value() {
        return value;
    }

    String session() {
        return session;
    }

    LongConsumer queued() {
        return onQueued;
    }

    String idempotencyKey() {
        return idempotencyKey;
    }

    static Long millis(Duration d) {
        return d == null ? null : d.toMillis();
    }

    /** The body of {@code POST /locks} for these options. */
    Api.AcquireBody body(String key, Long waitMs, String sessionId, String token) {
        boolean inSession = sessionId != null;
        return new Api.AcquireBody(key, inSession ? null : millis(ttl), waitMs,
                mode == LockMode.SHARED ? LockMode.SHARED : null, limit == null ? null : (long) limit,
                permits == null ? null : (long) permits, value, sessionId, token);
    }

    private static Duration positive(Duration d, String name) {
        Objects.requireNonNull(d, name);
        if (d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException(name + " must be positive");
        }
        return d;
    }

    private static int atLeastOne(int n, String name) {
        if (n < 1) {
            throw new IllegalArgumentException(name + " must be at least 1");
        }
        return n;
    }

    @Override
    public String toString() {
        return "LockOptions(ttl " + ttl + ", wait " + wait + ", " + mode.wire()
                + (limit == null ? "" : ", limit " + limit) + (permits == null ? "" : ", permits " + permits) + ")";
    }
}
