# The source of both clients: scripts/unasync.py writes the sync one (lockgate/_sync/) from it.
"""A session, `AsyncSession`: one lease that any number of locks hang on,
kept alive while its connection to the gateway stays open.

The session is one `POST /sessions` with `Accept: text/event-stream`: the
gateway keeps it alive for as long as the response stays open and ends it
(releasing its locks) the moment it closes. Its locks and lock sets are
streamed ones taken with `"session"`: the gateway does not renew them, the
session's keepalive is theirs, and each one's own stream tells its end.
Holding it is `holding.AsyncHolding`'s, as for a lock: a lost session loses
everything taken through it (and, in asyncio, cancels their blocks'
bodies); ending it releases them with it.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Union, cast
from urllib.parse import quote

from .._api import LockMode, SessionGrant
from .._protocol import SESSION, answer, session_body, session_lost_error
from ..errors import LockgateError, SessionNotFound
from ._interfaces import AsyncGatewayInterface
from .batch import AsyncLockSet
from .holding import AsyncHeld, AsyncHolding
from .lock import AsyncLock

__all__ = ["AsyncSession"]


class AsyncSession(AsyncHeld):
    """A session: one lease for many locks, held while its connection to the
    gateway stays open.

    Entering its `async with` block opens it (or `await session.open()`);
    `session.lock(key, ...)` makes a lock that hangs on it. `lost` is set
    once the session is gone (the gateway ended it, its connection broke,
    or no renewal came in time), and with it every lock taken through it is
    lost (`session-ended`). Leaving the block ends the session, which
    releases its locks at once, and raises `LockLost` if the session was
    lost while the block ran, unless the block raised an exception of its
    own, which is never replaced.

    `id` is the session's secret: whoever has it can take locks in the
    session and end it. It is never shown by `repr`.
    """

    def __init__(
        self,
        gateway: AsyncGatewayInterface,
        *,
        ttl: float,
        lock_delay: float,
        value: Optional[str] = None,
        on_lost: Optional[Callable[["AsyncSession"], Any]] = None,
    ) -> None:
        self.gateway = gateway
        self.ttl = ttl
        self.lock_delay = lock_delay
        self.value = value
        #: The session's id, once opened: a secret, like an owner token.
        self.id: Optional[str] = None
        self._request_body = session_body(ttl=ttl, lock_delay=lock_delay, value=value)
        self._holding = AsyncHolding(self, gateway, SESSION, "session", "the session", on_lost=on_lost)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(ttl={self.ttl}, {self._holding.state}, locks={len(self._holding.members)})"

    def lock(
        self,
        key: str,
        *,
        wait: float = 0.0,
        mode: Optional[LockMode] = None,
        limit: Optional[int] = None,
        permits: Optional[int] = None,
        value: Optional[str] = None,
        on_lost: Optional[Callable[[AsyncLock], Any]] = None,
        on_queued: Optional[Callable[[int], Any]] = None,
    ) -> AsyncLock:
        """A streamed lock on `key` in this session, taken when its `async
        with` block starts (or by `await lock.acquire()`), as
        `gateway.lock` makes one; it has no lease of its own: it lives as
        long as the session, unless released first."""
        return AsyncLock(
            self.gateway,
            key,
            ttl=self.ttl,
            wait=wait,
            mode=mode,
            limit=limit,
            permits=permits,
            value=value,
            on_lost=on_lost,
            on_queued=on_queued,
            session=self,
        )

    def lock_all(
        self,
        locks: Sequence[Union[str, Mapping[str, Any]]],
        *,
        wait: float = 0.0,
        value: Optional[str] = None,
        on_lost: Optional[Callable[[AsyncLockSet], Any]] = None,
    ) -> AsyncLockSet:
        """Several locks taken together in this session, all or none, as
        `gateway.lock_all` takes them (one streamed batch); they live as
        long as the session, unless released first. A wait that closes a
        cycle with another session's raises `Deadlock`."""
        return AsyncLockSet(self.gateway, locks, ttl=self.ttl, wait=wait, value=value, session=self, on_lost=on_lost)

    # -- opening ---------------------------------------------------------

    async def open(self) -> "AsyncSession":
        """Opens the session on the gateway."""
        await self._holding.open(self._request_body, wait=0.0, ttl=self.ttl, accept=self._opened)
        return self

    async def _take(self) -> None:
        await self.open()

    def _opened(self, data: Dict[str, Any]) -> None:
        grant = cast(SessionGrant, data)
        self.id = grant["id"]
        self.ttl = grant["ttl_ms"] / 1000.0
        self.lock_delay = grant["lock_delay_ms"] / 1000.0

    def _id_for_lock(self) -> str:
        """The id a lock in the session is taken with."""
        if self.id is None:
            raise RuntimeError("the session is not open: enter its block (or open() it) before taking locks in it")
        return self.id

    # -- ending ----------------------------------------------------------

    async def end(self) -> None:
        """Ends the session (once; later calls do nothing), which releases
        every lock in it at once. Raises `LockLost` when the gateway found
        it already gone, and `GatewayUnavailable` when it could not be
        asked (the closed connection still ends it, or its lease does)."""
        await self._holding.give_back()

    async def _give_back(self) -> Optional[LockgateError]:
        """`DELETE`s the session; returns the error to raise, if any."""
        try:
            response = await self.gateway._request(
                "DELETE", "/sessions/" + quote(self._id_for_lock(), safe=""), retry_unanswered=False
            )
            answer(response)
        except SessionNotFound as exc:
            # It was gone before the end: lost while held. Its stream is
            # about to say why, if it has not yet.
            told = await self._holding.told_end()
            lost = session_lost_error(self._holding.found_lost(told or "expired"))
            lost.__cause__ = exc
            return lost
        except LockgateError as exc:
            return exc
        return None
