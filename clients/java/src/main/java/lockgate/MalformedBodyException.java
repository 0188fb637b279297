package lockgate;

/** {@code malformed-body}: the body is not JSON, or has a member of the wrong type. */
public class MalformedBodyException extends InvalidRequestException {
    private static final long serialVersionUID = 1L;

    MalformedBodyException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
