"""The checker against histories made by hand, each with a known answer:
every run starts with it (`python -m harness selftest`), so a checker that
stopped seeing a violation fails before any scenario runs.

Times are milliseconds from 0; tokens small integers.
"""

from __future__ import annotations

import sys

from . import checker
from .verdicts import judge


def grant(client, key, token, start, end, expires, ttl=2000, kind="plain", gateway="gw1", waited=0):
    return {"client": client, "op": "acquire", "kind": kind, "key": key, "gateway": gateway, "start": start,
            "end": end, "outcome": "granted", "fencing_token": token, "expires_at_ms": expires, "ttl_ms": ttl,
            "waited_ms": waited}


def release(client, key, token, at):
    return {"client": client, "op": "release", "key": key, "gateway": "gw1", "start": at, "end": at + 1,
            "fencing_token": token, "outcome": "released"}


def renewed(client, key, token, at, expires):
    return {"client": client, "op": "renewed", "key": key, "gateway": "gw1", "start": at, "end": at,
            "fencing_token": token, "expires_at_ms": expires}


def write(client, key, token, at, **outcomes):
    return {"client": client, "op": "write", "key": key, "start": at, "end": at + 1, "fencing_token": token,
            "outcome": "ok", **outcomes}


def read(client, key, token, at, refused=False):
    return {"client": client, "op": "read", "key": key, "start": at, "end": at + 1, "fencing_token": token,
            "outcome": "ok", "read_r": "refused" if refused else "ok"}


def fault(fault_id, at, heal_at, kind="kill", process="lockgate-gw2"):
    return [{"client": "nemesis", "op": "fault", "id": fault_id, "fault": kind, "detail": process, "start": at},
            {"client": "nemesis", "op": "heal", "id": fault_id, "fault": kind, "start": heal_at}]


def queue_grant(key, token, at, expires, outright=True, gateway="gw2"):
    return {"client": "queue", "op": "queue-grant", "key": key, "instance": f"{gateway}#0", "gateway": gateway,
            "waiter": "w", "fencing_token": token, "expires_at_ms": expires, "outright": outright, "start": at,
            "end": at}


class Scenario:
    name, checks = "selftest", []


class DeadWaiters:
    name, checks = "selftest", [checker.dead_waiters_passed_on]


class PausedWaiters:
    name, checks = "selftest", [checker.paused_waiters_answered]


def run(records, rows=None) -> checker.Result:
    return checker.check(Scenario, records, rows or {}, None, None, None, {"activity": []}, 0, 100_000)


def run_kills(records, *planned) -> checker.Result:
    """With the kills of gw2 (fault ids 1, 2, ...) as the hand-off scenario records them."""
    info = {"activity": [], "dead_waiters": {"key": "k", "gateway": "gw2", "ttl_ms": 2000, "kills": [
        {"fault": n, "planned": plan} for n, plan in enumerate(planned, 1)]}}
    return checker.check(DeadWaiters, records, {}, None, None, None, info, 0, 100_000)


def run_pause(waited):
    """gw2 stopped from 900 to 1500 while the queue granted its waiter B the
    place at 1101 (lease to 3101); B asked at 0 and was answered at 1502
    with `waited` ms."""
    info = {"activity": [], "paused_waiters": {"key": "k", "gateway": "gw2", "pauses": [
        {"fault": 1, "late_ms": 400, "grant": queue_grant("k", 2, 1101, 3101)}]}}
    records = [*fault(1, 900, 1500, kind="pause"), queue_grant("k", 2, 1101, 3101),
               grant("B", "k", 2, 0, 1502, 3101, gateway="gw2", waited=waited), release("B", "k", 2, 1600)]
    return checker.check(PausedWaiters, records, {}, None, None, None, info, 0, 100_000)


def dead_waiter(kill_at, next_heard_at, outright=True):
    """A holder on gw1 releases at 1100; the queue grants the place to a
    waiter of gw2, killed at `kill_at`, that nobody answers; the next
    client hears of a grant at `next_heard_at`."""
    return [grant("A", "k", 1, 0, 1, 2001), release("A", "k", 1, 1100), *fault(1, kill_at, kill_at + 1000),
            queue_grant("k", 2, 1101, 3101 if outright else 2101, outright),
            grant("C", "k", 3, 1050, next_heard_at, next_heard_at + 2000, gateway="gw3"),
            release("C", "k", 3, next_heard_at + 50)]


