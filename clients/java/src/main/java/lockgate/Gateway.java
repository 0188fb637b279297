package lockgate;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpTimeoutException;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Objects;
import java.util.Optional;
import java.util.Spliterator;
import java.util.Spliterators;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;
import javax.net.ssl.SSLContext;

/**
 * A client of one lockgate gateway (or of several behind one address): the
 * place every lock, session, watch and election starts. Immutable and safe
 * for use by many threads; make it once and share it, as its {@link
 * java.net.http.HttpClient} (made at the first request) keeps the
 * connections every call shares.
 *
 * <pre>{@code
 * var gw = Gateway.create(URI.create("https://locks.internal:8443"))
 *         .apiKey(System.getenv("LOCKGATE_API_KEY"))
 *         .tls(Path.of("ca.pem"), Path.of("me.pem"), Path.of("me-key.pem"));
 * }</pre>
 *
 * <p>Durations are {@link Duration}s (sent as whole milliseconds); times the
 * gateway reports are {@link Instant}s by the Redis server's clock.
 */
public final class Gateway {
    static final System.Logger LOG = System.getLogger("lockgate");

    /** How long any call waits for an answer, on top of any wait it asks for, unless {@link #timeout} says. */
    public static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(10);
    /** The gateway's usual longest wait of one request; a longer wait is made of several. */
    private static final long DEFAULT_MAX_WAIT_MS = 60_000;

    private final URI uri;
    private final String apiKey;
    private final Duration timeout;
    private final Connections connections;
    private final AtomicLong maxWaitMs;
    private volatile Transport transport;

    /** The HTTP client, made at the first request; shared by the copies that differ only in key or timeout. */
    private static final class Connections {
        final SSLContext tls;
        private HttpClient client;

        Connections(SSLContext tls) {
            this.tls = tls;
        }

        synchronized HttpClient client() {
            if (client == null) {
                client = Transport.client(tls);
            }
            return client;
        }
    }

    private Gateway(URI uri, String apiKey, Duration timeout, Connections connections, AtomicLong maxWaitMs) {
        this.uri = uri;
        this.apiKey = apiKey;
        this.timeout = timeout;
        this.connections = connections;
        this.maxWaitMs = maxWaitMs;
    }

    /** A client of the gateway at {@code uri}, such as {@code http://127.0.0.1:8080}. It makes no request. */
    public static Gateway create(URI uri) {
        Objects.requireNonNull(uri, "uri");
        if (!"http".equals(uri.getScheme()) && !"https".equals(uri.getScheme())) {
            throw new IllegalArgumentException("not an http or https URI: " + uri);
        }
        return new Gateway(uri, null, DEFAULT_TIMEOUT, new Connections(null), new AtomicLong(DEFAULT_MAX_WAIT_MS));
    }

    /** {@link #create(URI)} of a URI in text. */
    public static Gateway create(String uri) {
        return create(URI.create(uri));
    }

    /**
     * This gateway with {@code Authorization: Bearer <key>} on every request:
     * an API key of a gateway that has them, or its admin token (for {@link #revoke}).
     */
    public Gateway apiKey(String key) {
        return new Gateway(uri, Objects.requireNonNull(key, "key"), timeout, connections, maxWaitMs);
    }

    /**
     * This gateway over TLS with PEM files: {@code caBundle} the CA
     * certificates the gateway's certificate must be signed by (null: the
     * JDK's), {@code certificate} and {@code privateKey} a client certificate,
     * for a gateway started with {@code --tls-client-ca} (null: none).
     *
     * @throws IllegalArgumentException when a file cannot be read as PEM
     */
    public Gateway tls(Path caBundle, Path certificate, Path privateKey) {
        return sslContext(Tls.context(caBundle, certificate, privateKey));
    }

    /** This gateway over TLS trusting the CA certificates of {@code caBundle} (PEM). */
    public Gateway tls(Path caBundle) {
        return tls(caBundle, null, null);
    }

    /** This gateway over TLS with a context of your own (a key store, a trust store, a provider). */
    public Gateway sslContext(SSLContext context) {
        return new Gateway(uri, apiKey, timeout, new Connections(Objects.requireNonNull(context, "context")),
                maxWaitMs);
    }

    /** This gateway waiting at most {@code timeout} for any answer, on top of the wait a call asks for (default 10 s). */
    public Gateway timeout(Duration timeout) {
        if (timeout.isNegative() || timeout.isZero()) {
            throw new IllegalArgumentException("timeout must be positive");
        }
        return new Gateway(uri, apiKey, timeout, connections, maxWaitMs);
    }

