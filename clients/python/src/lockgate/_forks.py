"""Keeps a forked child away from its parent's locks.

A child made by `os.fork` inherits the parent's lock handles and the
sockets under them, but not the lock: only the parent's connection holds
it, and it is the parent's to release. Every held handle is registered
here; in the child they are all marked as forked, so they neither release
(no `DELETE`, no socket touched) nor claim to hold the lock. Handles also
compare the process id they were acquired in, for forks made by means that
skip `os.register_at_fork` hooks.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

_held: "weakref.WeakSet[Any]" = weakref.WeakSet()
_guard = threading.Lock()


def track(handle: Any) -> None:
    """Registers a handle that holds a lock; `handle._forked_away()` runs in
    every child forked while it lives."""
    with _guard:
        _held.add(handle)


def forget(handle: Any) -> None:
    with _guard:
        _held.discard(handle)


def _after_fork_in_child() -> None:
    # The guard may have been held by another thread at the fork: the
    # child must not wait for it. It makes a fresh one instead.
    global _guard
    _guard = threading.Lock()
    for handle in list(_held):
        handle._forked_away()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
