package lockgate;

/** {@code too-many-waiters}: the gateway has as many waiting requests as it allows; try again later. */
public class TooManyWaitersException extends GatewayUnavailableException {
    private static final long serialVersionUID = 1L;

    TooManyWaitersException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
