"""What holding a lock needs from asyncio, under the names the shared
source uses (the sync client has the same names in `_sync/_concurrency.py`,
made of threads): pausing, shielding from cancellation, a streamed lock's
reader task, its deadline timer, and the task running its `async with`
body, which a lost lock cancels.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from typing import Any, Awaitable, Callable, Coroutine, Optional, Set, TypeVar

import httpx

__all__ = [
    "LostFlag",
    "sleep",
    "shielded",
    "close_quietly",
    "abort_stream",
    "call_on_lost",
    "StreamReader",
    "Deadline",
    "Body",
]

log = logging.getLogger("lockgate")

T = TypeVar("T")

#: What `lock.lost` is.
LostFlag = asyncio.Event

sleep = asyncio.sleep

# Futures of `on_lost` coroutines, kept alive until they finish.
_callbacks: "Set[asyncio.Future[Any]]" = set()


async def shielded(call: Callable[[], Awaitable[T]]) -> T:
    """Runs `call()` to its end even if the calling task is cancelled
    meanwhile; the cancellation is raised afterwards."""
    task = asyncio.ensure_future(call())
    interrupted = False
    while not task.done():
        try:
            # Unlike awaiting the task, wait() never cancels it.
            await asyncio.wait((task,))
        except asyncio.CancelledError:
            interrupted = True
    if interrupted:
        if not task.cancelled():
            task.exception()  # retrieved, so it is not reported as lost
        raise asyncio.CancelledError
    return task.result()


async def close_quietly(response: httpx.Response) -> None:
    try:
        await response.aclose()
    except Exception:
        pass


async def abort_stream(response: Optional[httpx.Response]) -> None:
    """Ends a streamed response another task may be reading: it wakes with
    an error."""
    if response is not None:
        await close_quietly(response)


def call_on_lost(callback: Optional[Callable[[Any], Any]], lock: Any) -> None:
    """Calls a lock's `on_lost(lock)`; a coroutine it returns is scheduled
    on the loop."""
    if callback is None:
        return
    try:
        result = callback(lock)
        if inspect.isawaitable(result):
            future = asyncio.ensure_future(result)
            _callbacks.add(future)
            future.add_done_callback(_callback_done)
    except Exception:
        log.exception("on_lost callback of lock %r failed", getattr(lock, "key", None))


def _callback_done(future: "asyncio.Future[Any]") -> None:
    _callbacks.discard(future)
    if not future.cancelled() and future.exception() is not None:
        log.error("on_lost callback failed: %r", future.exception())


class StreamReader:
    """Follows a streamed lock's events in a task of its own. `stop()`
    cancels the task, which closes the stream."""

    def __init__(self) -> None:
        self._task: "Optional[asyncio.Task[None]]" = None

    def start(self, read: Callable[[], Coroutine[Any, Any, None]], response: httpx.Response, name: str) -> None:
        self._task = asyncio.get_running_loop().create_task(read(), name=name)

    def finished(self) -> None:
        """Said by the reader as it stops reading (nothing to do here)."""

    def stop(self) -> None:
        task = self._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()

    async def join(self, timeout: float) -> None:
        task = self._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            await asyncio.wait((task,), timeout=timeout)

    def abandon(self) -> None:
        """In a forked child: the task is the parent's."""
        self._task = None


class Deadline:
    """Calls `expired()` once, on the loop, when the monotonic clock passes
    the time last `set`, unless cancelled first."""

    def __init__(self, expired: Callable[[], None], name: str) -> None:
        self._expired = expired
        self._when = 0.0
        self._handle: Optional[asyncio.TimerHandle] = None
        self._cancelled = False

    def set(self, when: float) -> None:
        if self._cancelled:
            return
        self._when = when
        if self._handle is not None:
            self._handle.cancel()
        delay = max(0.0, when - time.monotonic())
        self._handle = asyncio.get_running_loop().call_later(delay, self._fire)

    def cancel(self) -> None:
        self._cancelled = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        if self._cancelled:
            return
        if time.monotonic() < self._when:  # the loop's clock may round early
            self.set(self._when)
            return
        self._cancelled = True
        self._expired()


class Body:
    """The task running a lock's `async with` body: a lost lock cancels it,
    and leaving the block tells that cancellation from anyone else's (the
    way `asyncio.timeout` does)."""

    def __init__(self, key: str) -> None:
        self._task: "Optional[asyncio.Task[Any]]" = None
        self._cancelling = 0
        self._inside = False
        self._cancelled = False
        # Marks the CancelledError of our own cancellation, for Pythons
        # without Task.uncancel (before 3.11).
        self._message = f"lockgate: lock {key!r} lost ({uuid.uuid4()})"

    def enter(self) -> None:
        self._task = asyncio.current_task()
        cancelling = getattr(self._task, "cancelling", None)
        self._cancelling = cancelling() if cancelling is not None else 0
        self._inside = True

    def interrupt(self) -> None:
        task = self._task
        if self._inside and task is not None and not task.done():
            self._cancelled = True
            task.cancel(msg=self._message)

    def leave(self, exc: Optional[BaseException]) -> bool:
        """Whether `exc`, what the body raised, is our cancellation."""
        self._inside = False
        if not self._cancelled:
            return False
        cancelled_here = isinstance(exc, asyncio.CancelledError)
        uncancel = getattr(self._task, "uncancel", None)
        if uncancel is not None:
            # 3.11+: our request is taken back whatever the body made of
            # it; the cancellation is only ours if no one else asked for
            # one too since the block began.
            return bool(uncancel() <= self._cancelling) and cancelled_here
        return cancelled_here and exc is not None and exc.args[:1] == (self._message,)

