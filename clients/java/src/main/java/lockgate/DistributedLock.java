package lockgate;

import java.time.Duration;
import java.time.Instant;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;

/**
 * A lock of one key as a {@link Lock}, as Redisson's {@code RLock} is: each
 * thread that holds it holds its own grant (a streamed lock the gateway
 * renews), re-entrant, counted per thread in this process (the gateway keeps
 * one grant and its fencing token however many times the thread re-enters).
 * Another thread, here or anywhere, waits in the lock's queue on the gateway,
 * in arrival order.
 *
 * <p>The {@link HeldLock} methods are those of the calling thread's grant
 * ({@link IllegalMonitorStateException} when it holds none); {@link #held()}
 * hands that grant on to other threads. A lost lock is told ({@link
 * #lost()}), and {@link #unlock()} then throws {@link LockLostException}, as
 * Redisson's unlock throws when its lease had run out; work run with {@link
 * Gateway#withLock} is interrupted as well.
 *
 * <p>{@link #newCondition()} is refused: a condition would have its waiters
 * give the lock up and be signalled across processes, which the gateway does
 * not offer. Watch the lock ({@link Gateway#watch}) instead.
 */
public class DistributedLock implements Lock, HeldLock {
    private final Gateway gateway;
    private final String key;
    private final LockOptions options;
    private final Session session;
    private final Map<Thread, Entry> holds = new ConcurrentHashMap<>();
    /** For a read lock of a pair, the pair's write lock; for its write lock, the read lock. */
    private DistributedLock writeLock;
    private DistributedLock readLock;

    /** A thread's hold: its grant, how many times it holds it, and whether it is its write hold's (nested). */
    private static final class Entry {
        final Hold hold;
        int count = 1;
        boolean nested;

        Entry(Hold hold, boolean nested) {
            this.hold = hold;
            this.nested = nested;
        }
    }

    DistributedLock(Gateway gateway, String key, LockOptions options, Session session) {
        this.gateway = gateway;
        this.key = key;
        this.options = options;
        this.session = session;
    }

    /** Pairs a read lock and a write lock of one key ({@link DistributedReadWriteLock}). */
    static void pair(DistributedLock read, DistributedLock write) {
        read.writeLock = write;
        write.readLock = read;
    }

    /** Waits as long as it takes for the lock (an interrupt is kept for later, as {@link Lock#lock()} says). */
    @Override
    public void lock() {
        try {
            acquire(null, false);
        } catch (InterruptedException e) {
            throw new AssertionError("an uninterruptible wait was interrupted", e);
        }
    }

    /** Waits as long as it takes for the lock, or until this thread is interrupted (then it holds nothing). */
    @Override
    public void lockInterruptibly() throws InterruptedException {
        acquire(null, true);
    }

    /** Takes the lock if it is free now; false at once if another owner holds it. */
    @Override
    public boolean tryLock() {
        try {
            return acquire(Duration.ZERO, false);
        } catch (InterruptedException e) {
            throw new AssertionError("an uninterruptible wait was interrupted", e);
        }
    }

