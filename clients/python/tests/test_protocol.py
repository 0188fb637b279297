"""The pieces without I/O: Server-Sent Events decoding, the lease clock,
problem documents mapped to errors."""

from __future__ import annotations

from lockgate import GatewayUnavailable, InvalidRequest, LockHeld, LockLost, NotOwner
from lockgate._protocol import LeaseClock, SSEDecoder
from lockgate.errors import error_from_problem


def _decode(text: str):
    decoder = SSEDecoder()
    events = []
    for line in text.split("\n"):
        event = decoder.feed(line)
        if event is not None:
            events.append(event)
    return events


def test_sse_decoding() -> None:
    events = _decode(
        ": keep-alive\n\n"
        "id: 1-0\nevent: snapshot\ndata: {\"held\": false}\n\n"
        "event: renewed\ndata: {\"a\":\ndata: 1}\n\n"
        "event: gap\ndata: {}\n\n"
    )
    assert [(e.event, e.id) for e in events] == [("snapshot", "1-0"), ("renewed", None), ("gap", None)]
    assert events[0].json() == {"held": False}
    assert events[1].json() == {"a": 1}  # data lines joined with a newline


def test_lease_clock_never_runs_past_the_lease() -> None:
    clock = LeaseClock(sent_at=100.0)
    # Granted after a 2 s wait, answered 0.5 s later still: the lease is
    # timed from the earliest moment the grant could have been made.
    clock.granted({"ttl_ms": 3000, "expires_at_ms": 50_000, "waited_ms": 2000}, now=102.5)
    assert clock.deadline == 105.0
    # A renewal on the Redis clock 1 s after the grant ends 1 s later.
    clock.renewed(51_000, now=103.2)
    assert clock.deadline == 106.0
    # Whatever the Redis clock says, never past its arrival plus a lease.
    clock.renewed(90_000, now=103.4)
    assert clock.deadline == 106.4
    # And a renewal never moves the end back.
    clock.renewed(40_000, now=103.5)
    assert clock.deadline == 106.4


def test_problems_map_by_slug() -> None:
    def error(slug: str, status: int):
        return error_from_problem(status, {"type": f"/problems/{slug}", "title": "t", "status": status})

    assert isinstance(error("lock-held", 409), LockHeld)
    assert isinstance(error("not-owner", 409), NotOwner)
    assert isinstance(error("lock-not-found", 404), LockLost)
    assert isinstance(error("limit-mismatch", 409), InvalidRequest)
    assert isinstance(error("invalid-key", 422), InvalidRequest)
    assert isinstance(error("backend-unavailable", 503), GatewayUnavailable)
    assert isinstance(error("something-new", 502), GatewayUnavailable)
    held = error_from_problem(409, {"type": "/problems/lock-held", "retry_after_ms": 1500, "key": "k"})
    assert held.slug == "lock-held" and held.retry_after == 1.5 and held.key == "k"
