"""The checker: reads a scenario's history and final state, counts what broke.

Holding intervals. A grant is held, as far as its client can know, from the
moment the client learns of it until the client gives it back (the start of
its release, or its stream's end) or its lease could have ended (the latest
`expires_at_ms` the client was told), whichever is first. Two grants of one
key whose intervals intersect overlapped: the lock was given to two holders
at once. A client that outlives its lease (a paused client) is not an
overlap by this measure: its interval ends with its lease, and what it
writes afterwards is what the fence is for.

Lost updates. Every acknowledged write of the row meant +1. The fenced
counter (`value = value + 1 ... WHERE fence < token`) must end equal to the
writes it accepted; the plain counter (read, then write what was read + 1)
ends short by every update that an overlapping or late writer overwrote.

Purchases. A purchase answered 201 (or 200, the replay of one) whose order
is not in Redis at the end was lost; units confirmed to buyers beyond the
stock were oversold.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

OPERATIONS = {"acquire", "release", "read", "write", "purchase"}


@dataclass
class Hold:
    client: str
    key: str
    kind: str  # plain or stream
    gateway: str
    fencing_token: int
    start: float
    end: float
    lease_end: float
    given_back: float  # when the client let go, which may be after its lease
    overlapped: bool = False


@dataclass
class Result:
    scenario: str
    operations: int = 0
    faults: int = 0
    overlaps: int = 0
    lost_plain: int = 0
    lost_fenced: int = 0
    stale_refused: int = 0
    purchases_lost: int = 0
    oversold: int = 0
    failures: list[str] = field(default_factory=list)  # invariants that must hold, broken
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # the harness itself failed
    holds: list[Hold] = field(default_factory=list)
    fault_spans: list[tuple[float, float, str]] = field(default_factory=list)
    marks: list[tuple[float, str]] = field(default_factory=list)
    refused_writes: list[tuple[float, str]] = field(default_factory=list)
    told_lost: list[tuple[float, str]] = field(default_factory=list)
    t0: float = 0
    t1: float = 0

    @property
    def passed(self) -> bool:
        return self.error is None and not self.failures


def holds_of(records: list[dict]) -> list[Hold]:
    releases = {(r["client"], r["fencing_token"]): r for r in records if r["op"] == "release"}
    stream_ends = {(r["client"], r["fencing_token"]): r for r in records if r["op"] == "stream-end"}
    holds = []
    for grant in records:
        if grant["op"] != "acquire" or grant["outcome"] != "granted":
            continue
        ident = (grant["client"], grant["fencing_token"])
        lease_end = grant["expires_at_ms"]
        if grant["kind"] == "plain":
            release = releases.get(ident)
            given_back = release["start"] if release else lease_end
        else:
            ended = stream_ends.get(ident)
            given_back = ended["end"] if ended else lease_end
            if ended:
                lease_end = ended["last_expires_at_ms"]
        holds.append(Hold(grant["client"], grant["key"], grant["kind"], grant["gateway"],
                          grant["fencing_token"], grant["end"], min(given_back, lease_end), lease_end,
                          given_back))
    return holds


def mark_overlaps(holds: list[Hold]) -> int:
    by_key = defaultdict(list)
    for hold in holds:
        if hold.end > hold.start:  # a grant heard of after its lease held nothing
            by_key[hold.key].append(hold)
    for key_holds in by_key.values():
        key_holds.sort(key=lambda hold: hold.start)
        active: list[Hold] = []
        for hold in key_holds:
            active = [other for other in active if other.end > hold.start]
            for other in active:
                if other.fencing_token != hold.fencing_token:
                    other.overlapped = hold.overlapped = True
            active.append(hold)
    return sum(hold.overlapped for hold in holds)


def count_writes(records: list[dict], rows: dict[str, dict], result: Result) -> None:
    writes = [r for r in records if r["op"] == "write"]
    for key, row in rows.items():
        mine = [w for w in writes if w["key"] == key]
        fenced_ok = sum(w.get("fenced") == "ok" for w in mine)
        plain_ok = sum(w.get("plain") == "ok" for w in mine)
        result.lost_fenced += max(0, fenced_ok - row["value"])
        result.lost_plain += max(0, plain_ok - row["plain"])
        if row["value"] > fenced_ok:
            result.notes.append(f"{key}: the fenced counter holds {row['value'] - fenced_ok} more than the "
                                "writes acknowledged (a write applied whose answer was lost)")
    result.stale_refused = sum(w.get("fenced") == "refused" for w in writes)
    errors = sum(w["outcome"] != "ok" for w in writes)
    if errors:
        result.notes.append(f"{errors} writes failed at the database")
    result.refused_writes = [(w["end"], w["client"]) for w in writes if w.get("fenced") == "refused"]
    late = 0
    lease_of = {(h.client, h.fencing_token): h.lease_end for h in result.holds}
    for write in writes:
        lease_end = lease_of.get((write["client"], write["fencing_token"]))
        if write.get("fenced") == "ok" and lease_end is not None and write["start"] > lease_end:
            late += 1
    if late:
        result.notes.append(f"{late} fenced writes came after their writer's lease had ended and were accepted, "
                            "since no newer holder had written yet (the fence orders writes, it cannot do more)")


def count_purchases(records: list[dict], sale: dict | None, orders: list[dict] | None, result: Result) -> None:
    purchases = [r for r in records if r["op"] == "purchase"]
    if not purchases:
        return
    confirmed = {p["order_id"]: p["quantity"] for p in purchases if p["outcome"] == "confirmed"}
    outcomes = defaultdict(int)
    for purchase in purchases:
        outcomes[purchase["outcome"]] += 1
    result.notes.append("purchases: " + ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items())))
    if sale is None or orders is None:
        result.failures.append("the sale could not be read back from Redis")
        return
    recorded = {order["order_id"] for order in orders}
    result.purchases_lost = sum(1 for order_id in confirmed if order_id not in recorded)
    result.oversold = max(0, sum(confirmed.values()) - sale["initial_stock"])
    units = sum(order["quantity"] for order in orders)
    if sale["sold"] + sale["stock"] != sale["initial_stock"] or units != sale["sold"]:
        result.failures.append(f"the sale's record is inconsistent: sold {sale['sold']} + stock {sale['stock']} "
                               f"vs initial {sale['initial_stock']}, orders sum to {units}")
    result.notes.append(f"sale: {sale['sold']} of {sale['initial_stock']} sold, {len(orders)} orders in Redis, "
                        f"{len(confirmed)} confirmed to buyers")


def faults_of(records: list[dict], result: Result, t_end: float) -> dict[int, tuple[float, float, dict]]:
    starts = {r["id"]: r for r in records if r["op"] == "fault"}
    heals = {r["id"]: r["start"] for r in records if r["op"] == "heal"}
    windows = {}
    for fault_id, fault in starts.items():
        end = heals.get(fault_id, t_end)
        windows[fault_id] = (fault["start"], end, fault)
        result.fault_spans.append((fault["start"], end, f"{fault['fault']} {fault['detail']}"))
    result.faults = len(starts)
    result.marks = [(r["start"], r["mark"]) for r in records if r["op"] == "mark"]
    return windows


def check(scenario, records: list[dict], rows: dict[str, dict], sale, orders, info: dict,
          t0: float, t1: float) -> Result:
    result = Result(scenario.name, t0=t0, t1=t1)
    client_records = [r for r in records if r["client"] != "nemesis"]
    result.operations = sum(r["op"] in OPERATIONS for r in client_records)
    windows = faults_of(records, result, t1)
    result.holds = holds_of(client_records)
    result.overlaps = mark_overlaps(result.holds)
    count_writes(client_records, rows, result)
    count_purchases(client_records, sale, orders, result)
    result.told_lost = [(r["told_at"], r["client"]) for r in client_records
                        if r["op"] == "stream-end" and r.get("told") == "lost"]
    endings = defaultdict(int)
    for record in client_records:
        if record["op"] == "stream-end":
            how = {"closed": "closed by their holder", "silent": "given up unheard by the lease's end",
                   "closed-by-gateway": "cut by the gateway without an event"}.get(record["outcome"])
            endings[how or f"told {record['outcome']} ({record['lost_reason'] or '-'})"] += 1
    if endings:
        result.notes.append("streamed locks: " + ", ".join(f"{n} {how}" for how, n in sorted(endings.items())))
    grants = defaultdict(int)
    unavailable = 0
    for record in client_records:
        if record["op"] == "acquire":
            if record["outcome"] == "granted":
                grants[record["gateway"]] += 1
            elif record["outcome"].startswith("unavailable") or record["outcome"] in ("timeout", "refused"):
                unavailable += 1
    result.notes.append("grants by gateway: " + ", ".join(f"{gw} {n}" for gw, n in sorted(grants.items()))
                        + f"; {unavailable} acquisitions failed (503, timeout or refused)")
    late_grants = sum(1 for hold in result.holds if hold.end <= hold.start)
    if late_grants:
        result.notes.append(f"{late_grants} grants reached their client after their lease had ended")
    if result.lost_fenced != 0:
        result.failures.append(f"lost updates with the fence: {result.lost_fenced}")
    for extra in scenario.checks:
        extra(client_records, windows, info, result)
    return result


# Checks of single scenarios.

def streams_told_lost_in_time(records, windows, info, result: Result) -> None:
    """Every streamed holder on the cut-off gateway was told `lost` before its
    lease could have ended (unless it let go first)."""
    gateway = info.get("cut_gateway")
    cut = windows.get(info.get("cut_id"))
    if gateway is None or cut is None:
        result.failures.append("harness: the partition was not recorded")
        return
    cut_start, cut_end, _ = cut
    ends = [r for r in records if r["op"] == "stream-end" and r["gateway"] == gateway
            and r["start"] < cut_start < r["end"]]
    margins, late = [], []
    for end in ends:
        if end["told"] == "lost":
            margin = end["expires_when_told"] - end["told_at"]
            margins.append(margin)
            # Strict: a client told even a millisecond after its lease could
            # have ended may have worked on beside the next holder meanwhile.
            if margin < 0:
                late.append(f"{end['client']} told {-margin:.1f} ms after its lease's end")
        elif end["outcome"] == "closed" and end["end"] < end["last_expires_at_ms"]:
            continue  # it let go before its lease was at risk
        else:
            late.append(f"{end['client']} never told (stream ended: {end['outcome']})")
    if not margins and not late:
        result.failures.append(f"harness: no streamed holder on {gateway} outlived its lease's end after the cut, "
                               "so nothing was checked")
    elif late:
        result.failures.append("streamed holders not told lost in time: " + "; ".join(late))
    if margins:
        result.notes.append(f"{len(margins)} streamed holders on {gateway} told lost "
                            f"({', '.join(sorted({e['lost_reason'] or '?' for e in ends if e['told'] == 'lost'}))}); "
                            f"margin before the lease's end: least {min(margins):.1f} ms, most {max(margins):.1f} ms")
    plain = info.get("plain_at_cut", 0)
    result.notes.append(f"at the cut {gateway} held {len(ends)} streamed and {plain} plain locks")


def others_keep_granting(records, windows, info, result: Result) -> None:
    gateway = info.get("cut_gateway")
    cut = windows.get(info.get("cut_id"))
    if cut is None:
        return
    cut_start, cut_end, _ = cut
    granted = [r for r in records if r["op"] == "acquire" and r["outcome"] == "granted"
               and r["gateway"] != gateway and cut_start <= r["end"] <= cut_end]
    if not granted:
        result.failures.append(f"no other gateway granted a lock while {gateway} was cut off")
    else:
        result.notes.append(f"while {gateway} was cut off the others granted {len(granted)} locks")