def cases():
    """(what, records, rows, what the result must say)."""
    yield ("one token given to two clients at once is an overlap and a duplicate",
           [grant("A", "k", 7, 0, 1, 2001), release("A", "k", 7, 1500),
            grant("B", "k", 7, 1000, 1001, 3001), release("B", "k", 7, 2500)], None,
           lambda r: r.overlaps == 2 and r.tokens_duplicate == 2)
    yield ("a grant heard of before another was asked for carries the smaller token",
           [grant("A", "k", 9, 0, 1, 2001), release("A", "k", 9, 100),
            grant("B", "k", 5, 200, 201, 2201), release("B", "k", 5, 300)], None,
           lambda r: r.tokens_backwards == 1 and not r.props["token-order"].held)
    yield ("grants asked for concurrently may carry tokens in either order",
           [grant("A", "k", 9, 0, 50, 2001), release("A", "k", 9, 100),
            grant("B", "k", 5, 10, 200, 2200), release("B", "k", 5, 300)], None,
           lambda r: r.tokens_backwards == 0)
    yield ("an expires_at_ms reported early (a Redis clock behind) neither hides an overlap nor passes the report",
           [grant("A", "k", 1, 0, 1, 1), grant("B", "k", 2, 500, 501, 2501), release("B", "k", 2, 900)], None,
           lambda r: r.overlaps == 2 and not r.props["lease-report"].held)
    yield ("an expires_at_ms reported late (a Redis clock ahead) is cut to the arrival plus ttl_ms",
           [grant("A", "k", 1, 0, 1, 9001), grant("B", "k", 2, 2500, 2501, 4501), release("B", "k", 2, 2600)],
           None, lambda r: r.overlaps == 0 and not r.props["lease-report"].held)
    yield ("a stream without an end record is held until its last renewal's lease",
           [grant("S", "k", 1, 0, 1, 3001, ttl=3000, kind="stream"), renewed("S", "k", 1, 1000, 4000),
            renewed("S", "k", 1, 2000, 5000), grant("L", "k", 2, 4500, 4501, 6501), release("L", "k", 2, 4600)],
           None, lambda r: r.overlaps == 2)
    yield ("a plain and a streamed holder of one key overlap like any two",
           [grant("S", "k", 1, 0, 1, 3001, ttl=3000, kind="stream"),
            {"client": "S", "op": "stream-end", "key": "k", "gateway": "gw1", "start": 1, "end": 2500,
             "fencing_token": 1, "outcome": "closed"},
            grant("L", "k", 2, 2000, 2001, 4001), release("L", "k", 2, 2100)], None,
           lambda r: r.overlaps == 2)
    yield ("a write that overwrote another is a lost update, per counter",
           [read("A", "k", 1, 0), read("B", "k", 2, 10, refused=False),
            write("A", "k", 1, 20, fenced_w="ok", fenced_r="refused", plain="ok"),
            write("B", "k", 2, 30, fenced_w="ok", fenced_r="ok", plain="ok")],
           {"k": {"plain": 1, "value_w": 1, "value_r": 1}},
           lambda r: (r.lost_plain, r.lost_w, r.lost_r, r.refused_r) == (1, 1, 0, 1))
    yield ("a dead waiter granted outright holds the key its lease, within the bound, from the release after "
           "the kill", dead_waiter(1000, 3110), None,
           lambda r: r.props["passed-on"].held is True and "at most 2010 ms" in r.props["passed-on"].detail)
    yield ("a key held by nobody alive beyond the dead waiter's lease and the bound breaks passed-on",
           dead_waiter(1000, 4200), None, lambda r: r.props["passed-on"].held is False)
    yield ("a whole lease after a gateway that died more than 0.5 s before the place freed breaks passed-on "
           "(a second at most then)", dead_waiter(300, 3110), None, lambda r: r.props["passed-on"].held is False)
    yield ("kills that left no place granted outright to a dead waiter measured nothing of the one-write hand-off",
           dead_waiter(300, 2120, outright=False), None, lambda r: r.props["passed-on"].held is None)
    yield ("a grant heard late whose waited_ms puts its lease's start past the grant breaks waited-report",
           [], None, lambda _r: run_pause(1500).props["waited-report"].held is False
           and run_pause(1100).props["waited-report"].held is True)
    yield ("a must-hold property that broke makes the verdict BROKEN",
           [grant("A", "k", 1, 0, 1, 2001), grant("B", "k", 2, 500, 501, 2501)], None,
           lambda r: (judge(r, ("exclusion",), ()), r.verdict)[1] == "BROKEN")
    yield ("an expected break that did not show is unexpectedly safe",
           [grant("A", "k", 1, 0, 1, 2001), release("A", "k", 1, 100)], None,
           lambda r: (judge(r, ("token-order",), ("exclusion",)), r.verdict)[1] == "unexpectedly safe")
    yield ("a must-hold with nothing to measure it on is VACUOUS",
           [grant("A", "k", 1, 0, 1, 2001)], None,
           lambda r: (judge(r, ("told-lost",), ()), r.verdict)[1] == "VACUOUS")


def main() -> int:
    failed = 0
    for what, records, rows, expect in cases():
        killed = any(r["op"] == "fault" for r in records)
        if not expect(run_kills(records, "planned") if killed else run(records, rows)):
            failed += 1
            print(f"checker self-test FAILED: {what}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
