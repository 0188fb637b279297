package lockgate;

/** {@code missing-token}: the request needed a token and had none. */
public class MissingTokenException extends InvalidRequestException {
    private static final long serialVersionUID = 1L;

    MissingTokenException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
