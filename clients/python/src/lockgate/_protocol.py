"""What the sync and asyncio clients share without doing any I/O: request
bodies and paths, answers read into errors, what tells the streams of a
lock, a lock set and a session apart (`Kind`), the lease clock of what is
held through one and its safety margin, and the leader an election's
events name.
"""

from __future__ import annotations

import json
import logging
import math
import os
import ssl
import uuid
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union, cast
from urllib.parse import quote

import httpx

from ._api import (
    AcquireBody,
    AcquiredEvent,
    BatchBody,
    BatchLockBody,
    LockMode,
    LockStreamEventName,
    LockWatchEventName,
    ModeBody,
    SessionBody,
    ValueEvent,
)
from .errors import GatewayUnavailable, LockgateError, LockLost, error_from_problem
from .models import Leader, LockEvent, LockInfo
from .sse import Event

log = logging.getLogger("lockgate")

#: Transport errors raised before any byte of the request left: retrying
#: them can never do anything twice.
UNSENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

STREAM_HEADERS = {
    "Accept": "text/event-stream",
    # A streamed connection is never handed back to the pool: the client
    # may shut its socket down from another thread to end it, which must
    # never hit a connection another request has taken over.
    "Connection": "close",
}

#: How long releasing a streamed lock waits for its reader to finish.
JOIN_TIMEOUT = 2.0

#: How long a live stream may stay silent, in seconds, beyond the request
#: timeout: the gateway sends a comment on an idle event stream at least
#: every 15 s. A lock in a session gets no renewals (the session's are
#: its), only those comments; a silent gateway is found out by the
#: session's deadline long before this.
STREAM_SILENCE = 20.0


def backoff(attempt: int) -> float:
    """The pause before sending a request again, in seconds."""
    return min(0.05 * 2.0**attempt, 1.0)


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
    ttl: Optional[float],
    wait: float,
    mode: Optional[LockMode] = None,
    limit: Optional[int] = None,
    permits: Optional[int] = None,
    value: Optional[str] = None,
    token: Optional[str] = None,
    session: Optional[str] = None,
) -> AcquireBody:
    """The JSON body of `POST /locks`; a lock in a `session` has no `ttl`
    (the session's lease is its own)."""
    body: AcquireBody = {"key": key, "wait_ms": millis(wait, "wait")}
    if ttl is not None:
        body["ttl_ms"] = millis(ttl, "ttl")
    if session is not None:
        body["session"] = session
    if mode is not None:
        body["mode"] = mode
    if limit is not None:
        body["limit"] = limit
    if permits is not None:
        body["permits"] = permits
    if value is not None:
        body["value"] = value
    if token is not None:
        body["token"] = token
    return body


def batch_body(
    locks: Sequence[Union[str, Mapping[str, Any]]],
    *,
    ttl: Optional[float],
    wait: float,
    value: Optional[str] = None,
    session: Optional[str] = None,
) -> BatchBody:
    """The JSON body of `POST /locks/batch`: each lock a key, or a mapping
    with `key` and any of `mode`, `limit`, `permits`; a batch in a
    `session` has no `ttl`."""
    entries: List[BatchLockBody] = []
    for lock in locks:
        if isinstance(lock, str):
            entries.append({"key": lock})
            continue
        unknown = set(lock) - {"key", "mode", "limit", "permits"}
        if unknown or "key" not in lock:
            raise ValueError(f"a lock of a batch is a key or {{key, mode, limit, permits}}, not {dict(lock)!r}")
        entry: BatchLockBody = {"key": lock["key"]}
        for name in ("mode", "limit", "permits"):
            if lock.get(name) is not None:
                entry[name] = lock[name]
        entries.append(entry)
    if not entries:
        raise ValueError("a batch needs at least one lock")
    body: BatchBody = {"locks": entries, "wait_ms": millis(wait, "wait")}
    if ttl is not None:
        body["ttl_ms"] = millis(ttl, "ttl")
    if session is not None:
        body["session"] = session
    if value is not None:
        body["value"] = value
    return body


