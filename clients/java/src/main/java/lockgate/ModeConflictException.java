package lockgate;

/** {@code mode-conflict}: the hold is in another mode (a counting lock's holder has no other mode). */
public class ModeConflictException extends InvalidRequestException {
    private static final long serialVersionUID = 1L;

    ModeConflictException(Problem problem, Throwable cause) {
        super(problem, cause);
    }
}
