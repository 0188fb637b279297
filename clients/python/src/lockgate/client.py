"""The synchronous client: `Gateway`, its streamed `Lock`, the plain `Lease`,
`Watcher` and `Election`.

A `Lock` is held through a streamed lock (`POST /locks` with
`Accept: text/event-stream`): the gateway renews the lease for as long as
the response stays open, and ends the hold the moment it closes. A reader
thread follows the stream's events; a watchdog thread declares the lock lost
when no renewal arrived before the lease could have ended, which covers a
gateway that died, froze or lost its network without a word.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from types import TracebackType
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Type

import httpx

from . import _forks
from ._protocol import (
    STREAM_HEADERS,
    UNSENT_ERRORS,
    LeaderTracker,
    LeaseClock,
    ServerSentEvent,
    SSEDecoder,
    acquire_body,
    attach_note,
    is_lock_not_found,
    leader_of,
    lock_path,
    lost_error,
    millis,
    new_idempotency_key,
    problem_error,
    refusal_error,
    unreachable,
)
from .errors import GatewayUnavailable, InvalidRequest, LockgateError, LockHeld, LockLost, NotOwner
from .models import Leader, LockEvent, LockInfo

__all__ = ["Gateway", "Lock", "Lease", "Watcher", "Election", "Leadership", "LeaderObserver"]

log = logging.getLogger("lockgate")

#: How long `release` waits for a streamed lock's reader thread to finish.
_JOIN_TIMEOUT = 2.0


def _backoff(attempt: int) -> float:
    return min(0.05 * 2.0**attempt, 1.0)


class Gateway:
    """A lockgate gateway, reached over HTTP.

    `url` is the gateway's base URL; `api_key` is sent as
    `Authorization: Bearer <key>`; `timeout` (seconds) bounds each request's
    connecting, sending and waiting for an answer, on top of any lock wait
    asked for; `retries` is how many times a request that got no answer is
    sent again (an acquisition with the same `Idempotency-Key`).

    Thread-safe; one per process is enough. After `os.fork` the child
    quietly opens its own connections.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: Optional[str] = None,
        timeout: float = 10.0,
        retries: int = 2,
        headers: Optional[Mapping[str, str]] = None,
        transport: Optional[httpx.BaseTransport] = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = float(timeout)
        self.retries = int(retries)
        self._headers: Dict[str, str] = dict(headers or {})
        if api_key is not None:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._transport = transport
        self._guard = threading.Lock()
        self._pid = os.getpid()
        self._client = self._new_client()

    def _new_client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            headers=self._headers,
            timeout=self.timeout,
            transport=self._transport,
            # Each streamed lock keeps a connection for as long as it is held.
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=20),
        )

    def _http(self) -> httpx.Client:
        if os.getpid() != self._pid:
            # A forked child must not share the parent's pooled sockets: the
            # old client is dropped unclosed, which only closes this
            # process's copies of them.
            self._guard = threading.Lock()
            self._pid = os.getpid()
            self._client = self._new_client()
        return self._client

    def close(self) -> None:
        """Closes the pooled connections. Locks still held end with them."""
        if os.getpid() == self._pid:
            self._client.close()

    def __enter__(self) -> "Gateway":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Gateway({self.url!r})"

    # -- requests --------------------------------------------------------

    def _timeout(self, extra: float = 0.0) -> httpx.Timeout:
        """The request timeout, its read part lengthened by a lock wait."""
        return httpx.Timeout(self.timeout, read=self.timeout + extra)

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        params: Optional[Mapping[str, Any]] = None,
        extra_time: float = 0.0,
        retry_unanswered: bool = True,
    ) -> httpx.Response:
        """Sends a request; one that got no answer is sent again up to
        `retries` times when `retry_unanswered` (or, whatever it is, when
        it never left)."""
        attempt = 0
        while True:
            try:
                return self._http().request(
                    method,
                    path,
                    json=json,
                    headers=headers,
                    params=params,
                    timeout=self._timeout(extra_time),
                )
            except httpx.TransportError as exc:
                if attempt >= self.retries or not (retry_unanswered or isinstance(exc, UNSENT_ERRORS)):
                    raise unreachable(exc) from exc
                log.debug("retrying %s %s after %r", method, path, exc)
                time.sleep(_backoff(attempt))
                attempt += 1

    @staticmethod
    def _answer(response: httpx.Response) -> Dict[str, Any]:
        if response.status_code >= 400:
            raise problem_error(response)
        if not response.content:
            return {}
        data = response.json()
        return data if isinstance(data, dict) else {"data": data}

    # -- streamed locks --------------------------------------------------

    def lock(
        self,
        key: str,
        *,
        ttl: float = 30.0,
        wait: float = 0.0,
        mode: Optional[str] = None,
        limit: Optional[int] = None,
        value: Optional[str] = None,
        on_lost: Optional[Callable[["Lock"], Any]] = None,
    ) -> "Lock":
        """A streamed lock on `key`, taken when its `with` block starts (or
        by `acquire()`): held for as long as the block runs, renewed by the
        gateway every `ttl / 3` seconds, released when the block ends.

        `wait` is how long to wait for another owner to let go (0: try
        once); `mode="shared"` makes it a reader of a read-write lock,
        `limit=N` a counting lock of N holders; `value` is a public string
        anyone inspecting the lock sees. `on_lost(lock)` is called, from a
        background thread, once the lock is lost.
        """
        return Lock(self, key, ttl=ttl, wait=wait, mode=mode, limit=limit, value=value, on_lost=on_lost)

    # -- plain leases ----------------------------------------------------

    def acquire(
        self,
        key: str,
        *,
        ttl: float = 30.0,
        wait: float = 0.0,
        mode: Optional[str] = None,
        limit: Optional[int] = None,
        value: Optional[str] = None,
        token: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> "Lease":
        """Takes a lease on `key` (`POST /locks`) that ends after `ttl`
        seconds unless extended; raises `LockHeld` when another owner holds
        it past `wait` seconds.

        Every acquisition goes with a fresh `Idempotency-Key` (or the one
        given), and a request whose answer was lost is sent again with the
        same one, so the gateway answers the grant it made instead of
        making another. With `token` it re-enters a lease held with that
        token (one more hold, the lease reset to `ttl`); a re-entry is only
        sent again when it surely never reached the gateway.
        """
        body = acquire_body(key, ttl=ttl, wait=wait, mode=mode, limit=limit, value=value, token=token)
        headers: Dict[str, str] = {}
        if token is None:
            headers["Idempotency-Key"] = idempotency_key or new_idempotency_key()
        response = self._request(
            "POST",
            "/locks",
            json=body,
            headers=headers,
            extra_time=wait,
            retry_unanswered=token is None,
        )
        data = self._answer(response)
        replayed = response.headers.get("Idempotent-Replayed", "").lower() == "true"
        return Lease(self, data, value=value, replayed=replayed)

    def extend(self, key: str, token: str, ttl: float) -> "Lease":
        """Renews a lease: it ends `ttl` seconds from now. Raises `LockLost`
        when the lease is gone (stop working on the resource), `NotOwner`
        when another owner holds the lock."""
        response = self._request(
            "PUT", lock_path(key, "ttl"), json={"token": token, "ttl_ms": millis(ttl, "ttl")}
        )
        return Lease(self, dict(self._answer(response), token=token))

    def release(self, key: str, token: str) -> int:
        """Gives back one hold of a lease; returns the holds left (0: the
        lock is free). Raises `LockLost` when no such lock is held."""
        response = self._request(
            "DELETE", lock_path(key), headers={"Lock-Token": token}, retry_unanswered=False
        )
        data = self._answer(response)
        return int(data.get("holds") or 0)

    def set_value(self, key: str, token: str, value: Optional[str]) -> "Lease":
        """Replaces the public value of the lease held with `token`."""
        response = self._request("PUT", lock_path(key, "value"), json={"token": token, "value": value})
        data = self._answer(response)
        data.pop("ttl_ms", None)  # not the lease's length in this answer
        return Lease(self, dict(data, token=token), value=value)

    def inspect(self, key: str) -> Optional[LockInfo]:
        """The lock's state (holders, leases, waiters), or None when free."""
        response = self._request("GET", lock_path(key))
        if is_lock_not_found(response):
            return None
        return LockInfo.from_json(self._answer(response))

    def list_locks(self, prefix: str = "", *, page_size: int = 100) -> Iterator[LockInfo]:
        """Every held lock whose key starts with `prefix`, fetched a page at
        a time."""
        cursor: Optional[str] = None
        while True:
            params: Dict[str, Any] = {"prefix": prefix, "limit": page_size}
            if cursor:
                params["cursor"] = cursor
            data = self._answer(self._request("GET", "/locks", params=params))
            for item in data.get("locks") or ():
                yield LockInfo.from_json(item)
            cursor = data.get("next_cursor")
            if not cursor:
                return

    def revoke(self, key: str, admin_token: str) -> bool:
        """Ends every hold of `key` at once (an operator's action, with the
        gateway's admin token); False when it was not held."""
        response = self._request(
            "DELETE",
            lock_path(key),
            params={"force": "true"},
            headers={"Authorization": f"Bearer {admin_token}"},
        )
        if is_lock_not_found(response):
            return False
        self._answer(response)
        return True

    # -- following locks -------------------------------------------------

    def watch(
        self,
        key: str,
        *,
        last_event_id: Optional[str] = None,
        reconnect_timeout: float = 30.0,
        idle_timeout: Optional[float] = 60.0,
    ) -> "Watcher":
        """The events of `key` (`GET /locks/{key}/events`), as an iterator
        that reconnects after a dropped connection and resumes after the last
        event seen (`Last-Event-ID`)."""
        return Watcher(
            self, key, last_event_id=last_event_id,
            reconnect_timeout=reconnect_timeout, idle_timeout=idle_timeout,
        )

    def election(self, key: str, *, value: Optional[str] = None, ttl: float = 10.0) -> "Election":
        """An election whose leader is the holder of the streamed lock `key`,
        publishing `value` (its address, say)."""
        return Election(self, key, value=value, ttl=ttl)


class Lease:
    """A lease taken with `Gateway.acquire`: a token, a fencing token and an
    end the holder must keep pushing back with `extend`.

    As a context manager, leaving the block gives the hold back.
    """

    def __init__(
        self,
        gateway: Gateway,
        data: Mapping[str, Any],
        *,
        value: Optional[str] = None,
        replayed: bool = False,
    ) -> None:
        self.gateway = gateway
        self.key: str = str(data.get("key", ""))
        self.token: str = str(data.get("token", ""))
        self.fencing_token: int = int(data.get("fencing_token") or 0)
        self.ttl: Optional[float] = data["ttl_ms"] / 1000.0 if "ttl_ms" in data else None
        self.expires_at_ms: Optional[int] = data.get("expires_at_ms")
        self.holds: int = int(data.get("holds") or 1)
        self.waited: float = float(data.get("waited_ms") or 0) / 1000.0
        self.value = value
        #: True when the gateway answered a retried acquisition with the
        #: grant the first attempt made (`Idempotent-Replayed: true`).
        self.replayed = replayed

    def extend(self, ttl: Optional[float] = None) -> "Lease":
        """Renews the lease for `ttl` seconds from now (the last length by
        default)."""
        renewed = self.gateway.extend(self.key, self.token, ttl if ttl is not None else (self.ttl or 30.0))
        self.ttl, self.expires_at_ms, self.holds = renewed.ttl, renewed.expires_at_ms, renewed.holds
        return self

    def release(self) -> int:
        """Gives back one hold; returns the holds left."""
        self.holds = self.gateway.release(self.key, self.token)
        return self.holds

    def set_value(self, value: Optional[str]) -> None:
        self.gateway.set_value(self.key, self.token, value)
        self.value = value

    def __enter__(self) -> "Lease":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            self.release()
        except LockgateError as error:
            if exc is None:
                raise
            attach_note(exc, f"lockgate: releasing {self.key!r} also failed: {error!r}")
            log.warning("releasing %r failed while the block raised: %r", self.key, error)

    def __repr__(self) -> str:
        return f"Lease(key={self.key!r}, fencing_token={self.fencing_token}, holds={self.holds})"


class Lock:
    """A streamed lock: held while its connection to the gateway stays open.

    `key`, `token` and `fencing_token` are set once it is acquired; hand
    the fencing token to whatever the lock protects. `lost` is a
    `threading.Event` set once the lock is gone; `check()` raises
    `LockLost` from then on. Leaving the `with` block releases it (at most
    once) and raises `LockLost` if the lock was lost while the block ran,
    unless the block raised an exception of its own, which is never
    replaced.
    """

    def __init__(
        self,
        gateway: Gateway,
        key: str,
        *,
        ttl: float,
        wait: float,
        mode: Optional[str] = None,
        limit: Optional[int] = None,
        value: Optional[str] = None,
        on_lost: Optional[Callable[["Lock"], Any]] = None,
    ) -> None:
        self.gateway = gateway
        self.key = key
        self.ttl = ttl
        self.wait = wait
        self.mode = mode
        self.limit = limit
        self.value = value
        self.on_lost = on_lost
        self.token: Optional[str] = None
        self.fencing_token: Optional[int] = None
        #: The `acquired` event's data: the grant as the gateway made it.
        self.grant: Dict[str, Any] = {}
        #: The place in the lock's queue while waiting (1 is next).
        self.position: Optional[int] = None
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        self._body = acquire_body(key, ttl=ttl, wait=wait, mode=mode, limit=limit, value=value)
        self._state = threading.Lock()
        self._changed = threading.Condition(self._state)
        self._clock: Optional[LeaseClock] = None
        self._response: Optional[httpx.Response] = None
        self._socket: Optional[socket.socket] = None
        self._stream_open = False
        self._releasing = False
        self._released = False
        self._forked = False
        self._pid = 0
        self._reader: Optional[threading.Thread] = None
        self._watchdog: Optional[threading.Thread] = None

    def __repr__(self) -> str:
        state = (
            "lost" if self.lost.is_set() else "released" if self._released
            else "held" if self.token else "not acquired"
        )
        return f"Lock(key={self.key!r}, fencing_token={self.fencing_token}, {state})"

    # -- acquiring -------------------------------------------------------

    def acquire(self) -> "Lock":
        """Takes the lock, waiting up to `wait` seconds; raises `LockHeld`
        when the wait runs out."""
        if self.token is not None:
            raise RuntimeError(f"lock {self.key!r} was already acquired; make a new one with Gateway.lock")
        gateway = self.gateway
        # Reads are never further apart than the wait before the grant, or
        # a third of the lease after it (renewals). The watchdog declares
        # the lock lost long before this read timeout; it only makes sure
        # a reader blocked on a silent connection ends too.
        timeout = gateway._timeout(max(self.wait, self.ttl))
        attempt = 0
        while True:
            client = gateway._http()
            request = client.build_request(
                "POST", "/locks", json=self._body, headers=STREAM_HEADERS, timeout=timeout
            )
            sent_at = time.monotonic()
            try:
                response = client.send(request, stream=True)
                break
            except UNSENT_ERRORS as exc:
                if attempt >= gateway.retries:
                    raise unreachable(exc) from exc
                time.sleep(_backoff(attempt))
                attempt += 1
            except httpx.TransportError as exc:
                raise unreachable(exc) from exc
        try:
            if response.status_code != 200:
                response.read()
                raise problem_error(response)
            events = _events(response)
            for event in events:
                if event.event == "queued":
                    self.position = event.json().get("position")
                elif event.event == "refused":
                    raise refusal_error(event.json())
                elif event.event == "acquired":
                    self._granted(event.json(), sent_at, response)
                    break
            else:
                raise GatewayUnavailable(f"the gateway ended the stream of {self.key!r} before granting it")
        except httpx.TransportError as exc:
            response.close()
            raise unreachable(exc) from exc
        except BaseException:
            # Closing the connection withdraws the request: the gateway stops
            # waiting and grants nothing (or releases what it just granted).
            response.close()
            raise
        self._reader = threading.Thread(
            target=self._read, args=(events,), name=f"lockgate-lock-{self.key}", daemon=True
        )
        self._watchdog = threading.Thread(
            target=self._watch, name=f"lockgate-watchdog-{self.key}", daemon=True
        )
        self._reader.start()
        self._watchdog.start()
        return self

    def _granted(self, grant: Dict[str, Any], sent_at: float, response: httpx.Response) -> None:
        clock = LeaseClock(sent_at)
        clock.granted(grant, time.monotonic())
        self.grant = grant
        self.token = grant.get("token")
        self.fencing_token = grant.get("fencing_token")
        self.position = None
        self._clock = clock
        self._response = response
        self._stream_open = True
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        self._socket = sock if isinstance(sock, socket.socket) else None
        self._pid = os.getpid()
        _forks.track(self)

    # -- holding ---------------------------------------------------------

    def _read(self, events: Iterator[ServerSentEvent]) -> None:
        """The reader thread: follows the stream until it ends."""
        reason = "connection-lost"
        try:
            for event in events:
                if event.event == "renewed":
                    expires_at_ms = event.json().get("expires_at_ms")
                    with self._state:
                        if self._clock is not None and isinstance(expires_at_ms, int):
                            self._clock.renewed(expires_at_ms, time.monotonic())
                        self._changed.notify_all()
                elif event.event in ("released", "lost"):
                    reason = "released" if event.event == "released" else str(
                        event.json().get("reason") or "lock-gone"
                    )
                    with self._state:
                        # The stream ends after this: its socket is no
                        # longer ours to shut down.
                        self._stream_open = False
                    break
        except Exception as exc:  # the connection broke, or was shut down on purpose
            log.debug("stream of %r ended: %r", self.key, exc)
        finally:
            with self._state:
                self._stream_open = False
            try:
                if self._response is not None:
                    self._response.close()
            except Exception:
                pass
        self._lose(reason)

    def _watch(self) -> None:
        """The watchdog thread: the lock is lost once its lease could have
        ended with no renewal heard."""
        with self._state:
            while True:
                if self.lost.is_set() or self._releasing or self._forked or self._clock is None:
                    return
                left = self._clock.deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
        self._lose("lease-expired")

    def _lose(self, reason: str) -> None:
        with self._state:
            if self.lost.is_set() or self._releasing or self._forked:
                self._changed.notify_all()
                return
            self.lost_reason = reason
            self.lost.set()
            self._changed.notify_all()
        log.warning("lock %r lost: %s", self.key, reason)
        # Closing the connection tells a live gateway to release at once.
        self._shutdown_stream()
        if self.on_lost is not None:
            try:
                self.on_lost(self)
            except Exception:
                log.exception("on_lost callback of lock %r failed", self.key)

    def _shutdown_stream(self) -> None:
        """Ends the streamed connection from any thread: the reader blocked
        in a read wakes with an error. Only while the stream is ours."""
        with self._state:
            if not self._stream_open or self._socket is None or self._forked:
                return
            try:
                self._socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _forked_away(self) -> None:
        # In a forked child: take no lock the parent's threads may have held.
        self._state = threading.Lock()
        self._changed = threading.Condition(self._state)
        self._forked = True
        self._socket = None
        self._stream_open = False

    @property
    def _in_other_process(self) -> bool:
        return self._forked or (self._pid != 0 and os.getpid() != self._pid)

    @property
    def remaining(self) -> float:
        """Seconds until the lease could end unless a renewal arrives first."""
        if self._clock is None or self.lost.is_set():
            return 0.0
        return max(0.0, self._clock.deadline - time.monotonic())

    def check(self) -> None:
        """Raises `LockLost` unless the lock is still held (as far as this
        process can know: a renewal arrived before the lease could end)."""
        if self._in_other_process:
            raise lost_error(self.key, "forked")
        if self.token is None:
            raise LockLost(f"lock {self.key!r} is not acquired")
        if not self.lost.is_set() and self._clock is not None and time.monotonic() >= self._clock.deadline:
            self._lose("lease-expired")
        if self.lost.is_set():
            raise lost_error(self.key, self.lost_reason or "lock-gone")
        if self._released:
            raise lost_error(self.key, "released")

    # -- releasing -------------------------------------------------------

    def release(self) -> None:
        """Releases the lock (once; later calls do nothing). Raises
        `LockLost` when the gateway found it already gone, and
        `GatewayUnavailable` when it could not be asked (the closed
        connection still ends the hold, or the lease does)."""
        with self._state:
            if self._released or self.token is None:
                return
            self._released = True
            if self._in_other_process:
                return
            was_lost = self.lost.is_set()
            self._releasing = True
            self._changed.notify_all()
        error: Optional[LockgateError] = None
        try:
            if not was_lost:
                try:
                    self.gateway.release(self.key, self.token)
                except (LockLost, NotOwner) as exc:
                    # It was gone before the release: lost while held.
                    self.lost_reason = self.lost_reason or "lock-gone"
                    self.lost.set()
                    lost = lost_error(self.key, self.lost_reason)
                    lost.__cause__ = exc
                    error = lost
                except LockgateError as exc:
                    error = exc
        finally:
            self._shutdown_stream()
            reader = self._reader
            if reader is not None and reader is not threading.current_thread():
                reader.join(_JOIN_TIMEOUT)
            _forks.forget(self)
        if error is not None:
            raise error

    def __enter__(self) -> "Lock":
        return self.acquire()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._in_other_process:
            return
        try:
            self.release()
        except LockgateError as error:
            if exc is not None:
                # The block's own exception says more: keep it, note ours.
                attach_note(exc, f"lockgate: releasing {self.key!r} also failed: {error!r}")
                log.warning("releasing lock %r failed while the block raised: %r", self.key, error)
                return
            if isinstance(error, GatewayUnavailable):
                # The connection is closed: a live gateway has released, a
                # dead one's lease runs out. The block ran under the lock.
                log.warning("releasing lock %r: %s", self.key, error)
                return
            raise
        # A loss is only taken in before the release began: it happened
        # while the block ran.
        if exc is None and self.lost.is_set():
            raise lost_error(self.key, self.lost_reason or "lock-gone")


def _events(response: httpx.Response) -> Iterator[ServerSentEvent]:
    decoder = SSEDecoder()
    for line in response.iter_lines():
        event = decoder.feed(line)
        if event is not None:
            yield event


class Watcher:
    """Iterates a lock's events (`GET /locks/{key}/events`).

    A dropped connection, or one silent for longer than `idle_timeout`
    (the gateway sends a comment at least every 15 s by default), is made
    again, resuming after `last_event_id`: no event is missed or seen twice
    while the gateway keeps them (a `gap` event, then a fresh `snapshot`,
    says when it no longer did). Reconnecting gives up with
    `GatewayUnavailable` after `reconnect_timeout` seconds of failures.
    """

    def __init__(
        self,
        gateway: Gateway,
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
        self._events: Optional[Iterator[ServerSentEvent]] = None
        self._closed = False

    def __iter__(self) -> "Watcher":
        return self

    def __next__(self) -> LockEvent:
        while True:
            if self._closed:
                raise StopIteration
            if self._events is None:
                self._connect()
            assert self._events is not None
            try:
                event = next(self._events)
            except StopIteration:
                self._drop()
                continue
            except (httpx.TransportError, httpx.StreamError) as exc:
                # Dropped (or closed by `close()`, which the loop sees).
                log.debug("watch stream of %r dropped: %r", self.key, exc)
                self._drop()
                continue
            if event.id is not None:
                self.last_event_id = event.id
            return LockEvent(type=event.event, data=event.json(), id=event.id)

    def _connect(self) -> None:
        gateway = self.gateway
        started = time.monotonic()
        attempt = 0
        while True:
            headers = dict(STREAM_HEADERS)
            if self.last_event_id:
                headers["Last-Event-ID"] = self.last_event_id
            client = gateway._http()
            request = client.build_request(
                "GET", lock_path(self.key, "events"), headers=headers,
                timeout=httpx.Timeout(gateway.timeout, read=self.idle_timeout),
            )
            error: LockgateError
            try:
                response = client.send(request, stream=True)
            except httpx.TransportError as exc:
                error = unreachable(exc)
            else:
                if response.status_code == 200:
                    if self._resuming:
                        self.reconnects += 1
                    self._response = response
                    self._events = _events(response)
                    if self._closed:  # closed from another thread meanwhile
                        self._drop()
                    return
                response.read()
                response.close()
                error = problem_error(response)
                if not isinstance(error, GatewayUnavailable):
                    raise error
            if self._closed or time.monotonic() - started >= self.reconnect_timeout:
                raise error
            time.sleep(min(_backoff(attempt), max(0.0, started + self.reconnect_timeout - time.monotonic())))
            attempt += 1

    @property
    def _resuming(self) -> bool:
        return self.last_event_id is not None

    def _drop(self) -> None:
        response, self._response, self._events = self._response, None, None
        if response is not None:
            try:
                response.close()
            except Exception:
                pass

    def close(self) -> None:
        """Stops following; the iteration ends. May be called from another
        thread than the one iterating."""
        self._closed = True
        response = self._response
        if response is not None:
            # Wakes a read blocked in another thread (closing alone would
            # not). The connection is never pooled, so the socket is ours.
            stream = response.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def __enter__(self) -> "Watcher":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class Leadership(Lock):
    """Leadership won in an election: a streamed lock whose fencing token is
    the leader's term. Leaving the `with` block resigns."""

    def __init__(self, election: "Election", *, timeout: Optional[float], wait_step: float,
                 on_lost: Optional[Callable[["Lock"], Any]] = None) -> None:
        super().__init__(election.gateway, election.key, ttl=election.ttl, wait=0.0,
                         value=election.value, on_lost=on_lost)
        self.election = election
        self.timeout = timeout
        self.wait_step = wait_step

    @property
    def term(self) -> Optional[int]:
        """The leader's term (its fencing token)."""
        return self.fencing_token

    def acquire(self) -> "Leadership":
        """Campaigns until elected: waits in the lock's queue, a step of
        `wait_step` seconds at a time, through refusals and an unreachable
        gateway, until `timeout` (None: forever) runs out with `LockHeld`."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        attempt = 0
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            self.wait = self.wait_step if left is None else max(0.0, min(self.wait_step, left))
            self._body = acquire_body(self.key, ttl=self.ttl, wait=self.wait, value=self.value)
            try:
                super().acquire()
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
                time.sleep(_backoff(attempt) if left is None else min(_backoff(attempt), left))
                attempt += 1

    def resign(self) -> None:
        """Gives up the leadership (releases the lock)."""
        self.release()


class Election:
    """Leader election on one lock key: the holder of the streamed lock
    leads, publishing `value`; the other candidates wait in line."""

    def __init__(self, gateway: Gateway, key: str, *, value: Optional[str] = None, ttl: float = 10.0) -> None:
        self.gateway = gateway
        self.key = key
        self.value = value
        self.ttl = ttl

    def campaign(
        self,
        *,
        timeout: Optional[float] = None,
        wait_step: float = 60.0,
        on_lost: Optional[Callable[["Lock"], Any]] = None,
    ) -> Leadership:
        """A campaign: entering its `with` block (or `acquire()`) returns
        once elected; the block runs as the leader, and leaving it resigns."""
        return Leadership(self, timeout=timeout, wait_step=wait_step, on_lost=on_lost)

    def leader(self) -> Optional[Leader]:
        """The current leader, or None."""
        return leader_of(self.gateway.inspect(self.key))

    def observe(self, **watch_options: Any) -> "LeaderObserver":
        """The leader now, then again at every change (None while there is
        none), as an iterator; `watch_options` as for `Gateway.watch`."""
        return LeaderObserver(self.gateway.watch(self.key, **watch_options))


class LeaderObserver:
    """Iterates an election's leader: the one at the start, then each new
    one (None while there is none). Follows the lock's events, so it
    resumes after a dropped connection like a `Watcher`."""

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher
        self._tracker = LeaderTracker()

    @property
    def leader(self) -> Optional[Leader]:
        """The leader as of the last event seen."""
        return self._tracker.leader

    def __iter__(self) -> "LeaderObserver":
        return self

    def __next__(self) -> Optional[Leader]:
        for event in self.watcher:
            if self._tracker.update(event):
                return self._tracker.leader
        raise StopIteration

    def close(self) -> None:
        """Stops following (from any thread); the iteration ends."""
        self.watcher.close()

    def __enter__(self) -> "LeaderObserver":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
