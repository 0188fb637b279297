package lockgate;

import java.util.Map;
import java.util.function.BiFunction;

/**
 * Which exception each problem slug is: one class per slug of the lock API,
 * each answered with the status named here ({@code ContractTest} checks both
 * against {@code openapi/openapi.json}). Any other slug is a {@link
 * GatewayUnavailableException} for a 5xx or 429, an {@link
 * InvalidRequestException} for another 4xx.
 */
final class Problems {
    private Problems() {}

    /** The status a slug is answered with, and its exception. */
    record Kind(int status, BiFunction<Problem, Throwable, LockgateException> make) {}

    static final Map<String, Kind> BY_SLUG = Map.ofEntries(
            Map.entry("lock-held", new Kind(409, LockHeldException::new)),
            Map.entry("not-owner", new Kind(409, NotOwnerException::new)),
            Map.entry("deadlock", new Kind(409, DeadlockException::new)),
            Map.entry("limit-mismatch", new Kind(409, LimitMismatchException::new)),
            Map.entry("mode-conflict", new Kind(409, ModeConflictException::new)),
            Map.entry("lock-not-found", new Kind(404, LockLostException::new)),
            Map.entry("session-not-found", new Kind(404, SessionNotFoundException::new)),
            Map.entry("invalid-key", new Kind(422, InvalidKeyException::new)),
            Map.entry("invalid-field", new Kind(422, InvalidFieldException::new)),
            Map.entry("invalid-token", new Kind(422, InvalidTokenException::new)),
            Map.entry("idempotency-key-reused", new Kind(422, IdempotencyKeyReusedException::new)),
            Map.entry("missing-token", new Kind(400, MissingTokenException::new)),
            Map.entry("malformed-body", new Kind(400, MalformedBodyException::new)),
            Map.entry("body-too-large", new Kind(413, BodyTooLargeException::new)),
            Map.entry("unsupported-media-type", new Kind(415, UnsupportedMediaTypeException::new)),
            Map.entry("unauthorized", new Kind(401, UnauthorizedException::new)),
            Map.entry("forbidden", new Kind(403, ForbiddenException::new)),
            Map.entry("backend-unavailable", new Kind(503, BackendUnavailableException::new)),
            Map.entry("not-replicated", new Kind(503, NotReplicatedException::new)),
            Map.entry("request-timeout", new Kind(503, RequestTimeoutException::new)),
            Map.entry("shutting-down", new Kind(503, ShuttingDownException::new)),
            Map.entry("too-many-waiters", new Kind(503, TooManyWaitersException::new)));

    /** The exception for a problem the gateway answered with. */
    static LockgateException of(Problem problem) {
        Kind kind = BY_SLUG.get(problem.slug());
        if (kind != null) {
            return kind.make().apply(problem, null);
        }
        int status = problem.status();
        if (status >= 500 || status == 429) {
            return new GatewayUnavailableException(problem, null);
        }
        if (status >= 400) {
            return new InvalidRequestException(problem, null);
        }
        return new LockgateException(problem, null);
    }

    /** The exception for an answer of {@code status} with {@code body}. */
    static LockgateException refusal(int status, String body, String retryAfterHeader) {
        return of(Problem.parse(status, body, retryAfterHeader));
    }
}
