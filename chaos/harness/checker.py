"""The checker: reads a scenario's history and final state, measures what
broke, and states each property as held or broken (`verdicts.py` then
weighs them against what the scenario declares).

Holding intervals. A grant is held, as far as its client can know, from the
moment the client hears of it until the client gives it back (the start of
its release, or its stream's end) or its lease could have ended, whichever
is first. The lease's end is what the gateway reported (`expires_at_ms`,
on the Redis clock), kept within what the client's own clock allows
(`lease_end`), so that a Redis clock set wrong can neither hide an overlap
nor make one up. Two grants of one key whose intervals intersect
overlapped, whatever their fencing tokens (two clients given one token is
no excuse). A client that outlives its lease (a paused client) is not an
overlap by this measure: its interval ends with its lease, and what it
writes afterwards is what the fence is for.

Lost updates. Every acknowledged write of a counter was the value its
writer read, plus one; a counter that ends below the writes it accepted
lost the difference (an accepted write overwrote another's).

Fencing tokens. Per key, a grant heard of before another grant was asked
for must carry the smaller token: tokens follow the real-time order of
the grants. And no two grants of a key carry the same token.

Purchases. A purchase answered 201 (or 200, the replay of one) whose order
is not among the sale's orders at the end (in Redis, or in the orders
database where a hand-off stored it) was lost; units confirmed to buyers
beyond the stock were oversold.
"""

from __future__ import annotations

import bisect
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

OPERATIONS = {"acquire", "release", "read", "write", "purchase"}
# expires_at_ms is whole milliseconds of the Redis clock; the clients'
# times are fractions of the same clock.
LEASE_TOLERANCE_MS = 5


@dataclass
class Hold:
    client: str
    key: str
    kind: str  # plain or stream
    gateway: str
    fencing_token: int
    asked: float  # the request's start
    start: float  # when the client heard of the grant
    end: float  # held until, as the client can know
    lease_end: float
    given_back: float  # when the client let go, which may be after its lease
    ended: str | None = None  # how: its release's or stream end's outcome
    overlapped: bool = False


@dataclass
class Prop:
    held: bool | None  # None: nothing to measure it on
    detail: str = ""


@dataclass
class Result:
    scenario: str
    operations: int = 0
    faults: int = 0
    overlaps: int = 0
    lost_plain: int = 0
    lost_w: int = 0  # fence checked at write
    lost_r: int = 0  # fence raised at every access
    refused_w: int = 0
    refused_r: int = 0
    tokens_backwards: int = 0
    tokens_duplicate: int = 0
    purchases_lost: int = 0
    oversold: int = 0
    unavailable_s: float | None = None  # the longest, fault to first grant after it
    props: dict[str, Prop] = field(default_factory=dict)
    activity: list[dict] = field(default_factory=list)
    verdict: str = ""
    failures: list[str] = field(default_factory=list)  # why the verdict is not ok
    expected: list[str] = field(default_factory=list)  # expected breaks, as shown
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # the harness itself failed
    holds: list[Hold] = field(default_factory=list)
    fault_spans: list[tuple[float, float, str]] = field(default_factory=list)
    marks: list[tuple[float, str]] = field(default_factory=list)
    refused_writes: list[tuple[float, str]] = field(default_factory=list)
    told_lost: list[tuple[float, str]] = field(default_factory=list)
    backwards_grants: list[tuple[float, str]] = field(default_factory=list)
    unheard_grants: list[tuple[float, float, str]] = field(default_factory=list)  # held by a dead waiter
    t0: float = 0
    t1: float = 0

    @property
    def passed(self) -> bool:
        return self.verdict in ("ok", "unexpectedly safe")


def lease_end(ttl: float, asked: float, heard: float, waited_ms: float, expires_at: float,
              renewals: list[tuple[float, float]] = ()) -> float:
    """The end of a lease as the client can know it: what the gateway
    reported, no earlier than the request's start (plus the time the
    gateway says it waited) plus the lease, no later than its arrival plus
    the lease. A renewal's end is mapped onto the client's clock through the
    grant, and bounded by its own arrival plus the lease."""
    anchor = min(heard, asked + waited_ms)
    end = min(max(expires_at, anchor + ttl), heard + ttl)
    granted_redis = expires_at - ttl
    for at, renewed_to in renewals:
        mapped = anchor + (renewed_to - granted_redis)
        end = max(end, min(max(renewed_to, mapped), at + ttl))
    return end


