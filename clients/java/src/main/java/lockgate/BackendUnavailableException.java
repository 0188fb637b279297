package lockgate;

/** {@code backend-unavailable}: the gateway cannot reach Redis; nothing was granted. */
public class BackendUnavailableException extends GatewayUnavailableException {
    private static final long serialVersionUID = 1L;

    BackendUnavailableException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
