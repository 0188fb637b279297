package lockgate;

/** {@code shutting-down}: the gateway is stopping and takes no new work; another instance can serve. */
public class ShuttingDownException extends GatewayUnavailableException {
    private static final long serialVersionUID = 1L;

    ShuttingDownException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
