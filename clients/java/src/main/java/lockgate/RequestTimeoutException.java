package lockgate;

/** {@code request-timeout}: the gateway gave up on the request after its own time limit. */
public class RequestTimeoutException extends GatewayUnavailableException {
    private static final long serialVersionUID = 1L;

    RequestTimeoutException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
