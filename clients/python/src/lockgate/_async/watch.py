# The source of both clients: scripts/unasync.py writes the sync one (lockgate/_sync/) from it.
"""Following a lock and electing a leader: `AsyncWatcher` (a lock's events,
resumed after a dropped connection), `AsyncElection`, `AsyncLeadership`
(the leader's streamed lock) and `AsyncLeaderObserver`.
"""

from __future__ import annotations

import logging
import time
from typing import Any, AsyncIterator, Callable, Optional

import httpx

from .._protocol import (
    STREAM_HEADERS,
    LeaderTracker,
    acquire_body,
    backoff,
    event_json,
    leader_of,
    lock_path,
    problem_error,
    unreachable,
)
from ..errors import GatewayUnavailable, InvalidRequest, LockgateError, LockHeld
from ..models import Leader, LockEvent
from ..sse import Event
from ._concurrency import abort_stream, close_quietly, sleep
from ._interfaces import AsyncGatewayInterface
from .holding import stream_events
from .lock import AsyncLock

__all__ = ["AsyncWatcher", "AsyncElection", "AsyncLeadership", "AsyncLeaderObserver"]

log = logging.getLogger("lockgate")


class AsyncWatcher:
    """Iterates a lock's events (`GET /locks/{key}/events`).

    A dropped connection, or one silent for longer than `idle_timeout`
    (the gateway sends a comment at least every 15 s), is made again,
    resuming after `last_event_id`: no event is missed or seen twice while
    the gateway keeps them (a `gap` event, then a fresh `snapshot`, says
    when it no longer did). Reconnecting gives up with `GatewayUnavailable`
    after `reconnect_timeout` seconds of failures. `aclose()` ends the
    iteration (in the sync client, from any thread).
    """

    def __init__(
        self,
        gateway: AsyncGatewayInterface,
        key: str,
        *,
        last_event_id: Optional[str] = None,
        reconnect_timeout: float = 30.0,
        idle_timeout: Optional[float] = 60.0,
    ) -> None:
        self.gateway = gateway
        self.key = key
        self.last_event_id = last_event_id
        self.reconnect_timeout = reconnect_timeout
        self.idle_timeout = idle_timeout
        #: How many times the stream was opened again after a drop.
        self.reconnects = 0
        self._response: Optional[httpx.Response] = None
        self._events: Optional[AsyncIterator[Event]] = None
        self._closed = False

    def __aiter__(self) -> "AsyncWatcher":
        return self

    async def __anext__(self) -> LockEvent:
        while True:
            if self._closed:
                await self._drop()
                raise StopAsyncIteration
            if self._events is None:
                await self._connect()
                continue  # closed meanwhile?
            try:
                event = await self._events.__anext__()
            except StopAsyncIteration:
                await self._drop()
                continue
            except (httpx.TransportError, httpx.StreamError) as exc:
                # Dropped (or ended by `aclose()`, which the loop sees).
                log.debug("watch stream of %r dropped: %r", self.key, exc)
                await self._drop()
                continue
            if event.id:
                self.last_event_id = event.id
            return LockEvent(type=event.event, data=event_json(event), id=event.id or None)

    async def _connect(self) -> None:
        """Opens the stream, trying again through failures that may pass
        (no answer, or a 5xx such as `backend-unavailable`) until
        `reconnect_timeout` runs out; a 4xx is raised at once."""
        started = time.monotonic()
        attempt = 0
        while True:
            error = await self._open()
            if error is None:
                return
            if self._closed or time.monotonic() - started >= self.reconnect_timeout:
                raise error
            await sleep(min(backoff(attempt), max(0.0, started + self.reconnect_timeout - time.monotonic())))
            attempt += 1

    async def _open(self) -> Optional[LockgateError]:
        """Opens the stream once; returns the error when that failed in a
        way that may pass, and raises any other."""
        headers = dict(STREAM_HEADERS)
        if self.last_event_id:
            headers["Last-Event-ID"] = self.last_event_id
        client = self.gateway._http()
        request = client.build_request(
            "GET",
            lock_path(self.key, "events"),
            headers=headers,
            timeout=httpx.Timeout(self.gateway.timeout, read=self.idle_timeout),
        )
        try:
            response = await client.send(request, stream=True)
        except httpx.TransportError as exc:
            return unreachable(exc)
        if response.status_code != 200:
            await response.aread()
            await response.aclose()
            error = problem_error(response)
            # Only the gateway's own trouble (a 5xx) may pass. A 4xx (an
            # invalid key, a missing permission) says the request is wrong
            # as it stands: asking again would only be refused again.
            if response.status_code >= 500:
                return error
            raise error
        if self.last_event_id is not None:
            self.reconnects += 1
        self._response = response
        self._events = stream_events(response, self.last_event_id or "")
        return None

    async def _drop(self) -> None:
        response, self._response, self._events = self._response, None, None
        if response is not None:
            await close_quietly(response)

    async def aclose(self) -> None:
        """Stops following; the iteration ends."""
        self._closed = True
        await abort_stream(self._response)

    async def __aenter__(self) -> "AsyncWatcher":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


