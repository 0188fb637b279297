# The source of both clients: scripts/unasync.py writes the sync one (lockgate/_sync/) from it.
"""What locks, lock sets, sessions and watchers ask of their gateway and of
the session they live in, as protocols: `AsyncGatewayInterface`,
`AsyncSessionInterface`.

The gateway and the session make those objects, so the modules that define
them name their gateway and session by these protocols instead of importing
gateway.py and session.py back (httpcore's `interfaces` do the same).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Protocol, Tuple

import httpx

from .._api import LockMode, ModeChange
from .._protocol import LeaseClock
from ..models import LockInfo

__all__ = ["AsyncGatewayInterface", "AsyncRenewedLease", "AsyncSessionInterface", "AsyncSessionMember"]


class AsyncRenewedLease(Protocol):
    """A lease as `extend` returns it: when it now ends."""

    @property
    def expires_at_ms(self) -> Optional[int]: ...


class AsyncGatewayInterface(Protocol):
    """The gateway (`AsyncGateway`) as its locks, lock sets, sessions and
    watchers use it: the sending of requests and the plain-lock calls."""

    @property
    def timeout(self) -> float: ...

    def _http(self) -> httpx.AsyncClient: ...

    async def _send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        params: Optional[Mapping[str, Any]] = None,
        extra_time: float = 0.0,
        retry_unanswered: bool = True,
        stream: bool = False,
    ) -> Tuple[httpx.Response, float]: ...

    async def _request(self, method: str, path: str, **options: Any) -> httpx.Response: ...

    async def extend(self, key: str, token: str, ttl: float) -> AsyncRenewedLease: ...

    async def change_mode(self, key: str, token: str, mode: LockMode, *, wait: float = 0.0) -> ModeChange: ...

    async def release(self, key: str, token: str) -> int: ...

    async def inspect(self, key: str) -> Optional[LockInfo]: ...


class AsyncSessionMember(Protocol):
    """A lock or lock set held in a session: the session's loss is its loss,
    and ending the session releases it."""

    def _lose(self, reason: str) -> None: ...

    def _ends_with_session(self) -> bool: ...

    async def _stop_following(self) -> None: ...


class AsyncSessionInterface(Protocol):
    """The session (`AsyncSession`) as the locks and lock sets taken in it
    use it: its id, its lease clock, and the bookkeeping of its members."""

    @property
    def lost_reason(self) -> Optional[str]: ...

    def _id_for_lock(self) -> str: ...

    @property
    def _lease_clock(self) -> LeaseClock: ...

    def _expire_if_due(self) -> None: ...

    def _attach(self, lock: AsyncSessionMember) -> None: ...

    def _detach(self, lock: AsyncSessionMember) -> None: ...
