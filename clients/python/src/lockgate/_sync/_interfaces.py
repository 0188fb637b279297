# Written by scripts/unasync.py from lockgate/_async/_interfaces.py: edit that file, not this one.
"""What locks, lock sets, sessions and watchers ask of their gateway and of
the session they live in, as protocols: `GatewayInterface`,
`SessionInterface` (and its `ParentHolding`).

The gateway and the session make those objects, so the modules that define
them name their gateway and session by these protocols instead of importing
gateway.py, session.py and holding.py back (httpcore's `interfaces` do the
same).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Protocol, Tuple

import httpx

from .._api import LockMode, ModeChange
from .._protocol import LeaseClock
from ..errors import LockLost
from ..models import LockInfo

__all__ = ["GatewayInterface", "ParentHolding", "ValuedLease", "SessionInterface"]


class ValuedLease(Protocol):
    """A lease as `set_value` returns it: when it ends."""

    @property
    def expires_at_ms(self) -> Optional[int]: ...


class GatewayInterface(Protocol):
    """The gateway (`Gateway`) as its locks, lock sets, sessions and
    watchers use it: the sending of requests and the plain-lock calls."""

    @property
    def timeout(self) -> float: ...

    def _http(self) -> httpx.Client: ...

    def _stream(
        self, path: str, body: Mapping[str, Any], *, extra_time: float, retried: bool
    ) -> Tuple[httpx.Response, float]: ...

    def _request(self, method: str, path: str, **options: Any) -> httpx.Response: ...

    def change_mode(self, key: str, token: str, mode: LockMode, *, wait: float = 0.0) -> ModeChange: ...

    def set_value(self, key: str, token: str, value: Optional[str]) -> ValuedLease: ...

    def release(self, key: str, token: str) -> int: ...

    def inspect(self, key: str) -> Optional[LockInfo]: ...


class ParentHolding(Protocol):
    """A session's holding as the holdings of the locks and lock sets taken
    in it use it: its lease is theirs, its loss theirs, and they join it
    and leave it."""

    reason: Optional[str]

    @property
    def lease_clock(self) -> Optional[LeaseClock]: ...

    @property
    def expires_at_ms(self) -> Optional[int]: ...

    def error(self, reason: str) -> LockLost: ...

    def expire_if_due(self) -> None: ...

    def _attach(self, member: Any) -> None: ...

    def _detach(self, member: Any) -> None: ...


class SessionInterface(Protocol):
    """The session (`Session`) as the locks and lock sets taken in it
    use it: its id, and its holding, which theirs hang on."""

    @property
    def _holding(self) -> ParentHolding: ...

    def _id_for_lock(self) -> str: ...
