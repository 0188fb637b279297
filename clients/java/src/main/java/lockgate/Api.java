package lockgate;

import java.util.List;
import lockgate.Wire.Nullable;
import lockgate.Wire.Schema;

/**
 * The documents the client sends and reads, one record per schema of
 * {@code openapi/openapi.json} (named by {@link Schema}); {@code ContractTest}
 * checks every component against the document. Durations are {@code *Ms}
 * milliseconds, times {@code *AtMs} Unix milliseconds by the Redis clock, as
 * on the wire; the public types turn them into {@code java.time}.
 */
final class Api {
    private Api() {}

    @Schema(value = "AcquireBody", sent = true)
    record AcquireBody(String key, @Nullable Long ttlMs, @Nullable Long waitMs, @Nullable LockMode mode,
            @Nullable Long limit, @Nullable Long permits, @Nullable String value, @Nullable String session,
            @Nullable String token) {}

    @Schema("LockGrant")
    record LockGrant(String key, String token, long fencingToken, long ttlMs, long expiresAtMs, long holds,
            long waitedMs) {}

    @Schema(value = "ExtendBody", sent = true)
    record ExtendBody(String token, @Nullable Long ttlMs) {}

    @Schema(value = "ValueBody", sent = true)
    record ValueBody(String token, @Nullable String value) {}

    @Schema("LeaseRenewal")
    record LeaseRenewal(String key, long ttlMs, long expiresAtMs, long fencingToken, long holds) {}

    @Schema(value = "ModeBody", sent = true)
    record ModeBody(String token, LockMode mode, @Nullable Long waitMs) {}

    @Schema("ModeChange")
    record ModeChange(String key, LockMode mode, long ttlMs, long expiresAtMs, long fencingToken, long holds) {}

    @Schema("HoldReleased")
    record HoldReleased(String key, long holds) {}

    @Schema("LockStatus")
    record LockStatus(String key, boolean held, long ttlMs, long expiresAtMs, long fencingToken, long holds,
            LockMode mode, @Nullable Integer limit, long holders, List<LeaseEntry> leases,
            List<WaiterEntry> waiters) {}

    @Schema("FreeLock")
    record FreeLock(String key, boolean held, List<WaiterEntry> waiters, @Nullable Long delayedUntilMs) {}

    @Schema("LeaseEntry")
    record LeaseEntry(long fencingToken, long holds, long acquiredAtMs, long expiresAtMs, @Nullable Long permits,
            @Nullable String session, @Nullable String value) {}

    @Schema("WaiterEntry")
    record WaiterEntry(long position, String mode, long waitingSinceMs) {}

    @Schema("LockList")
    record LockList(List<LockStatus> locks, @Nullable String nextCursor) {}

    @Schema("QueuedEvent")
    record QueuedEvent(long position) {}

    @Schema("RenewedEvent")
    record RenewedEvent(long expiresAtMs) {}

    /** A streamed lock's or batch's {@code lost}: the reason, and the key lost ({@code shutting-down} names none). */
    @Schema("LostEvent")
    record LostEvent(String reason, @Nullable String key) {}

    @Schema("ReleasedEvent")
    record ReleasedEvent(String key) {}

    @Schema(value = "SessionBody", sent = true)
    record SessionBody(@Nullable Long ttlMs, @Nullable Long lockDelayMs, @Nullable String value) {}

    @Schema("SessionGrant")
    record SessionGrant(String id, long ttlMs, long lockDelayMs, long expiresAtMs) {}

    @Schema("SessionRenewedEvent")
    record SessionRenewedEvent(long expiresAtMs) {}

    @Schema("SessionEndedEvent")
    record SessionEndedEvent(String reason) {}

    @Schema(value = "BatchBody", sent = true)
    record BatchBody(List<BatchLockBody> locks, @Nullable Long ttlMs, @Nullable Long waitMs, @Nullable String session,
            @Nullable String value) {}

    @Schema(value = "BatchLockBody", sent = true)
    record BatchLockBody(String key, @Nullable LockMode mode, @Nullable Long limit, @Nullable Long permits) {}

    @Schema("BatchGrant")
    record BatchGrant(String token, long ttlMs, long expiresAtMs, long waitedMs, List<BatchGrantLock> locks) {}

    @Schema("BatchGrantLock")
    record BatchGrantLock(String key, LockMode mode, long fencingToken, long expiresAtMs) {}

    @Schema("AcquiredEvent")
    record AcquiredEvent(String key, long fencingToken, @Nullable String value, String mode, long expiresAtMs) {}

    @Schema("ValueEvent")
    record ValueEvent(String key, long fencingToken, @Nullable String value) {}

    @Schema("ModeEvent")
    record ModeEvent(String key, long fencingToken, long previousFencingToken, String mode, long expiresAtMs) {}

    @Schema("EndedEvent")
    record EndedEvent(String key, long fencingToken) {}

    @Schema("DelayedEvent")
    record DelayedEvent(String key, long delayedUntilMs) {}

    /** A problem document; every member may be missing from an answer that is not the gateway's. */
    @Schema("Problem")
    record ProblemDocument(@Nullable String type, @Nullable String title, @Nullable Integer status,
            @Nullable String detail, @Nullable String key, @Nullable Long retryAfterMs, @Nullable String field,
            @Nullable List<String> cycle, @Nullable Long limit, @Nullable Long maximum, @Nullable Long minimum) {}

    /** The events of a streamed lock the client tells apart. */
    @Schema("LockStreamEventName")
    enum LockEvent implements Wire.Named {
        QUEUED("queued"), REFUSED("refused"), ACQUIRED("acquired"), RENEWED("renewed"), RELEASED("released"),
        LOST("lost");

        private final String wire;

        LockEvent(String wire) {
            this.wire = wire;
        }

        @Override
        public String wire() {
            return wire;
        }
    }

    /** Every record above, for the contract test. */
    static final List<Class<? extends Record>> DOCUMENTS = List.of(
            AcquireBody.class, LockGrant.class, ExtendBody.class, ValueBody.class, LeaseRenewal.class,
            ModeBody.class, ModeChange.class, HoldReleased.class, LockStatus.class, FreeLock.class,
            LeaseEntry.class, WaiterEntry.class, LockList.class, QueuedEvent.class, RenewedEvent.class,
            LostEvent.class, ReleasedEvent.class, SessionBody.class, SessionGrant.class,
            SessionRenewedEvent.class, SessionEndedEvent.class, BatchBody.class, BatchLockBody.class,
            BatchGrant.class, BatchGrantLock.class, AcquiredEvent.class, ValueEvent.class, ModeEvent.class,
            EndedEvent.class, DelayedEvent.class, ProblemDocument.class);
}