    /** The gateway's address. */
    public URI uri() {
        return uri;
    }

    Transport transport() {
        Transport t = transport;
        if (t == null) {
            synchronized (this) {
                if (transport == null) {
                    transport = new Transport(uri, apiKey, timeout, connections.client());
                }
                t = transport;
            }
        }
        return t;
    }

    // ---- Locks as java.util.concurrent.locks.Lock

    /** The lock of {@code key} as a {@link java.util.concurrent.locks.Lock} (exclusive, a 30 s lease). */
    public DistributedLock lock(String key) {
        return lock(key, LockOptions.defaults());
    }

    /** The lock of {@code key} as a {@link java.util.concurrent.locks.Lock}, held as {@code options} say. */
    public DistributedLock lock(String key, LockOptions options) {
        return new DistributedLock(this, key, options, null);
    }

    /** The read-write lock of {@code key}: its read lock is the key held shared, its write lock exclusive. */
    public DistributedReadWriteLock readWriteLock(String key) {
        return readWriteLock(key, LockOptions.defaults());
    }

    /** The read-write lock of {@code key}, with the lease and value of {@code options}. */
    public DistributedReadWriteLock readWriteLock(String key, LockOptions options) {
        return new DistributedReadWriteLock(this, key, options, null);
    }

    /** The counting lock of {@code key} with {@code limit} places. */
    public CountingLock semaphore(String key, int limit) {
        return semaphore(key, limit, LockOptions.defaults());
    }

    /** The counting lock of {@code key} with {@code limit} places, with the lease and value of {@code options}. */
    public CountingLock semaphore(String key, int limit, LockOptions options) {
        return new CountingLock(this, key, limit, options, null);
    }

    // ---- Holding a lock for a block of work

    /**
     * Takes {@code key} as a streamed lock, waiting up to {@link
     * LockOptions#withWait} (default: as long as it takes), and returns the
     * grant, not tied to a thread: {@code try (HeldLock held = gw.acquire(key,
     * options)) { ... }}.
     *
     * @throws LockHeldException when the wait ran out
     * @throws InterruptedException when this thread is interrupted while it waits (it holds nothing then)
     */
    public HeldLock acquire(String key, LockOptions options) throws InterruptedException {
        return acquire(key, options, null, options.waitOrNull(), true);
    }

    /**
     * Runs {@code work} holding {@code key} (taken as {@link #acquire} takes
     * it), on this thread, and releases the lock afterwards. If the lock is
     * lost meanwhile, this thread is interrupted (a sleep, a wait, a blocking
     * queue or an interruptible channel stops at once), and the block ends in
     * {@link LockLostException}; the interrupt status it set is cleared then.
     *
     * @return what the work returned
     * @throws LockLostException when the lock was lost while the work ran
     * @throws E what the work threw (with the loss, if any, as a suppressed exception)
     */
    public <T, E extends Exception> T withLock(String key, LockOptions options, LockedWork<T, E> work)
            throws E, InterruptedException {
        Hold hold = acquire(key, options, null, options.waitOrNull(), true);
        return Guard.run(hold.holding(), hold, () -> work.run(hold));
    }

    /** {@link #withLock(String, LockOptions, LockedWork)} with the default options. */
    public <T, E extends Exception> T withLock(String key, LockedWork<T, E> work) throws E, InterruptedException {
        return withLock(key, LockOptions.defaults(), work);
    }

    /** {@link #withLock(String, LockOptions, LockedWork)} for work that needs nothing of the lock. */
    public <T, E extends Exception> T withLock(String key, LockOptions options, LockedCall<T, E> work)
            throws E, InterruptedException {
        return withLock(key, options, held -> work.call());
    }

    /** {@link #withLock(String, LockOptions, LockedWork)} with the default options, for work that needs nothing of the lock. */
    public <T, E extends Exception> T withLock(String key, LockedCall<T, E> work) throws E, InterruptedException {
        return withLock(key, LockOptions.defaults(), held -> work.call());
    }

    /**
     * {@link #withLock(String, LockOptions, LockedWork)} for work that returns
     * nothing (as Spring's {@code executeWithoutResult} beside {@code execute}):
     * {@code gw.runWithLock(key, options, held -> write(row, held.fencingToken()))}.
     */
    public <E extends Exception> void runWithLock(String key, LockOptions options, LockedAction<E> work)
            throws E, InterruptedException {
        withLock(key, options, held -> {
            work.run(held);
            return null;
        });
    }