def holds_of(records: list[dict]) -> list[Hold]:
    releases = {(r["client"], r["fencing_token"]): r for r in records if r["op"] == "release"}
    stream_ends = {(r["client"], r["fencing_token"]): r for r in records if r["op"] == "stream-end"}
    renewals = defaultdict(list)
    for r in records:
        if r["op"] == "renewed":
            renewals[(r["client"], r["fencing_token"])].append((r["start"], r["expires_at_ms"]))
    holds = []
    for grant in records:
        if grant["op"] != "acquire" or grant["outcome"] != "granted":
            continue
        ident = (grant["client"], grant["fencing_token"])
        given_back_record = releases.get(ident) if grant["kind"] == "plain" else stream_ends.get(ident)
        given_back = None
        if given_back_record is not None:
            given_back = given_back_record["start" if grant["kind"] == "plain" else "end"]
        # A stream without an end record (its client killed, or stopped
        # mid-write) holds until its last renewal's lease.
        lease = lease_end(grant["ttl_ms"], grant["start"], grant["end"], grant.get("waited_ms", 0),
                          grant["expires_at_ms"],
                          [(at, to) for at, to in renewals.get(ident, []) if given_back is None or at <= given_back])
        if given_back is None:
            given_back = lease
        holds.append(Hold(grant["client"], grant["key"], grant["kind"], grant["gateway"], grant["fencing_token"],
                          grant["start"], grant["end"], min(given_back, lease), lease, given_back,
                          given_back_record["outcome"] if given_back_record else None))
    return holds


def mark_overlaps(holds: list[Hold]) -> int:
    """Marks every hold whose interval meets another's of the same key,
    plain and streamed alike; returns how many are marked."""
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
                other.overlapped = hold.overlapped = True
            active.append(hold)
    return sum(hold.overlapped for hold in holds)


def check_token_order(holds: list[Hold], result: Result) -> None:
    """Per key: every grant heard of before another was asked for carries a
    smaller token; no token is given twice."""
    examples = []
    for key in sorted({hold.key for hold in holds}):
        grants = sorted((h for h in holds if h.key == key), key=lambda h: h.start)
        heard = [h.start for h in grants]
        highest = []  # the highest token among the grants heard of so far
        for h in grants:
            highest.append(max(h.fencing_token, highest[-1]) if highest else h.fencing_token)
        for h in grants:
            before = bisect.bisect_left(heard, h.asked)
            if before and highest[before - 1] >= h.fencing_token:
                result.tokens_backwards += 1
                result.backwards_grants.append((h.start, h.client))
                examples.append((highest[before - 1] - h.fencing_token, key, h))
        for token, n in Counter(h.fencing_token for h in grants).items():
            if n > 1:
                result.tokens_duplicate += n
                result.notes.append(f"{key}: fencing token {token} given to {n} grants")
    if examples:
        worst, key, h = max(examples, key=lambda e: e[0])
        result.notes.append(
            f"{result.tokens_backwards} grants carried a fencing token not above one heard of before they were "
            f"asked for; the worst: {h.client} on {key} via {h.gateway}, {worst} below (tokens are microseconds "
            f"of the Redis clock: {worst / 1e6:.3f} s)")
    held = result.tokens_backwards == 0 and result.tokens_duplicate == 0
    result.props["token-order"] = Prop(held, f"{result.tokens_backwards} out of order, "
                                             f"{result.tokens_duplicate} duplicated, of {len(holds)} grants")


