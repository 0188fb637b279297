package lockgate;

/** {@code invalid-token}: the token is not a UUID. */
public class InvalidTokenException extends InvalidRequestException {
    private static final long serialVersionUID = 1L;

    InvalidTokenException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
