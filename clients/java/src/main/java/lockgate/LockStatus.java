package lockgate;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * A lock as the gateway sees it ({@code GET /locks/{key}}, a listing, a
 * watch's snapshot): never a token. {@code held} is false only for a free
 * lock that a lock-delay keeps from holders until {@link #delayedUntil()}
 * (or a watch's snapshot of a free lock). Times are by the Redis server's
 * clock.
 *
 * @param limit a counting lock's places (1 for a plain lock, 0 for a shared one)
 * @param leases one per holder, oldest grant first (an election's leader is the first)
 * @param waiters the requests waiting now, on every instance, in the order they will be served
 */
public record LockStatus(String key, boolean held, LockMode mode, int limit, long holders, long fencingToken,
        long holds, Duration ttl, Instant expiresAt, List<LeaseInfo> leases, List<Waiter> waiters,
        Optional<Instant> delayedUntil) {

    /** Reads {@code GET /locks/{key}}'s answer (held, or free under a lock-delay) or a snapshot. */
    static LockStatus parse(String json) {
        Map<String, Object> members = Json.parseObject(json);
        if (Boolean.TRUE.equals(members.get("held"))) {
            return of(Wire.decode(members, Api.LockStatus.class));
        }
        Api.FreeLock free = Wire.decode(members, Api.FreeLock.class);
        return new LockStatus(free.key(), false, LockMode.EXCLUSIVE, 0, 0, 0, 0, Duration.ZERO, Instant.EPOCH,
                List.of(), waiters(free.waiters()),
                Optional.ofNullable(free.delayedUntilMs()).map(Instant::ofEpochMilli));
    }

    static LockStatus of(Api.LockStatus s) {
        List<LeaseInfo> leases = new ArrayList<>();
        for (Api.LeaseEntry lease : s.leases()) {
            leases.add(new LeaseInfo(lease.fencingToken(), Optional.ofNullable(lease.value()), lease.holds(),
                    lease.permits() == null ? 1 : lease.permits(), Instant.ofEpochMilli(lease.acquiredAtMs()),
                    Instant.ofEpochMilli(lease.expiresAtMs()), Optional.ofNullable(lease.session())));
        }
        return new LockStatus(s.key(), true, s.mode(), s.limit() == null ? 0 : s.limit(), s.holders(),
                s.fencingToken(), s.holds(), Duration.ofMillis(s.ttlMs()), Instant.ofEpochMilli(s.expiresAtMs()),
                List.copyOf(leases), waiters(s.waiters()), Optional.empty());
    }

    private static List<Waiter> waiters(List<Api.WaiterEntry> entries) {
        List<Waiter> waiters = new ArrayList<>();
        for (Api.WaiterEntry w : entries) {
            waiters.add(new Waiter(w.position(), w.mode(), Instant.ofEpochMilli(w.waitingSinceMs())));
        }
        return List.copyOf(waiters);
    }
}