def check_lease_reports(records: list[dict], result: Result) -> None:
    """Each grant's `expires_at_ms` against its request: the lease starts
    no earlier than the request was sent and no later than the client heard
    of it, so it ends between the start plus `ttl_ms` and the arrival plus
    `ttl_ms`. Outside that, the Redis clock disagrees with the clients'."""
    short, long_ = [], []
    for grant in records:
        if grant["op"] != "acquire" or grant["outcome"] != "granted":
            continue
        ttl, reported = grant["ttl_ms"], grant["expires_at_ms"]
        if reported < grant["start"] + ttl - LEASE_TOLERANCE_MS:
            short.append(grant["start"] + ttl - reported)
        elif reported > grant["end"] + ttl + LEASE_TOLERANCE_MS:
            long_.append(reported - grant["end"] - ttl)
    parts = []
    if short:
        parts.append(f"{len(short)} ended before the request's start plus ttl_ms (by up to {max(short):.0f} ms)")
    if long_:
        parts.append(f"{len(long_)} after the grant's arrival plus ttl_ms (by up to {max(long_):.0f} ms)")
    result.props["lease-report"] = Prop(not parts, "; ".join(parts) or "every reported lease within its request")


def count_writes(records: list[dict], rows: dict[str, dict], result: Result) -> None:
    writes = [r for r in records if r["op"] == "write"]
    reads = [r for r in records if r["op"] == "read"]
    for key, row in rows.items():
        mine = [w for w in writes if w["key"] == key]
        for name, field_, counter in (("lost_plain", "plain", "plain"), ("lost_w", "fenced_w", "value_w"),
                                      ("lost_r", "fenced_r", "value_r")):
            accepted = sum(w.get(field_) == "ok" for w in mine)
            setattr(result, name, getattr(result, name) + max(0, accepted - row[counter]))
            if row[counter] > accepted:
                result.notes.append(f"{key}: {counter} holds {row[counter] - accepted} more than the writes "
                                    "acknowledged (a write applied whose answer was lost)")
    result.refused_w = sum(w.get("fenced_w") == "refused" for w in writes)
    result.refused_r = (sum(w.get("fenced_r") == "refused" for w in writes)
                        + sum(r.get("read_r") == "refused" for r in reads))
    errors = sum(w["outcome"] != "ok" for w in writes) + sum(r["outcome"] != "ok" for r in reads)
    if errors:
        result.notes.append(f"{errors} reads or writes failed at the database")
    result.refused_writes = [(w["end"], w["client"]) for w in writes
                             if w.get("fenced_r") == "refused" or w.get("fenced_w") == "refused"]
    late = 0
    lease_of = {(h.client, h.fencing_token): h.lease_end for h in result.holds}
    for write in writes:
        end = lease_of.get((write["client"], write["fencing_token"]))
        if write.get("fenced_w") == "ok" and end is not None and write["start"] > end:
            late += 1
    if late:
        result.notes.append(f"{late} writes came after their writer's lease had ended and the fence checked at "
                            "write accepted them, since no newer holder had written yet")
    if rows:
        result.props["no-fence"] = Prop(result.lost_plain == 0, f"{result.lost_plain} updates lost")
        result.props["fence-write"] = Prop(result.lost_w == 0, f"{result.lost_w} updates lost")
        result.props["fence-read"] = Prop(result.lost_r == 0, f"{result.lost_r} updates lost")