def mode_body(token: str, mode: LockMode, wait: float) -> ModeBody:
    """The JSON body of `PUT /locks/{key}/mode`."""
    return {"token": token, "mode": mode, "wait_ms": millis(wait, "wait")}


def session_body(*, ttl: float, lock_delay: float, value: Optional[str]) -> SessionBody:
    """The JSON body of `POST /sessions`."""
    body: SessionBody = {"ttl_ms": millis(ttl, "ttl"), "lock_delay_ms": millis(lock_delay, "lock_delay")}
    if value is not None:
        body["value"] = value
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


def answer(response: httpx.Response) -> Dict[str, Any]:
    """The JSON document of a read answer, or the error it stands for."""
    if response.status_code >= 400:
        raise problem_error(response)
    if not response.content:
        return {}
    data = response.json()
    return data if isinstance(data, dict) else {"data": data}


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


def session_lost_error(reason: str) -> LockLost:
    """The error of a session that is lost: every lock in it is lost too."""
    detail = f"session lost: {reason}"
    return LockLost(detail, {"type": "about:blank", "title": "Session lost", "detail": detail, "reason": reason})


def note_failed_release(exc: BaseException, what: str, error: LockgateError) -> None:
    """Tells of a release (`what`: "releasing 'key'", "ending the
    session") that failed as a block was left by `exc`, which says more and
    is kept: a note on it (PEP 678, where Python has it) and a warning in
    the log."""
    add_note = getattr(exc, "add_note", None)
    if add_note is not None:
        add_note(f"lockgate: {what} also failed: {error!r}")
    log.warning("%s failed while the block raised: %r", what, error)


def event_json(event: Event) -> Dict[str, Any]:
    """An event's data: a JSON object ({} when empty)."""
    if not event.data:
        return {}
    parsed = json.loads(event.data)
    return parsed if isinstance(parsed, dict) else {"data": parsed}


class Kind(NamedTuple):
    """What tells a lock, a lock set and a session apart while held."""

    #: The route of its streamed request.
    path: str
    #: Whether a request that got no answer is sent again.
    retried: bool
    #: The event that carries the grant.
    granted: str
    #: The events that end its stream, each with the reason it stands for
    #: when its data names none.
    ends: Mapping[str, str]
    #: What it is once held, once given back by this client, and before.
    held: str
    given_back: str
    unheld: str
    #: What giving it back is called (in the log).
    giving_back: str
    #: Whether its loss cancels the task running its `async with` body.
    cancels_body: bool
    #: The error of its loss: of what name (a key), for what reason.
    lost: Callable[[str, str], LockLost]


def _lock_event(name: LockStreamEventName) -> str:
    """A streamed lock's event, by a name the contract has."""
    return name


def _session_lost(name: str, reason: str) -> LockLost:
    return session_lost_error(reason)


LOCK = Kind(
    path="/locks",
    retried=False,  # closing the connection withdrew it: a second one would wait for the first
    granted=_lock_event("acquired"),
    ends={_lock_event("released"): "released", _lock_event("lost"): "lock-gone"},
    held="held",
    given_back="released",
    unheld="not acquired",
    giving_back="releasing",
    cancels_body=True,
    lost=lost_error,
)

#: A streamed batch has the events of a streamed lock.
LOCK_SET = LOCK._replace(path="/locks/batch")

SESSION = Kind(
    path="/sessions",
    retried=True,  # a streamed session whose answer was lost ended with its connection
    granted="opened",
    ends={"ended": "expired"},
    held="open",
    given_back="ended",
    unheld="not opened",
    giving_back="ending",
    cancels_body=False,  # the bodies of the locks in it are cancelled, not its own
    lost=_session_lost,
)


