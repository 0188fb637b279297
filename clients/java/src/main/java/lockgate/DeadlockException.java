package lockgate;

import java.util.List;

/**
 * {@code deadlock}: the wait would have closed a cycle of waits between
 * sessions (each holding a lock the next one waits for), or two readers of one
 * lock tried to upgrade at once. This one, the youngest of the cycle, was
 * refused so that the others go on. Release what the session holds and try
 * again, or take the locks in one order.
 */
public class DeadlockException extends LockgateException {
    private static final long serialVersionUID = 1L;

    DeadlockException(Problem problem, Throwable cause) {
        super(problem, cause);
    }

    /** The keys of the cycle, in order, starting with the one this wait was for. */
    public List<String> cycle() {
        return problem().cycle();
    }
}