def count_purchases(records: list[dict], sale: dict | None, orders: list[dict] | None, stored: set | None,
                    result: Result) -> None:
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
    recorded = {order["order_id"] for order in orders} | (stored or set())
    result.purchases_lost = sum(1 for order_id in confirmed if order_id not in recorded)
    result.oversold = max(0, sum(confirmed.values()) - sale["initial_stock"])
    result.props["purchases"] = Prop(result.purchases_lost == 0, f"{result.purchases_lost} of {len(confirmed)} lost")
    if sale["stock"] > 0 and not result.oversold:
        result.props["oversell"] = Prop(None, f"the sale never sold out ({sale['stock']} left)")
    else:
        result.props["oversell"] = Prop(result.oversold == 0, f"{result.oversold} units beyond the stock")
    if stored is None:
        units = sum(order["quantity"] for order in orders)
        if sale["sold"] + sale["stock"] != sale["initial_stock"] or units != sale["sold"]:
            result.failures.append(f"the sale's record is inconsistent: sold {sale['sold']} + stock {sale['stock']} "
                                   f"vs initial {sale['initial_stock']}, orders sum to {units}")
    result.notes.append(f"sale: {sale['sold']} of {sale['initial_stock']} sold, {len(recorded)} orders recorded, "
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


def unavailability(holds: list[Hold], windows: dict, result: Result) -> None:
    """Per fault, from its start to the first grant asked for after it."""
    heard = sorted((h.asked, h.start) for h in holds)
    worst = None
    for fault_id, (start, _, fault) in sorted(windows.items()):
        after = [got for asked, got in heard if asked >= start]
        gap = (min(after) - start) / 1000 if after else (result.t1 - start) / 1000
        worst = gap if worst is None else max(worst, gap)
        if len(windows) > 1:
            result.notes.append(f"fault {fault_id} ({fault['fault']} {fault['detail']}): first grant "
                                f"{gap:.1f} s after it" + ("" if after else " (none: until the end)"))
    result.unavailable_s = worst


def check_activity(records: list[dict], holds: list[Hold], windows: dict, info: dict, result: Result) -> None:
    """Grants (and confirmed purchases) in every window the schedule said
    must see some, and after the last heal."""
    wanted = list(info.get("activity", []))
    heals = [end for _, end, _ in windows.values()]
    if heals:
        wanted.append({"label": "after the last heal", "start": max(heals), "end": result.t1,
                       "gateways": None, "keys": None, "purchases": True})
    purchases = [r for r in records if r["op"] == "purchase" and r["outcome"] == "confirmed"
                 and r["client"] != "drain"]
    for window in wanted:
        start, end, gateways, keys = window["start"], window["end"], window.get("gateways"), window.get("keys")
        grants = sum(1 for h in holds if start <= h.start <= end and (gateways is None or h.gateway in gateways)
                     and (keys is None or h.key in keys))
        bought = sum(1 for p in purchases if start <= p["end"] <= end
                     and (gateways is None or p.get("gateway") in gateways))
        needs_purchases = window.get("purchases", True)
        result.activity.append({"label": window["label"], "seconds": round((end - start) / 1000, 1),
                                "grants": grants, "purchases": bought if needs_purchases else None,
                                "ok": grants > 0 and (bought > 0 or not needs_purchases)})


def check(scenario, records: list[dict], rows: dict[str, dict], sale, orders, stored, info: dict,
          t0: float, t1: float) -> Result:
    result = Result(scenario.name, t0=t0, t1=t1)
    client_records = [r for r in records if r["client"] != "nemesis"]
    result.operations = sum(r["op"] in OPERATIONS for r in client_records if r["client"] != "drain")
    windows = faults_of(records, result, t1)
    result.holds = holds_of(client_records)
    result.overlaps = mark_overlaps(result.holds)
    result.props["exclusion"] = Prop(result.overlaps == 0, f"{result.overlaps} holds overlapped another")
    check_token_order(result.holds, result)
    check_lease_reports(client_records, result)
    count_writes(client_records, rows, result)
    count_purchases(client_records, sale, orders, stored, result)
    unavailability(result.holds, windows, result)
    check_activity(client_records, result.holds, windows, info, result)
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
        result.props["told-lost"] = Prop(None, "the fault was not recorded")
        return
    cut_start, cut_end, _ = cut
    ends = [r for r in records if r["op"] == "stream-end" and r["gateway"] == gateway
            and r["start"] < cut_start < r["end"]]
    margins, late = [], []
    for end in ends:
        if end["told"] == "lost":
            margin = end["deadline_when_told"] - end["told_at"]
            margins.append(margin)
            # Strict: a client told even a millisecond after its lease could
            # have ended may have worked on beside the next holder meanwhile.
            if margin < 0:
                late.append(f"{end['client']} told {-margin:.1f} ms after its lease's end")
        elif end["outcome"] == "closed" and end["end"] < end["deadline"]:
            continue  # it let go before its lease was at risk
        else:
            late.append(f"{end['client']} never told (stream ended: {end['outcome']})")
    if not margins and not late:
        result.props["told-lost"] = Prop(None, f"no streamed holder on {gateway} outlived its lease's end "
                                               "after the fault")
    else:
        detail = f"{len(margins)} of {len(ends)} streamed holders on {gateway} told lost in time"
        if margins:
            detail += f", the closest {min(margins):.0f} ms before the lease's end"
        result.props["told-lost"] = Prop(not late, detail + ("; " + "; ".join(late) if late else ""))
    if margins:
        reasons = sorted({e["lost_reason"] or "?" for e in ends if e["told"] == "lost"})
        result.notes.append(f"{len(margins)} streamed holders on {gateway} told lost ({', '.join(reasons)}); "
                            f"margin before the lease's end: least {min(margins):.1f} ms, most {max(margins):.1f} ms")
    plain = info.get("plain_at_cut", 0)
    result.notes.append(f"at the fault {gateway} held {len(ends)} streamed and {plain} plain locks")


def lease_kept_after_gateway_death(records, windows, info, result: Result) -> None:
    """The streamed locks a killed gateway held stay held until their lease
    ends: the next grant of each key is heard of no earlier than that."""
    gateway = info.get("cut_gateway")
    kill = windows.get(info.get("cut_id"))
    if gateway is None or kill is None:
        result.props["lease-kept"] = Prop(None, "the kill was not recorded")
        return
    kill_start = kill[0]
    orphans = [h for h in result.holds if h.gateway == gateway and h.kind == "stream"
               and h.start < kill_start <= h.given_back + 50 and h.ended in (None, "closed-by-gateway")]
    early, waits = [], []
    for orphan in orphans:
        following = [h for h in result.holds if h.key == orphan.key and h.start > kill_start
                     and h is not orphan]
        if not following:
            continue
        first = min(following, key=lambda h: h.start)
        waits.append(first.start - orphan.lease_end)
        if first.start < orphan.lease_end:
            early.append(f"{orphan.key}: {first.client} granted {orphan.lease_end - first.start:.0f} ms "
                         f"before {orphan.client}'s lease ended")
    if not waits:
        result.props["lease-kept"] = Prop(None, f"no lock held through {gateway} at its death was granted again")
        return
    result.props["lease-kept"] = Prop(not early, (f"{len(waits)} locks of the killed {gateway} granted again, "
                                                  f"{min(waits):.0f} to {max(waits):.0f} ms after their lease")
                                      + ("; " + "; ".join(early) if early else ""))


# The one-write hand-off's bound (lua/lib/queue.lua): a waiter whose gateway
# died less than FRESH_MS before its grant may hold the lock for its lease;
# one whose gateway died earlier is offered it for OFFER_MS at most.
FRESH_MS = 500
OFFER_MS = 1000
TENDING_ROUND_MS = 300  # a gateway with waiters tends their lock this often
# What the next grant takes beyond that: the waiting gateway's tend is due
# 1 ms past the lease it last read, then the script, the message, the
# answer, on two loaded cores.
HANDOFF_SLACK_MS = 200
# A tend sent just before the kill still renews the presence as Redis
# runs it: a death counts as more than FRESH_MS before a grant only beyond this.
DEATH_MARGIN_MS = 50


def dead_waiters_passed_on(records, windows, info, result: Result) -> None:
    """After each kill of the dead waiters' gateway: how long the key stayed
    with nobody alive holding it, from the kill, or the end of the hold it
    came during (the holder's release), to the next grant a client heard of.
    Within the waiter's `ttl_ms` + FRESH_MS + a tending round + slack; a
    second + a tending round + slack where the gateway had died more than
    FRESH_MS before the place freed. The grants the queue published
    (`fairqueue.GrantListener`) that no client heard of say what each kill
    left: a place granted outright to a dead waiter, one offered to it, or
    none; a run where no kill left an outright grant measured nothing of the
    one-write hand-off."""
    plan = info.get("dead_waiters")
    if plan is None:
        result.props["passed-on"] = Prop(None, "the kills were not recorded")
        return
    key, gateway, ttl = plan["key"], plan["gateway"], plan["ttl_ms"]
    bound_outright = ttl + FRESH_MS + TENDING_ROUND_MS + HANDOFF_SLACK_MS
    bound_offered = min(ttl, OFFER_MS) + TENDING_ROUND_MS + HANDOFF_SLACK_MS
    holds = sorted((h for h in result.holds if h.key == key and h.end > h.start), key=lambda h: h.start)
    heard = {h.fencing_token for h in result.holds if h.key == key}
    unheard = [r for r in records if r["op"] == "queue-grant" and r["key"] == key and r["gateway"] == gateway
               and r["fencing_token"] not in heard]
    free, outright_free, passed_after_lease, late = [], [], [], []
    kinds = Counter()
    for n, kill in enumerate(plan["kills"], 1):
        window = windows.get(kill["fault"])
        if window is None:
            continue
        killed = window[0]
        free_from = killed
        for hold in holds:  # the hold the kill came during, if any
            if hold.start <= free_from < hold.end:
                free_from = hold.end
        following = [hold for hold in holds if hold.start >= free_from]
        if not following:
            late.append(f"kill {n}: {key} never granted again")
            continue
        granted = following[0]
        gap = granted.start - free_from
        dead = next((r for r in unheard if killed - OFFER_MS <= r["start"] <= granted.start), None)
        died_before = free_from - killed
        bound = bound_offered if died_before > FRESH_MS + DEATH_MARGIN_MS else bound_outright
        if dead is None:
            kind = "no dead waiter granted"
        elif dead["outright"]:
            kind = "granted outright to the dead waiter"
            outright_free.append(gap)
            passed_after_lease.append(granted.start - dead["expires_at_ms"])
        else:
            kind = "offered to the dead waiter"
        kinds[kind] += 1
        free.append(gap)
        if dead:
            result.unheard_grants.append((dead["start"], dead["expires_at_ms"],
                                          f"{key} {kind} of {dead['instance']}, fencing token {dead['fencing_token']}"))
        shown = (f"kill {n} ({kill['planned']}; the place freed {died_before:.0f} ms after it): {kind}"
                 + (f" (published {dead['start'] - killed:+.0f} ms from the kill, lease to "
                    f"{dead['expires_at_ms'] - dead['start']:.0f} ms after)" if dead else "")
                 + f"; {key} free again {gap:.0f} ms later, to {granted.client} via {granted.gateway} "
                   f"(bound {bound} ms)")
        result.notes.append(shown)
        if gap > bound:
            late.append(f"kill {n}: {key} held by nobody alive for {gap:.0f} ms, beyond {bound} ms")
    if not free and not late:
        result.props["passed-on"] = Prop(None, f"no kill of {gateway} was recorded")
        return
    measured = sum(1 for kill in plan["kills"] if kill["fault"] in windows)
    detail = (f"{measured} kill{'' if measured == 1 else 's'} of {gateway}: "
              + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())))
    if free:
        detail += f"; free again after at most {max(free):.0f} ms, p50 {statistics.median(free):.0f} ms"
    if outright_free:
        detail += (f" (after an outright grant to a dead waiter: at most {max(outright_free):.0f} ms, p50 "
                   f"{statistics.median(outright_free):.0f} ms; the next grant {max(passed_after_lease):.0f} ms "
                   f"at most past the dead waiter's lease)")
    detail += (f"; bound {ttl} + {FRESH_MS} + {TENDING_ROUND_MS} + {HANDOFF_SLACK_MS} = {bound_outright} ms, "
               f"{bound_offered} ms where {gateway} died more than {FRESH_MS} ms before the place freed")
    if late:
        result.props["passed-on"] = Prop(False, "; ".join(late) + "; " + detail)
    elif not outright_free:
        result.props["passed-on"] = Prop(None, "no kill left a place granted outright to a dead waiter: " + detail)
    else:
        result.props["passed-on"] = Prop(True, detail)


