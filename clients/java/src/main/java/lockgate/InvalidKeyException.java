package lockgate;

/** {@code invalid-key}: the key is not 1 to 200 characters of {@code A-Z a-z 0-9 . _ : -}. */
public class InvalidKeyException extends InvalidRequestException {
    private static final long serialVersionUID = 1L;

    InvalidKeyException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
