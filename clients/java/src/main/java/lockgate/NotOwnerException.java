package lockgate;

/** {@code not-owner}: the token given does not hold the lock (another owner's does; who is never said). */
public class NotOwnerException extends LockgateException {
    private static final long serialVersionUID = 1L;

    NotOwnerException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