def paused_waiters_answered(records, windows, info, result: Result) -> None:
    """Of each pause of the waiters' gateway around a hand-off: how late it
    could read the grant (from the grant to its continuation), whether it
    answered its client the grant as made (outright) or claimed the place
    anew (a later lease end), and where the lease the answer reports began
    by the client's rule: its request's start plus the waited_ms reported,
    which a client takes for the earliest moment the grant was made (the
    Go and Python clients time their lease from it, as `lease_end` does).
    `waited-report` holds when no such start lies past the lease's real
    start (its `expires_at_ms` - `ttl_ms`, the Redis clock being the
    clients' here) by more than LEASE_TOLERANCE_MS."""
    plan = info.get("paused_waiters")
    if plan is None:
        result.props["waited-report"] = Prop(None, "the pauses were not recorded")
        return
    key = plan["key"]
    answers = {r["fencing_token"]: r for r in records
               if r["op"] == "acquire" and r["outcome"] == "granted" and r["key"] == key}
    late, measured = [], 0
    for n, pause in enumerate(plan["pauses"], 1):
        grant, window = pause["grant"], windows.get(pause["fault"])
        if grant is None or window is None:
            result.notes.append(f"pause {n}: no grant to a waiter of {plan['gateway']} while it was stopped")
            continue
        heard_late = window[1] - grant["start"]
        answer = answers.get(grant["fencing_token"])
        if answer is None:
            result.notes.append(f"pause {n}: continued {heard_late:.0f} ms after the grant; the grant was "
                                "answered to no client (its place gone, the waiter queued again)")
            continue
        measured += 1
        how = ("answered as granted outright" if answer["expires_at_ms"] == grant["expires_at_ms"]
               else f"claimed anew (lease end {answer['expires_at_ms'] - grant['expires_at_ms']:+.0f} ms)")
        began = answer["expires_at_ms"] - answer["ttl_ms"]
        past = answer["start"] + answer.get("waited_ms", 0) - began
        result.notes.append(f"pause {n}: continued {heard_late:.0f} ms after the grant; {how} to "
                            f"{answer['client']}, waited_ms {answer.get('waited_ms', 0)}: its request's start plus "
                            f"waited_ms lies {past:+.0f} ms from the lease's start")
        if past > LEASE_TOLERANCE_MS:
            late.append(f"pause {n}: {answer['client']}'s lease, heard {heard_late:.0f} ms late and {how}, "
                        f"began {past:.0f} ms before its request's start plus waited_ms")
    if not measured:
        result.props["waited-report"] = Prop(None, "no grant made while the gateway was stopped was answered")
        return
    result.props["waited-report"] = Prop(not late, "; ".join(late) or
                                         f"{measured} grants heard late, each lease begun no earlier than its "
                                         "request's start plus waited_ms")


