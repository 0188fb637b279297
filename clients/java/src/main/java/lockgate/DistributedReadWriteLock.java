package lockgate;

import java.util.concurrent.locks.ReadWriteLock;

/**
 * A read-write lock of one key, as Redisson's {@code RReadWriteLock}: the read
 * lock is the key held shared (many readers at once, here and anywhere), the
 * write lock the key held exclusive. A writer waiting holds back new readers,
 * so readers cannot starve it. As in {@link
 * java.util.concurrent.locks.ReentrantReadWriteLock}, the thread holding the
 * write lock may take the read lock too, and keeps reading when it then lets
 * the write lock go (the gateway downgrades its grant: no other writer can
 * come between); the read lock's holder cannot take the write lock (it would
 * wait for itself): {@link HeldLock#upgrade} its grant instead.
 */
public final class DistributedReadWriteLock implements ReadWriteLock {
    private final DistributedLock read;
    private final DistributedLock write;

    DistributedReadWriteLock(Gateway gateway, String key, LockOptions options, Session session) {
        this.read = new DistributedLock(gateway, key, options.withMode(LockMode.SHARED), session);
        this.write = new DistributedLock(gateway, key, options.withMode(LockMode.EXCLUSIVE), session);
        DistributedLock.pair(read, write);
    }

    @Override
    public DistributedLock readLock() {
        return read;
    }

    @Override
    public DistributedLock writeLock() {
        return write;
    }
}
