package lockgate;

/** Work run under several locks by {@link Gateway#withLocks}, handed the set (for each lock's fencing token). */
@FunctionalInterface
public interface LockSetWork<T, E extends Exception> {
    T run(LockSet locks) throws E;
}
