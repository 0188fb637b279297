"""What the sync and asyncio clients share: request bodies, answers read
into errors and models, Server-Sent Events decoding, and the local clock of
a streamed lock's lease.

Nothing here does I/O, so both clients use it as it is.
"""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional
from urllib.parse import quote

import httpx

from .errors import GatewayUnavailable, LockgateError, LockLost, error_from_problem
from .models import Leader, LockEvent, LockInfo

#: Transport errors raised before any byte of the request left: retrying
#: them can never do anything twice.
UNSENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

STREAM_HEADERS = {
    "Accept": "text/event-stream",
    # A streamed lock's connection is never handed back to the pool: the
    # client may shut its socket down from another thread to end the hold,
    # which must never hit a connection another request has taken over.
    "Connection": "close",
}


def millis(seconds: Optional[float], name: str, *, minimum: float = 0.0) -> Optional[int]:
    """Seconds (a float) as whole milliseconds, for the gateway's `*_ms` fields."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or math.isnan(seconds):
        raise TypeError(f"{name} must be a number of seconds, not {seconds!r}")
    if seconds < minimum:
        raise ValueError(f"{name} must be at least {minimum} s, not {seconds!r}")
    return int(round(seconds * 1000))


def acquire_body(
    key: str,
    *,
    ttl: float,
    wait: float,
    mode: Optional[str] = None,
    limit: Optional[int] = None,
    value: Optional[str] = None,
    token: Optional[str] = None,
) -> Dict[str, Any]:
    """The JSON body of `POST /locks`."""
    body: Dict[str, Any] = {"key": key, "ttl_ms": millis(ttl, "ttl"), "wait_ms": millis(wait, "wait")}
    if mode is not None:
        body["mode"] = mode
    if limit is not None:
        body["limit"] = limit
    if value is not None:
        body["value"] = value
    if token is not None:
        body["token"] = token
    return body


def new_idempotency_key() -> str:
    return str(uuid.uuid4())


def lock_path(key: str, *rest: str) -> str:
    """`/locks/<key>[/rest...]`, the key escaped for the path. Valid keys
    need no escaping; an invalid one reaches the gateway intact and is
    refused there as `invalid-key`."""
    return "/".join(("/locks", quote(key, safe=":")) + rest)


def unreachable(exc: BaseException, what: str = "the gateway") -> GatewayUnavailable:
    """The error for a request that got no answer."""
    detail = f"cannot reach {what}: {type(exc).__name__}: {exc}".rstrip(": ")
    return GatewayUnavailable(
        detail,
        {"type": "about:blank", "title": "Gateway unreachable", "detail": detail},
    )


def problem_error(response: httpx.Response) -> LockgateError:
    """The error for a refusal whose body has been read."""
    problem: Dict[str, Any]
    try:
        parsed = json.loads(response.content) if response.content else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        problem = parsed
    else:
        # Not the gateway's own answer (a proxy's error page, say).
        problem = {
            "type": "about:blank",
            "title": response.reason_phrase or f"HTTP {response.status_code}",
            "status": response.status_code,
            "detail": response.text[:200] if response.content else f"HTTP {response.status_code}",
        }
    problem.setdefault("status", response.status_code)
    return error_from_problem(response.status_code, problem)


def is_lock_not_found(response: httpx.Response) -> bool:
    """Whether the answer is `404 lock-not-found` (a free lock), not some
    other 404 (a wrong URL)."""
    if response.status_code != 404:
        return False
    try:
        return bool(json.loads(response.content).get("type") == "/problems/lock-not-found")
    except (ValueError, AttributeError):
        return False


def refusal_error(problem: Mapping[str, Any]) -> LockgateError:
    """The error for a streamed lock's `refused` event (a problem document)."""
    status = problem.get("status")
    return error_from_problem(status if isinstance(status, int) else 409, problem)


def lost_error(key: str, reason: str) -> LockLost:
    detail = f"lock {key!r} lost: {reason}"
    return LockLost(
        detail,
        {"type": "about:blank", "title": "Lock lost", "detail": detail, "key": key, "reason": reason},
    )


def attach_note(exc: BaseException, note: str) -> None:
    """Adds `note` to an exception's traceback (PEP 678) where Python has it."""
    add_note = getattr(exc, "add_note", None)
    if add_note is not None:
        add_note(note)


