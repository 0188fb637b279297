package lockgate;

/** {@code invalid-field}: a field of the request is out of its range ({@link Problem#field()} names it, {@link Problem#maximum()} may say the largest). */
public class InvalidFieldException extends InvalidRequestException {
    private static final long serialVersionUID = 1L;

    InvalidFieldException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
