package lockgate;

/** {@code limit-mismatch}: the lock is held with another limit ({@link Problem#limit()}); every holder must ask with the same. */
public class LimitMismatchException extends InvalidRequestException {
    private static final long serialVersionUID = 1L;

    LimitMismatchException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