@dataclass(frozen=True)
class ServerSentEvent:
    event: str
    data: str
    id: Optional[str]

    def json(self) -> Dict[str, Any]:
        if not self.data:
            return {}
        parsed = json.loads(self.data)
        return parsed if isinstance(parsed, dict) else {"data": parsed}


class SSEDecoder:
    """Server-Sent Events from lines (the WHATWG rules the gateway needs:
    `event`, `data`, `id`, comments; `retry` is ignored)."""

    def __init__(self) -> None:
        self._event = ""
        self._data: List[str] = []
        self._id: Optional[str] = None
        self._has_id = False

    def feed(self, line: str) -> Optional[ServerSentEvent]:
        """Takes one line (no line ending); returns an event when a blank
        line completes one."""
        if not line:
            if not self._data and not self._event:
                self._has_id = False
                return None
            event = ServerSentEvent(
                self._event or "message",
                "\n".join(self._data),
                self._id if self._has_id else None,
            )
            self._event, self._data, self._has_id = "", [], False
            return event
        if line.startswith(":"):
            return None  # a keep-alive comment
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        elif field == "id" and "\0" not in value:
            self._id, self._has_id = value, True
        return None


class LeaseClock:
    """When a streamed lock's lease could end at the earliest, on this
    process's monotonic clock.

    The gateway reports lease ends on the Redis clock (`expires_at_ms`). The
    grant is mapped to the local clock at the earliest moment it could have
    been made (the request's sending, plus the time the gateway says it
    waited), so a renewal's end maps to a local time no later than the real
    one. A renewal is also bounded by its arrival plus the lease length,
    which holds whatever the two clocks do.
    """

    def __init__(self, sent_at: float) -> None:
        self._sent_at = sent_at
        self._anchor = sent_at
        self._granted_ms = 0
        self.ttl = 0.0
        self.deadline = sent_at

    def granted(self, grant: Mapping[str, Any], now: float) -> None:
        ttl_ms = int(grant.get("ttl_ms") or 0)
        self.ttl = ttl_ms / 1000.0
        waited = float(grant.get("waited_ms") or 0) / 1000.0
        self._anchor = min(now, self._sent_at + waited)
        self._granted_ms = int(grant.get("expires_at_ms") or 0) - ttl_ms
        self.deadline = self._anchor + self.ttl

    def renewed(self, expires_at_ms: int, now: float) -> None:
        mapped = self._anchor + (expires_at_ms - self._granted_ms) / 1000.0
        self.deadline = max(self.deadline, min(mapped, now + self.ttl))


def leader_of(info: Optional[LockInfo]) -> Optional[Leader]:
    """The leader a lock's state names: its oldest lease."""
    if info is None or not info.held or not info.leases:
        return None
    lease = info.leases[0]
    return Leader(value=lease.value, term=lease.fencing_token, expires_at_ms=lease.expires_at_ms)


class LeaderTracker:
    """Follows a lock's watch events and tells each change of leader."""

    def __init__(self) -> None:
        self.leader: Optional[Leader] = None
        self._started = False

    def update(self, event: LockEvent) -> bool:
        """Applies an event; True when the leader (or its value) changed,
        and always for the first snapshot."""
        before = self.leader
        data = event.data
        if event.type == "snapshot":
            self.leader = leader_of(LockInfo.from_json(data)) if data.get("held") else None
        elif event.type == "acquired":
            if self.leader is None:
                self.leader = Leader(
                    value=data.get("value"),
                    term=int(data.get("fencing_token") or 0),
                    expires_at_ms=data.get("expires_at_ms"),
                )
        elif event.type == "value":
            if self.leader is not None and self.leader.term == data.get("fencing_token"):
                self.leader = Leader(data.get("value"), self.leader.term, self.leader.expires_at_ms)
        elif event.type in ("released", "expired", "revoked"):
            if self.leader is not None and (
                event.type == "revoked" or self.leader.term == data.get("fencing_token")
            ):
                self.leader = None
        first = not self._started and event.type == "snapshot"
        self._started = self._started or event.type == "snapshot"
        return first or self.leader != before