    /** {@link #runWithLock(String, LockOptions, LockedAction)} with the default options. */
    public <E extends Exception> void runWithLock(String key, LockedAction<E> work) throws E, InterruptedException {
        runWithLock(key, LockOptions.defaults(), work);
    }

    // ---- Several locks at once

    /**
     * Takes every lock of {@code locks} or none ({@code POST /locks/batch},
     * streamed), for one owner token, as one lock is held: the gateway renews
     * them all, and the set is lost when any is. {@link LockOptions#withWait}
     * is the whole batch's budget (default: try once); {@code withTtl}, {@code
     * withValue}, {@code inSession} are taken as for one lock. Batches naming
     * the same keys in any order never deadlock each other.
     *
     * @throws LockHeldException when a lock was held when the wait ran out ({@link
     *     LockHeldException#key()} names it); none is held then
     */
    public LockSet lockAll(List<BatchLock> locks, LockOptions options) throws InterruptedException {
        return LockSet.acquire(this, locks, options, null);
    }

    /** {@link #lockAll(List, LockOptions)} of exclusive locks of {@code keys}, trying once. */
    public LockSet lockAll(String... keys) throws InterruptedException {
        List<BatchLock> locks = new ArrayList<>();
        for (String key : keys) {
            locks.add(BatchLock.of(key));
        }
        return lockAll(locks, LockOptions.defaults());
    }

    /** Runs {@code work} holding every lock of {@code locks}, as {@link #withLock} runs work under one lock. */
    public <T, E extends Exception> T withLocks(List<BatchLock> locks, LockOptions options, LockSetWork<T, E> work)
            throws E, InterruptedException {
        LockSet set = lockAll(locks, options);
        return Guard.run(set.holding(), set, () -> work.run(set));
    }

    // ---- Sessions, leases, elections

    /** Opens a session with the gateway's default lease (10 s). */
    public Session session() throws InterruptedException {
        return session(SessionOptions.defaults());
    }

    /** Opens a session with a lease of {@code ttl}. */
    public Session session(Duration ttl) throws InterruptedException {
        return session(SessionOptions.ttl(ttl));
    }

    /** Opens a streamed session: the gateway keeps it alive every third of its lease while it is open. */
    public Session session(SessionOptions options) throws InterruptedException {
        return Session.open(this, options);
    }

    /**
     * Takes {@code key} as a plain lease that its holder extends ({@link
     * Lease#extend}); tries once, or waits up to {@link LockOptions#withWait}
     * (at most the gateway's longest wait). Sent again with the same {@code
     * Idempotency-Key} when its answer is lost.
     */
    public Lease lease(String key, LockOptions options) throws InterruptedException {
        return Lease.acquire(this, key, options);
    }

    /** An election of the leader of {@code key} (a 30 s lease: how long a leader whose gateway died stays in office). */
    public Election election(String key) {
        return election(key, LockOptions.defaults());
    }

    /** An election of the leader of {@code key}, its candidates' locks held as {@code options} say. */
    public Election election(String key, LockOptions options) {
        return new Election(this, key, options);
    }

    // ---- By key and token

    /**
     * Gives one hold of {@code token} back ({@code DELETE /locks/{key}}) and
     * returns the holds left (0: the lock is free).
     *
     * @throws LockLostException when there is no such lock
     * @throws NotOwnerException when another token holds it
     */
    public long release(String key, String token) {
        Transport.Answer answer = transport().call("DELETE", Transport.lockPath(key, ""), null,
                Map.of("Lock-Token", token), Duration.ZERO);
        return answer.status() == 204 ? 0 : answer.decode(Api.HoldReleased.class).holds();
    }

    /** Makes the lease of {@code token} end {@code ttl} from now, and returns when it ends by the Redis clock. */
    public Instant extend(String key, String token, Duration ttl) {
        return Instant.ofEpochMilli(transport().call("PUT", Transport.lockPath(key, "/ttl"),
                new Api.ExtendBody(token, ttl.toMillis()), Map.of(), Duration.ZERO)
                .decode(Api.LeaseRenewal.class).expiresAtMs());
    }

    // ---- Reading and revoking

    /** The lock as the gateway sees it now; empty when nobody holds it (and no lock-delay keeps it). */
    public Optional<LockStatus> inspect(String key) {
        try {
            return Optional.of(parse(transport().call("GET", Transport.lockPath(key, ""), null, Map.of(),
                    Duration.ZERO).body()));
        } catch (LockLostException notHeld) {
            return Optional.empty();
        }
    }

    private static LockStatus parse(String body) {
        try {
            return LockStatus.parse(body);
        } catch (IllegalArgumentException e) {
            throw new GatewayUnavailableException("reading the gateway's answer", e);
        }
    }

