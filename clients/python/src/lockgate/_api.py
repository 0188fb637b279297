"""The gateway's JSON documents as the client reads and writes them: one
TypedDict per schema of `openapi/openapi.json`, named as the schema is,
holding the fields the client uses, and the enumerations it names.

tests/test_contract.py checks every name and type here against the
document, and mypy (tests/test_source.py) checks the client's code against
these, so a change of the contract fails a test instead of a user. A key
the client can do without is declared in a `total=False` part; every
other one must be required by the document too.
"""

from __future__ import annotations

from typing import List, Literal, Optional, TypedDict

#: How a lock is held (`LockModeText`).
LockMode = Literal["exclusive", "shared"]

#: The events of a streamed lock (`LockStreamEventName`).
LockStreamEventName = Literal["queued", "refused", "acquired", "renewed", "released", "lost"]

#: The events of a watched lock (`LockWatchEventName`).
LockWatchEventName = Literal["snapshot", "acquired", "value", "released", "expired", "revoked", "gap"]


class LockStreamEvent(TypedDict):
    """An event of a streamed lock, as the SSE reader gives it."""

    event: LockStreamEventName
    data: str


class _LockWatchEventKeys(TypedDict):
    event: LockWatchEventName
    data: str


class LockWatchEvent(_LockWatchEventKeys, total=False):
    """An event of a watched lock, as the SSE reader gives it."""

    id: Optional[str]


class _AcquireBodyKeys(TypedDict):
    key: str


class AcquireBody(_AcquireBodyKeys, total=False):
    ttl_ms: Optional[int]
    wait_ms: Optional[int]
    mode: Optional[LockMode]
    limit: Optional[int]
    permits: Optional[int]
    value: Optional[str]
    token: Optional[str]
    session: Optional[str]


class _TokenKeys(TypedDict):
    token: str


class ExtendBody(_TokenKeys, total=False):
    ttl_ms: Optional[int]


class ValueBody(_TokenKeys, total=False):
    value: Optional[str]


class LockGrant(TypedDict):
    """`201` to `POST /locks`, and a streamed lock's `acquired` event."""

    key: str
    token: str
    fencing_token: int
    ttl_ms: int
    expires_at_ms: int
    holds: int
    waited_ms: int


class LeaseRenewal(TypedDict):
    """`PUT /locks/{key}/ttl` and `PUT /locks/{key}/value`."""

    key: str
    ttl_ms: int
    expires_at_ms: int
    fencing_token: int
    holds: int


class _ModeBodyKeys(TypedDict):
    token: str
    mode: LockMode


class ModeBody(_ModeBodyKeys, total=False):
    """`PUT /locks/{key}/mode`: an upgrade or a downgrade of a hold."""

    wait_ms: Optional[int]


class ModeChange(TypedDict):
    """`200` to `PUT /locks/{key}/mode`: the hold's lease, and its mode now."""

    key: str
    mode: LockMode
    ttl_ms: int
    expires_at_ms: int
    fencing_token: int
    holds: int


class _BatchLockBodyKeys(TypedDict):
    key: str


class BatchLockBody(_BatchLockBodyKeys, total=False):
    """One lock of `POST /locks/batch`."""

    mode: Optional[LockMode]
    limit: Optional[int]
    permits: Optional[int]


class _BatchBodyKeys(TypedDict):
    locks: List[BatchLockBody]


class BatchBody(_BatchBodyKeys, total=False):
    """`POST /locks/batch`: several locks, all or none, for one token."""

    ttl_ms: Optional[int]
    wait_ms: Optional[int]
    session: Optional[str]
    value: Optional[str]


class BatchGrantLock(TypedDict):
    key: str
    mode: LockMode
    fencing_token: int
    expires_at_ms: int


class BatchGrant(TypedDict):
    """`201` to `POST /locks/batch`: one token for every lock."""

    token: str
    ttl_ms: int
    expires_at_ms: int
    waited_ms: int
    locks: List[BatchGrantLock]


class HoldReleased(TypedDict):
    key: str
    holds: int


class _LeaseEntryKeys(TypedDict):
    fencing_token: int
    holds: int
    acquired_at_ms: int
    expires_at_ms: int


class LeaseEntry(_LeaseEntryKeys, total=False):
    value: Optional[str]
    permits: Optional[int]
    session: Optional[str]


class WaiterEntry(TypedDict):
    position: int
    mode: str
    waiting_since_ms: int


class _LockStatusKeys(TypedDict):
    key: str
    held: bool


class LockStatus(_LockStatusKeys, total=False):
    """`GET /locks/{key}`, one of `GET /locks`, and a watcher's `snapshot`,
    which for a free lock (`FreeLock`) has only `key`, `held` and
    `waiters`: hence the optional keys."""

    ttl_ms: int
    expires_at_ms: int
    fencing_token: int
    holds: int
    mode: LockMode
    limit: Optional[int]
    holders: int
    leases: List[LeaseEntry]
    waiters: List[WaiterEntry]


class _FreeLockKeys(TypedDict):
    key: str
    held: bool


class FreeLock(_FreeLockKeys, total=False):
    """`GET /locks/{key}` of a lock nobody holds under a lock-delay (a
    session that held it expired, or it was revoked), and a watcher's
    `snapshot` of a free lock."""

    waiters: List[WaiterEntry]
    delayed_until_ms: Optional[int]


class _LockListKeys(TypedDict):
    locks: List[LockStatus]


class LockList(_LockListKeys, total=False):
    next_cursor: Optional[str]


class QueuedEvent(TypedDict):
    position: int


class RenewedEvent(TypedDict):
    expires_at_ms: int


class _LostEventKeys(TypedDict):
    reason: str


class LostEvent(_LostEventKeys, total=False):
    """A streamed lock's or batch's `lost`: why, and which lock (none for
    `shutting-down`)."""

    key: Optional[str]


class EndedEvent(TypedDict):
    """A watcher's `released`, `expired` and `revoked`."""

    key: str
    fencing_token: int


class ValueEvent(EndedEvent, total=False):
    value: Optional[str]


class AcquiredEvent(ValueEvent, total=True):
    """A watcher's `acquired`."""

    expires_at_ms: int


class SessionBody(TypedDict, total=False):
    """`POST /sessions`."""

    ttl_ms: Optional[int]
    lock_delay_ms: Optional[int]
    value: Optional[str]


class SessionGrant(TypedDict):
    """`201` to `POST /sessions`, and a streamed session's `opened` event."""

    id: str
    ttl_ms: int
    lock_delay_ms: int
    expires_at_ms: int


class SessionRenewedEvent(TypedDict):
    """A streamed session's `renewed`."""

    expires_at_ms: int


class SessionEndedEvent(TypedDict):
    """A streamed session's `ended`: `expired`, `deleted` or `shutting-down`."""

    reason: str


class _ProblemKeys(TypedDict):
    type: str
    title: str
    status: int
    detail: str


class Problem(_ProblemKeys, total=False):
    key: Optional[str]
    field: Optional[str]
    retry_after_ms: Optional[int]
    cycle: Optional[List[str]]
