"""What holding a lock needs from threads, under the names the shared
source uses (the asyncio client has the same names in
`_async/_concurrency.py`): pausing, a streamed lock's reader thread, its
watchdog, and the body of its `with` block, which nothing can stop from
outside: a sync body asks (`lock.check()`, `lock.lost`).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any, Callable, Optional, TypeVar

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
LostFlag = threading.Event

sleep = time.sleep


def shielded(call: Callable[[], T]) -> T:
    """Runs `call()`: nothing cancels a thread, so there is nothing to
    shield it from (the asyncio client's shields it from cancellation)."""
    return call()


def close_quietly(response: httpx.Response) -> None:
    try:
        response.close()
    except Exception:
        pass


def _socket_of(response: httpx.Response) -> Optional[socket.socket]:
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    return sock if isinstance(sock, socket.socket) else None


def _shut_down(sock: Optional[socket.socket]) -> None:
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def abort_stream(response: Optional[httpx.Response]) -> None:
    """Ends a streamed response another thread may be reading: its blocked
    read wakes with an error (closing alone would not wake it). The
    connection is never pooled, so the socket is the stream's own."""
    if response is not None:
        _shut_down(_socket_of(response))


def call_on_lost(callback: Optional[Callable[[Any], Any]], lock: Any) -> None:
    """Calls a lock's `on_lost(lock)`, in the thread that found the loss."""
    if callback is None:
        return
    try:
        callback(lock)
    except Exception:
        log.exception("on_lost callback of lock %r failed", getattr(lock, "key", None))


class StreamReader:
    """Follows a streamed lock's events in a daemon thread of its own.
    `stop()` shuts the stream's socket down, the only way to wake a thread
    blocked reading it; only while the reader has not closed it, since its
    descriptor may then be another connection's."""

    def __init__(self) -> None:
        self._thread: Optional[threading.Thread] = None
        self._socket: Optional[socket.socket] = None
        self._guard = threading.Lock()

    def start(self, read: Callable[[], None], response: httpx.Response, name: str) -> None:
        self._socket = _socket_of(response)
        self._thread = threading.Thread(target=read, name=name, daemon=True)
        self._thread.start()

    def finished(self) -> None:
        """Said by the reader before it closes the stream."""
        with self._guard:
            self._socket = None

    def stop(self) -> None:
        with self._guard:
            _shut_down(self._socket)

    def join(self, timeout: float) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def abandon(self) -> None:
        """In a forked child: the thread and the socket are the parent's,
        and so may be the guard, held by a thread the child does not have."""
        self._guard = threading.Lock()
        self._socket = None
        self._thread = None


class Deadline:
    """Calls `expired()` once, from a watchdog thread, when the monotonic
    clock passes the time last `set`, unless cancelled first."""

    def __init__(self, expired: Callable[[], None], name: str) -> None:
        self._expired = expired
        self._name = name
        self._when = 0.0
        self._cancelled = False
        self._started = False
        self._changed = threading.Condition()

    def set(self, when: float) -> None:
        with self._changed:
            if self._cancelled:
                return
            self._when = when
            self._changed.notify_all()
            if not self._started:
                self._started = True
                threading.Thread(target=self._watch, name=self._name, daemon=True).start()

    def cancel(self) -> None:
        with self._changed:
            self._cancelled = True
            self._changed.notify_all()

    def _watch(self) -> None:
        with self._changed:
            while True:
                if self._cancelled:
                    return
                left = self._when - time.monotonic()
                if left <= 0:
                    self._cancelled = True  # fires once
                    break
                self._changed.wait(left)
        self._expired()


class Body:
    """The body of a lock's `with` block: a thread runs it, and nothing
    stops a thread from outside, so a lost lock leaves it to the body to
    notice (`lock.check()`, `lock.lost`, `on_lost`)."""

    def __init__(self, key: str) -> None:
        pass

    def enter(self) -> None:
        pass

    def interrupt(self) -> None:
        pass

    def leave(self, exc: Optional[BaseException]) -> bool:
        """Whether `exc` is the lock's own interruption: never, here."""
        return False

