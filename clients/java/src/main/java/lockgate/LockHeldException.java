package lockgate;

import java.time.Duration;
import java.util.Optional;

/** {@code lock-held}: another owner holds the lock, and the wait (if any) ran out. Nothing was granted. */
public class LockHeldException extends LockgateException {
    private static final long serialVersionUID = 1L;

    LockHeldException(Problem problem, Throwable cause) {
        super(problem, cause);
    }

    /** What is left of the holder's lease (or of a lock-delay) when the gateway refused. */
    public Optional<Duration> retryAfter() {
        return problem().retryAfter();
    }

    /** The key that was held (for a batch, the one of its locks that was). */
    public Optional<String> key() {
        return problem().key();
    }
}