    /**
     * The held locks whose key starts with {@code prefix}, fetched a page at a
     * time as the stream is read: a full pass lists every lock held all along
     * exactly once (a lock taken or freed meanwhile may be listed or not).
     */
    public Stream<LockStatus> list(String prefix) {
        Iterator<LockStatus> pages = new Iterator<>() {
            private Iterator<Api.LockStatus> page = List.<Api.LockStatus>of().iterator();
            private String cursor = "";

            @Override
            public boolean hasNext() {
                while (!page.hasNext() && cursor != null) {
                    String query = "?limit=100&prefix=" + Transport.escape(prefix)
                            + (cursor.isEmpty() ? "" : "&cursor=" + Transport.escape(cursor));
                    Api.LockList list = transport().call("GET", "/locks" + query, null, Map.of(), Duration.ZERO)
                            .decode(Api.LockList.class);
                    page = list.locks().iterator();
                    cursor = list.nextCursor();
                }
                return page.hasNext();
            }

            @Override
            public LockStatus next() {
                if (!hasNext()) {
                    throw new NoSuchElementException();
                }
                return LockStatus.of(page.next());
            }
        };
        return StreamSupport.stream(Spliterators.spliteratorUnknownSize(pages, Spliterator.ORDERED), false);
    }

    /**
     * Ends every hold of {@code key} at once ({@code DELETE
     * /locks/{key}?force=true}): an operator's tool for a stuck holder, who is
     * told ({@link LossReason#REVOKED}); the next grant's fencing token is
     * larger than any before. Needs the admin token ({@link #apiKey}) or a
     * principal allowed to revoke.
     *
     * @return false when the lock was not held
     */
    public boolean revoke(String key) {
        return revoking(Transport.lockPath(key, "") + "?force=true");
    }

    /** Ends only the hold of {@code key} with {@code fencingToken}; false when that hold is gone (another's is left alone). */
    public boolean revoke(String key, long fencingToken) {
        return revoking(Transport.lockPath(key, "") + "?force=true&fencing_token=" + fencingToken);
    }

    private boolean revoking(String path) {
        try {
            transport().call("DELETE", path, null, Map.of(), Duration.ZERO);
            return true;
        } catch (LockLostException notHeld) {
            return false;
        }
    }

    // ---- Watching

    /** Follows {@code key}'s events from now on. */
    public Watcher watch(String key) throws InterruptedException {
        return watch(key, null);
    }

    /** Follows {@code key}'s events after {@code lastEventId} (a {@link Watcher#lastEventId()}; null: from now). */
    public Watcher watch(String key, String lastEventId) throws InterruptedException {
        return watch(key, lastEventId, Watcher.DEFAULT_IDLE_TIMEOUT);
    }

    /** {@link #watch(String, String)}, taking a connection silent for {@code idleTimeout} as dropped (default 45 s). */
    public Watcher watch(String key, String lastEventId, Duration idleTimeout) throws InterruptedException {
        return Watcher.open(this, key, lastEventId, idleTimeout);
    }

    // ---- How a streamed lock is taken

    /** A candidate's lock: asked again through any refusal but an invalid request, until granted. */
    Hold campaign(String key, LockOptions options) throws InterruptedException {
        return acquire(key, options, null, null, true, true);
    }

    Hold acquire(String key, LockOptions options, Session session, Duration wait, boolean interruptible)
            throws InterruptedException {
        return acquire(key, options, session, wait, interruptible, false);
    }

