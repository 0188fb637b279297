# Written by scripts/unasync.py from lockgate/_async/lock.py: edit that file, not this one.
"""A streamed lock, `Lock`: held while its connection to the gateway
stays open.

The lock is one `POST /locks` with `Accept: text/event-stream`: the
gateway renews the lease for as long as the response stays open, and ends
the hold the moment it closes. A reader follows the stream's events, and a
deadline declares the lock lost when no renewal arrived before the lease
could have ended, less a safety margin: that covers a gateway that died,
froze or lost its network without a word. A lock taken in a session has no
lease of its own: the session's renewals and deadline are its, and the
session's loss is its loss. How the reader, the deadline and the block's
body run (asyncio: a task, a timer, a task cancelled on a loss; sync: two
threads, and a body that asks) is in `_concurrency`.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from types import TracebackType
from typing import Any, Iterator, Callable, Dict, Optional, Type, cast

import httpx

from .. import _forks
from .._api import LockGrant, LockMode, LockStreamEventName, LostEvent, QueuedEvent, RenewedEvent
from .._protocol import (
    JOIN_TIMEOUT,
    STREAM_HEADERS,
    STREAM_SILENCE,
    LeaseClock,
    acquire_body,
    event_json,
    lost_error,
    note_failed_release,
    problem_error,
    refusal_error,
    session_lost_error,
    unreachable,
)
from ..errors import GatewayUnavailable, LockgateError, LockLost, NotOwner
from ..sse import Event, EventStreamParser
from ._concurrency import Body, Deadline, LostFlag, StreamReader, call_on_lost, close_quietly, shielded
from ._interfaces import GatewayInterface, SessionInterface

__all__ = ["Lock", "stream_events"]

log = logging.getLogger("lockgate")


def stream_events(response: httpx.Response, last_event_id: str = "") -> Iterator[Event]:
    """The Server-Sent Events of a streamed answer, as they arrive."""
    parser = EventStreamParser(last_event_id)
    for chunk in response.iter_bytes():
        for event in parser.feed(chunk):
            yield event


class Lock:
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
    session's.
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
        session: Optional[SessionInterface] = None,
    ) -> None:
        self.gateway = gateway
        self.key = key
        #: The session the lock hangs on, if any.
        self.session = session
        self.ttl = ttl
        self.wait = wait
        self.mode = mode
        self.limit = limit
        #: The places of the counting lock this holder takes.
        self.permits = permits
        self.value = value
        self.on_lost = on_lost
        self.token: Optional[str] = None
        self.fencing_token: Optional[int] = None
        #: The `acquired` event's data: the grant as the gateway made it.
        self.grant: Dict[str, Any] = {}
        #: The place in the lock's queue while waiting (1 is next).
        self.position: Optional[int] = None
        self.lost_reason: Optional[str] = None
        self._lost: Optional[LostFlag] = None
        self._request_body = acquire_body(
            key,
            ttl=ttl if session is None else None,
            wait=wait,
            mode=mode,
            limit=limit,
            permits=permits,
            value=value,
            session=session._id_for_lock() if session is not None else None,
        )
        # Reentrant: `lost` is made under it, also by code that holds it.
        self._guard = threading.RLock()
        self._clock: Optional[LeaseClock] = None
        self._reader = StreamReader()
        self._deadline = Deadline(functools.partial(self._lose, "lease-expired"), f"lockgate-watchdog-{key}")
        self._body = Body(key)
        self._releasing = False
        self._released = False
        self._forked = False
        self._pid = 0

    def __repr__(self) -> str:
        state = (
            "lost" if self.lost_reason else "released" if self._released
            else "held" if self.token else "not acquired"
        )
        return f"{type(self).__name__}(key={self.key!r}, fencing_token={self.fencing_token}, {state})"

    @property
    def lost(self) -> LostFlag:
        """Set once the lock is lost: a `threading.Event` in the sync
        client, an `asyncio.Event` in the asyncio one."""
        with self._guard:
            if self._lost is None:
                # Made on first use: Python 3.9 binds an asyncio.Event to
                # the event loop of the moment.
                self._lost = LostFlag()
            return self._lost

    # -- acquiring -------------------------------------------------------

    def acquire(self) -> "Lock":
        """Takes the lock, waiting up to `wait` seconds; raises `LockHeld`
        when the wait runs out."""
        if self.token is not None:
            raise RuntimeError(f"lock {self.key!r} was already acquired; make a new one with gateway.lock()")
        if self.session is not None and self.session.lost_reason is not None:
            raise session_lost_error(self.session.lost_reason)
        self.lost  # made now (asyncio: inside the loop)
        # Reads are never further apart than the wait before the grant, or
        # a third of the lease after it (renewals; in a session, only the
        # gateway's keep-alive comments). The deadline (the session's, in
        # one) declares the lock lost long before this read timeout; it
        # only makes sure a reader blocked on a silent connection ends too.
        response, sent_at = self.gateway._send(
            "POST",
            "/locks",
            json=self._request_body,
            headers=STREAM_HEADERS,
            extra_time=max(self.wait, self.ttl if self.session is None else STREAM_SILENCE),
            retry_unanswered=False,
            stream=True,
        )
        events = stream_events(response)
        try:
            grant = self._grant(response, events)
        except httpx.TransportError as exc:
            close_quietly(response)
            raise unreachable(exc) from exc
        except BaseException:
            # Closing the connection withdraws the request: the gateway stops
            # waiting and grants nothing (or releases what it just granted).
            shielded(functools.partial(close_quietly, response))
            raise
        self._hold(grant, sent_at, response, events)
        return self

    def _grant(self, response: httpx.Response, events: Iterator[Event]) -> LockGrant:
        """Reads the stream up to the grant, noting the place in the queue
        meanwhile; raises the refusal, if that is what comes."""
        if response.status_code != 200:
            response.read()
            raise problem_error(response)
        for event in events:
            name = cast(LockStreamEventName, event.event)
            if name == "queued":
                self.position = cast(QueuedEvent, event_json(event))["position"]
            elif name == "refused":
                raise refusal_error(event_json(event))
            elif name == "acquired":
                return cast(LockGrant, event_json(event))
        raise GatewayUnavailable(f"the gateway ended the stream of {self.key!r} before granting it")

    def _hold(self, grant: LockGrant, sent_at: float, response: httpx.Response, events: Iterator[Event]) -> None:
        """Takes in the grant, and starts following the stream."""
        if self.session is None:
            clock = LeaseClock(sent_at)
            clock.granted(grant, time.monotonic())
        else:
            clock = self.session._lease_clock  # its lease is the session's
        with self._guard:
            self.grant = dict(grant)
            self.token = grant["token"]
            self.fencing_token = grant["fencing_token"]
            self.position = None
            self._clock = clock
            self._pid = os.getpid()
        _forks.track(self)
        if self.session is None:
            self._deadline.set(clock.deadline)
        read = functools.partial(self._read, response, events)
        self._reader.start(read, response, f"lockgate-lock-{self.key}")
        if self.session is not None:
            # From now on the session's loss is this lock's (at once, if
            # the session was lost while the grant came).
            self.session._attach(self)

    # -- holding ---------------------------------------------------------

    def _read(self, response: httpx.Response, events: Iterator[Event]) -> None:
        """The reader: follows the stream until it ends, which loses the
        lock unless a release ended it."""
        reason = "connection-lost"
        try:
            for event in events:
                name = cast(LockStreamEventName, event.event)
                if name == "renewed":
                    self._renewed(cast(RenewedEvent, event_json(event))["expires_at_ms"])
                elif name == "released":
                    reason = "released"
                    break
                elif name == "lost":
                    reason = cast(LostEvent, event_json(event)).get("reason") or "lock-gone"
                    break
        except Exception as exc:  # the connection broke, or was cut on purpose
            log.debug("stream of %r ended: %r", self.key, exc)
        finally:
            self._reader.finished()
            close_quietly(response)
        self._lose(reason)

    def _renewed(self, expires_at_ms: int) -> None:
        with self._guard:
            if self._clock is None or self.session is not None:
                return
            self._clock.renewed(expires_at_ms, time.monotonic())
            self._deadline.set(self._clock.deadline)

    def _lose(self, reason: str) -> None:
        with self._guard:
            if self.lost_reason is not None or self._releasing or self._forked:
                return
            self.lost_reason = reason
            self.lost.set()
        self._deadline.cancel()
        log.warning("lock %r lost: %s", self.key, reason)
        # Closing the connection tells a live gateway to release at once.
        self._reader.stop()
        self._body.interrupt()
        call_on_lost(self.on_lost, self)

    def _forked_away(self) -> None:
        # In a forked child: take no lock the parent's threads may have held.
        self._guard = threading.RLock()
        self._forked = True
        self._reader.abandon()

    @property
    def _in_other_process(self) -> bool:
        return self._forked or (self._pid != 0 and os.getpid() != self._pid)

    @property
    def remaining(self) -> float:
        """Seconds until the lock counts as lost unless a renewal arrives
        first: the lease's earliest end, less the safety margin."""
        clock = self._clock
        if clock is None or self.lost_reason is not None:
            return 0.0
        return max(0.0, clock.deadline - time.monotonic())

    def check(self) -> None:
        """Raises `LockLost` unless the lock is still held (as far as this
        process can know: a renewal came in time)."""
        if self._in_other_process:
            raise lost_error(self.key, "forked")
        if self.token is None:
            raise LockLost(f"lock {self.key!r} is not acquired")
        clock = self._clock
        if self.lost_reason is None and self.session is not None:
            self.session._expire_if_due()  # which loses this lock too
        elif self.lost_reason is None and clock is not None and time.monotonic() >= clock.deadline:
            self._lose("lease-expired")
        if self.lost_reason is not None:
            raise lost_error(self.key, self.lost_reason)
        if self._released:
            raise lost_error(self.key, "released")

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
        token = self.token
        if token is None:
            raise LockLost(f"lock {self.key!r} is not acquired")
        self.check()
        changed = self.gateway.change_mode(self.key, token, mode, wait=wait)
        with self._guard:
            self.mode = changed["mode"]
            self.fencing_token = changed["fencing_token"]

    # -- releasing -------------------------------------------------------

    def release(self) -> None:
        """Releases the lock (once; later calls do nothing). Raises
        `LockLost` when the gateway found it already gone, and
        `GatewayUnavailable` when it could not be asked (the closed
        connection still ends the hold, or the lease does)."""
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
        error: Optional[LockgateError] = None
        try:
            if not was_lost:
                error = self._release_on_gateway(token)
        finally:
            self._stop_following()
        if error is not None:
            raise error

    def _ends_with_session(self) -> bool:
        """Said by the lock's session as it ends, which releases the lock
        with it: no release of its own, and the `session-ended` its stream
        is about to tell is no loss. Whether its stream is to be closed
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
        """Closes the stream (which ends the hold on a live gateway) and
        lets the reader finish."""
        self._reader.stop()
        self._reader.join(JOIN_TIMEOUT)
        _forks.forget(self)
        if self.session is not None:
            self.session._detach(self)

    def _release_on_gateway(self, token: str) -> Optional[LockgateError]:
        """`DELETE`s the lock; returns the error to raise, if any."""
        try:
            self.gateway.release(self.key, token)
        except (LockLost, NotOwner) as exc:
            # It was gone before the release: lost while held.
            with self._guard:
                self.lost_reason = reason = self.lost_reason or "lock-gone"
                self.lost.set()
            lost = lost_error(self.key, reason)
            lost.__cause__ = exc
            return lost
        except LockgateError as exc:
            return exc
        return None

    def __enter__(self) -> "Lock":
        self.acquire()
        self._body.enter()
        if self.lost_reason is not None:  # lost before the body began
            shielded(self.release)
            raise lost_error(self.key, self.lost_reason)
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
        try:
            shielded(self.release)
        except LockgateError as error:
            if ours:
                raise lost_error(self.key, self.lost_reason or "lock-gone") from exc
            if exc is not None:
                note_failed_release(exc, f"releasing {self.key!r}", error)
                return
            if isinstance(error, GatewayUnavailable):
                # The connection is closed: a live gateway has released, a
                # dead one's lease runs out. The block ran under the lock.
                log.warning("releasing lock %r: %s", self.key, error)
                return
            raise
        if ours:
            # Our cancellation becomes the loss it stands for; its traceback,
            # kept as the cause, shows where the body was stopped.
            raise lost_error(self.key, self.lost_reason or "lock-gone") from exc
        # A loss is only taken in before the release began: it happened
        # while the block ran.
        if exc is None and self.lost_reason is not None:
            raise lost_error(self.key, self.lost_reason)
