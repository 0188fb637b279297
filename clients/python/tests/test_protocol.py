"""The pieces without I/O: the lease clock and its safety margin, problem
documents mapped to errors, the leader an election's events name."""

from __future__ import annotations

import pytest

from lockgate import (
    Deadlock,
    GatewayUnavailable,
    InvalidRequest,
    LockEvent,
    LockgateError,
    LockHeld,
    LockInfo,
    LockLost,
    NotOwner,
    SessionNotFound,
)
from lockgate._protocol import LeaderTracker, LeaseClock, safety_margin
from lockgate.errors import error_from_problem


def test_lease_clock_never_runs_past_the_lease() -> None:
    clock = LeaseClock(sent_at=100.0)
    # Granted after a 2 s wait, answered 0.5 s later still: the lease is
    # timed from the earliest moment the grant could have been made.
    clock.granted(_grant(ttl_ms=3000, expires_at_ms=50_000, waited_ms=2000), now=102.5)
    assert clock.lease_end == 105.0
    # A renewal on the Redis clock 1 s after the grant ends 1 s later.
    clock.renewed(51_000, now=103.2)
    assert clock.lease_end == 106.0
    # Whatever the Redis clock says, never past its arrival plus a lease.
    clock.renewed(90_000, now=103.4)
    assert clock.lease_end == pytest.approx(106.4)
    # And a renewal never moves the end back.
    clock.renewed(40_000, now=103.5)
    assert clock.lease_end == pytest.approx(106.4)


def test_lost_is_declared_a_safety_margin_before_the_lease_ends() -> None:
    clock = LeaseClock(sent_at=10.0)
    clock.granted(_grant(ttl_ms=30_000, expires_at_ms=80_000, waited_ms=0), now=10.1)
    assert clock.lease_end == 40.0
    assert clock.deadline == pytest.approx(37.0)  # a tenth of 30 s
    clock.renewed(90_000, now=20.05)
    assert clock.deadline == pytest.approx(50.0 - 3.0)


@pytest.mark.parametrize(
    ("ttl", "margin"),
    [(600.0, 60.0), (30.0, 3.0), (10.0, 1.0), (5.0, 1.0), (3.0, 1.0), (1.5, 0.5), (0.6, 0.2)],
)
def test_safety_margin(ttl: float, margin: float) -> None:
    # A tenth of the lease, at least a second, at most a third of the lease
    # (so a renewal, due every third, may come a third late).
    assert safety_margin(ttl) == pytest.approx(margin)


def test_problems_map_by_slug() -> None:
    def error(slug: str, status: int):
        return error_from_problem(status, {"type": f"/problems/{slug}", "title": "t", "status": status})

    assert isinstance(error("lock-held", 409), LockHeld)
    assert isinstance(error("not-owner", 409), NotOwner)
    assert isinstance(error("lock-not-found", 404), LockLost)
    assert isinstance(error("limit-mismatch", 409), InvalidRequest)
    assert isinstance(error("invalid-key", 422), InvalidRequest)
    assert isinstance(error("backend-unavailable", 503), GatewayUnavailable)
    assert isinstance(error("rate-limited", 429), GatewayUnavailable)
    assert isinstance(error("internal", 500), GatewayUnavailable)
    assert isinstance(error("something-new", 502), GatewayUnavailable)
    assert isinstance(error("session-not-found", 404), SessionNotFound)
    assert isinstance(error("deadlock", 409), Deadlock)
    assert issubclass(SessionNotFound, LockgateError) and issubclass(Deadlock, LockgateError)
    assert isinstance(error("some-future-refusal", 409), InvalidRequest)
    cycle = error_from_problem(409, {"type": "/problems/deadlock", "status": 409, "cycle": ["a", "b"]})
    assert isinstance(cycle, Deadlock) and cycle.cycle == ("a", "b")
    held = error_from_problem(409, {"type": "/problems/lock-held", "retry_after_ms": 1500, "key": "k"})
    assert held.slug == "lock-held" and held.retry_after == 1.5 and held.key == "k"


def test_leader_tracker_follows_the_holder() -> None:
    tracker = LeaderTracker()
    assert tracker.update(LockEvent("snapshot", {"key": "k", "held": False, "waiters": []}, "1-0"))
    assert tracker.leader is None
    acquired = {"key": "k", "fencing_token": 7, "mode": "exclusive", "expires_at_ms": 5, "value": "a"}
    assert tracker.update(LockEvent("acquired", acquired, "2-0"))
    assert (tracker.leader and tracker.leader.value, tracker.leader and tracker.leader.term) == ("a", 7)
    assert tracker.update(LockEvent("value", {"key": "k", "fencing_token": 7, "value": "b"}, "3-0"))
    assert tracker.leader is not None and tracker.leader.value == "b"
    assert not tracker.update(LockEvent("released", {"key": "k", "fencing_token": 6}, "4-0"))
    assert tracker.update(LockEvent("expired", {"key": "k", "fencing_token": 7}, "5-0"))
    assert tracker.leader is None


def _grant(*, ttl_ms: int, expires_at_ms: int, waited_ms: int):
    return {
        "key": "k",
        "token": "t",
        "fencing_token": 1,
        "ttl_ms": ttl_ms,
        "expires_at_ms": expires_at_ms,
        "holds": 1,
        "waited_ms": waited_ms,
    }


def test_a_lock_under_a_lock_delay_reads_as_free_and_delayed() -> None:
    info = LockInfo.from_json({"key": "k", "held": False, "waiters": [], "delayed_until_ms": 9000})
    assert (info.held, info.delayed_until_ms, info.holders) == (False, 9000, 0)
    held = LockInfo.from_json({"key": "k", "held": True, "fencing_token": 3, "holds": 1})
    assert held.delayed_until_ms is None
    delayed = LockEvent("delayed", {"key": "k", "delayed_until_ms": 9000}, "7-0")
    assert (delayed.key, delayed.delayed_until_ms) == ("k", 9000)
