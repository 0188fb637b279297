//! The problem catalogue: every kind of problem the gateway answers with, declared once as a table from which the enum, the list and each one's page are made.

use axum::http::StatusCode;

/// What a problem type means, for its documents and its page.
pub struct ProblemInfo {
    pub slug: &'static str,
    pub title: &'static str,
    pub status: StatusCode,
    pub about: &'static str,
}

/// Declares [`ProblemType`] from the table: one variant per row, `ALL` in
/// the table's order, and `info()` from each row's fields. A row is all it
/// takes to add a problem type; none can be left out of the list.
macro_rules! problem_catalogue {
    ($($name:ident { slug: $slug:literal, title: $title:literal, status: $status:ident, about: $about:literal $(,)? }),+ $(,)?) => {
        /// Every kind of problem the gateway answers with. The slug is part
        /// of the contract: clients branch on it, so a slug never changes
        /// meaning.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ProblemType {
            $($name),+
        }

        impl ProblemType {
            /// Every problem type, in the catalogue's order.
            pub const ALL: &'static [Self] = &[$(Self::$name),+];

            pub fn info(self) -> ProblemInfo {
                match self {
                    $(Self::$name => ProblemInfo {
                        slug: $slug,
                        title: $title,
                        status: StatusCode::$status,
                        about: $about,
                    }),+
                }
            }
        }
    };
}

