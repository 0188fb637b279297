package lockgate;

import java.util.EnumSet;
import java.util.Set;

/**
 * Why a held lock, lock set or session was lost: what {@link Held#lost()}
 * completes with. The gateway tells most of them (a streamed lock's or batch's
 * {@code lost} event, a streamed session's {@code ended} event); the client
 * tells the rest ({@link #CONNECTION_LOST}, {@link #LEASE_EXPIRED}, {@link
 * #RELEASED_ELSEWHERE}).
 */
public enum LossReason implements Wire.Named {
    /** A renewal found no lock: its lease ran out, or its key was deleted in Redis (a failover lost it). */
    LOCK_GONE("lock-gone"),
    /** Another owner holds it now. */
    HELD_BY_ANOTHER("held-by-another"),
    /** No renewal reached Redis before the lease would end. */
    BACKEND_UNAVAILABLE("backend-unavailable"),
    /** An operator revoked it ({@code DELETE /locks/{key}?force=true}). */
    REVOKED("revoked"),
    /** The session it hung on ended (expired, deleted, or lost by this client). */
    SESSION_ENDED("session-ended"),
    /** The gateway released it (or ended the session) as it shut down. */
    SHUTTING_DOWN("shutting-down"),
    /** A session nobody kept alive expired. */
    EXPIRED("expired"),
    /** A session was ended with its id by someone else ({@code DELETE /sessions/{id}}). */
    DELETED("deleted"),
    /** Someone released it with its token ({@code DELETE /locks/{key}}), not through this client. */
    RELEASED_ELSEWHERE("released-elsewhere"),
    /** The stream to the gateway broke (the gateway died, or the network between), so nothing renews the lease. */
    CONNECTION_LOST("connection-lost"),
    /**
     * No renewal (for a {@link Lease}, no extension) came a safety margin before the lease could have ended, by
     * this process's clock (a frozen gateway, a network gone silent).
     */
    LEASE_EXPIRED("lease-expired"),
    /** A reason this client does not know (a newer gateway's); {@link LockLostException#reasonCode()} names it. */
    OTHER("other");

    /** The reasons of a streamed lock's (and batch's) {@code lost} event. */
    static final Set<LossReason> LOCK_STREAM = EnumSet.of(
            LOCK_GONE, HELD_BY_ANOTHER, BACKEND_UNAVAILABLE, REVOKED, SESSION_ENDED, SHUTTING_DOWN);
    /** The reasons of a streamed session's {@code ended} event. */
    static final Set<LossReason> SESSION_STREAM = EnumSet.of(EXPIRED, DELETED, SHUTTING_DOWN);

    private final String wire;

    LossReason(String wire) {
        this.wire = wire;
    }

    /** The reason as the gateway (or the client) names it, such as {@code lock-gone}. */
    @Override
    public String wire() {
        return wire;
    }

    /** The reason named {@code code}; {@link #OTHER} for one this client does not know. */
    public static LossReason of(String code) {
        for (LossReason reason : values()) {
            if (reason.wire.equals(code)) {
                return reason;
            }
        }
        return OTHER;
    }

    String describe() {
        switch (this) {
            case LOCK_GONE: return "a renewal found no lock (its lease ran out, or it was deleted)";
            case HELD_BY_ANOTHER: return "another owner holds it";
            case BACKEND_UNAVAILABLE: return "no renewal reached Redis before the lease would end";
            case REVOKED: return "an operator revoked it";
            case SESSION_ENDED: return "the session it hung on ended";
            case SHUTTING_DOWN: return "the gateway let it go as it shut down";
            case EXPIRED: return "nobody kept it alive before its lease ran out";
            case DELETED: return "it was ended with its id by someone else";
            case RELEASED_ELSEWHERE: return "it was released with its token by someone else";
            case CONNECTION_LOST: return "the stream to the gateway broke, so nothing renews the lease";
            case LEASE_EXPIRED: return "no renewal (or extension) came a safety margin before the lease could end";
            default: return "the gateway gave a reason this client does not know";
        }
    }
}
