package lockgate;

import java.util.Objects;

/**
 * One lock of {@link Gateway#lockAll}: its key, and how it is held (exclusive,
 * shared, or {@code permits} of a counting lock's {@code limit} places).
 */
public record BatchLock(String key, LockMode mode, int limit, int permits) {
    public BatchLock {
        Objects.requireNonNull(key, "key");
        Objects.requireNonNull(mode, "mode");
        if (limit < 1 || permits < 1) {
            throw new IllegalArgumentException("limit and permits are at least 1");
        }
    }

    /** {@code key}, exclusive. */
    public static BatchLock of(String key) {
        return new BatchLock(key, LockMode.EXCLUSIVE, 1, 1);
    }

    /** {@code key}, shared: a reader. */
    public static BatchLock shared(String key) {
        return new BatchLock(key, LockMode.SHARED, 1, 1);
    }

    /** {@code permits} of the {@code limit} places of the counting lock {@code key}. */
    public static BatchLock counting(String key, int limit, int permits) {
        return new BatchLock(key, LockMode.EXCLUSIVE, limit, permits);
    }

    Api.BatchLockBody body() {
        return new Api.BatchLockBody(key, mode == LockMode.SHARED ? LockMode.SHARED : null,
                limit == 1 ? null : (long) limit, permits == 1 ? null : (long) permits);
    }
}
