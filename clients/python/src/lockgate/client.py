"""The synchronous client: `Gateway`, its streamed `Lock`, the plain
`Lease`, `LockSet` (several locks at once), `Session`, `Watcher` and `Election`.

A streamed lock's events are followed by a reader thread, and a watchdog
thread declares it lost when no renewal came in time; nothing can stop the
thread running a `with` block, so the block asks (`lock.check()`,
`lock.lost`). The code is in `lockgate._sync`, written by
scripts/unasync.py from the asyncio client's.
"""

from __future__ import annotations

from ._sync.batch import LockSet
from ._sync.gateway import Gateway, Lease
from ._sync.lock import Lock
from ._sync.session import Session
from ._sync.watch import Election, LeaderObserver, Leadership, Watcher

__all__ = ["Gateway", "Lock", "Lease", "LockSet", "Session", "Watcher", "Election", "Leadership", "LeaderObserver"]
