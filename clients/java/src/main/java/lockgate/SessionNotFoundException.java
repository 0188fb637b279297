package lockgate;

/** {@code session-not-found}: the session is unknown or has ended (expired, or deleted): no lock is taken in it, and a wait in it ended with it. */
public class SessionNotFoundException extends LockgateException {
    private static final long serialVersionUID = 1L;

    SessionNotFoundException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
