package lockgate;

/** {@code unsupported-media-type}: the body is not {@code application/json}. */
public class UnsupportedMediaTypeException extends InvalidRequestException {
    private static final long serialVersionUID = 1L;

    UnsupportedMediaTypeException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
