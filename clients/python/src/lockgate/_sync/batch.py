# Written by scripts/unasync.py from lockgate/_async/batch.py: edit that file, not this one.
"""Several locks at once, `LockSet`: one `POST /locks/batch`, all or
none, one owner token for every lock.

The gateway does not stream a batch: each of its locks is an ordinary
lease of the one token. The client keeps them alive itself, renewing
every lock (`PUT /locks/{key}/ttl`) every third of the lease, and a
deadline declares the set lost when no renewal succeeded before the
lease could have ended, less the safety margin, as for a streamed lock.
A renewal the gateway answers `lock-not-found` or `not-owner` (expired,
revoked, released by someone with the token) loses the set at once. A
batch taken in a session has no lease of its own: the session's
keepalive and loss are its.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from types import TracebackType
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Type, Union, cast

from .. import _forks
from .._api import BatchGrant
from .._protocol import (
    JOIN_TIMEOUT,
    LeaseClock,
    answer,
    batch_body,
    lost_error,
    note_failed_release,
    session_lost_error,
)
from ..errors import GatewayUnavailable, LockgateError, LockLost, NotOwner
from ..models import HeldLock
from ._concurrency import Body, Deadline, LostFlag, Renewer, call_on_lost, shielded
from ._interfaces import GatewayInterface, SessionInterface

__all__ = ["LockSet"]

log = logging.getLogger("lockgate")


class LockSet:
    """Several locks taken together for one owner token: entering its
    `with` block takes every lock or none (or `await
    locks.acquire()`), leaving it releases them all.

    `locks` lists each lock's key, mode and fencing token (each key counts
    its own: pass `fencing_tokens[key]` to the resource of that key);
    `lost` is set once any of them is lost, which loses the set: in
    asyncio the block's body is cancelled and the block raises `LockLost`,
    in the sync client the body asks (`check()`, `lost`).
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
        on_lost: Optional[Callable[["LockSet"], Any]] = None,
    ) -> None:
        self.gateway = gateway
        self.session = session
        self.ttl = ttl
        self.wait = wait
        self.value = value
        self.on_lost = on_lost
        self._request_body = batch_body(
            locks,
            ttl=ttl if session is None else None,
            wait=wait,
            value=value,
            session=session._id_for_lock() if session is not None else None,
        )
        self.keys: List[str] = [lock["key"] for lock in self._request_body["locks"]]
        #: The owner token of every lock of the set, once taken.
        self.token: Optional[str] = None
        self.locks: List[HeldLock] = []
        #: The grant as the gateway made it.
        self.grant: Dict[str, Any] = {}
        self.lost_reason: Optional[str] = None
        self._lost: Optional[LostFlag] = None
        # Reentrant: `lost` is made under it, also by code that holds it.
        self._guard = threading.RLock()
        self._clock: Optional[LeaseClock] = None
        self._renewer = Renewer()
        self._deadline = Deadline(functools.partial(self._lose, "lease-expired"), "lockgate-batch-watchdog")
        self._body = Body(",".join(self.keys))
        self._releasing = False
        self._released = False
        self._forked = False
        self._pid = 0

    def __repr__(self) -> str:
        state = (
            "lost" if self.lost_reason else "released" if self._released
            else "held" if self.token else "not acquired"
        )
        return f"{type(self).__name__}(keys={self.keys!r}, {state})"

    @property
    def lost(self) -> LostFlag:
        """Set once the set is lost: a `threading.Event` in the sync client,
        an `asyncio.Event` in the asyncio one."""
        with self._guard:
            if self._lost is None:
                self._lost = LostFlag()
            return self._lost

    @property
    def fencing_tokens(self) -> Dict[str, int]:
        """Each key's fencing token."""
        return {lock.key: lock.fencing_token for lock in self.locks}

    # -- acquiring -------------------------------------------------------

    def acquire(self) -> "LockSet":
        """Takes every lock, waiting up to `wait` seconds in all; raises
        `LockHeld` (whose `.problem["key"]` names the lock that was held)
        or `Deadlock`, and then holds none of them."""
        if self.token is not None:
            raise RuntimeError("the locks were already acquired; make a new set with gateway.lock_all()")
        if self.session is not None and self.session.lost_reason is not None:
            raise session_lost_error(self.session.lost_reason)
        self.lost  # made now (asyncio: inside the loop)
        # Not sent again when the answer was lost: a second batch would
        # wait for the locks the first one may hold, whose lease ends them.
        response, sent_at = self.gateway._send(
            "POST", "/locks/batch", json=self._request_body, extra_time=self.wait, retry_unanswered=False
        )
        grant = cast(BatchGrant, answer(response))
        self._hold(grant, sent_at)
        return self

    def _hold(self, grant: BatchGrant, sent_at: float) -> None:
        if self.session is None:
            clock = LeaseClock(sent_at)
            clock.started(grant["ttl_ms"], grant["expires_at_ms"], time.monotonic(), waited_ms=grant["waited_ms"])
        else:
            clock = self.session._lease_clock
        with self._guard:
            self.grant = dict(grant)
            self.token = grant["token"]
            self.locks = [HeldLock(lock["key"], lock["mode"], lock["fencing_token"]) for lock in grant["locks"]]
            self._clock = clock
            self._pid = os.getpid()
        _forks.track(self)
        if self.session is None:
            self._deadline.set(clock.deadline)
            self._renewer.start(self._renew, clock.ttl / 3.0, "lockgate-batch-renewer")
        else:
            self.session._attach(self)

    # -- holding ---------------------------------------------------------

    def _renew(self) -> bool:
        """Renews every lock of the set; False once the set is lost."""
        token, clock = self.token, self._clock
        if token is None or clock is None or self.lost_reason is not None:
            return False
        ends: List[int] = []
        for key in self.keys:
            try:
                renewed = self.gateway.extend(key, token, clock.ttl)
            except (LockLost, NotOwner) as exc:
                log.debug("renewing %r of a batch: %r", key, exc)
                self._lose("lock-gone")
                return False
            except GatewayUnavailable as exc:
                # The deadline decides: a later renewal may still come in time.
                log.debug("renewing %r of a batch: %r", key, exc)
                return True
            if renewed.expires_at_ms is not None:
                ends.append(renewed.expires_at_ms)
        with self._guard:
            if ends and self.lost_reason is None and not self._releasing:
                clock.renewed(min(ends), time.monotonic())
                self._deadline.set(clock.deadline)
        return True

    def _lose(self, reason: str) -> None:
        with self._guard:
            if self.lost_reason is not None or self._releasing or self._forked:
                return
            self.lost_reason = reason
            self.lost.set()
        self._deadline.cancel()
        self._renewer.stop()
        log.warning("locks %r lost: %s", self.keys, reason)
        self._body.interrupt()
        call_on_lost(self.on_lost, self)

    def _forked_away(self) -> None:
        # In a forked child: take no lock the parent's threads may have held.
        self._guard = threading.RLock()
        self._forked = True
        self._renewer.abandon()

    @property
    def _in_other_process(self) -> bool:
        return self._forked or (self._pid != 0 and os.getpid() != self._pid)

    @property
    def remaining(self) -> float:
        """Seconds until the set counts as lost unless a renewal succeeds
        first."""
        clock = self._clock
        if clock is None or self.lost_reason is not None:
            return 0.0
        return max(0.0, clock.deadline - time.monotonic())

    def check(self) -> None:
        """Raises `LockLost` unless every lock of the set is still held (as
        far as this process can know: a renewal succeeded in time)."""
        what = ", ".join(self.keys)
        if self._in_other_process:
            raise lost_error(what, "forked")
        if self.token is None:
            raise LockLost(f"locks {what} are not acquired")
        clock = self._clock
        if self.lost_reason is None and self.session is not None:
            self.session._expire_if_due()  # which loses this set too
        elif self.lost_reason is None and clock is not None and time.monotonic() >= clock.deadline:
            self._lose("lease-expired")
        if self.lost_reason is not None:
            raise lost_error(what, self.lost_reason)
        if self._released:
            raise lost_error(what, "released")

    # -- releasing -------------------------------------------------------

    def release(self) -> None:
        """Releases every lock of the set (once; later calls do nothing).
        Raises `LockLost` when the gateway found one already gone, and
        `GatewayUnavailable` when one could not be released (its lease
        ends it)."""
        with self._guard:
            token = self.token
            if self._released or token is None:
                return
            self._released = True
            if self._in_other_process:
                return
            was_lost = self.lost_reason is not None
            self._releasing = True
        self._deadline.cancel()
        self._stop_following()
        error: Optional[LockgateError] = None
        for key in self.keys:
            try:
                self.gateway.release(key, token)
            except (LockLost, NotOwner) as exc:
                if was_lost:
                    continue
                with self._guard:
                    self.lost_reason = self.lost_reason or "lock-gone"
                    self.lost.set()
                if error is None:
                    error = lost_error(key, self.lost_reason or "lock-gone")
                    error.__cause__ = exc
            except LockgateError as exc:
                error = error or exc
        if error is not None:
            raise error

    def _ends_with_session(self) -> bool:
        """Said by the set's session as it ends, which releases its locks
        with it: no release of its own. Whether it has to stop following
        (`_stop_following`)."""
        with self._guard:
            if self._released or self.token is None:
                return False
            self._released = True
            if self._in_other_process:
                return False
            self._releasing = True
        self._deadline.cancel()
        return True

    def _stop_following(self) -> None:
        """Stops the renewals."""
        self._renewer.stop()
        self._renewer.join(JOIN_TIMEOUT)
        _forks.forget(self)
        if self.session is not None:
            self.session._detach(self)

    def __enter__(self) -> "LockSet":
        self.acquire()
        self._body.enter()
        if self.lost_reason is not None:  # lost before the body began
            shielded(self.release)
            raise lost_error(", ".join(self.keys), self.lost_reason)
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        ours = self._body.leave(exc)
        if self._in_other_process:
            return
        what = ", ".join(self.keys)
        try:
            shielded(self.release)
        except LockgateError as error:
            if ours:
                raise lost_error(what, self.lost_reason or "lock-gone") from exc
            if exc is not None:
                note_failed_release(exc, f"releasing {what}", error)
                return
            if isinstance(error, GatewayUnavailable):
                log.warning("releasing locks %s: %s", what, error)
                return
            raise
        if ours:
            raise lost_error(what, self.lost_reason or "lock-gone") from exc
        if exc is None and self.lost_reason is not None:
            raise lost_error(what, self.lost_reason)
