package lockgate;

/**
 * The gateway refused the request itself (any 4xx the other exceptions do not
 * name; the subclasses name the gateway's slugs), or the client refused it
 * before sending. Sending it again will not help.
 */
public class InvalidRequestException extends LockgateException {
    private static final long serialVersionUID = 1L;

    InvalidRequestException(Problem problem, Throwable cause) {
        super(problem, cause);
    }

    /** A request the client refuses itself. */
    InvalidRequestException(String message) {
        super("lockgate: " + message, Problem.ofClient("Invalid request", 0, message), null);
    }
}
