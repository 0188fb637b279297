package lockgate;

/** {@code forbidden}: the principal may not do this to this key. */
public class ForbiddenException extends InvalidRequestException {
    private static final long serialVersionUID = 1L;

    ForbiddenException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
