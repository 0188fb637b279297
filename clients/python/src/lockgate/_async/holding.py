# The source of both clients: scripts/unasync.py writes the sync one (lockgate/_sync/) from it.
"""What a streamed lock, a lock set and a session each are while held,
written once: `AsyncHolding`, and `AsyncHeld`, the face the three show.

Each of the three is one streamed request (`POST /locks`, `POST
/locks/batch` or `POST /sessions` with `Accept: text/event-stream`) whose
response stays open while it is held: the gateway renews it (the lock,
every lock of the set, or the session) and ends the hold the moment the
connection closes. The holding sends the request, reads up to the grant
and follows the stream from there: each renewal moves the deadline, and
the stream's last event (`released`, `lost`, a session's `ended`) is a
loss, as a broken connection is. The deadline declares it lost when no
renewal arrived before the lease could have ended, less a safety margin:
that covers a gateway that died, froze or lost its network without a word.
What hangs on a session has no lease of its own: the session's deadline is
its, and the session's loss is its loss.

The state the three share is here: whether it is lost and why, how long is
left, what a loss cancels (the stream, the deadline, the task running the
block's body, what hangs on a session), whether this process is a fork of
the holder's; and the giving back, once, as the block ends. How the
reader, the deadline and the body run (asyncio: a task, a timer, a task
cancelled on a loss; sync: two threads, and a body that asks) is in
`_concurrency`.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import threading
import time
from types import TracebackType
from typing import Any, AsyncIterator, Callable, Dict, Mapping, NoReturn, Optional, Sequence, Set, Type, TypeVar, cast

import httpx

from .. import _forks
from .._api import LockStreamEventName, LostEvent, QueuedEvent, RenewedEvent
from .._protocol import (
    JOIN_TIMEOUT,
    STREAM_SILENCE,
    Kind,
    LeaseClock,
    answer,
    event_json,
    note_failed_release,
    problem_error,
    refusal_error,
    unreachable,
)
from ..errors import GatewayUnavailable, LockgateError, LockLost, NotOwner
from ..sse import Event, EventStreamParser
from ._concurrency import Body, Deadline, LostFlag, StreamReader, call_on_lost, close_quietly, shielded
from ._interfaces import AsyncGatewayInterface, AsyncParentHolding, AsyncSessionInterface

__all__ = ["AsyncHeld", "AsyncHolding", "stream_events"]

log = logging.getLogger("lockgate")


class _Unstreamed(Exception):
    """A plain answer to a streamed request: what it granted, held by
    nothing."""

    def __init__(self, grant: Dict[str, Any]) -> None:
        super().__init__("granted without a stream")
        self.grant = grant


async def stream_events(response: httpx.Response, last_event_id: str = "") -> AsyncIterator[Event]:
    """The Server-Sent Events of a streamed answer, as they arrive."""
    parser = EventStreamParser(last_event_id)
    async for chunk in response.aiter_bytes():
        for event in parser.feed(chunk):
            yield event


class AsyncHolding:
    """One lock, lock set or session, held through its stream: the request,
    the reader of its events, its deadline, its loss, its giving back.

    `owner` is what it is held for (told to `on_lost`, and asked to give
    it back with `_give_back`); `name` names it in errors and `what` in
    the log. One taken in a `session` opened here hangs on the session's
    holding (its `parent`): the session's lease and deadline are its, and
    the session's loss loses it (`session-ended`). One taken with the
    `session_id` of a session opened elsewhere has no lease this client
    follows: only its stream tells of its end.
    """

    def __init__(
        self,
        owner: "AsyncHeld",
        gateway: AsyncGatewayInterface,
        kind: Kind,
        name: str,
        what: str,
        *,
        on_lost: Optional[Callable[[Any], Any]] = None,
        session: Optional[AsyncSessionInterface] = None,
        session_id: Optional[str] = None,
    ) -> None:
        self.owner, self.gateway, self.kind = owner, gateway, kind
        self.name, self.what, self.on_lost = name, what, on_lost
        #: The holding of the session opened here that it hangs on.
        self.parent: Optional[AsyncParentHolding] = session._holding if session is not None else None
        #: The id of the session it hangs on, if any.
        self.session_id = session._id_for_lock() if session is not None else session_id
        #: Whether it has a lease of its own (none in a session).
        self.own_lease = self.session_id is None
        #: Why it was lost; None while it is not.
        self.reason: Optional[str] = None
        #: The lock whose end ended the stream, as the gateway named it.
        self.ended_by: Optional[str] = None
        #: Why the stream ended: its last event's reason, or `connection-lost`.
        self.stream_end: Optional[str] = None
        #: When its own lease ends, as the gateway last said (Unix ms,
        #: Redis clock).
        self._expires_at_ms: Optional[int] = None
        #: Its own lease's clock, once granted (None without a lease of its own).
        self.clock: Optional[LeaseClock] = None
        #: What hangs on it (a session's locks and lock sets), lost with it.
        self.members: Set[AsyncHolding] = set()
        self.granted = False
        # Reentrant: `lost` is made under it, also by code that holds it.
        self.guard = threading.RLock()
        self._lost: Optional[LostFlag] = None
        self._reader = StreamReader()
        self._deadline = Deadline(functools.partial(self.lose, "lease-expired"), f"lockgate-watchdog-{name}")
        self._body = Body(name)
        self._giving_back = False
        self._given_back = False
        self._forked = False
        self._pid = 0

    @property
    def lost(self) -> LostFlag:
        with self.guard:
            if self._lost is None:
                # Made on first use: Python 3.9 binds an asyncio.Event to
                # the event loop of the moment.
                self._lost = LostFlag()
            return self._lost

    @property
    def state(self) -> str:
        """For a `repr`: lost, given back, held, or not yet."""
        if self.reason is not None:
            return "lost"
        return self.kind.given_back if self._given_back else self.kind.held if self.granted else self.kind.unheld

    @property
    def lease_clock(self) -> Optional[LeaseClock]:
        """The clock of the lease it lives by: its own, its session's, or
        none this client follows."""
        return self.parent.lease_clock if self.parent is not None else self.clock

    @property
    def expires_at_ms(self) -> Optional[int]:
        """When the lease it lives by ends, as the gateway last said: its
        own, its session's, or None for a session this client does not
        follow."""
        if self.parent is not None:
            return self.parent.expires_at_ms
        return self._expires_at_ms if self.own_lease else None

    def error(self, reason: str) -> LockLost:
        return self.kind.lost(self.ended_by or self.name, reason)

    # -- taking ----------------------------------------------------------

    async def open(
        self,
        body: Mapping[str, Any],
        *,
        wait: float,
        ttl: float,
        accept: Callable[[Dict[str, Any]], None],
        on_queued: Optional[Callable[[int], Any]] = None,
    ) -> None:
        """Sends the streamed request and reads up to the grant, which
        `accept` takes in (under the guard) before the stream is followed;
        raises the refusal, if that is what comes. `on_queued(position)`
        is told each place in the queue while a lock waits."""
        if self.granted:
            raise RuntimeError(f"{self.what} was taken already; make a new one to take it again")
        if self.parent is not None and self.parent.reason is not None:
            raise self.parent.error(self.parent.reason)
        self.lost  # made now (asyncio: inside the loop)
        # Reads are never further apart than the wait before the grant, or
        # a third of the lease after it (renewals; in a session, only the
        # gateway's keep-alive comments). The deadline declares it lost long
        # before this read timeout; it only makes sure a reader blocked on
        # a silent connection ends too.
        response, sent_at = await self.gateway._stream(
            self.kind.path,
            body,
            extra_time=max(wait, ttl if self.own_lease else STREAM_SILENCE),
            retried=self.kind.retried,
        )
        events = stream_events(response)
        try:
            grant = await self._grant(response, events, on_queued)
        except _Unstreamed as plain:
            await close_quietly(response)
            await self._refuse_unstreamed(plain.grant, accept)
        except httpx.TransportError as exc:
            await close_quietly(response)
            raise unreachable(exc) from exc
        except BaseException:
            # Closing the connection withdraws the request: the gateway stops
            # waiting and grants nothing (or gives back what it just granted).
            await shielded(functools.partial(close_quietly, response))
            raise
        self._hold(grant, sent_at, response, events, accept)

    async def _grant(
        self,
        response: httpx.Response,
        events: AsyncIterator[Event],
        on_queued: Optional[Callable[[int], Any]],
    ) -> Dict[str, Any]:
        """Reads the stream up to the grant, telling the place in the queue
        meanwhile; raises the refusal, if that is what comes."""
        if response.status_code != 200:
            await response.aread()
            if response.status_code == 201:
                raise _Unstreamed(answer(response))
            raise problem_error(response)
        async for event in events:
            name = cast(LockStreamEventName, event.event)
            if name == "queued" and on_queued is not None:
                on_queued(cast(QueuedEvent, event_json(event))["position"])
            elif name == "refused":
                raise refusal_error(event_json(event))
            elif event.event == self.kind.granted:
                return event_json(event)
        raise GatewayUnavailable(f"the gateway ended the stream of {self.what} before granting it")

    async def _refuse_unstreamed(self, grant: Dict[str, Any], accept: Callable[[Dict[str, Any]], None]) -> NoReturn:
        """A gateway older than this client (in a rolling upgrade) granted
        the request as a plain one, which nothing would renew: it is given
        back at once, and refused as a gateway that cannot serve it."""
        with self.guard:
            accept(grant)
        error = await self.owner._give_back()
        if error is not None:
            log.warning("giving back %s, granted without a stream: %r", self.what, error)
        raise GatewayUnavailable(
            f"the gateway answered {self.kind.path} without a stream (a version before this client's?);"
            f" {self.what} was given back"
        ) from None

    def _hold(
        self,
        grant: Dict[str, Any],
        sent_at: float,
        response: httpx.Response,
        events: AsyncIterator[Event],
        accept: Callable[[Dict[str, Any]], None],
    ) -> None:
        """Takes in the grant, and starts following the stream."""
        clock: Optional[LeaseClock] = None
        if self.own_lease:
            clock = LeaseClock(sent_at)
            clock.granted(grant, time.monotonic())
        with self.guard:
            accept(grant)
            self.granted = True
            self.clock = clock
            self._expires_at_ms = grant.get("expires_at_ms")
            self._pid = os.getpid()
        _forks.track(self)
        if clock is not None:
            self._deadline.set(clock.deadline)
        self._reader.start(functools.partial(self._read, response, events), response, f"lockgate-{self.name}")
        if self.parent is not None:
            # From now on the session's loss is this one's (at once, if the
            # session was lost while the grant came).
            self.parent._attach(self)

    # -- holding ---------------------------------------------------------

    async def _read(self, response: httpx.Response, events: AsyncIterator[Event]) -> None:
        """The reader: follows the stream until it ends, which is a loss
        unless this client gave it back."""
        reason, key = "connection-lost", None
        try:
            async for event in events:
                if event.event == "renewed":
                    self._renewed(cast(RenewedEvent, event_json(event))["expires_at_ms"])
                elif event.event in self.kind.ends:
                    # `lost` names its reason and lock, `released` its lock,
                    # a session's `ended` its reason.
                    ended = cast(LostEvent, event_json(event))
                    reason = ended.get("reason") or self.kind.ends[event.event]
                    key = ended.get("key")
                    break
        except Exception as exc:  # the connection broke, or was cut on purpose
            log.debug("stream of %s ended: %r", self.what, exc)
        finally:
            self._reader.finished()
            await close_quietly(response)
        self.stream_end = reason
        self.lose(reason, key)

    def _renewed(self, expires_at_ms: int) -> None:
        with self.guard:
            clock = self.clock
            if clock is None or self.reason is not None:
                return
            clock.renewed(expires_at_ms, time.monotonic())
            self._expires_at_ms = expires_at_ms
            self._deadline.set(clock.deadline)

    def lose(self, reason: str, key: Optional[str] = None) -> None:
        """Counts it lost (once, unless it is being given back): the
        stream is closed, the body cancelled, what hangs on it lost, and
        `on_lost` told."""
        with self.guard:
            if self.reason is not None or self._giving_back or self._forked:
                return
            self.reason, self.ended_by = reason, key
            self.lost.set()
            members = list(self.members)
        self._deadline.cancel()
        log.warning("%s lost: %s", self.what, reason)
        # Closing the connection tells a live gateway to give it up at once.
        self._reader.stop()
        self._body.interrupt()
        for member in members:
            member.lose("session-ended")
        call_on_lost(self.on_lost, self.owner)

    def expire_if_due(self) -> None:
        """Loses it if its deadline has passed (the watchdog may not have
        run yet); what hangs on a session, if the session's has."""
        if self.parent is not None:
            self.parent.expire_if_due()  # which loses this one too
            return
        clock = self.clock
        if self.reason is None and clock is not None and time.monotonic() >= clock.deadline:
            self.lose("lease-expired")

    def _attach(self, member: "AsyncHolding") -> None:
        """Something was granted on this session: its loss is the member's."""
        with self.guard:
            lost = self.reason is not None
            if not lost:
                self.members.add(member)
        if lost:
            member.lose("session-ended")

    def _detach(self, member: "AsyncHolding") -> None:
        with self.guard:
            self.members.discard(member)

    def _forked_away(self) -> None:
        # In a forked child: take no lock the parent's threads may have held.
        self.guard = threading.RLock()
        self._forked = True
        self._reader.abandon()

    @property
    def in_other_process(self) -> bool:
        return self._forked or (self._pid != 0 and os.getpid() != self._pid)

    @property
    def remaining(self) -> float:
        clock = self.lease_clock
        if not self.granted or self.reason is not None:
            return 0.0
        if clock is None:
            return math.inf
        return max(0.0, clock.deadline - time.monotonic())

    def check(self) -> None:
        if self.in_other_process:
            raise self.error("forked")
        if not self.granted:
            raise LockLost(f"{self.what} is {self.kind.unheld}")
        if self.reason is None:
            self.expire_if_due()
        if self.reason is not None:
            raise self.error(self.reason)
        if self._given_back:
            raise self.error(self.kind.given_back)

    # -- giving back -----------------------------------------------------

    async def give_back(self) -> None:
        """Gives it back (once; later calls do nothing): the owner tells the
        gateway (`_give_back`) unless it was lost, then the stream is
        closed. What hangs on a session ends with it: released with it,
        not lost."""
        was_lost = self._begin_giving_back()
        if was_lost is None:
            return
        with self.guard:
            members = list(self.members)
        ending = [member for member in members if member._begin_giving_back() is not None]
        error: Optional[LockgateError] = None
        try:
            if not was_lost:
                error = await self.owner._give_back()
        finally:
            for member in ending:
                await member._stop_following()
            await self._stop_following()
        if error is not None:
            raise error

    def _begin_giving_back(self) -> Optional[bool]:
        """Marks it given back: whether it was lost, or None when there is
        nothing to give back (never granted, given back already, or this
        process is not the holder). A loss its stream tells from now on
        is no loss: the giving back ends the stream."""
        with self.guard:
            if self._given_back or not self.granted:
                return None
            self._given_back = True
            if self.in_other_process:
                return None
            was_lost = self.reason is not None
            self._giving_back = True
        self._deadline.cancel()
        return was_lost

    async def _stop_following(self) -> None:
        """Closes the stream (which ends the hold on a live gateway) and
        lets the reader finish."""
        self._reader.stop()
        await self._reader.join(JOIN_TIMEOUT)
        _forks.forget(self)
        if self.parent is not None:
            self.parent._detach(self)

    async def release_locks(self, keys: Sequence[str], token: str) -> Optional[LockgateError]:
        """`DELETE`s each lock with the token; returns the error to raise,
        if any. The first one's answer tells whether it was still held: its
        release ends the stream, and the gateway gives the others back, so
        one found gone after it is no loss."""
        for index, key in enumerate(keys):
            try:
                await self.gateway.release(key, token)
            except (LockLost, NotOwner) as exc:
                if index > 0:
                    continue
                lost = self.error(self.found_lost("lock-gone"))
                lost.__cause__ = exc
                return lost
            except LockgateError as exc:
                return exc
        return None

    def found_lost(self, reason: str) -> str:
        """Takes in a loss the giving back found (it was gone before):
        the reason already known, or this one."""
        with self.guard:
            self.reason = reason = self.reason or reason
            self.lost.set()
        return reason

    async def told_end(self) -> Optional[str]:
        """Why the stream ended, once the reader has finished (it may be
        about to say)."""
        await self._reader.join(JOIN_TIMEOUT)
        return self.stream_end

    # -- the block -------------------------------------------------------

    async def enter(self) -> None:
        """As its block begins, once granted."""
        if self.kind.cancels_body:
            self._body.enter()
        if self.reason is not None:  # lost before the body began
            await shielded(self.give_back)
            raise self.error(self.reason)

    async def exit(self, exc: Optional[BaseException]) -> None:
        """As its block ends, which `exc` (if any) ended: gives it back,
        never replacing `exc`, and raises `LockLost` when it was lost
        while the block ran."""
        ours = self._body.leave(exc)
        if self.in_other_process:
            return
        try:
            await shielded(self.give_back)
        except LockgateError as error:
            if ours:
                raise self.error(self.reason or "lock-gone") from exc
            if isinstance(exc, LockLost) and isinstance(error, LockLost):
                return  # the body already stopped for the loss
            if exc is not None:
                note_failed_release(exc, f"{self.kind.giving_back} {self.what}", error)
                return
            if isinstance(error, GatewayUnavailable):
                # The connection is closed: a live gateway has given it up, a
                # dead one's lease runs out. The block ran while it was held.
                log.warning("%s %s: %s", self.kind.giving_back, self.what, error)
                return
            raise
        if ours:
            # Our cancellation becomes the loss it stands for; its traceback,
            # kept as the cause, shows where the body was stopped.
            raise self.error(self.reason or "lock-gone") from exc
        # A loss is only taken in before the giving back began: it happened
        # while the block ran.
        if exc is None and self.reason is not None:
            raise self.error(self.reason)


