package lockgate;

import java.util.Optional;

/**
 * The lock (or lock set, or session) is no longer held: lost while held
 * ({@link #reason()} says why, {@link Held#lost()} completed with it), or the
 * gateway answered {@code lock-not-found} to a release, an extension or a
 * change of a lock this client thought it held. Work done under the lock
 * since it was lost was not protected by it.
 */
public class LockLostException extends LockgateException {
    private static final long serialVersionUID = 1L;

    private final LossReason reason;
    private final String reasonCode;
    private final String key;

    /** {@code lock-not-found}: the gateway's answer. */
    LockLostException(Problem problem, Throwable cause) {
        super(problem, cause);
        this.reason = LossReason.LOCK_GONE;
        this.reasonCode = reason.wire();
        this.key = problem.key().orElse(null);
    }

    /** A loss the client learned of: {@code what} is "the lock k", "the session", "the locks [a, b]". */
    LockLostException(String what, String key, LossReason reason, String reasonCode, Throwable cause) {
        super("lockgate: lost " + what + ": " + reason.describe()
                        + (reason == LossReason.OTHER ? " (" + reasonCode + ")" : "")
                        + (cause == null ? "" : ": " + cause.getMessage()),
                Problem.ofClient("Lock lost", 0, what + " was lost: " + reasonCode), cause);
        this.reason = reason;
        this.reasonCode = reasonCode;
        this.key = key;
    }

    /** The same loss thrown again, here: its stack is the thrower's, its cause the loss as first told. */
    LockLostException(LockLostException told) {
        super(told.getMessage(), told.problem(), told);
        this.reason = told.reason;
        this.reasonCode = told.reasonCode;
        this.key = told.key;
    }

    /** Why it was lost; {@link LossReason#LOCK_GONE} for the gateway's {@code lock-not-found}. */
    public LossReason reason() {
        return reason;
    }

    /** The reason as it was told, such as {@code revoked} (a newer gateway's own reasons included). */
    public String reasonCode() {
        return reasonCode;
    }

    /** The key of the lock lost, when one lock was (a lock set's names the one its gateway named). */
    public Optional<String> key() {
        return Optional.ofNullable(key);
    }
}
