# Written by scripts/unasync.py from lockgate/_async/lock.py: edit that file, not this one.
"""A streamed lock, `Lock`: held while its connection to the gateway
stays open.

The lock is one `POST /locks` with `Accept: text/event-stream`: the
gateway renews the lease for as long as the response stays open, and ends
the hold the moment it closes. Holding it (the stream, its deadline, its
loss, the block) is `holding.Holding`'s, as for a lock set and a
session; what is the lock's own is here: its terms, its grant, its place
in the queue, and the changes of its hold.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, cast

from .._api import LockGrant, LockMode
from .._protocol import LOCK, acquire_body
from ..errors import LockgateError
from ._interfaces import GatewayInterface, SessionInterface
from .holding import Held, Holding

__all__ = ["Lock"]


class Lock(Held):
    """A streamed lock: held while its connection to the gateway stays open.

    `key`, `token` and `fencing_token` are set once it is acquired; hand
    the fencing token to whatever the lock protects. `lost` is set once the
    lock is gone, and `check()` raises `LockLost` from then on. Leaving the
    `with` block releases it (at most once) and raises `LockLost` if
    the lock was lost while the block ran, unless the block raised an
    exception of its own, which is never replaced. In asyncio a lost lock
    also cancels the task running the block, and the block raises
    `LockLost` in place of that cancellation (a cancellation from anywhere
    else goes on).

    A lock taken through a `session` hangs on the session's lease: it is
    lost when the session is (reason `session-ended`), and `ttl` is the
    session's. One taken with the `session_id` of a session opened
    elsewhere hangs on that one: its stream tells when the session ends.
    """

    def __init__(
        self,
        gateway: GatewayInterface,
        key: str,
        *,
        ttl: float,
        wait: float,
        mode: Optional[LockMode] = None,
        limit: Optional[int] = None,
        permits: Optional[int] = None,
        value: Optional[str] = None,
        on_lost: Optional[Callable[["Lock"], Any]] = None,
        on_queued: Optional[Callable[[int], Any]] = None,
        session: Optional[SessionInterface] = None,
        session_id: Optional[str] = None,
    ) -> None:
        self.gateway = gateway
        self.key = key
        #: The session the lock hangs on, if it was opened here.
        self.session = session
        self.ttl = ttl
        self.wait = wait
        self.mode = mode
        self.limit = limit
        #: The places of the counting lock this holder takes.
        self.permits = permits
        self.value = value
        #: Told each place in the queue while the lock waits (1 is next).
        self.on_queued = on_queued
        self.token: Optional[str] = None
        self.fencing_token: Optional[int] = None
        #: The `acquired` event's data: the grant as the gateway made it.
        self.grant: Dict[str, Any] = {}
        #: The place in the lock's queue while waiting (1 is next).
        self.position: Optional[int] = None
        self._holding = Holding(
            self, gateway, LOCK, key, f"lock {key!r}", on_lost=on_lost, session=session, session_id=session_id
        )
        own = self._holding.own_lease
        self._request_body = acquire_body(
            key, ttl=ttl if own else None, wait=wait, mode=mode, limit=limit, permits=permits, value=value,
            session=self._holding.session_id,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key={self.key!r}, fencing_token={self.fencing_token}, {self._holding.state})"

    # -- acquiring -------------------------------------------------------

    def acquire(self) -> "Lock":
        """Takes the lock, waiting up to `wait` seconds; raises `LockHeld`
        when the wait runs out."""
        self._holding.open(
            self._request_body, wait=self.wait, ttl=self.ttl, accept=self._granted, on_queued=self._queued
        )
        return self

    def _take(self) -> None:
        self.acquire()

    def _queued(self, position: int) -> None:
        self.position = position
        if self.on_queued is not None:
            self.on_queued(position)

    def _granted(self, data: Dict[str, Any]) -> None:
        grant = cast(LockGrant, data)
        self.grant = dict(grant)
        self.token = grant["token"]
        self.fencing_token = grant["fencing_token"]
        self.position = None

    def _held_token(self) -> str:
        """The token, once `check()` found the lock still held."""
        self.check()
        return cast(str, self.token)

    # -- changing the hold -----------------------------------------------

    def upgrade(self, *, wait: float = 0.0) -> None:
        """Makes this shared hold the exclusive one without letting go,
        waiting up to `wait` seconds for the other shared holders to leave.
        The hold gets a new, larger fencing token (`fencing_token`). Raises
        `LockHeld` when the wait ran out (the shared hold is kept) and
        `Deadlock` when another holder is upgrading already."""
        self._change_mode("exclusive", wait)

    def downgrade(self) -> None:
        """Makes this exclusive hold a shared one without letting go (the
        fencing token stays), letting the readers waiting behind it in."""
        self._change_mode("shared", 0.0)

    def _change_mode(self, mode: LockMode, wait: float) -> None:
        changed = self.gateway.change_mode(self.key, self._held_token(), mode, wait=wait)
        with self._holding.guard:
            self.mode = changed["mode"]
            self.fencing_token = changed["fencing_token"]

    def set_value(self, value: Optional[str]) -> None:
        """Replaces the public value of the lock's holder (what `inspect`
        and watchers show; None clears it) while it is held."""
        self.gateway.set_value(self.key, self._held_token(), value)
        self.value = value

    # -- releasing -------------------------------------------------------

    def release(self) -> None:
        """Releases the lock (once; later calls do nothing). Raises
        `LockLost` when the gateway found it already gone, and
        `GatewayUnavailable` when it could not be asked (the closed
        connection still ends the hold, or the lease does)."""
        self._holding.give_back()

    def _give_back(self) -> Optional[LockgateError]:
        return self._holding.release_locks([self.key], cast(str, self.token))
