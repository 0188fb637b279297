# Written by scripts/unasync.py from lockgate/_async/gateway.py: edit that file, not this one.
"""The gateway and its plain leases: `Gateway`, with one method per
operation of the API, and `Lease`.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from types import TracebackType
from typing import Any, Iterator, Callable, Dict, Mapping, Optional, Sequence, Tuple, Type, Union, cast

import httpx

from .._api import HoldReleased, LockGrant, LockList, LockMode, ModeChange
from .._protocol import (
    tls_context,
    STREAM_HEADERS,
    UNSENT_ERRORS,
    acquire_body,
    answer,
    backoff,
    is_lock_not_found,
    lock_path,
    millis,
    mode_body,
    new_idempotency_key,
    note_failed_release,
    unreachable,
)
from ..errors import LockgateError
from ..models import LockInfo
from ._concurrency import shielded, sleep
from .batch import LockSet
from .lock import Lock
from .session import Session
from .watch import Election, Watcher

__all__ = ["Gateway", "Lease"]

log = logging.getLogger("lockgate")


class Gateway:
    """A lockgate gateway, reached over HTTP.

    `url` is the gateway's base URL; `api_key` is sent as
    `Authorization: Bearer <key>`; `timeout` (seconds) bounds each request's
    connecting, sending and waiting for an answer, on top of any lock wait
    asked for; `retries` is how many times a request that got no answer is
    sent again (an acquisition with the same `Idempotency-Key`); `headers`
    go with every request; `transport` is an httpx transport.

    For a gateway served over HTTPS, `verify` is the CA bundle to trust (a
    path to a PEM file), an `ssl.SSLContext`, or True for the system's; and
    `cert` the client certificate the gateway may ask for, as a path to a
    PEM file holding certificate and key or a `(certificate, key)` pair of
    paths (httpx's own meanings of both).

    Close it (`close()`, or use it as a context manager) to close its
    connections. After `os.fork` the child quietly opens its own.
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
        verify: Union[bool, str, ssl.SSLContext] = True,
        cert: Optional[Union[str, Tuple[str, str]]] = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = float(timeout)
        self.retries = int(retries)
        self._headers: Dict[str, str] = dict(headers or {})
        if api_key is not None:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._transport = transport
        self._verify = verify
        self._cert = cert
        self._guard = threading.Lock()
        self._pid = os.getpid()
        self._client: Optional[httpx.Client] = None

    def _http(self) -> httpx.Client:
        """The connection pool, made on first use (for asyncio, inside the
        event loop)."""
        if os.getpid() != self._pid:
            # A forked child must not share the parent's pooled sockets: the
            # old pool is dropped unclosed, which only closes this process's
            # copies of them. The guard may have been held at the fork.
            self._guard = threading.Lock()
            self._pid = os.getpid()
            self._client = None
        with self._guard:
            if self._client is None:
                self._client = httpx.Client(
                    base_url=self.url,
                    headers=self._headers,
                    timeout=self.timeout,
                    transport=self._transport,
                    verify=tls_context(self._verify, self._cert),
                    # Each streamed lock keeps a connection while it is held.
                    limits=httpx.Limits(max_connections=None, max_keepalive_connections=20),
                )
            return self._client

    def close(self) -> None:
        """Closes the pooled connections. Locks still held end with them."""
        client, self._client = self._client, None
        if client is not None and os.getpid() == self._pid:
            client.close()

    def __enter__(self) -> "Gateway":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    # -- requests --------------------------------------------------------

    def _timeout(self, extra: float = 0.0) -> httpx.Timeout:
        """The request timeout, its read part lengthened by a lock wait."""
        return httpx.Timeout(self.timeout, read=self.timeout + extra)

    def _stream(
        self, path: str, body: Mapping[str, Any], *, extra_time: float, retried: bool
    ) -> Tuple[httpx.Response, float]:
        """Sends a streamed request (`POST path` with `Accept:
        text/event-stream`): its response, unread, and when it was sent.
        `extra_time` is how long the stream may go silent; `retried`,
        whether a request that got no answer is sent again."""
        return self._send(
            "POST",
            path,
            json=body,
            headers=STREAM_HEADERS,
            extra_time=extra_time,
            retry_unanswered=retried,
            stream=True,
        )

    def _send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        params: Optional[Mapping[str, Any]] = None,
        extra_time: float = 0.0,
        retry_unanswered: bool = True,
        stream: bool = False,
    ) -> Tuple[httpx.Response, float]:
        """Sends a request, and again up to `retries` times while it gets no
        answer: when `retry_unanswered`, or else only when it surely never
        left. Returns the answer and when (monotonic) the request that got
        it was sent."""
        attempt = 0
        while True:
            client = self._http()
            request = client.build_request(
                method, path, json=json, headers=headers, params=params, timeout=self._timeout(extra_time)
            )
            sent_at = time.monotonic()
            try:
                return client.send(request, stream=stream), sent_at
            except httpx.TransportError as exc:
                if attempt >= self.retries or not (retry_unanswered or isinstance(exc, UNSENT_ERRORS)):
                    raise unreachable(exc) from exc
                log.debug("retrying %s %s after %r", method, path, exc)
                sleep(backoff(attempt))
                attempt += 1

    def _request(self, method: str, path: str, **options: Any) -> httpx.Response:
        response, _ = self._send(method, path, **options)
        return response

    # -- streamed locks --------------------------------------------------

    def lock(
        self,
        key: str,
        *,
        ttl: float = 30.0,
        wait: float = 0.0,
        mode: Optional[LockMode] = None,
        limit: Optional[int] = None,
        permits: Optional[int] = None,
        value: Optional[str] = None,
        on_lost: Optional[Callable[[Lock], Any]] = None,
        on_queued: Optional[Callable[[int], Any]] = None,
        session: Optional[str] = None,
    ) -> Lock:
        """A streamed lock on `key`, taken when its `with` block starts
        (or by `lock.acquire()`): held for as long as the block runs,
        renewed by the gateway every `ttl / 3` seconds, released when the
        block ends.

        `wait` is how long to wait for another owner to let go (0: try
        once); `mode="shared"` makes it a reader of a read-write lock,
        `limit=N` a counting lock of N places, of which this holder takes
        `permits` (default 1); `value` is a public string
        anyone inspecting the lock sees. `on_lost(lock)` is called once the
        lock is lost (by the sync client from a background thread; by the
        asyncio one on the loop, scheduling a coroutine it returns).
        `on_queued(position)` is called with the lock's place in the queue
        (1 is next) each time it changes while it waits, in the acquiring
        thread (or on the loop); what it raises ends the wait.

        `session` is the id of a session opened elsewhere (its opener
        handed it over) to hang the lock on: it lives as long as that
        session (`ttl` is not used) unless released first, and is lost
        (`session-ended`) when the gateway ends the session. For a session
        opened here, use `session.lock(...)`.
        """
        return Lock(
            self, key, ttl=ttl, wait=wait, mode=mode, limit=limit, permits=permits, value=value,
            on_lost=on_lost, on_queued=on_queued, session_id=session,
        )

    # -- several locks at once -------------------------------------------

    def lock_all(
        self,
        locks: Sequence[Union[str, Mapping[str, Any]]],
        *,
        ttl: float = 30.0,
        wait: float = 0.0,
        value: Optional[str] = None,
        on_lost: Optional[Callable[[LockSet], Any]] = None,
        session: Optional[str] = None,
    ) -> LockSet:
        """Several locks taken together when the `with` block starts
        (or by `locks.acquire()`): every one or none, for one owner
        token, held as one streamed lock is (a streamed `POST
        /locks/batch`): renewed by the gateway every `ttl / 3` seconds while
        the block runs, all released when it ends, and lost together when
        any of them is.

        Each lock is a key, or a mapping with `key` and any of `mode`,
        `limit`, `permits` (as `lock` takes them). `wait` is the whole
        batch's budget; batches naming the same keys in any order never
        deadlock each other. A refusal is `LockHeld` naming the held `key`
        in its problem. `session` is the id of a session opened elsewhere
        to hang the set on, as for `lock`.
        """
        return LockSet(self, locks, ttl=ttl, wait=wait, value=value, on_lost=on_lost, session_id=session)

    # -- sessions --------------------------------------------------------

    def session(
        self,
        *,
        ttl: float = 10.0,
        lock_delay: float = 0.0,
        value: Optional[str] = None,
        on_lost: Optional[Callable[[Session], Any]] = None,
    ) -> Session:
        """A session, opened when its `with` block starts (or by
        `session.open()`): one lease of `ttl` seconds that every lock
        taken through it (`session.lock(key, ...)`) hangs on, kept alive by
        the gateway while the client stays connected, ended when the block
        ends. When the session is lost, so is each of its locks.

        `lock_delay` is how long each of its locks stays unavailable after
        the session expired (not after a clean end), so a holder that lost
        it has that long to notice; `value` is a public string shown with
        the session. `on_lost(session)` is called once the session is lost,
        as a lock's `on_lost` is.
        """
        return Session(self, ttl=ttl, lock_delay=lock_delay, value=value, on_lost=on_lost)

    # -- plain leases ----------------------------------------------------

    def acquire(
        self,
        key: str,
        *,
        ttl: float = 30.0,
        wait: float = 0.0,
        mode: Optional[LockMode] = None,
        limit: Optional[int] = None,
        permits: Optional[int] = None,
        value: Optional[str] = None,
        token: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        session: Optional[str] = None,
    ) -> "Lease":
        """Takes a lease on `key` (`POST /locks`) that ends after `ttl`
        seconds unless extended; raises `LockHeld` when another owner holds
        it past `wait` seconds.

        Every acquisition goes with a fresh `Idempotency-Key` (or the one
        given), and a request whose answer was lost is sent again with the
        same one, so the gateway answers the grant it made instead of
        making another. With `token` it re-enters a lease held with that
        token (one more hold, the lease reset to `ttl`); a re-entry is only
        sent again when it surely never reached the gateway. With `session`
        (a session's id) the lease hangs on that session: it lives as long
        as the session, and `ttl` is not used.
        """
        body = acquire_body(
            key, ttl=ttl if session is None else None, wait=wait, mode=mode, limit=limit, permits=permits,
            value=value, token=token, session=session,
        )
        headers: Dict[str, str] = {}
        if token is None:
            headers["Idempotency-Key"] = idempotency_key or new_idempotency_key()
        response = self._request(
            "POST", "/locks", json=body, headers=headers, extra_time=wait, retry_unanswered=token is None
        )
        grant = cast(LockGrant, answer(response))
        replayed = response.headers.get("Idempotent-Replayed", "").lower() == "true"
        return Lease(self, grant, value=value, replayed=replayed, mode=mode or "exclusive", permits=permits)

    def extend(self, key: str, token: str, ttl: float) -> "Lease":
        """Renews a lease: it ends `ttl` seconds from now. Raises `LockLost`
        when the lease is gone (stop working on the resource), `NotOwner`
        when another owner holds the lock."""
        response = self._request(
            "PUT", lock_path(key, "ttl"), json={"token": token, "ttl_ms": millis(ttl, "ttl")}
        )
        return Lease(self, dict(answer(response), token=token))

    def change_mode(self, key: str, token: str, mode: LockMode, *, wait: float = 0.0) -> ModeChange:
        """Upgrades (`mode="exclusive"`) or downgrades (`"shared"`) the
        hold of `key` held with `token`, without letting go (`PUT
        /locks/{key}/mode`). An upgrade waits up to `wait` seconds for the
        other shared holders to leave, and raises `LockHeld` when they did
        not (the shared hold is kept) and `Deadlock` when another holder is
        upgrading already. Returns the hold's lease, with its fencing
        token (new after an upgrade) and mode."""
        response = self._request(
            "PUT", lock_path(key, "mode"), json=mode_body(token, mode, wait), extra_time=wait, retry_unanswered=False
        )
        return cast(ModeChange, answer(response))

    def release(self, key: str, token: str) -> int:
        """Gives back one hold of a lease; returns the holds left (0: the
        lock is free). Raises `LockLost` when no such lock is held."""
        response = self._request(
            "DELETE", lock_path(key), headers={"Lock-Token": token}, retry_unanswered=False
        )
        released = cast(HoldReleased, answer(response))
        return released.get("holds", 0)

    def set_value(self, key: str, token: str, value: Optional[str]) -> "Lease":
        """Replaces the public value of the lease held with `token`."""
        response = self._request("PUT", lock_path(key, "value"), json={"token": token, "value": value})
        lease = answer(response)
        lease.pop("ttl_ms", None)  # not the lease's length in this answer
        return Lease(self, dict(lease, token=token), value=value)

    def inspect(self, key: str) -> Optional[LockInfo]:
        """The lock's state (holders, leases, waiters), or None when free; a
        lock kept free by a lock-delay is a `LockInfo` with `held` False and
        `delayed_until_ms`."""
        response = self._request("GET", lock_path(key))
        if is_lock_not_found(response):
            return None
        return LockInfo.from_json(answer(response))

    def list_locks(self, prefix: str = "", *, page_size: int = 100) -> Iterator[LockInfo]:
        """Every held lock whose key starts with `prefix`, fetched a page at
        a time."""
        cursor: Optional[str] = None
        while True:
            params: Dict[str, Any] = {"prefix": prefix, "limit": page_size}
            if cursor:
                params["cursor"] = cursor
            page = cast(LockList, answer(self._request("GET", "/locks", params=params)))
            for status in page["locks"]:
                yield LockInfo.from_json(status)
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def revoke(self, key: str, admin_token: str, *, fencing_token: Optional[int] = None) -> bool:
        """Ends the holds of `key` (an operator's action, with the gateway's
        admin token): with `fencing_token`, only the hold with that fencing
        token (the one the operator saw stuck, as `inspect` shows it), and
        never another holder's; without, every hold at once. False when
        there was nothing to end."""
        params: Dict[str, Any] = {"force": "true"}
        if fencing_token is not None:
            params["fencing_token"] = fencing_token
        response = self._request(
            "DELETE",
            lock_path(key),
            params=params,
            headers={"Authorization": f"Bearer {admin_token}"},
        )
        if is_lock_not_found(response):
            return False
        answer(response)
        return True

    # -- following locks -------------------------------------------------

    def watch(
        self,
        key: str,
        *,
        last_event_id: Optional[str] = None,
        reconnect_timeout: float = 30.0,
        idle_timeout: Optional[float] = 60.0,
    ) -> Watcher:
        """The events of `key` (`GET /locks/{key}/events`), as an iterator
        that reconnects after a dropped connection and resumes after the
        last event seen (`Last-Event-ID`)."""
        return Watcher(
            self,
            key,
            last_event_id=last_event_id,
            reconnect_timeout=reconnect_timeout,
            idle_timeout=idle_timeout,
        )

    def election(self, key: str, *, value: Optional[str] = None, ttl: float = 10.0) -> Election:
        """An election whose leader is the holder of the streamed lock `key`,
        publishing `value` (its address, say)."""
        return Election(self, key, value=value, ttl=ttl)