problem_catalogue! {
    MalformedBody {
        slug: "malformed-body",
        title: "Malformed request body",
        status: BAD_REQUEST,
        about: "The body is not JSON, or a field has the wrong JSON type, or a required field is missing or an unknown one present.",
    },
    UnsupportedMediaType {
        slug: "unsupported-media-type",
        title: "Unsupported media type",
        status: UNSUPPORTED_MEDIA_TYPE,
        about: "The body must be sent with Content-Type: application/json.",
    },
    BodyTooLarge {
        slug: "body-too-large",
        title: "Request body too large",
        status: PAYLOAD_TOO_LARGE,
        about: "The body is larger than the gateway's configured limit.",
    },
    InvalidKey {
        slug: "invalid-key",
        title: "Invalid lock key",
        status: UNPROCESSABLE_ENTITY,
        about: "A lock key is 1 to 200 characters of A-Z a-z 0-9 . _ : -, and not only dots.",
    },
    InvalidField {
        slug: "invalid-field",
        title: "Invalid field",
        status: UNPROCESSABLE_ENTITY,
        about: "A field has the right type but a value outside its range; the `field` member names it.",
    },
    MissingToken {
        slug: "missing-token",
        title: "Missing lock token",
        status: BAD_REQUEST,
        about: "Releasing or renewing needs the owner's token: the Lock-Token header or ?token= for DELETE, the `token` field for PUT.",
    },
    InvalidToken {
        slug: "invalid-token",
        title: "Invalid lock token",
        status: UNPROCESSABLE_ENTITY,
        about: "A lock token is the UUID text returned when the lock was taken. A request names one token: the Lock-Token header and ?token= (or the body's `token`) may not name two different ones.",
    },
    LockHeld {
        slug: "lock-held",
        title: "Lock is held",
        status: CONFLICT,
        about: "There was no place for this request and the wait (if any) ran out: another owner holds the lock (or every \
                 place of a counting lock, or it is held in the other mode, or a writer waits and holds new readers back). \
                 `retry_after_ms` is when a place may free: the earliest holder's remaining lease.",
    },
    NotOwner {
        slug: "not-owner",
        title: "Not the lock's owner",
        status: CONFLICT,
        about: "The token given does not hold this lock. The holder is not revealed.",
    },
    LockNotFound {
        slug: "lock-not-found",
        title: "Lock not found",
        status: NOT_FOUND,
        about: "No such lock: never taken, released, or its lease expired. A holder that sees this has lost its lease.",
    },
    LimitMismatch {
        slug: "limit-mismatch",
        title: "Limit mismatch",
        status: CONFLICT,
        about: "The lock is held with another limit than the request names (a plain lock has limit 1). The `limit` \
                 member is the one it is held with: ask with that, or wait until the lock is free to take it with another.",
    },
    ModeConflict {
        slug: "mode-conflict",
        title: "Mode conflict",
        status: CONFLICT,
        about: "The token holds this lock in the other mode (shared or exclusive); a re-entry keeps the mode the lock was taken in.",
    },
    SessionNotFound {
        slug: "session-not-found",
        title: "Session not found",
        status: NOT_FOUND,
        about: "There is no session with this id: it was never opened, or it ended (deleted, or expired because \
                 nobody kept it alive). A request waiting with a session that ends is answered this too. Open \
                 a new session with POST /sessions.",
    },
    Deadlock {
        slug: "deadlock",
        title: "Deadlock",
        status: CONFLICT,
        about: "Waiting would close a cycle: sessions each holding a lock the next one waits for (`cycle` names \
                 the keys, in order). This request was the youngest wait of the cycle and was refused; the others \
                 go on waiting. Release what this session holds, or take the locks in one order.",
    },
    SaleNotFound {
        slug: "sale-not-found",
        title: "Sale not found",
        status: NOT_FOUND,
        about: "No sale with this sku: create it with PUT /seckill/{sku}.",
    },
    SoldOut {
        slug: "sold-out",
        title: "Sold out",
        status: CONFLICT,
        about: "The sale has less stock left than the quantity asked for. Nothing was bought.",
    },
    LimitExceeded {
        slug: "limit-exceeded",
        title: "Per-user limit exceeded",
        status: CONFLICT,
        about: "The purchase would take the user past the sale's per_user_limit. Nothing was bought.",
    },
    IdempotencyKeyReused {
        slug: "idempotency-key-reused",
        title: "Idempotency key reused",
        status: UNPROCESSABLE_ENTITY,
        about: "The Idempotency-Key was already used with a different body. Send a new key for a new purchase.",
    },
    RateLimited {
        slug: "rate-limited",
        title: "Too many requests",
        status: TOO_MANY_REQUESTS,
        about: "The purchase quota (per user, and per client address when configured) is spent. Retry after Retry-After; RateLimit and RateLimit-Policy describe the quota.",
    },
    Unauthorized {
        slug: "unauthorized",
        title: "Unauthorized",
        status: UNAUTHORIZED,
        about: "This route needs credentials: Authorization: Bearer <token>.",
    },
    Forbidden {
        slug: "forbidden",
        title: "Forbidden",
        status: FORBIDDEN,
        about: "The credentials given do not grant this route.",
    },
    AdministrationDisabled {
        slug: "administration-disabled",
        title: "Administration is off",
        status: FORBIDDEN,
        about: "No admin token is configured, so administration (sale resets, revoking locks) is \
                 refused. Start the gateway with \
                 LOCKGATE_ADMIN_TOKEN (or --admin-token) and send it as Authorization: Bearer <token>; \
                 `make run` makes one at first start and keeps it in .run/admin-token.",
    },
    NotFound {
        slug: "not-found",
        title: "Not found",
        status: NOT_FOUND,
        about: "No route matches this path. See /docs for the API.",
    },
    MethodNotAllowed {
        slug: "method-not-allowed",
        title: "Method not allowed",
        status: METHOD_NOT_ALLOWED,
        about: "The path exists but not with this method; the Allow header lists the methods it takes.",
    },
    HeadersTooLarge {
        slug: "headers-too-large",
        title: "Request headers too large",
        status: REQUEST_HEADER_FIELDS_TOO_LARGE,
        about: "The request's headers together are larger than the gateway accepts.",
    },
    TooManyWaiters {
        slug: "too-many-waiters",
        title: "Too many waiters",
        status: SERVICE_UNAVAILABLE,
        about: "This instance already has its maximum of waiting requests. Retry after Retry-After, or try once with wait_ms 0.",
    },
    ShuttingDown {
        slug: "shutting-down",
        title: "Shutting down",
        status: SERVICE_UNAVAILABLE,
        about: "This instance is stopping; the wait ended and nothing was granted. Retry (another instance will answer).",
    },
    NotReplicated {
        slug: "not-replicated",
        title: "Not confirmed by replicas",
        status: SERVICE_UNAVAILABLE,
        about: "Too few replicas confirmed the write in time (replica-confirmed grants are on). A grant was undone; an \
                 extension or a purchase stands on the primary (retry a purchase with the same Idempotency-Key).",
    },
    RequestTimeout {
        slug: "request-timeout",
        title: "Request timed out",
        status: SERVICE_UNAVAILABLE,
        about: "The gateway could not answer within its request timeout. Anything granted meanwhile was released.",
    },
    BackendUnavailable {
        slug: "backend-unavailable",
        title: "Backend unavailable",
        status: SERVICE_UNAVAILABLE,
        about: "Redis could not be reached, or did not answer within the gateway's Redis timeout; retry after Retry-After. \
                 When Redis could not be reached, nothing changed. When it was only slow, the request may still take effect once \
                 it answers: a lock granted so is released by the gateway or lapses with its lease, a purchase is found again \
                 by retrying with the same Idempotency-Key.",
    },
    FormatUnsupported {
        slug: "format-unsupported",
        title: "Data format not written here",
        status: SERVICE_UNAVAILABLE,
        about: "The data format in use on Redis is newer than this instance writes (a newer release raised it), so it changes nothing and grants \
                 nothing; nothing was done. Retry on another instance (its /readyz answers 503 with status `format` meanwhile), or see GET /version.",
    },
    Internal {
        slug: "internal",
        title: "Internal error",
        status: INTERNAL_SERVER_ERROR,
        about: "The gateway failed in a way it did not expect. The details are in its log.",
    },
}

impl ProblemType {
    pub fn from_slug(slug: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|kind| kind.info().slug == slug)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_type_has_a_distinct_slug_that_finds_it_again() {
        for kind in ProblemType::ALL {
            assert_eq!(ProblemType::from_slug(kind.info().slug), Some(*kind));
        }
        assert_eq!(ProblemType::from_slug("no-such-slug"), None);
    }
}
