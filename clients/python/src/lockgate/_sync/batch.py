# Written by scripts/unasync.py from lockgate/_async/batch.py: edit that file, not this one.
"""Several locks at once, `LockSet`: one streamed `POST /locks/batch`,
all or none, one owner token for every lock.

The set is held as one streamed lock is: the gateway renews every lock of
it for as long as the response stays open, and the first of them to end
(released with the token, or lost) ends the stream, the gateway giving the
others back; closing the connection gives them all back at once. Holding
it is `holding.Holding`'s, as for a single lock; what is the set's
own is here: its locks and their fencing tokens.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union, cast

from .._api import BatchGrant
from .._protocol import LOCK_SET, batch_body
from ..errors import LockgateError
from ..models import HeldLock
from ._interfaces import GatewayInterface, SessionInterface
from .holding import Held, Holding

__all__ = ["LockSet"]


class LockSet(Held):
    """Several locks taken together for one owner token: entering its
    `with` block takes every lock or none (or `await
    locks.acquire()`), leaving it releases them all.

    `locks` lists each lock's key, mode and fencing token (each key counts
    its own: pass `fencing_tokens[key]` to the resource of that key);
    `lost` is set once any of them is lost, which loses the set (the
    gateway gives the others back; `lost_key` names the one that ended
    it): in asyncio the block's body is cancelled and the block raises
    `LockLost`, in the sync client the body asks (`check()`, `lost`).
    """

    def __init__(
        self,
        gateway: GatewayInterface,
        locks: Sequence[Union[str, Mapping[str, Any]]],
        *,
        ttl: float,
        wait: float,
        value: Optional[str] = None,
        session: Optional[SessionInterface] = None,
        session_id: Optional[str] = None,
        on_lost: Optional[Callable[["LockSet"], Any]] = None,
    ) -> None:
        self.gateway = gateway
        #: The session the set hangs on, if it was opened here.
        self.session = session
        self.ttl = ttl
        self.wait = wait
        self.value = value
        in_session = session._id_for_lock() if session is not None else session_id
        self._request_body = batch_body(
            locks, ttl=ttl if in_session is None else None, wait=wait, value=value, session=in_session
        )
        self.keys: List[str] = [lock["key"] for lock in self._request_body["locks"]]
        #: The owner token of every lock of the set, once taken.
        self.token: Optional[str] = None
        self.locks: List[HeldLock] = []
        #: The grant as the gateway made it.
        self.grant: Dict[str, Any] = {}
        names = ", ".join(self.keys)
        self._holding = Holding(
            self, gateway, LOCK_SET, names, f"locks {names}", on_lost=on_lost, session=session, session_id=session_id
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(keys={self.keys!r}, {self._holding.state})"

    @property
    def fencing_tokens(self) -> Dict[str, int]:
        """Each key's fencing token."""
        return {lock.key: lock.fencing_token for lock in self.locks}

    @property
    def lost_key(self) -> Optional[str]:
        """The lock whose end lost the set, as the gateway named it (None
        while the set is held, and when the loss named none: the gateway
        shut down, or this client's deadline or connection decided)."""
        return self._holding.ended_by

    # -- acquiring -------------------------------------------------------

    def acquire(self) -> "LockSet":
        """Takes every lock, waiting up to `wait` seconds in all; raises
        `LockHeld` (whose `.problem["key"]` names the lock that was held)
        or `Deadlock`, and then holds none of them."""
        self._holding.open(self._request_body, wait=self.wait, ttl=self.ttl, accept=self._granted)
        return self

    def _take(self) -> None:
        self.acquire()

    def _granted(self, data: Dict[str, Any]) -> None:
        grant = cast(BatchGrant, data)
        self.grant = dict(grant)
        self.token = grant["token"]
        self.locks = [HeldLock(lock["key"], lock["mode"], lock["fencing_token"]) for lock in grant["locks"]]

    # -- releasing -------------------------------------------------------

    def release(self) -> None:
        """Releases every lock of the set (once; later calls do nothing),
        each with `DELETE` and the token. Raises `LockLost` when the
        gateway found the first one already gone, and `GatewayUnavailable`
        when it could not be asked (the closed connection still gives them
        all back, or their leases end them)."""
        self._holding.give_back()

    def _give_back(self) -> Optional[LockgateError]:
        return self._holding.release_locks(self.keys, cast(str, self.token))
