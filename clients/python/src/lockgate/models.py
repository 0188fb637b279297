"""What the gateway tells about locks, as plain read-only values.

Durations are seconds (floats); times are the gateway's `*_at_ms` fields
kept as they are: Unix epoch milliseconds by the Redis server's clock, which
need not agree with this machine's. Each model keeps the JSON it was read
from as `raw`, so fields a newer gateway adds are not lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple, cast

from ._api import FreeLock, LeaseEntry, LockStatus

__all__ = ["LeaseInfo", "LockInfo", "Leader", "LockEvent"]


def _seconds(ms: Any) -> Optional[float]:
    return ms / 1000.0 if isinstance(ms, (int, float)) else None


@dataclass(frozen=True)
class LeaseInfo:
    """One holder's lease as `GET /locks/{key}` shows it (never its token)."""

    fencing_token: int
    value: Optional[str]
    holds: int
    acquired_at_ms: Optional[int]
    expires_at_ms: Optional[int]
    #: The places it takes of a counting lock (None for other kinds).
    permits: Optional[int] = None
    #: The public handle of the session it hangs on, if any (never its id).
    session: Optional[str] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "LeaseInfo":
        lease = cast(LeaseEntry, data)
        return cls(
            fencing_token=lease["fencing_token"],
            value=lease.get("value"),
            holds=lease["holds"],
            acquired_at_ms=lease["acquired_at_ms"],
            expires_at_ms=lease["expires_at_ms"],
            permits=lease.get("permits"),
            session=lease.get("session"),
        )


@dataclass(frozen=True)
class HeldLock:
    """One lock of a batch taken with `lock_all`: its key, how it is held,
    and its own fencing token (each key counts its own)."""

    key: str
    mode: str
    fencing_token: int


@dataclass(frozen=True)
class LockInfo:
    """A lock's state: `GET /locks/{key}`, one entry of `GET /locks`, or a
    watcher's `snapshot`. A lock nobody holds has `held` False (and a
    `delayed_until_ms` while a lock-delay keeps it from being granted)."""

    key: str
    held: bool
    ttl: Optional[float]
    expires_at_ms: Optional[int]
    fencing_token: Optional[int]
    holds: int
    mode: Optional[str]
    limit: Optional[int]
    holders: int
    leases: Tuple[LeaseInfo, ...]
    #: The requests waiting now, in the order they will be served:
    #: `{"position", "mode", "waiting_since_ms"}` each.
    waiters: Tuple[Dict[str, Any], ...]
    #: For a lock nobody holds: until when no one is granted it (Unix ms,
    #: Redis clock), under the lock-delay of a session that held it and
    #: expired, or of a revoked hold; None when no delay is in force.
    delayed_until_ms: Optional[int]
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "LockInfo":
        status = cast(LockStatus, data)
        held = status["held"]
        return cls(
            key=status["key"],
            held=held,
            ttl=_seconds(status.get("ttl_ms")),
            expires_at_ms=status.get("expires_at_ms"),
            fencing_token=status.get("fencing_token"),
            holds=status.get("holds", 0),
            mode=status.get("mode"),
            limit=status.get("limit"),
            holders=status.get("holders", 1 if held else 0),
            leases=tuple(LeaseInfo.from_json(lease) for lease in status.get("leases", ())),
            waiters=tuple(dict(waiter) for waiter in status.get("waiters", ())),
            delayed_until_ms=None if held else cast(FreeLock, data).get("delayed_until_ms"),
            raw=dict(data),
        )


@dataclass(frozen=True)
class Leader:
    """The leader of an election: the holder of its lock."""

    #: What the leader published (its address, say); None if nothing.
    value: Optional[str]
    #: The leader's term: its fencing token, larger for every new leader.
    term: int
    expires_at_ms: Optional[int] = None


@dataclass(frozen=True)
class LockEvent:
    """One event of `GET /locks/{key}/events`.

    `type` is `snapshot`, `acquired`, `value`, `released`, `expired`,
    `revoked`, `delayed` (the lock stays free under a lock-delay until
    `delayed_until_ms`) or `gap`; `data` is its JSON; `id` resumes the
    stream after it.
    """

    type: str
    data: Dict[str, Any]
    id: Optional[str]

    @property
    def key(self) -> Optional[str]:
        return self.data.get("key")

    @property
    def fencing_token(self) -> Optional[int]:
        return self.data.get("fencing_token")

    @property
    def value(self) -> Optional[str]:
        return self.data.get("value")

    @property
    def delayed_until_ms(self) -> Optional[int]:
        """Of a `delayed` event (or a `snapshot` of a delayed lock): until
        when no one is granted the lock, in Unix ms by the Redis clock."""
        return self.data.get("delayed_until_ms")

    def snapshot(self) -> Optional[LockInfo]:
        """The lock's state, for a `snapshot` event."""
        return LockInfo.from_json(self.data) if self.type == "snapshot" else None
