# Written by scripts/unasync.py from lockgate/_async/session.py: edit that file, not this one.
"""A session, `Session`: one lease that any number of locks hang on,
kept alive while its connection to the gateway stays open.

The session is one `POST /sessions` with `Accept: text/event-stream`: the
gateway keeps it alive for as long as the response stays open and ends it
(releasing its locks) the moment it closes. Its locks are streamed locks
taken with `"session"`: the gateway does not renew them, the session's
keepalive is theirs, and each one's own stream tells its end. A reader
follows the session's events and a deadline declares it lost when no
renewal arrived in time, as for a lock; a lost session loses every lock
taken through it (and, in asyncio, cancels their blocks' bodies).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from types import TracebackType
from typing import Any, Iterator, Callable, Mapping, Optional, Sequence, Set, Type, Union, cast
from urllib.parse import quote

import httpx

from .. import _forks
from .._api import LockMode, SessionEndedEvent, SessionGrant, SessionRenewedEvent
from .._protocol import (
    JOIN_TIMEOUT,
    STREAM_HEADERS,
    STREAM_SILENCE,
    LeaseClock,
    answer,
    event_json,
    note_failed_release,
    problem_error,
    session_body,
    session_lost_error,
    unreachable,
)
from ..errors import GatewayUnavailable, LockgateError, LockLost, SessionNotFound
from ..sse import Event
from ._concurrency import Deadline, LostFlag, StreamReader, call_on_lost, close_quietly, shielded
from ._interfaces import GatewayInterface, SessionMember
from .batch import LockSet
from .lock import Lock, stream_events

__all__ = ["Session"]

log = logging.getLogger("lockgate")


class Session:
    """A session: one lease for many locks, held while its connection to the
    gateway stays open.

    Entering its `with` block opens it (or `session.open()`);
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
        gateway: GatewayInterface,
        *,
        ttl: float,
        lock_delay: float,
        value: Optional[str] = None,
        on_lost: Optional[Callable[["Session"], Any]] = None,
    ) -> None:
        self.gateway = gateway
        self.ttl = ttl
        self.lock_delay = lock_delay
        self.value = value
        self.on_lost = on_lost
        #: The session's id, once opened: a secret, like an owner token.
        self.id: Optional[str] = None
        #: When the session ends unless kept alive (Unix ms, Redis clock),
        #: as of the last renewal.
        self.expires_at_ms: Optional[int] = None
        self.lost_reason: Optional[str] = None
        self._lost: Optional[LostFlag] = None
        self._request_body = session_body(ttl=ttl, lock_delay=lock_delay, value=value)
        # Reentrant: `lost` is made under it, also by code that holds it.
        self._guard = threading.RLock()
        self._clock: Optional[LeaseClock] = None
        self._locks: Set[SessionMember] = set()
        self._reader = StreamReader()
        self._deadline = Deadline(functools.partial(self._lose, "lease-expired"), "lockgate-session-watchdog")
        #: Why the session's stream ended: the reason of its `ended` event,
        #: or `connection-lost`.
        self._stream_end: Optional[str] = None
        self._ending = False
        self._ended = False
        self._forked = False
        self._pid = 0

    def __repr__(self) -> str:
        state = (
            "lost" if self.lost_reason else "ended" if self._ended
            else "open" if self.id else "not opened"
        )
        return f"{type(self).__name__}(ttl={self.ttl}, {state}, locks={len(self._locks)})"

    @property
    def lost(self) -> LostFlag:
        """Set once the session is lost: a `threading.Event` in the sync
        client, an `asyncio.Event` in the asyncio one."""
        with self._guard:
            if self._lost is None:
                self._lost = LostFlag()
            return self._lost

    def lock(
        self,
        key: str,
        *,
        wait: float = 0.0,
        mode: Optional[LockMode] = None,
        limit: Optional[int] = None,
        permits: Optional[int] = None,
        value: Optional[str] = None,
        on_lost: Optional[Callable[[Lock], Any]] = None,
    ) -> Lock:
        """A streamed lock on `key` in this session, taken when its `async
        with` block starts (or by `lock.acquire()`), as
        `gateway.lock` makes one; it has no lease of its own: it lives as
        long as the session, unless released first."""
        return Lock(
            self.gateway,
            key,
            ttl=self.ttl,
            wait=wait,
            mode=mode,
            limit=limit,
            permits=permits,
            value=value,
            on_lost=on_lost,
            session=self,
        )

    def lock_all(
        self,
        locks: Sequence[Union[str, Mapping[str, Any]]],
        *,
        wait: float = 0.0,
        value: Optional[str] = None,
        on_lost: Optional[Callable[[LockSet], Any]] = None,
    ) -> LockSet:
        """Several locks taken together in this session, all or none, as
        `gateway.lock_all` takes them; they live as long as the session,
        unless released first. A wait that closes a cycle with another
        session's raises `Deadlock`."""
        return LockSet(self.gateway, locks, ttl=self.ttl, wait=wait, value=value, session=self, on_lost=on_lost)

    # -- opening ---------------------------------------------------------

    def open(self) -> "Session":
        """Opens the session on the gateway."""
        if self.id is not None:
            raise RuntimeError("the session was already opened; make a new one with gateway.session()")
        self.lost  # made now (asyncio: inside the loop)
        # A streamed session whose answer was lost ended with its
        # connection: sending the request again makes no second one.
        response, sent_at = self.gateway._send(
            "POST",
            "/sessions",
            json=self._request_body,
            headers=STREAM_HEADERS,
            extra_time=STREAM_SILENCE,
            stream=True,
        )
        events = stream_events(response)
        try:
            grant = self._opened(response, events)
        except httpx.TransportError as exc:
            close_quietly(response)
            raise unreachable(exc) from exc
        except BaseException:
            # Closing the connection ends a session just opened.
            shielded(functools.partial(close_quietly, response))
            raise
        self._hold(grant, sent_at, response, events)
        return self

    def _opened(self, response: httpx.Response, events: Iterator[Event]) -> SessionGrant:
        if response.status_code != 200:
            response.read()
            raise problem_error(response)
        for event in events:
            if event.event == "opened":
                return cast(SessionGrant, event_json(event))
        raise GatewayUnavailable("the gateway ended the session's stream before opening it")

    def _hold(self, grant: SessionGrant, sent_at: float, response: httpx.Response, events: Iterator[Event]) -> None:
        """Takes in the opened session, and starts following its stream."""
        clock = LeaseClock(sent_at)
        clock.started(grant["ttl_ms"], grant["expires_at_ms"], time.monotonic())
        with self._guard:
            self.id = grant["id"]
            self.ttl = grant["ttl_ms"] / 1000.0
            self.lock_delay = grant["lock_delay_ms"] / 1000.0
            self.expires_at_ms = grant["expires_at_ms"]
            self._clock = clock
            self._pid = os.getpid()
        _forks.track(self)
        self._deadline.set(clock.deadline)
        read = functools.partial(self._read, response, events)
        self._reader.start(read, response, "lockgate-session")

    def _id_for_lock(self) -> str:
        """The id a lock in the session is taken with."""
        if self.id is None:
            raise RuntimeError("the session is not open: enter its block (or open() it) before taking locks in it")
        return self.id

    @property
    def _lease_clock(self) -> LeaseClock:
        """The session's lease clock, which its locks share."""
        clock = self._clock
        if clock is None:
            raise RuntimeError("the session is not open")
        return clock

    # -- holding ---------------------------------------------------------

    def _read(self, response: httpx.Response, events: Iterator[Event]) -> None:
        """The reader: follows the stream until it ends, which loses the
        session unless this client ended it."""
        reason = "connection-lost"
        try:
            for event in events:
                # The session's events (the document's description of the
                # streamed answer): opened, renewed, ended.
                if event.event == "renewed":
                    self._renewed(cast(SessionRenewedEvent, event_json(event))["expires_at_ms"])
                elif event.event == "ended":
                    reason = cast(SessionEndedEvent, event_json(event)).get("reason") or "expired"
                    break
        except Exception as exc:  # the connection broke, or was cut on purpose
            log.debug("stream of the session ended: %r", exc)
        finally:
            self._reader.finished()
            close_quietly(response)
        self._stream_end = reason
        self._lose(reason)

    def _renewed(self, expires_at_ms: int) -> None:
        with self._guard:
            if self._clock is None:
                return
            self._clock.renewed(expires_at_ms, time.monotonic())
            self.expires_at_ms = expires_at_ms
            self._deadline.set(self._clock.deadline)

    def _lose(self, reason: str) -> None:
        with self._guard:
            if self.lost_reason is not None or self._ending or self._forked:
                return
            self.lost_reason = reason
            self.lost.set()
            locks = list(self._locks)
        self._deadline.cancel()
        log.warning("session lost: %s", reason)
        # Closing the connection tells a live gateway to end it at once.
        self._reader.stop()
        for lock in locks:
            lock._lose("session-ended")
        call_on_lost(self.on_lost, self)

    def _expire_if_due(self) -> None:
        """Loses the session if its deadline has passed (the watchdog may
        not have run yet)."""
        clock = self._clock
        if self.lost_reason is None and clock is not None and time.monotonic() >= clock.deadline:
            self._lose("lease-expired")

    def _attach(self, lock: SessionMember) -> None:
        """A lock was granted in the session: its loss is the lock's."""
        with self._guard:
            lost = self.lost_reason is not None
            if not lost:
                self._locks.add(lock)
        if lost:
            lock._lose("session-ended")

    def _detach(self, lock: SessionMember) -> None:
        with self._guard:
            self._locks.discard(lock)

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
        """Seconds until the session (and every lock in it) counts as lost
        unless a renewal arrives first: the lease's earliest end, less the
        safety margin."""
        clock = self._clock
        if clock is None or self.lost_reason is not None:
            return 0.0
        return max(0.0, clock.deadline - time.monotonic())

    def check(self) -> None:
        """Raises `LockLost` unless the session still holds (as far as this
        process can know: a renewal came in time)."""
        if self._in_other_process:
            raise session_lost_error("forked")
        if self.id is None:
            raise LockLost("the session is not open")
        self._expire_if_due()
        if self.lost_reason is not None:
            raise session_lost_error(self.lost_reason)
        if self._ended:
            raise session_lost_error("ended")

    # -- ending ----------------------------------------------------------

    def end(self) -> None:
        """Ends the session (once; later calls do nothing), which releases
        every lock in it at once. Raises `LockLost` when the gateway found
        it already gone, and `GatewayUnavailable` when it could not be
        asked (the closed connection still ends it, or its lease does)."""
        with self._guard:
            session_id = self.id
            if self._ended or session_id is None:
                return
            self._ended = True
            if self._in_other_process:
                return
            was_lost = self.lost_reason is not None
            self._ending = True
            locks = list(self._locks)
        self._deadline.cancel()
        # Released with the session, not one by one; their streams are
        # about to tell `session-ended`, which is no loss now.
        ending = [lock for lock in locks if lock._ends_with_session()]
        error: Optional[LockgateError] = None
        try:
            if not was_lost:
                error = self._end_on_gateway(session_id)
        finally:
            for lock in ending:
                lock._stop_following()
            self._reader.stop()
            self._reader.join(JOIN_TIMEOUT)
            _forks.forget(self)
        if error is not None:
            raise error

    def _end_on_gateway(self, session_id: str) -> Optional[LockgateError]:
        """`DELETE`s the session; returns the error to raise, if any."""
        try:
            response = self.gateway._request(
                "DELETE", "/sessions/" + quote(session_id, safe=""), retry_unanswered=False
            )
            answer(response)
        except SessionNotFound as exc:
            # It was gone before the end: lost while held. Its stream is
            # about to say why, if it has not yet.
            self._reader.join(JOIN_TIMEOUT)
            with self._guard:
                self.lost_reason = reason = self.lost_reason or self._stream_end or "expired"
                self.lost.set()
            lost = session_lost_error(reason)
            lost.__cause__ = exc
            return lost
        except LockgateError as exc:
            return exc
        return None

    def __enter__(self) -> "Session":
        return self.open()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._in_other_process:
            return
        try:
            shielded(self.end)
        except LockgateError as error:
            if isinstance(exc, LockLost) and isinstance(error, LockLost):
                return  # the body already stopped for the session's end
            if exc is not None:
                note_failed_release(exc, "ending the session", error)
                return
            if isinstance(error, GatewayUnavailable):
                # The connection is closed: a live gateway has ended the
                # session, a dead one's lease runs out.
                log.warning("ending the session: %s", error)
                return
            raise
        # A loss is only taken in before the end began: it happened while
        # the block ran.
        if exc is None and self.lost_reason is not None:
            raise session_lost_error(self.lost_reason)