class AsyncLeadership(AsyncLock):
    """Leadership won in an election: a streamed lock whose fencing token is
    the leader's term. Leaving the block resigns."""

    def __init__(
        self,
        election: "AsyncElection",
        *,
        timeout: Optional[float],
        wait_step: float,
        on_lost: Optional[Callable[[AsyncLock], Any]] = None,
    ) -> None:
        super().__init__(
            election.gateway, election.key, ttl=election.ttl, wait=0.0, value=election.value, on_lost=on_lost
        )
        self.election = election
        self.timeout = timeout
        self.wait_step = wait_step

    @property
    def term(self) -> Optional[int]:
        """The leader's term (its fencing token)."""
        return self.fencing_token

    async def acquire(self) -> "AsyncLeadership":
        """Campaigns until elected: waits in the lock's queue, a step of
        `wait_step` seconds at a time, through refusals and an unreachable
        gateway, until `timeout` (None: forever) runs out with `LockHeld`."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        attempt = 0
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            self.wait = self.wait_step if left is None else max(0.0, min(self.wait_step, left))
            self._request_body = acquire_body(self.key, ttl=self.ttl, wait=self.wait, value=self.value)
            try:
                await super().acquire()
                return self
            except LockHeld:
                if left is not None and left <= self.wait:
                    raise
            except InvalidRequest as exc:
                # A gateway whose longest wait is shorter than our step.
                if exc.problem.get("field") == "wait_ms" and self.wait_step > 1.0:
                    self.wait_step /= 2
                    continue
                raise
            except GatewayUnavailable:
                if left is not None and left <= 0:
                    raise
                await sleep(backoff(attempt) if left is None else min(backoff(attempt), left))
                attempt += 1

    async def proclaim(self, value: Optional[str]) -> None:
        """Publishes a new value for the leader (its address, say) without
        a new election: observers see the leader again with it."""
        await self.set_value(value)
        self.election.value = value

    async def resign(self) -> None:
        """Gives up the leadership (releases the lock)."""
        await self.release()


class AsyncElection:
    """Leader election on one lock key: the holder of the streamed lock
    leads, publishing `value`; the other candidates wait in line."""

    def __init__(self, gateway: AsyncGatewayInterface, key: str, *, value: Optional[str] = None, ttl: float = 10.0) -> None:
        self.gateway = gateway
        self.key = key
        self.value = value
        self.ttl = ttl

    def campaign(
        self,
        *,
        timeout: Optional[float] = None,
        wait_step: float = 60.0,
        on_lost: Optional[Callable[[AsyncLock], Any]] = None,
    ) -> AsyncLeadership:
        """A campaign: entering its `async with` block returns once
        elected (as does `await campaign.acquire()`); the block runs as the
        leader, and leaving it resigns."""
        return AsyncLeadership(self, timeout=timeout, wait_step=wait_step, on_lost=on_lost)

    async def leader(self) -> Optional[Leader]:
        """The current leader, or None."""
        return leader_of(await self.gateway.inspect(self.key))

    def observe(self, **watch_options: Any) -> "AsyncLeaderObserver":
        """The leader now, then again at every change (None while there is
        none), as an iterator; `watch_options` as for `watch`."""
        return AsyncLeaderObserver(AsyncWatcher(self.gateway, self.key, **watch_options))


class AsyncLeaderObserver:
    """Iterates an election's leader: the one at the start, then each new
    one (None while there is none). Follows the lock's events, so it
    resumes after a dropped connection like a watcher."""

    def __init__(self, watcher: AsyncWatcher) -> None:
        self.watcher = watcher
        self._tracker = LeaderTracker()

    @property
    def leader(self) -> Optional[Leader]:
        """The leader as of the last event seen."""
        return self._tracker.leader

    def __aiter__(self) -> "AsyncLeaderObserver":
        return self

    async def __anext__(self) -> Optional[Leader]:
        async for event in self.watcher:
            if self._tracker.update(event):
                return self._tracker.leader
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Stops following (in the sync client, from any thread); the
        iteration ends."""
        await self.watcher.aclose()

    async def __aenter__(self) -> "AsyncLeaderObserver":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()
