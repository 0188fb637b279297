"""The asyncio client: `AsyncGateway`, its streamed `AsyncLock`, the plain
`AsyncLease`, `AsyncLockSet` (several locks at once), `AsyncSession`, `AsyncWatcher` and `AsyncElection`.

A lost lock cancels the task running the `async with` body, and the block
then raises `LockLost` in place of that cancellation, the way
`asyncio.timeout` turns its own cancellation into `TimeoutError`. A
cancellation from elsewhere is left alone. The code is in `lockgate._async`,
from which the sync client is written.
"""

from __future__ import annotations

from ._async.batch import AsyncLockSet
from ._async.gateway import AsyncGateway, AsyncLease
from ._async.lock import AsyncLock
from ._async.session import AsyncSession
from ._async.watch import AsyncElection, AsyncLeaderObserver, AsyncLeadership, AsyncWatcher

__all__ = [
    "AsyncGateway",
    "AsyncLock",
    "AsyncLease",
    "AsyncLockSet",
    "AsyncSession",
    "AsyncWatcher",
    "AsyncElection",
    "AsyncLeadership",
    "AsyncLeaderObserver",
]
