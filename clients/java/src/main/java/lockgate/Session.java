package lockgate;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * One liveness lease that any number of locks hang on, as in etcd, Consul,
 * ZooKeeper and Chubby: one keepalive keeps them all, and when the session
 * ends, every lock taken through it ends with it. Held as a streamed session
 * ({@code POST /sessions} with {@code Accept: text/event-stream}), which the
 * gateway keeps alive every third of its lease while the response stays
 * open; the locks taken through it are streamed locks with {@code
 * "session"}, which the gateway does not renew (their lease is the
 * session's).
 *
 * <p>It is lost when the gateway ends it ({@link LossReason#EXPIRED}, {@link
 * LossReason#DELETED} by someone with its id, {@link
 * LossReason#SHUTTING_DOWN}), when its stream breaks ({@link
 * LossReason#CONNECTION_LOST}), or when no renewal came a safety margin
 * before its lease could end ({@link LossReason#LEASE_EXPIRED}); then every
 * lock taken through it is lost with {@link LossReason#SESSION_ENDED}, its
 * cause the session's loss. Safe for use by many threads.
 */
public final class Session extends AbstractHeld {
    private final Gateway gateway;
    private final String id;
    private final Duration lockDelay;
    /** What hangs on the session, each with what to do when the session's close released it. */
    private final Map<Holding, Runnable> members = new ConcurrentHashMap<>();

    private Session(Gateway gateway, Api.SessionGrant grant, Holding holding) {
        super(holding);
        this.gateway = gateway;
        this.id = grant.id();
        this.lockDelay = Duration.ofMillis(grant.lockDelayMs());
        holding.onLoss(this::lostWithMembers);
    }

    /** Opens a streamed session, once more when the first request got no answer at all (a stale connection). */
    static Session open(Gateway gateway, SessionOptions options) throws InterruptedException {
        try {
            return openOnce(gateway, options);
        } catch (GatewayUnavailableException e) {
            if (!Gateway.unsent(e)) {
                throw e;
            }
            return openOnce(gateway, options);
        }
    }

    private static Session openOnce(Gateway gateway, SessionOptions options) throws InterruptedException {
        Start start = new Start(gateway);
        EventStream stream = gateway.transport().stream("POST", "/sessions", options.body(), Map.of(), Duration.ZERO,
                start, null);
        return start.open(stream, gateway.transport().timeout(), true);
    }

    /**
     * The session's id: a secret like a lock's token. Whoever has it can hang
     * locks on the session ({@link LockOptions#inSession}) and end it. Never
     * log it; {@link #toString()} leaves it out.
     */
    public String id() {
        return id;
    }

    /** The session's lease. */
    public Duration ttl() {
        return Duration.ofMillis(holding.ttlMs());
    }

    /** How long its locks stay free of holders after it expires. */
    public Duration lockDelay() {
        return lockDelay;
    }

    /** When the session's lease ends by the Redis clock, as its last renewal said. */
    public Instant expiresAt() {
        return Instant.ofEpochMilli(holding.expiresAtMs());
    }

    @Override
    public Duration remaining() {
        return holding.remaining();
    }

    LockLostException loss() {
        return holding.loss();
    }

    /** A lock of {@code key} hanging on this session: its lease is the session's ({@code ttl} is not sent). */
    public DistributedLock lock(String key) {
        return lock(key, LockOptions.defaults());
    }

    /** A lock of {@code key} hanging on this session, with {@code options} ({@code withTtl} has no effect). */
    public DistributedLock lock(String key, LockOptions options) {
        return new DistributedLock(gateway, key, options, this);
    }

    /** A read-write lock of {@code key} hanging on this session. */
    public DistributedReadWriteLock readWriteLock(String key) {
        return new DistributedReadWriteLock(gateway, key, LockOptions.defaults(), this);
    }

    /** A counting lock of {@code key} with {@code limit} places, hanging on this session. */
    public CountingLock semaphore(String key, int limit) {
        return new CountingLock(gateway, key, limit, LockOptions.defaults(), this);
    }

    /** Takes {@code key} in this session, as {@link Gateway#acquire} takes it. */
    public HeldLock acquire(String key, LockOptions options) throws InterruptedException {
        return gateway.acquire(key, options, this, options.waitOrNull(), true);
    }

    /** Runs {@code work} holding {@code key} in this session, as {@link Gateway#withLock} does. */
    public <T, E extends Exception> T withLock(String key, LockOptions options, LockedWork<T, E> work)
            throws E, InterruptedException {
        Hold hold = gateway.acquire(key, options, this, options.waitOrNull(), true);
        return Guard.run(hold.holding(), hold, () -> work.run(hold));
    }

    /** Takes every lock of {@code locks} or none in this session, as {@link Gateway#lockAll} takes them. */
    public LockSet lockAll(List<BatchLock> locks, LockOptions options) throws InterruptedException {
        return LockSet.acquire(gateway, locks, options, this);
    }

    /**
     * Lists a lock (or set) taken through the session, so that the session's
     * end is its end; {@code closedBySession} runs when the session's close
     * released it. False (nothing listed) when the session is no longer held.
     */
    boolean attach(Holding member, Runnable closedBySession) {
        members.put(member, closedBySession);
        if (!holding.isHeld()) {
            members.remove(member);
            return false;
        }
        return true;
    }

    void forget(Holding member) {
        members.remove(member);
    }

    private void lostWithMembers(LockLostException loss) {
        for (Holding member : new ArrayList<>(members.keySet())) {
            member.lose(LossReason.SESSION_ENDED, loss);
        }
        members.clear();
    }

    /**
     * Ends the session ({@code DELETE /sessions/{id}}): every lock taken
     * through it is released at once, without lock-delay (their {@link
     * #lost()} is cancelled: released, not lost), then the stream closes.
     * Safe to call more than once.
     *
     * @throws LockLostException when the session had been lost (its locks then are too)
     */
    @Override
    public void close() {
        if (!beginClose()) {
            return;
        }
        // From here on, the news that the locks' session ended is this close's own.
        List<Holding> ending = new ArrayList<>();
        for (Map.Entry<Holding, Runnable> member : new ArrayList<>(members.entrySet())) {
            if (member.getKey().beginRelease()) {
                member.getValue().run();
                ending.add(member.getKey());
            }
        }
        members.clear();
        LockLostException gone = null;
        try {
            gateway.transport().call("DELETE", "/sessions/" + Transport.escape(id), null, Map.of(), Duration.ZERO);
        } catch (SessionNotFoundException e) {
            gone = new LockLostException("the session", null, LossReason.EXPIRED, LossReason.EXPIRED.wire(), e);
        } catch (LockgateException e) {
            Gateway.LOG.log(System.Logger.Level.WARNING,
                    "the end of the session was not confirmed; its closed stream ends it, or its lease does", e);
        }
        if (gone == null) {
            holding.released();
            ending.forEach(Holding::released);
            return;
        }
        holding.lostOnRelease(gone);
        for (Holding member : ending) {
            member.lostOnRelease(new LockLostException(member.what(), null,
                    LossReason.SESSION_ENDED, LossReason.SESSION_ENDED.wire(), gone));
        }
        throw Holding.copyOf(gone);
    }

    @Override
    public String toString() {
        return "Session(ttl " + ttl() + ")";
    }

    /** A streamed {@code POST /sessions}: {@code opened}, then {@code renewed}, and last {@code ended}. */
    private static final class Start extends Opening<Session> {
        Start(Gateway gateway) {
            super(gateway, "session");
        }

        @Override
        public void onEvent(EventStreamParser.Event event) {
            Session session = made();
            switch (event.type()) {
                case "opened": {
                    Api.SessionGrant grant = Wire.decode(event.data(), Api.SessionGrant.class);
                    LeaseClock clock = new LeaseClock(grant.ttlMs(), grant.expiresAtMs(), sentNanos,
                            System.nanoTime(), 0);
                    opened(new Session(gateway, grant, new Holding("the session", null, clock)));
                    break;
                }
                case "renewed":
                    if (session != null) {
                        session.holding.renewed(Wire.decode(event.data(), Api.SessionRenewedEvent.class).expiresAtMs());
                    }
                    break;
                case "ended":
                    if (session != null) {
                        String code = Wire.decode(event.data(), Api.SessionEndedEvent.class).reason();
                        session.holding.lose(LossReason.of(code), code, null);
                    }
                    break;
                default:
                    break;
            }
        }
    }
}
