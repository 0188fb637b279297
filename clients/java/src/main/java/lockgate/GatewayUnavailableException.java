package lockgate;

/**
 * The gateway could not be reached, did not answer in time, or cannot serve
 * now (any 5xx or 429; the subclasses name the gateway's slugs). Nothing was
 * granted: try again later ({@link Problem#retryAfter()} says when, if the
 * gateway did).
 */
public class GatewayUnavailableException extends LockgateException {
    private static final long serialVersionUID = 1L;

    GatewayUnavailableException(Problem problem, Throwable cause) {
        super(problem, cause);
    }

    GatewayUnavailableException(String message, Throwable cause) {
        super("lockgate: " + message + (cause == null || cause.getMessage() == null ? "" : ": " + cause.getMessage()),
                Problem.ofClient("Gateway unavailable", 0, message), cause);
    }
}
