package lockgate;

/** {@code body-too-large}: the body is larger than the gateway takes. */
public class BodyTooLargeException extends InvalidRequestException {
    private static final long serialVersionUID = 1L;

    BodyTooLargeException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