    /** Waits at most {@code time} in the lock's queue; false when another owner still holds it then. */
    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        return acquire(Duration.ofNanos(unit.toNanos(Math.max(0, time))), true);
    }

    private boolean acquire(Duration wait, boolean interruptible) throws InterruptedException {
        Thread thread = Thread.currentThread();
        Entry entry = holds.get(thread);
        if (entry != null) {
            entry.hold.check();
            entry.count++;
            return true;
        }
        if (writeLock != null) {
            Entry write = writeLock.holds.get(thread);
            if (write != null) {
                // A writer may take the read lock too, as ReentrantReadWriteLock allows: the same grant.
                write.hold.check();
                holds.put(thread, new Entry(write.hold, true));
                return true;
            }
        }
        if (readLock != null && readLock.holds.containsKey(thread)) {
            throw new IllegalMonitorStateException("this thread holds the read lock of " + key
                    + ": taking the write lock would wait for itself; upgrade() its hold, or unlock it first");
        }
        try {
            Hold hold = gateway.acquire(key, options, session, wait, interruptible);
            holds.put(thread, new Entry(hold, false));
            return true;
        } catch (LockHeldException e) {
            if (wait == null) {
                throw e;
            }
            return false;
        }
    }

    /**
     * Gives one hold of this thread back; at the last, the lock is released
     * ({@code DELETE}, then its stream closes), so the next owner may take it
     * as soon as this returns.
     *
     * @throws IllegalMonitorStateException when this thread does not hold it
     * @throws LockLostException when the lock had been lost while held
     */
    @Override
    public void unlock() {
        Thread thread = Thread.currentThread();
        Entry entry = holds.get(thread);
        if (entry == null) {
            throw new IllegalMonitorStateException("the lock " + key + " is not held by this thread");
        }
        if (--entry.count > 0) {
            return;
        }
        holds.remove(thread);
        if (entry.nested) {
            return;
        }
        Entry reading = readLock == null ? null : readLock.holds.get(thread);
        if (reading != null && reading.hold == entry.hold) {
            // The writer keeps reading: its grant becomes a shared one, as a downgrade of ReentrantReadWriteLock.
            entry.hold.downgrade();
            reading.nested = false;
            return;
        }
        entry.hold.close();
    }

    /** Refused: the gateway has no condition variables (see the class's description). */
    @Override
    public Condition newCondition() {
        throw new UnsupportedOperationException("a lockgate lock has no conditions: a condition's waiters would give "
                + "the lock up and be signalled across processes, which the gateway does not offer; watch the lock "
                + "(Gateway.watch) instead");
    }

    /** Whether the calling thread holds the lock (and it has not been lost). */
    public boolean isHeldByCurrentThread() {
        Entry entry = holds.get(Thread.currentThread());
        return entry != null && entry.hold.isHeld();
    }

    /** How many times the calling thread holds it (0 for none). */
    public int getHoldCount() {
        Entry entry = holds.get(Thread.currentThread());
        return entry == null ? 0 : entry.count;
    }

    /** The calling thread's grant, to hand on (its fencing token, its loss) to other threads. */
    public Optional<HeldLock> held() {
        Entry entry = holds.get(Thread.currentThread());
        return entry == null ? Optional.empty() : Optional.of(entry.hold);
    }

    private Hold current() {
        Entry entry = holds.get(Thread.currentThread());
        if (entry == null) {
            throw new IllegalMonitorStateException("the lock " + key + " is not held by this thread");
        }
        return entry.hold;
    }

    @Override
    public String key() {
        return key;
    }

    @Override
    public long fencingToken() {
        return current().fencingToken();
    }

    @Override
    public String token() {
        return current().token();
    }

    @Override
    public LockMode mode() {
        Entry entry = holds.get(Thread.currentThread());
        return entry == null ? options.mode() : entry.hold.mode();
    }

    @Override
    public int permits() {
        return options.permits();
    }

    @Override
    public Optional<String> value() {
        return current().value();
    }

    @Override
    public Instant expiresAt() {
        return current().expiresAt();
    }

    @Override
    public Duration waited() {
        return current().waited();
    }

    @Override
    public void setValue(String value) {
        current().setValue(value);
    }

    @Override
    public void upgrade(Duration wait) throws InterruptedException {
        current().upgrade(wait);
    }

    @Override
    public void downgrade() {
        current().downgrade();
    }

    /** The calling thread's grant's loss ({@link IllegalMonitorStateException} when it holds none). */
    @Override
    public CompletableFuture<LossReason> lost() {
        return current().lost();
    }

    /** {@link #isHeldByCurrentThread()}. */
    @Override
    public boolean isHeld() {
        return isHeldByCurrentThread();
    }

    @Override
    public void check() {
        current().check();
    }

    @Override
    public Duration remaining() {
        Entry entry = holds.get(Thread.currentThread());
        return entry == null ? Duration.ZERO : entry.hold.remaining();
    }

    /** {@link #unlock()} when the calling thread holds the lock, nothing otherwise: {@code try (lock) { ... }}. */
    @Override
    public void close() {
        if (holds.containsKey(Thread.currentThread())) {
            unlock();
        }
    }

    @Override
    public String toString() {
        return "DistributedLock(" + key + ", " + options.mode().wire() + ")";
    }
}
