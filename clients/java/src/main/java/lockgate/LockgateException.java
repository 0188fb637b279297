package lockgate;

/**
 * The base of every error the client throws. It carries the gateway's problem
 * document ({@link #problem()}), or one the client made of the same shape
 * (type {@code about:blank}) when no answer came or a stream broke. Each
 * problem slug the lock API answers has its own subclass ({@link
 * LockHeldException} for {@code lock-held}, ...), grouped under {@link
 * GatewayUnavailableException} (retry later: nothing was granted) and {@link
 * InvalidRequestException} (the request itself was refused). Unchecked, as
 * {@link java.util.concurrent.locks.Lock}'s methods declare none.
 */
public class LockgateException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final transient Problem problem;

    LockgateException(Problem problem, Throwable cause) {
        super(problem.toString(), cause);
        this.problem = problem;
    }

    LockgateException(String message, Problem problem, Throwable cause) {
        super(message, cause);
        this.problem = problem;
    }

    /** The problem document: the gateway's, or the client's own ({@code about:blank}). */
    public Problem problem() {
        return problem;
    }

    /** The problem's slug ({@code lock-held}, ...); empty when the client made the error. */
    public String slug() {
        return problem.slug();
    }

    /** The HTTP status of the answer; 0 when none came. */
    public int status() {
        return problem.status();
    }
}