    /**
     * Takes a streamed lock in as many requests as the wait needs (the
     * gateway bounds one request's wait; a longer one asks again, joining the
     * queue anew). {@code wait} null: as long as it takes. With {@code
     * persist}, a gateway that cannot serve is asked again with backoff.
     */
    private Hold acquire(String key, LockOptions options, Session session, Duration wait, boolean interruptible,
            boolean persist) throws InterruptedException {
        if (options.idempotencyKey() != null) {
            throw new InvalidRequestException("withIdempotencyKey is for a lease; a streamed lock's grant ends with "
                    + "its connection, and is never retried");
        }
        if (session != null && options.session() != null) {
            throw new InvalidRequestException("the lock is in this session already: inSession is for a session opened "
                    + "elsewhere");
        }
        long until = wait == null ? 0 : System.nanoTime() + wait.toNanos();
        int failures = 0;
        while (true) {
            long asked = maxWaitMs.get();
            boolean last = false;
            if (wait != null) {
                long leftMs = TimeUnit.NANOSECONDS.toMillis(until - System.nanoTime());
                if (leftMs <= asked) {
                    asked = Math.max(0, leftMs);
                    last = true;
                }
            }
            long started = System.nanoTime();
            long pause;
            try {
                return holdRetryingUnsent(key, options, session, asked, interruptible);
            } catch (InvalidFieldException e) {
                if (lowerMaxWait(e, asked)) {
                    continue;
                }
                throw e;
            } catch (LockHeldException e) {
                if (last) {
                    throw e;
                }
                failures = 0;
                // The wait ran out with the lock still held: ask again, after a pause if waits this short would spin.
                long retry = e.retryAfter().map(Duration::toNanos).orElse(TimeUnit.SECONDS.toNanos(1));
                pause = Math.min(TimeUnit.SECONDS.toNanos(1) - (System.nanoTime() - started), retry);
            } catch (GatewayUnavailableException e) {
                if (!persist) {
                    throw e;
                }
                pause = backoffNanos(failures++, 250, e);
            }
            if (pause > 0) {
                Waits.sleep(pause, interruptible);
            }
        }
    }

    /** One streamed request; sent once more when it got no answer at all (a pooled connection the gateway closed). */
    private Hold holdRetryingUnsent(String key, LockOptions options, Session session, long waitMs,
            boolean interruptible) throws InterruptedException {
        try {
            return holdOnce(key, options, session, waitMs, interruptible);
        } catch (GatewayUnavailableException e) {
            if (!unsent(e)) {
                throw e;
            }
            return holdOnce(key, options, session, waitMs, interruptible);
        }
    }

    /** Whether a failure got no answer at all (so nothing was granted): a connection refused, reset, closed. */
    static boolean unsent(GatewayUnavailableException e) {
        return e.status() == 0 && e.getCause() instanceof IOException && !(e.getCause() instanceof HttpTimeoutException);
    }

    private Hold holdOnce(String key, LockOptions options, Session session, long waitMs, boolean interruptible)
            throws InterruptedException {
        if (session != null) {
            session.check();
        }
        String sessionId = session != null ? session.id() : options.session();
        Hold.Acquisition acquisition = new Hold.Acquisition(this, options, session);
        EventStream stream = transport().stream("POST", "/locks", options.body(key, waitMs, sessionId, null),
                Map.of(), Duration.ofMillis(waitMs), acquisition, null);
        Hold hold = acquisition.open(stream, Duration.ofMillis(waitMs).plus(transport().timeout()), interruptible);
        if (session != null && !hold.isHeld()) {
            throw Holding.copyOf(hold.holding().loss());
        }
        return hold;
    }

    /** Learns the gateway's longest wait from its refusal of {@code wait_ms}; true when shorter than asked (ask again). */
    private boolean lowerMaxWait(InvalidFieldException e, long askedMs) {
        if (!"wait_ms".equals(e.problem().field().orElse(null)) || e.problem().maximum().isEmpty()) {
            return false;
        }
        long maximum = e.problem().maximum().get();
        if (maximum >= askedMs) {
            return false;
        }
        maxWaitMs.set(maximum);
        return true;
    }

    /**
     * Gives back every hold of {@code token} until the lock is free. After a
     * {@code DELETE} that got no answer it tries once more, and then counts
     * {@code lock-not-found} as released: the first may have done it.
     */
    void releaseAll(String key, String token) {
        boolean retried = false;
        while (true) {
            try {
                if (release(key, token) == 0) {
                    return;
                }
            } catch (LockLostException | NotOwnerException e) {
                if (retried) {
                    return;
                }
                throw e;
            } catch (GatewayUnavailableException e) {
                if (retried || e.status() != 0) {
                    throw e;
                }
                retried = true;
            }
        }
    }

    /**
     * The pause before retry number {@code attempt} (0-based): doubling from
     * {@code baseMs}, at most 5 s, at least what the gateway asked for, with
     * jitter so that many clients do not come back at once.
     */
    static long backoffNanos(int attempt, long baseMs, LockgateException e) {
        long ms = baseMs << Math.min(attempt, 6);
        if (e != null && e.problem().retryAfter().isPresent()) {
            ms = Math.max(ms, e.problem().retryAfter().get().toMillis());
        }
        ms = Math.min(ms, 5000);
        long nanos = TimeUnit.MILLISECONDS.toNanos(ms);
        return nanos / 2 + ThreadLocalRandom.current().nextLong(nanos / 2 + 1);
    }

    @Override
    public String toString() {
        return "Gateway(" + uri + ")";
    }
}
