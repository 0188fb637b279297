package lockgate;

/** {@code not-replicated}: Redis did not confirm the write on the replicas the gateway waits for; it was undone. */
public class NotReplicatedException extends GatewayUnavailableException {
    private static final long serialVersionUID = 1L;

    NotReplicatedException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
