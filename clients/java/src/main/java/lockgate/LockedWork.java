package lockgate;

/**
 * Work run under a lock by {@link Gateway#withLock}, handed the held lock
 * (for its fencing token). {@code E} is what the work may throw, inferred from
 * the lambda (an unchecked exception when it throws no checked one).
 */
@FunctionalInterface
public interface LockedWork<T, E extends Exception> {
    T run(HeldLock held) throws E;
}