H = TypeVar("H", bound="AsyncHeld")


class AsyncHeld:
    """What a lock, a lock set and a session show of their holding: whether
    it is lost, why, and how long is left; and the `async with` block that
    takes it and gives it back. Each makes its `_holding`."""

    _holding: AsyncHolding

    @property
    def lost(self) -> LostFlag:
        """Set once it is lost: a `threading.Event` in the sync client, an
        `asyncio.Event` in the asyncio one."""
        return self._holding.lost

    @property
    def lost_reason(self) -> Optional[str]:
        """Why it was lost (`LockLost.reason` tells each); None while it is
        not."""
        return self._holding.reason

    @property
    def expires_at_ms(self) -> Optional[int]:
        """When its lease ends unless renewed (Unix ms, Redis clock), as of
        the last renewal: for what hangs on a session, the session's; None
        before the grant, and for what hangs on a session opened
        elsewhere."""
        return self._holding.expires_at_ms

    @property
    def remaining(self) -> float:
        """Seconds until it counts as lost unless a renewal arrives first:
        the lease's earliest end (for what hangs on a session, the
        session's), less the safety margin; 0 once lost; `math.inf` for
        what hangs on a session opened elsewhere, whose lease this client
        does not follow (only the gateway's word ends it)."""
        return self._holding.remaining

    def check(self) -> None:
        """Raises `LockLost` unless it is still held (as far as this process
        can know: a renewal came in time)."""
        self._holding.check()

    @property
    def on_lost(self) -> Optional[Callable[[Any], Any]]:
        """Called once with it when it is lost (sync: from a background
        thread; asyncio: on the loop, a coroutine it returns scheduled)."""
        return self._holding.on_lost

    @on_lost.setter
    def on_lost(self, callback: Optional[Callable[[Any], Any]]) -> None:
        self._holding.on_lost = callback

    async def _take(self) -> None:
        """Takes it (acquires the lock or locks, opens the session)."""
        raise NotImplementedError

    async def _give_back(self) -> Optional[LockgateError]:
        """Tells the gateway it is given back; returns the error to raise,
        if any."""
        raise NotImplementedError

    async def __aenter__(self: H) -> H:
        await self._take()
        await self._holding.enter()
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self._holding.exit(exc)
