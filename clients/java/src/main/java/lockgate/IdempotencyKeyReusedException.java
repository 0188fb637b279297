package lockgate;

/** {@code idempotency-key-reused}: the {@code Idempotency-Key} was sent before with another body. */
public class IdempotencyKeyReusedException extends InvalidRequestException {
    private static final long serialVersionUID = 1L;

    IdempotencyKeyReusedException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
