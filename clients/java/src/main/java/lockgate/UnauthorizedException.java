package lockgate;

/** {@code unauthorized}: the request needs a known principal: an API key ({@code Authorization: Bearer}) or a client certificate. */
public class UnauthorizedException extends InvalidRequestException {
    private static final long serialVersionUID = 1L;

    UnauthorizedException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
