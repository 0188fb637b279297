package lockgate;

import java.time.Instant;
import java.util.Optional;

/**
 * One holder's lease, as anyone may see it (never its token).
 *
 * @param permits the places of a counting lock it takes (1 for other kinds)
 * @param session the public handle of the session it hangs on (never the session's id)
 */
public record LeaseInfo(long fencingToken, Optional<String> value, long holds, long permits, Instant acquiredAt,
        Instant expiresAt, Optional<String> session) {}
