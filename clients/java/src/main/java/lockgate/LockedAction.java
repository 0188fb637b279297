package lockgate;

/** Work run under a lock that returns nothing, by {@link Gateway#runWithLock}, handed the held lock. */
@FunctionalInterface
public interface LockedAction<E extends Exception> {
    void run(HeldLock held) throws E;
}
