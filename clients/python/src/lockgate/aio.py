"""The asyncio client: `AsyncGateway`, its streamed `AsyncLock`, the plain
`AsyncLease`, `AsyncWatcher` and `AsyncElection`.

An `AsyncLock` is held through a streamed lock like the sync `Lock`; a
reader task follows the stream's events and a timer on the event loop
declares the lock lost when no renewal arrived before the lease could have
ended. A lost lock cancels the task running the `async with` body, and the
block then raises `LockLost` in place of that cancellation, the way
`asyncio.timeout` turns its own cancellation into `TimeoutError`. A
cancellation from elsewhere is left alone.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import time
import uuid
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Mapping, Optional, Type, TypeVar

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

__all__ = [
    "AsyncGateway",
    "AsyncLock",
    "AsyncLease",
    "AsyncWatcher",
    "AsyncElection",
    "AsyncLeadership",
    "AsyncLeaderObserver",
]

log = logging.getLogger("lockgate")

T = TypeVar("T")

#: How long `release` waits for a streamed lock's reader task to finish.
_JOIN_TIMEOUT = 2.0


def _backoff(attempt: int) -> float:
    return min(0.05 * 2.0**attempt, 1.0)


async def _shielded(awaitable: Awaitable[T]) -> T:
    """Runs `awaitable` to its end even if the calling task is cancelled
    meanwhile; the cancellation is raised afterwards."""
    task = asyncio.ensure_future(awaitable)
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


class AsyncGateway:
    """A lockgate gateway, for asyncio code. The same options as `Gateway`.

    Close it with `await gateway.aclose()` or `async with AsyncGateway(...)`.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: Optional[str] = None,
        timeout: float = 10.0,
        retries: int = 2,
        headers: Optional[Mapping[str, str]] = None,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = float(timeout)
        self.retries = int(retries)
        self._headers: Dict[str, str] = dict(headers or {})
        if api_key is not None:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._transport = transport
        self._pid = os.getpid()
        self._client: Optional[httpx.AsyncClient] = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None or os.getpid() != self._pid:
            # Made on first use, inside the event loop; a forked child makes
            # its own rather than share the parent's sockets.
            self._pid = os.getpid()
            self._client = httpx.AsyncClient(
                base_url=self.url,
                headers=self._headers,
                timeout=self.timeout,
                transport=self._transport,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=20),
            )
        return self._client

    async def aclose(self) -> None:
        """Closes the pooled connections. Locks still held end with them."""
        if self._client is not None and os.getpid() == self._pid:
            await self._client.aclose()
        self._client = None

    async def __aenter__(self) -> "AsyncGateway":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"AsyncGateway({self.url!r})"

    def _timeout(self, extra: float = 0.0) -> httpx.Timeout:
        return httpx.Timeout(self.timeout, read=self.timeout + extra)

    async def _request(
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
        attempt = 0
        while True:
            try:
                return await self._http().request(
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
                await asyncio.sleep(_backoff(attempt))
                attempt += 1

    @staticmethod
    def _answer(response: httpx.Response) -> Dict[str, Any]:
        if response.status_code >= 400:
            raise problem_error(response)
        if not response.content:
            return {}
        data = response.json()
        return data if isinstance(data, dict) else {"data": data}

    def lock(
        self,
        key: str,
        *,
        ttl: float = 30.0,
        wait: float = 0.0,
        mode: Optional[str] = None,
        limit: Optional[int] = None,
        value: Optional[str] = None,
        on_lost: Optional[Callable[["AsyncLock"], Any]] = None,
    ) -> "AsyncLock":
        """A streamed lock on `key`, taken by `async with` (or `await
        lock.acquire()`); see `Gateway.lock`. A lost lock cancels the
        block's body, and the block raises `LockLost`."""
        return AsyncLock(self, key, ttl=ttl, wait=wait, mode=mode, limit=limit, value=value, on_lost=on_lost)

    async def acquire(
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
    ) -> "AsyncLease":
        """Takes a plain lease; see `Gateway.acquire`."""
        body = acquire_body(key, ttl=ttl, wait=wait, mode=mode, limit=limit, value=value, token=token)
        headers: Dict[str, str] = {}
        if token is None:
            headers["Idempotency-Key"] = idempotency_key or new_idempotency_key()
        response = await self._request(
            "POST", "/locks", json=body, headers=headers, extra_time=wait, retry_unanswered=token is None
        )
        data = self._answer(response)
        replayed = response.headers.get("Idempotent-Replayed", "").lower() == "true"
        return AsyncLease(self, data, value=value, replayed=replayed)

    async def extend(self, key: str, token: str, ttl: float) -> "AsyncLease":
        """Renews a lease; see `Gateway.extend`."""
        response = await self._request(
            "PUT", lock_path(key, "ttl"), json={"token": token, "ttl_ms": millis(ttl, "ttl")}
        )
        return AsyncLease(self, dict(self._answer(response), token=token))

    async def release(self, key: str, token: str) -> int:
        """Gives back one hold; returns the holds left (0: free)."""
        response = await self._request(
            "DELETE", lock_path(key), headers={"Lock-Token": token}, retry_unanswered=False
        )
        return int(self._answer(response).get("holds") or 0)

    async def set_value(self, key: str, token: str, value: Optional[str]) -> "AsyncLease":
        """Replaces the public value of the lease held with `token`."""
        response = await self._request("PUT", lock_path(key, "value"), json={"token": token, "value": value})
        data = self._answer(response)
        data.pop("ttl_ms", None)  # not the lease's length in this answer
        return AsyncLease(self, dict(data, token=token), value=value)

    async def inspect(self, key: str) -> Optional[LockInfo]:
        """The lock's state, or None when free."""
        response = await self._request("GET", lock_path(key))
        if is_lock_not_found(response):
            return None
        return LockInfo.from_json(self._answer(response))

    async def list_locks(self, prefix: str = "", *, page_size: int = 100) -> AsyncIterator[LockInfo]:
        """Every held lock whose key starts with `prefix`."""
        cursor: Optional[str] = None
        while True:
            params: Dict[str, Any] = {"prefix": prefix, "limit": page_size}
            if cursor:
                params["cursor"] = cursor
            data = self._answer(await self._request("GET", "/locks", params=params))
            for item in data.get("locks") or ():
                yield LockInfo.from_json(item)
            cursor = data.get("next_cursor")
            if not cursor:
                return

    async def revoke(self, key: str, admin_token: str) -> bool:
        """Ends every hold of `key` (with the admin token); False when free."""
        response = await self._request(
            "DELETE", lock_path(key), params={"force": "true"},
            headers={"Authorization": f"Bearer {admin_token}"},
        )
        if is_lock_not_found(response):
            return False
        self._answer(response)
        return True

    def watch(
        self,
        key: str,
        *,
        last_event_id: Optional[str] = None,
        reconnect_timeout: float = 30.0,
        idle_timeout: Optional[float] = 60.0,
    ) -> "AsyncWatcher":
        """The events of `key`, as an async iterator that resumes after a
        dropped connection; see `Gateway.watch`."""
        return AsyncWatcher(
            self, key, last_event_id=last_event_id,
            reconnect_timeout=reconnect_timeout, idle_timeout=idle_timeout,
        )

    def election(self, key: str, *, value: Optional[str] = None, ttl: float = 10.0) -> "AsyncElection":
        """An election on the streamed lock `key`; see `Gateway.election`."""
        return AsyncElection(self, key, value=value, ttl=ttl)


class AsyncLease:
    """A plain lease taken with `AsyncGateway.acquire`; see `Lease`."""

    def __init__(
        self,
        gateway: AsyncGateway,
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
        self.replayed = replayed

    async def extend(self, ttl: Optional[float] = None) -> "AsyncLease":
        renewed = await self.gateway.extend(self.key, self.token, ttl if ttl is not None else (self.ttl or 30.0))
        self.ttl, self.expires_at_ms, self.holds = renewed.ttl, renewed.expires_at_ms, renewed.holds
        return self

    async def release(self) -> int:
        self.holds = await self.gateway.release(self.key, self.token)
        return self.holds

    async def set_value(self, value: Optional[str]) -> None:
        await self.gateway.set_value(self.key, self.token, value)
        self.value = value

    async def __aenter__(self) -> "AsyncLease":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            await _shielded(self.release())
        except LockgateError as error:
            if exc is None:
                raise
            attach_note(exc, f"lockgate: releasing {self.key!r} also failed: {error!r}")
            log.warning("releasing %r failed while the block raised: %r", self.key, error)

    def __repr__(self) -> str:
        return f"AsyncLease(key={self.key!r}, fencing_token={self.fencing_token}, holds={self.holds})"


class AsyncLock:
    """A streamed lock for asyncio code; see `Lock`.

    `lost` is an `asyncio.Event`. While the `async with` body runs, a lost
    lock cancels the task running it; the block then raises `LockLost`
    (unless the body raised an exception of its own, which is never
    replaced, or the task was also cancelled from elsewhere, which goes on).
    """

    def __init__(
        self,
        gateway: AsyncGateway,
        key: str,
        *,
        ttl: float,
        wait: float,
        mode: Optional[str] = None,
        limit: Optional[int] = None,
        value: Optional[str] = None,
        on_lost: Optional[Callable[["AsyncLock"], Any]] = None,
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
        self.grant: Dict[str, Any] = {}
        self.position: Optional[int] = None
        self.lost_reason: Optional[str] = None
        self._lost: Optional[asyncio.Event] = None
        self._body = acquire_body(key, ttl=ttl, wait=wait, mode=mode, limit=limit, value=value)
        self._clock: Optional[LeaseClock] = None
        self._response: Optional[httpx.Response] = None
        self._reader: Optional["asyncio.Task[None]"] = None
        self._timer: Optional[asyncio.TimerHandle] = None
        self._body_task: Optional["asyncio.Task[Any]"] = None
        self._cancelling = 0
        self._in_body = False
        self._cancelled_body = False
        # Marks the CancelledError of our own cancellation, for Pythons
        # without Task.uncancel (before 3.11).
        self._cancel_message = f"lockgate: lock {key!r} lost ({uuid.uuid4()})"
        self._releasing = False
        self._released = False
        self._forked = False
        self._pid = 0
        self._callbacks: "set[asyncio.Future[Any]]" = set()

    def __repr__(self) -> str:
        state = (
            "lost" if self.lost_reason else "released" if self._released
            else "held" if self.token else "not acquired"
        )
        return f"AsyncLock(key={self.key!r}, fencing_token={self.fencing_token}, {state})"

    @property
    def lost(self) -> asyncio.Event:
        """Set once the lock is lost."""
        # Made on first use inside the event loop (Python 3.9 binds an
        # Event to a loop when it is made).
        if self._lost is None:
            self._lost = asyncio.Event()
        return self._lost

    async def acquire(self) -> "AsyncLock":
        """Takes the lock, waiting up to `wait` seconds; raises `LockHeld`
        when the wait runs out."""
        if self.token is not None:
            raise RuntimeError(f"lock {self.key!r} was already acquired; make a new one with AsyncGateway.lock")
        self.lost  # made now, in the loop
        gateway = self.gateway
        timeout = gateway._timeout(max(self.wait, self.ttl))
        attempt = 0
        while True:
            client = gateway._http()
            request = client.build_request("POST", "/locks", json=self._body, headers=STREAM_HEADERS, timeout=timeout)
            sent_at = time.monotonic()
            try:
                response = await client.send(request, stream=True)
                break
            except UNSENT_ERRORS as exc:
                if attempt >= gateway.retries:
                    raise unreachable(exc) from exc
                await asyncio.sleep(_backoff(attempt))
                attempt += 1
            except httpx.TransportError as exc:
                raise unreachable(exc) from exc
        events = _events(response)
        try:
            if response.status_code != 200:
                await response.aread()
                raise problem_error(response)
            while True:
                try:
                    event = await events.__anext__()
                except StopAsyncIteration:
                    raise GatewayUnavailable(
                        f"the gateway ended the stream of {self.key!r} before granting it"
                    ) from None
                if event.event == "queued":
                    self.position = event.json().get("position")
                elif event.event == "refused":
                    raise refusal_error(event.json())
                elif event.event == "acquired":
                    self._granted(event.json(), sent_at, response)
                    break
        except httpx.TransportError as exc:
            await _close_quietly(response)
            raise unreachable(exc) from exc
        except BaseException:
            # Closing withdraws the request: nothing stays granted.
            await _shielded(_close_quietly(response))
            raise
        self._reader = asyncio.get_running_loop().create_task(self._read(events))
        self._arm_timer()
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
        self._pid = os.getpid()
        _forks.track(self)

    def _arm_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._clock is None:
            return
        delay = max(0.0, self._clock.deadline - time.monotonic())
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_deadline)

    def _on_deadline(self) -> None:
        self._timer = None
        if self._clock is not None and time.monotonic() < self._clock.deadline:
            self._arm_timer()
        else:
            self._lose("lease-expired")

    async def _read(self, events: AsyncIterator[ServerSentEvent]) -> None:
        """The reader task: follows the stream until it ends."""
        reason = "connection-lost"
        try:
            while True:
                try:
                    event = await events.__anext__()
                except StopAsyncIteration:
                    break
                if event.event == "renewed":
                    expires_at_ms = event.json().get("expires_at_ms")
                    if self._clock is not None and isinstance(expires_at_ms, int):
                        self._clock.renewed(expires_at_ms, time.monotonic())
                        if not self._releasing:
                            self._arm_timer()
                elif event.event in ("released", "lost"):
                    reason = "released" if event.event == "released" else str(
                        event.json().get("reason") or "lock-gone"
                    )
                    break
        except asyncio.CancelledError:
            # Cut on purpose, by a release or a loss already taken in.
            return
        except Exception as exc:
            log.debug("stream of %r ended: %r", self.key, exc)
        finally:
            if self._response is not None:
                await _close_quietly(self._response)
        self._lose(reason)

    def _lose(self, reason: str) -> None:
        if self.lost_reason is not None or self._releasing or self._forked or self._released:
            return
        self.lost_reason = reason
        self.lost.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        log.warning("lock %r lost: %s", self.key, reason)
        reader = self._reader
        if reader is not None and reader is not asyncio.current_task() and not reader.done():
            # Closes the connection: a live gateway releases at once.
            reader.cancel()
        task = self._body_task
        if self._in_body and task is not None and not task.done():
            self._cancelled_body = True
            task.cancel(msg=self._cancel_message)
        if self.on_lost is not None:
            try:
                result = self.on_lost(self)
                if inspect.isawaitable(result):
                    future = asyncio.ensure_future(result)
                    self._callbacks.add(future)
                    future.add_done_callback(self._callback_done)
            except Exception:
                log.exception("on_lost callback of lock %r failed", self.key)

    def _callback_done(self, future: "asyncio.Future[Any]") -> None:
        self._callbacks.discard(future)
        if not future.cancelled() and future.exception() is not None:
            log.error("on_lost callback of lock %r failed: %r", self.key, future.exception())

    def _forked_away(self) -> None:
        self._forked = True

    @property
    def _in_other_process(self) -> bool:
        return self._forked or (self._pid != 0 and os.getpid() != self._pid)

    @property
    def remaining(self) -> float:
        """Seconds until the lease could end unless a renewal arrives first."""
        if self._clock is None or self.lost_reason is not None:
            return 0.0
        return max(0.0, self._clock.deadline - time.monotonic())

    def check(self) -> None:
        """Raises `LockLost` unless the lock is still held."""
        if self._in_other_process:
            raise lost_error(self.key, "forked")
        if self.token is None:
            raise LockLost(f"lock {self.key!r} is not acquired")
        if self.lost_reason is None and self._clock is not None and time.monotonic() >= self._clock.deadline:
            self._lose("lease-expired")
        if self.lost_reason is not None:
            raise lost_error(self.key, self.lost_reason)
        if self._released:
            raise lost_error(self.key, "released")

    async def release(self) -> None:
        """Releases the lock (once; later calls do nothing); see `Lock.release`."""
        if self._released or self.token is None:
            return
        self._released = True
        if self._in_other_process:
            return
        was_lost = self.lost_reason is not None
        self._releasing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        error: Optional[LockgateError] = None
        try:
            if not was_lost:
                try:
                    await self.gateway.release(self.key, self.token)
                except (LockLost, NotOwner) as exc:
                    self.lost_reason = "lock-gone"
                    self.lost.set()
                    error = lost_error(self.key, self.lost_reason)
                    error.__cause__ = exc
                except LockgateError as exc:
                    error = exc
        finally:
            reader = self._reader
            if reader is not None and not reader.done():
                reader.cancel()
                await asyncio.wait((reader,), timeout=_JOIN_TIMEOUT)
            _forks.forget(self)
        if error is not None:
            raise error

    async def __aenter__(self) -> "AsyncLock":
        await self.acquire()
        task = asyncio.current_task()
        self._body_task = task
        cancelling = getattr(task, "cancelling", None)
        self._cancelling = cancelling() if cancelling is not None else 0
        if self.lost_reason is not None:
            await _shielded(self.release())
            raise lost_error(self.key, self.lost_reason)
        self._in_body = True
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Optional[bool]:
        self._in_body = False
        if self._in_other_process:
            return None
        ours = False
        if self._cancelled_body:
            task = self._body_task
            uncancel = getattr(task, "uncancel", None)
            if uncancel is not None:
                # 3.11+: the cancellation is only ours if no one else asked
                # for one too since the block began.
                ours = uncancel() <= self._cancelling and isinstance(exc, asyncio.CancelledError)
            else:
                ours = isinstance(exc, asyncio.CancelledError) and exc.args[:1] == (self._cancel_message,)
        try:
            await _shielded(self.release())
        except LockgateError as error:
            if ours:
                raise lost_error(self.key, self.lost_reason or "lock-gone") from exc
            if exc is not None:
                attach_note(exc, f"lockgate: releasing {self.key!r} also failed: {error!r}")
                log.warning("releasing lock %r failed while the block raised: %r", self.key, error)
                return None
            if isinstance(error, GatewayUnavailable):
                log.warning("releasing lock %r: %s", self.key, error)
                return None
            raise
        if ours:
            # Our cancellation becomes the loss it stands for; its traceback,
            # kept as the cause, shows where the body was stopped.
            raise lost_error(self.key, self.lost_reason or "lock-gone") from exc
        if exc is None and self.lost_reason is not None:
            raise lost_error(self.key, self.lost_reason)
        return None


async def _close_quietly(response: httpx.Response) -> None:
    try:
        await response.aclose()
    except Exception:
        pass


async def _events(response: httpx.Response) -> AsyncIterator[ServerSentEvent]:
    decoder = SSEDecoder()
    async for line in response.aiter_lines():
        event = decoder.feed(line)
        if event is not None:
            yield event


class AsyncWatcher:
    """Iterates a lock's events with `async for`; see `Watcher`."""

    def __init__(
        self,
        gateway: AsyncGateway,
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
        self.reconnects = 0
        self._response: Optional[httpx.Response] = None
        self._events: Optional[AsyncIterator[ServerSentEvent]] = None
        self._closed = False

    def __aiter__(self) -> "AsyncWatcher":
        return self

    async def __anext__(self) -> LockEvent:
        while True:
            if self._closed:
                raise StopAsyncIteration
            if self._events is None:
                await self._connect()
            assert self._events is not None
            try:
                event = await self._events.__anext__()
            except StopAsyncIteration:
                await self._drop()
                continue
            except (httpx.TransportError, httpx.StreamError) as exc:
                log.debug("watch stream of %r dropped: %r", self.key, exc)
                await self._drop()
                continue
            if event.id is not None:
                self.last_event_id = event.id
            return LockEvent(type=event.event, data=event.json(), id=event.id)

    async def _connect(self) -> None:
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
                response = await client.send(request, stream=True)
            except httpx.TransportError as exc:
                error = unreachable(exc)
            else:
                if response.status_code == 200:
                    if self.last_event_id is not None:
                        self.reconnects += 1
                    self._response = response
                    self._events = _events(response)
                    return
                await response.aread()
                await response.aclose()
                error = problem_error(response)
                if not isinstance(error, GatewayUnavailable):
                    raise error
            if self._closed or time.monotonic() - started >= self.reconnect_timeout:
                raise error
            await asyncio.sleep(min(_backoff(attempt), max(0.0, started + self.reconnect_timeout - time.monotonic())))
            attempt += 1

    async def _drop(self) -> None:
        response, self._response, self._events = self._response, None, None
        if response is not None:
            await _close_quietly(response)

    async def aclose(self) -> None:
        """Stops following; the iteration ends."""
        self._closed = True
        await self._drop()

    async def __aenter__(self) -> "AsyncWatcher":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


class AsyncLeadership(AsyncLock):
    """Leadership won in an election; see `Leadership`."""

    def __init__(self, election: "AsyncElection", *, timeout: Optional[float], wait_step: float,
                 on_lost: Optional[Callable[["AsyncLock"], Any]] = None) -> None:
        super().__init__(election.gateway, election.key, ttl=election.ttl, wait=0.0,
                         value=election.value, on_lost=on_lost)
        self.election = election
        self.timeout = timeout
        self.wait_step = wait_step

    @property
    def term(self) -> Optional[int]:
        """The leader's term (its fencing token)."""
        return self.fencing_token

    async def acquire(self) -> "AsyncLeadership":
        """Campaigns until elected; see `Leadership.acquire`."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        attempt = 0
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            self.wait = self.wait_step if left is None else max(0.0, min(self.wait_step, left))
            self._body = acquire_body(self.key, ttl=self.ttl, wait=self.wait, value=self.value)
            try:
                await super().acquire()
                return self
            except LockHeld:
                if left is not None and left <= self.wait:
                    raise
            except InvalidRequest as exc:
                if exc.problem.get("field") == "wait_ms" and self.wait_step > 1.0:
                    self.wait_step /= 2
                    continue
                raise
            except GatewayUnavailable:
                if left is not None and left <= 0:
                    raise
                await asyncio.sleep(_backoff(attempt) if left is None else min(_backoff(attempt), left))
                attempt += 1

    async def resign(self) -> None:
        """Gives up the leadership (releases the lock)."""
        await self.release()


class AsyncElection:
    """Leader election on one lock key; see `Election`."""

    def __init__(self, gateway: AsyncGateway, key: str, *, value: Optional[str] = None, ttl: float = 10.0) -> None:
        self.gateway = gateway
        self.key = key
        self.value = value
        self.ttl = ttl

    def campaign(
        self,
        *,
        timeout: Optional[float] = None,
        wait_step: float = 60.0,
        on_lost: Optional[Callable[["AsyncLock"], Any]] = None,
    ) -> AsyncLeadership:
        """A campaign: `async with` it to run as the leader once elected."""
        return AsyncLeadership(self, timeout=timeout, wait_step=wait_step, on_lost=on_lost)

    async def leader(self) -> Optional[Leader]:
        """The current leader, or None."""
        return leader_of(await self.gateway.inspect(self.key))

    def observe(self, **watch_options: Any) -> "AsyncLeaderObserver":
        """The leader now, then again at every change (None while there is
        none), as an async iterator; see `Election.observe`."""
        return AsyncLeaderObserver(self.gateway.watch(self.key, **watch_options))


class AsyncLeaderObserver:
    """Iterates an election's leader with `async for`; see `LeaderObserver`."""

    def __init__(self, watcher: AsyncWatcher) -> None:
        self.watcher = watcher
        self._tracker = LeaderTracker()

    @property
    def leader(self) -> Optional[Leader]:
        return self._tracker.leader

    def __aiter__(self) -> "AsyncLeaderObserver":
        return self

    async def __anext__(self) -> Optional[Leader]:
        async for event in self.watcher:
            if self._tracker.update(event):
                return self._tracker.leader
        raise StopAsyncIteration

    async def aclose(self) -> None:
        await self.watcher.aclose()

    async def __aenter__(self) -> "AsyncLeaderObserver":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()