def safety_margin(ttl: float) -> float:
    """How long before its lease could end the client counts a streamed lock
    as lost: a tenth of the lease, at least 1 s, but at most a third of it.

    The margin is there for what the client's clock cannot see: the time a
    renewal took to arrive, the gateway's clock running apart from this
    one, a thread or event loop that wakes late, and the work in flight
    that must stop before another holder may start. The third keeps the
    renewals, which come every third of the lease, from being outrun: a
    renewal may come a third of the lease late before the lock is lost.
    """
    return min(max(1.0, ttl / 10.0), ttl / 3.0)


class LeaseClock:
    """When a streamed lock (or session) counts as lost unless a renewal
    comes first, on this process's monotonic clock: the end of its lease,
    less a safety margin (`safety_margin`).

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
        self.margin = 0.0
        #: The earliest the lease could end.
        self.lease_end = sent_at

    @property
    def deadline(self) -> float:
        """When the lock counts as lost."""
        return self.lease_end - self.margin

    def granted(self, grant: Mapping[str, Any], now: float) -> None:
        """The grant of a lock, a batch (`LockGrant`, `BatchGrant`) or a
        session (`SessionGrant`, which waited for nothing) came."""
        self.started(grant["ttl_ms"], grant["expires_at_ms"], now, waited_ms=grant.get("waited_ms", 0))

    def started(self, ttl_ms: int, expires_at_ms: int, now: float, *, waited_ms: int = 0) -> None:
        """The lease began: `ttl_ms` long, ending at `expires_at_ms` on the
        Redis clock, after a wait of `waited_ms` on the gateway."""
        self.ttl = ttl_ms / 1000.0
        self.margin = safety_margin(self.ttl)
        self._anchor = min(now, self._sent_at + waited_ms / 1000.0)
        self._granted_ms = expires_at_ms - ttl_ms
        self.lease_end = self._anchor + self.ttl

    def renewed(self, expires_at_ms: int, now: float) -> None:
        mapped = self._anchor + (expires_at_ms - self._granted_ms) / 1000.0
        self.lease_end = max(self.lease_end, min(mapped, now + self.ttl))


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
        # Typed as the contract's names, so each name compared is checked.
        name = cast(LockWatchEventName, event.type)
        if name == "snapshot":
            info = LockInfo.from_json(event.data)
            self.leader = leader_of(info) if info.held else None
        elif name == "acquired":
            acquired = cast(AcquiredEvent, event.data)
            if self.leader is None:
                self.leader = Leader(
                    value=acquired.get("value"),
                    term=acquired["fencing_token"],
                    expires_at_ms=acquired["expires_at_ms"],
                )
        elif name == "value":
            changed = cast(ValueEvent, event.data)
            if self.leader is not None and self.leader.term == changed["fencing_token"]:
                self.leader = Leader(changed.get("value"), self.leader.term, self.leader.expires_at_ms)
        elif name in ("released", "expired", "revoked"):
            if self.leader is not None and (
                name == "revoked" or self.leader.term == event.data.get("fencing_token")
            ):
                self.leader = None
        first = not self._started and name == "snapshot"
        self._started = self._started or name == "snapshot"
        return first or self.leader != before


def tls_context(
    verify: Union[bool, str, ssl.SSLContext],
    cert: Optional[Union[str, Tuple[str, str]]],
) -> Union[bool, ssl.SSLContext]:
    """What httpx is given to verify the gateway and present a client
    certificate: one SSL context, made here, since httpx ignores `cert=`
    beside a CA path (`verify=<str>`), and deprecates both."""
    if cert is None and not isinstance(verify, str):
        return verify
    if isinstance(verify, ssl.SSLContext):
        context = verify
    elif verify is False:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif isinstance(verify, str) and os.path.isdir(verify):
        context = ssl.create_default_context(capath=verify)
    elif isinstance(verify, str):
        context = ssl.create_default_context(cafile=verify)
    else:
        context = ssl.create_default_context()
    if isinstance(cert, str):
        context.load_cert_chain(cert)
    elif cert is not None:
        context.load_cert_chain(*cert)
    return context