def handoff_exactly_once(records, windows, info, result: Result) -> None:
    """Every order answered 201 stored once in the database, and
    `lockgate orders reconcile` clean, once the fault healed."""
    handoff = info.get("handoff")
    if handoff is None:
        result.props["handoff"] = Prop(None, "the orders database was not read")
        return
    confirmed = {r["order_id"] for r in records if r["op"] == "purchase" and r["outcome"] == "confirmed"}
    missing = confirmed - handoff["stored"]
    problems = []
    if handoff["pending"]:
        problems.append(f"{handoff['pending']} orders still pending after {handoff['waited_s']:.0f} s")
    if missing:
        problems.append(f"{len(missing)} confirmed orders not in the database")
    if handoff["duplicates"]:
        problems.append(f"{handoff['duplicates']} orders stored more than once")
    if handoff["reconcile_status"] != 0:
        problems.append(f"`lockgate orders reconcile` exited {handoff['reconcile_status']}")
    detail = (f"{len(handoff['stored'])} rows for {len(confirmed)} confirmed orders"
              + ("; PostgreSQL killed while a batch was being stored" if info.get("killed_mid_batch") else "")
              + f"; reconcile: {handoff['reconcile'].strip() or '(no output)'}")
    result.props["handoff"] = Prop(not problems, "; ".join(problems + [detail]))


def others_keep_granting(records, windows, info, result: Result) -> None:
    """Kept for the notes: how many grants the other gateways made while
    one was cut off (the activity check is what requires some)."""
    gateway = info.get("cut_gateway")
    cut = windows.get(info.get("cut_id"))
    if cut is None:
        return
    granted = [h for h in result.holds if h.gateway != gateway and cut[0] <= h.start <= cut[1]]
    result.notes.append(f"while {gateway} was cut off the others granted {len(granted)} locks")
