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
"""

from __future__ import annotations

from .aio import (
    AsyncElection,
    AsyncGateway,
    AsyncLeaderObserver,
    AsyncLeadership,
    AsyncLease,
    AsyncLock,
    AsyncWatcher,
)
from .client import Election, Gateway, LeaderObserver, Leadership, Lease, Lock, Watcher
from .errors import GatewayUnavailable, InvalidRequest, LockgateError, LockHeld, LockLost, NotOwner
from .models import Leader, LeaseInfo, LockEvent, LockInfo

__version__ = "0.1.0"

__all__ = [
    "Gateway",
    "Lock",
    "Lease",
    "Watcher",
    "Election",
    "Leadership",
    "LeaderObserver",
    "AsyncGateway",
    "AsyncLock",
    "AsyncLease",
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
    "LockInfo",
    "LeaseInfo",
    "Leader",
    "LockEvent",
]