class Lease:
    """A lease taken with `acquire`: a token, a fencing token and an end the
    holder must keep pushing back with `extend`.

    As a context manager, leaving the block gives the hold back.
    """

    def __init__(
        self,
        gateway: Gateway,
        data: Mapping[str, Any],
        *,
        value: Optional[str] = None,
        replayed: bool = False,
        mode: Optional[str] = None,
        permits: Optional[int] = None,
    ) -> None:
        # A grant, or a renewal with the token added.
        grant = cast(LockGrant, data)
        self.gateway = gateway
        self.key: str = grant["key"]
        self.token: str = grant["token"]
        self.fencing_token: int = grant["fencing_token"]
        self.ttl: Optional[float] = grant["ttl_ms"] / 1000.0 if "ttl_ms" in grant else None
        self.expires_at_ms: Optional[int] = grant.get("expires_at_ms")
        self.holds: int = grant.get("holds", 1)
        self.waited: float = grant.get("waited_ms", 0) / 1000.0
        self.value = value
        #: How the lease holds its lock, as far as this client has asked.
        self.mode = mode
        #: The places of a counting lock the lease takes.
        self.permits = permits
        #: True when the gateway answered a retried acquisition with the
        #: grant the first attempt made (`Idempotent-Replayed: true`).
        self.replayed = replayed

    def extend(self, ttl: Optional[float] = None) -> "Lease":
        """Renews the lease for `ttl` seconds from now (the last length by
        default)."""
        renewed = self.gateway.extend(self.key, self.token, ttl if ttl is not None else (self.ttl or 30.0))
        self.ttl, self.expires_at_ms, self.holds = renewed.ttl, renewed.expires_at_ms, renewed.holds
        return self

    def upgrade(self, *, wait: float = 0.0) -> "Lease":
        """Makes this shared hold the exclusive one, waiting up to `wait`
        seconds for the other shared holders to leave; the fencing token
        becomes a new, larger one. `LockHeld` when the wait ran out (the
        shared hold is kept), `Deadlock` when another holder upgrades."""
        return self._changed(self.gateway.change_mode(self.key, self.token, "exclusive", wait=wait))

    def downgrade(self) -> "Lease":
        """Makes this exclusive hold a shared one (the fencing token stays)."""
        return self._changed(self.gateway.change_mode(self.key, self.token, "shared"))

    def _changed(self, changed: ModeChange) -> "Lease":
        self.mode = changed["mode"]
        self.fencing_token = changed["fencing_token"]
        self.expires_at_ms = changed["expires_at_ms"]
        self.holds = changed["holds"]
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
            shielded(self.release)
        except LockgateError as error:
            if exc is None:
                raise
            note_failed_release(exc, f"releasing {self.key!r}", error)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key={self.key!r}, fencing_token={self.fencing_token}, holds={self.holds})"
