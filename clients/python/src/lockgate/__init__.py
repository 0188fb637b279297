"""lockgate: the Python client of the lockgate gateway, distributed locks
on Redis over HTTP.

    from lockgate import Gateway, LockLost

    gw = Gateway("http://127.0.0.1:8080")
    with gw.lock("inv:42", ttl=30, wait=10) as lock:
        write(row, fence=lock.fencing_token)
        lock.check()        # raises LockLost once the lock is gone

`Gateway` is the synchronous client and `AsyncGateway` the asyncio one;
both hold locks through the gateway's streamed locks, so the gateway renews
them for as long as the holder's connection stays open. Durations are
seconds. Every error is a `LockgateError`.

The map: `_async/` is the client, written once for asyncio (`gateway`,
`lock`, `batch`, `session`, `watch`, and `holding`: what a lock, a lock
set and a session share while held); `_sync/` is the same written by
scripts/unasync.py, each with its own `_concurrency` (tasks or threads);
`_protocol` is what needs no
I/O (request bodies, answers, the lease clock); `_api` the API's documents,
checked against openapi/openapi.json; `sse` the Server-Sent Events reader;
`errors` and `models` what callers see. The clients are imported on first
use, so `lockgate.sse` and `lockgate.errors` need no httpx.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    Deadlock,
    GatewayUnavailable,
    InvalidRequest,
    LockgateError,
    LockHeld,
    LockLost,
    NotOwner,
    SessionNotFound,
)
from .models import HeldLock, Leader, LeaseInfo, LockEvent, LockInfo

if TYPE_CHECKING:
    from .aio import (
        AsyncElection,
        AsyncGateway,
        AsyncLeaderObserver,
        AsyncLeadership,
        AsyncLease,
        AsyncLock,
        AsyncLockSet,
        AsyncSession,
        AsyncWatcher,
    )
    from .client import Election, Gateway, LeaderObserver, Leadership, Lease, Lock, LockSet, Session, Watcher

__version__ = "0.1.0"

__all__ = [
    "Gateway",
    "Lock",
    "Lease",
    "LockSet",
    "Session",
    "Watcher",
    "Election",
    "Leadership",
    "LeaderObserver",
    "AsyncGateway",
    "AsyncLock",
    "AsyncLease",
    "AsyncLockSet",
    "AsyncSession",
    "AsyncWatcher",
    "AsyncElection",
    "AsyncLeadership",
    "AsyncLeaderObserver",
    "LockgateError",
    "LockHeld",
    "LockLost",
    "NotOwner",
    "GatewayUnavailable",
    "InvalidRequest",
    "SessionNotFound",
    "Deadlock",
    "LockInfo",
    "LeaseInfo",
    "HeldLock",
    "Leader",
    "LockEvent",
]

def __getattr__(name: str) -> Any:
    # Only the clients' classes are missing until then: they (and httpx)
    # are imported on first use.
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = ".aio" if name.startswith("Async") else ".client"
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> "list[str]":
    return sorted(set(globals()) | set(__all__))
