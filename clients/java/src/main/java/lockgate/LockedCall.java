package lockgate;

/** Work run under a lock (or a set of locks) that needs nothing of it: {@code gw.withLock(key, () -> work())}. */
@FunctionalInterface
public interface LockedCall<T, E extends Exception> {
    T call() throws E;
}
