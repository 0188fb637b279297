"""The errors of the lockgate client: one hierarchy rooted at `LockgateError`.

The gateway answers every refusal with an RFC 9457 problem document
(`application/problem+json`) whose `type` is `/problems/<slug>`. Each error
here carries that document as `.problem` (a dict) and its slug as `.slug`.
Errors the client makes up itself (the gateway could not be reached, a
streamed lock's events stopped) carry a problem document of the same shape
with `type` `about:blank`, so code that logs `.problem` needs no special case.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple, Type

__all__ = [
    "LockgateError",
    "LockHeld",
    "LockLost",
    "NotOwner",
    "GatewayUnavailable",
    "InvalidRequest",
    "SessionNotFound",
    "Deadlock",
    "error_from_problem",
]


class LockgateError(Exception):
    """Base of every error the lockgate client raises."""

    def __init__(self, message: str, problem: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(message)
        self.problem: Dict[str, Any] = dict(problem) if problem is not None else {
            "type": "about:blank",
            "title": type(self).__name__,
            "detail": message,
        }

    @property
    def slug(self) -> Optional[str]:
        """The problem's slug (`lock-held`, `not-owner`, ...); None when the
        client made the error up."""
        kind = self.problem.get("type")
        if isinstance(kind, str) and kind.startswith("/problems/"):
            return kind[len("/problems/"):]
        return None

    @property
    def status(self) -> Optional[int]:
        """The HTTP status the gateway answered with, if it answered."""
        status = self.problem.get("status")
        return status if isinstance(status, int) else None

    @property
    def key(self) -> Optional[str]:
        """The lock key the problem is about, when the gateway named one."""
        key = self.problem.get("key")
        return key if isinstance(key, str) else None


class LockHeld(LockgateError):
    """Another owner holds the lock, and the wait (if any) ran out."""

    @property
    def retry_after(self) -> Optional[float]:
        """Seconds left on the holder's lease when the gateway refused."""
        ms = self.problem.get("retry_after_ms")
        return ms / 1000.0 if isinstance(ms, (int, float)) else None


class LockLost(LockgateError):
    """The lock is no longer held by this owner: its lease ended, it was
    deleted or revoked, or the connection that held it broke."""

    @property
    def reason(self) -> Optional[str]:
        """Why: a streamed lock's `lost` reason (`lock-gone`,
        `held-by-another`, `backend-unavailable`, `revoked`,
        `shutting-down`, `session-ended`: the session it hung on ended or
        was lost) or one of the client's own (`lease-expired`: no event
        came before the lease could have ended; `connection-lost`;
        `released`: someone released it with its token; `forked`: this
        process is a fork of the holder). For a lost session
        (`session.check()`), the session's reason: `expired`, `deleted`,
        `shutting-down`, `connection-lost`, `lease-expired`, `forked`."""
        reason = self.problem.get("reason")
        return reason if isinstance(reason, str) else None


class NotOwner(LockgateError):
    """A token was given that does not hold the lock."""


class GatewayUnavailable(LockgateError):
    """The gateway could not be reached, or it could not reach Redis
    (`backend-unavailable`, `shutting-down`, ...). Nothing was granted."""


class InvalidRequest(LockgateError):
    """The gateway refused the request as malformed or not allowed
    (`invalid-key`, `invalid-field`, `limit-mismatch`, `unauthorized`, ...)."""


class SessionNotFound(LockgateError):
    """The session is unknown or has ended (expired, or deleted): a lock
    cannot be taken in it, and a wait in it ended with it."""


class Deadlock(LockgateError):
    """The wait would have closed a cycle of waits between sessions (each
    holding a lock the next one waits for); this one, the youngest of the
    cycle, was refused so the others can go on."""

    @property
    def cycle(self) -> Tuple[str, ...]:
        """The keys of the cycle, in order."""
        cycle = self.problem.get("cycle")
        return tuple(key for key in cycle if isinstance(key, str)) if isinstance(cycle, list) else ()


#: The problem slugs the client tells apart, and the error of each. Any
#: other slug is `GatewayUnavailable` for a 5xx (`internal` among them) and
#: `InvalidRequest` for a 4xx. tests/test_contract.py checks that each is
#: a slug of openapi/openapi.json, answered with the status named here.
SLUG_ERRORS: Dict[str, Tuple[int, Type[LockgateError]]] = {
    "lock-held": (409, LockHeld),
    "not-owner": (409, NotOwner),
    "lock-not-found": (404, LockLost),
    "session-not-found": (404, SessionNotFound),
    "deadlock": (409, Deadlock),
    "backend-unavailable": (503, GatewayUnavailable),
    "not-replicated": (503, GatewayUnavailable),
    "too-many-waiters": (503, GatewayUnavailable),
    "shutting-down": (503, GatewayUnavailable),
    "request-timeout": (503, GatewayUnavailable),
    "rate-limited": (429, GatewayUnavailable),
}


def error_from_problem(status: int, problem: Mapping[str, Any]) -> LockgateError:
    """The error for a problem document the gateway answered with."""
    kind = problem.get("type")
    slug = kind[len("/problems/"):] if isinstance(kind, str) and kind.startswith("/problems/") else ""
    known = SLUG_ERRORS.get(slug)
    cls = known[1] if known is not None else GatewayUnavailable if status >= 500 else InvalidRequest
    detail = problem.get("detail") or problem.get("title") or f"HTTP {status}"
    return cls(f"{detail} ({slug or status})", problem)
