"""The scenarios: a world (`Setup`), a workload, a nemesis schedule, and
what must hold and what is expected to break (see `verdicts.py`).

Each schedule runs while the clients do: it lets them warm up, injects its
faults (waiting, where it matters, for the moment that makes the fault
bite: a gateway holding locks, a client inside its critical section, a
grant on the primary about to die), says in which windows the side that
can still act must show activity, heals, and returns; the runner then lets
the clients go on for a while.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from . import checker
from .fairqueue import GrantListener, gateway_of, next_served
from .history import Tail, now_ms
from .nemesis import Stage
from .topology import GATEWAYS, SENTINELS, HarnessError, Setup
from .verdicts import SAFETY

LOCK_KEYS = ["chaos:k0", "chaos:k1", "chaos:k2", "chaos:k3", "chaos:k4"]
# In a cluster made by `redis-cli --cluster create`, the sale's slot and
# chaos:k0's (and chaos:k4's) fall to the same primary: the one the
# cluster scenarios kill.
SKU = "chaos-sale"
VICTIM = "L2"
SKEW_MS = 8000  # more than a failover takes here (about 3 s to promotion)


@dataclass
class Timing:
    warmup: float  # clients run this long before the first fault
    after: float  # and this long after the last heal
    hold_fault: float  # how long a partition, pause or slow link lasts
    rounds: int  # how many times a fault repeated round after round is injected

    @staticmethod
    def full() -> "Timing":
        return Timing(warmup=10, after=10, hold_fault=10, rounds=8)

    @staticmethod
    def short() -> "Timing":
        return Timing(warmup=4, after=4, hold_fault=6, rounds=2)


@dataclass
class Workload:
    """The clients' settings (see `runner.workload_config`)."""

    locker_keys: tuple[str, ...] = tuple(LOCK_KEYS[:2])
    plain_ttl_ms: int = 2000
    plain_wait_ms: int = 3000
    work_ms: tuple[int, int] = (50, 50)  # a locker's work between its read and its write
    victim_work_ms: tuple[int, int] = (1000, 1000)
    # A locker's work and lease by its home gateway, where they differ
    # from work_ms and plain_ttl_ms.
    home_work_ms: dict[str, tuple[int, int]] = field(default_factory=dict)
    home_ttl_ms: dict[str, int] = field(default_factory=dict)
    stream_ttl_ms: int = 3000
    # chaos:k1 is taken by lockers and streamers alike: plain and streamed
    # holders of one key.
    stream_keys: tuple[str, ...] = tuple(LOCK_KEYS[1:])
    hold_s: tuple[float, float] = (3, 8)
    slack_s: float = 0  # added to the clients' request timeouts (slow links)


# The leases of the default workload, which the schedules wait out.
PLAIN_TTL_MS = Workload.plain_ttl_ms
STREAM_TTL_MS = Workload.stream_ttl_ms


@dataclass
class Scenario:
    name: str
    summary: str
    schedule: Callable[[Stage], None]
    setup: Setup = field(default_factory=Setup)
    workload: Workload = field(default_factory=Workload)
    must_hold: tuple[str, ...] = SAFETY
    expected_break: tuple[str, ...] = ()
    checks: list[Callable] = field(default_factory=list)
    victim: str | None = None  # a locker that works slowly, to be paused mid-write
    minutes: float = 0  # a random schedule's length

    def expected_seconds(self, timing: Timing) -> float:
        return timing.warmup + max(self.minutes * 60, timing.hold_fault + 15) + timing.after


def safety(without: tuple[str, ...] = (), plus: tuple[str, ...] = ()) -> tuple[str, ...]:
    return tuple(name for name in SAFETY if name not in without) + plus


class HistoryWatch:
    """The clients' history files as they grow, for schedules that wait for
    a moment: a gateway holding locks, a client having read the row."""

    def __init__(self, history_dir: Path):
        self.history_dir = history_dir
        self.tails: dict[Path, Tail] = {}
        self.open: dict[tuple, dict] = {}  # grants not yet given back, by (client, token)
        self.last_grant: dict[str, dict] = {}

    def poll(self) -> list[dict]:
        for path in self.history_dir.glob("*.jsonl"):
            if path.name != "nemesis.jsonl" and path not in self.tails:
                self.tails[path] = Tail(path)
        new = []
        for tail in self.tails.values():
            for record in tail.new_records():
                new.append(record)
                ident = (record["client"], record.get("fencing_token"))
                if record["op"] == "acquire" and record["outcome"] == "granted":
                    self.open[ident] = record
                    self.last_grant[record["client"]] = record
                elif record["op"] in ("release", "stream-end"):
                    self.open.pop(ident, None)
        return new

    def held_on(self, gateway: str, kind: str, beyond_ms: float = 0, key: str | None = None) -> int:
        """Grants of `kind` (of `key`, if given) open on `gateway`; for
        streams, only those whose holder means to hold them `beyond_ms` longer."""
        self.poll()
        horizon = time.time() * 1000 + beyond_ms
        return sum(1 for grant in self.open.values() if grant["gateway"] == gateway and grant["kind"] == kind
                   and grant.get("hold_until", horizon) >= horizon and key in (None, grant["key"]))


def redis_side(stage: Stage) -> list[str]:
    return stage.world.redis_hosts + (SENTINELS if stage.world.layout == "sentinel" else [])


def others(gateway: str) -> list[str]:
    return [name for name in GATEWAYS if name != gateway]


def wait_for_holders(stage: Stage, gateway: str, watch: HistoryWatch, ttl_ms: int) -> None:
    """Until `gateway` holds a plain lock and a streamed one whose holder
    means to keep it past the lease's end even if no renewal gets through
    (so it has to be told); failing that (30 s), such a streamed one alone
    (30 s more). Without one the scenario's `told-lost` finds nothing to
    measure, and says so."""
    beyond = ttl_ms + 1000
    if stage.wait_for(lambda: watch.held_on(gateway, "stream", beyond)
                      and watch.held_on(gateway, "plain"), 30, 0.02):
        return
    stage.wait_for(lambda: watch.held_on(gateway, "stream", beyond), 30, 0.02)


# Faults, each for a fixed scenario and the random schedule alike: inject,
# say where activity must show, heal.

def cut_gateway(stage: Stage, gateway: str, seconds: float, one_way: bool = False) -> int:
    """`gateway` cut off from every Redis host and sentinel, or (one way)
    deaf to them: its requests arrive and run, their answers never come."""
    start = now_ms()
    if one_way:
        fault = stage.nemesis.partition(redis_side(stage), [gateway], one_way=True)
    else:
        fault = stage.nemesis.partition([gateway], redis_side(stage))
    stage.sleep(seconds)
    stage.nemesis.heal(fault)
    stage.expect_activity(f"while {gateway} was {'deaf to Redis' if one_way else 'cut off'}", start, now_ms(),
                          gateways=others(gateway))
    return fault


def pause_gateway(stage: Stage, gateway: str, seconds: float) -> None:
    start = now_ms()
    fault = stage.nemesis.pause(f"lockgate-{gateway}")
    stage.sleep(seconds)
    stage.nemesis.heal(fault)
    stage.expect_activity(f"while {gateway} was paused", start, now_ms(), gateways=others(gateway))


def kill_gateway(stage: Stage, gateway: str, seconds: float) -> int:
    """SIGKILL, restarted `seconds` later."""
    start = now_ms()
    fault = stage.nemesis.kill(f"lockgate-{gateway}")
    stage.sleep(seconds)
    stage.nemesis.heal(fault)
    stage.expect_activity(f"while {gateway} was dead", start, now_ms(), gateways=others(gateway))
    stage.world.wait_ready(stage.world.procs[f"lockgate-{gateway}"], stage.world.gateway_url(gateway))
    return fault


def slow_clients(stage: Stage, seconds: float, delay_ms: int = 2500, jitter_ms: int = 1000) -> None:
    """Every packet between the clients and the gateways held 1.5 to 3.5 s,
    either way: longer than a plain lease, so most grants reach their
    client after their lease has ended."""
    start = now_ms()
    fault = stage.nemesis.slow(["cl"], GATEWAYS, delay_ms=delay_ms, loss=0, jitter_ms=jitter_ms)
    stage.sleep(seconds)
    stage.nemesis.heal(fault)
    stage.expect_activity("while the client links were slow", start, now_ms())


def failover(stage: Stage, gateway: str = "gw1", keep: str | None = None, after_promotion: float = 6) -> None:
    """The network splits: the primary and `gateway` (and `keep`, a replica,
    if given) on one side, the other replicas, the sentinels and the other
    gateways on the other (clients and PostgreSQL reach both). The sentinels
    promote a replica; `gateway` goes on with the old primary. Then the
    split heals and the old primary rejoins as a replica of the new one,
    dropping what it took alone. The side that can act meanwhile is the
    other gateways', unless the primary kept a replica to confirm its grants
    and the new one has none (`--redis-wait-replicas`): then it is `gateway`."""
    world = stage.world
    primary = world.primary_host()
    if primary is None:
        raise HarnessError("no sentinel names a primary")
    minority = [primary, *([keep] if keep else []), gateway]
    majority = [h for h in world.redis_hosts if h not in minority] + SENTINELS + others(gateway)
    cut = stage.nemesis.partition(minority, majority)
    promoted = stage.wait_for(lambda: (world.primary_host() not in (None, primary)) and world.primary_host(), 30, 0.2)
    if not promoted:
        raise HarnessError(f"the sentinels did not promote a replica of {primary}")
    stage.nemesis.mark(f"{promoted} promoted")
    start = now_ms()
    stage.sleep(after_promotion)  # the old primary goes on alone meanwhile
    confirmed_alone = keep and world.setup.wait_replicas
    stage.expect_activity(f"after {promoted}'s promotion, before the heal", start, now_ms(),
                          gateways=[gateway] if confirmed_alone else others(gateway))
    stage.nemesis.heal(cut)
    demoted = [primary, *([keep] if keep else [])]
    if not stage.wait_for(lambda: all(world.redis_role(h)[0] == "slave" and world.redis_role(h)[1] == world.ip(promoted)
                                      for h in demoted), 30, 0.2):
        raise HarnessError(f"{', '.join(demoted)} did not become replicas of {promoted}")
    stage.nemesis.mark(f"{primary} a replica")
    if not world.follows_failover:
        world.notes.append("the gateways did not follow the failover (this binary takes no redis+sentinel:// URL)")


def pause_primary(stage: Stage, seconds: float) -> None:
    """The primary stopped (SIGSTOP) past Sentinel's down-after, a replica
    promoted, the old primary continued: until the sentinels demote it, a
    gateway still connected to it may take it for the primary."""
    world = stage.world
    primary = world.primary_host()
    if primary is None:
        raise HarnessError("no sentinel names a primary")
    began = time.monotonic()
    paused = stage.nemesis.pause(f"redis-{primary}")
    promoted = stage.wait_for(lambda: (world.primary_host() not in (None, primary)) and world.primary_host(), 30, 0.2)
    if not promoted:
        raise HarnessError(f"the sentinels did not promote a replica of the paused {primary}")
    stage.nemesis.mark(f"{promoted} promoted")
    start = now_ms()
    stage.sleep(max(3.0, seconds - (time.monotonic() - began)))
    stage.expect_activity(f"after {promoted}'s promotion, while {primary} was paused", start, now_ms())
    stage.nemesis.heal(paused)
    if not stage.wait_for(lambda: world.redis_role(primary)[0] == "slave", 30, 0.2):
        raise HarnessError(f"{primary} did not become a replica again")
    stage.nemesis.mark(f"{primary} a replica")


def kill_replica(stage: Stage, seconds: float, rng: random.Random) -> None:
    world = stage.world
    primary = world.primary_host()
    victim = rng.choice([h for h in world.redis_hosts if h != primary])
    start = now_ms()
    fault = stage.nemesis.kill(f"redis-{victim}")
    stage.sleep(seconds)
    stage.nemesis.heal(fault)
    stage.expect_activity(f"while {victim} was dead", start, now_ms())


# The fixed scenarios' schedules.

def gateway_partition(stage: Stage) -> None:
    watch = HistoryWatch(stage.history_dir)
    stage.sleep(stage.timing.warmup)
    wait_for_holders(stage, "gw1", watch, STREAM_TTL_MS)
    stage.info["plain_at_cut"] = watch.held_on("gw1", "plain")
    stage.info["cut_gateway"] = "gw1"
    # Longer than a streamed lease, so every stream on gw1 must end.
    stage.info["cut_id"] = cut_gateway(stage, "gw1", max(stage.timing.hold_fault, STREAM_TTL_MS / 1000 + 2))


def gateway_deaf(stage: Stage) -> None:
    watch = HistoryWatch(stage.history_dir)
    stage.sleep(stage.timing.warmup)
    wait_for_holders(stage, "gw1", watch, STREAM_TTL_MS)
    stage.info["plain_at_cut"] = watch.held_on("gw1", "plain")
    stage.info["cut_gateway"] = "gw1"
    stage.info["cut_id"] = cut_gateway(stage, "gw1", max(stage.timing.hold_fault, STREAM_TTL_MS / 1000 + 2),
                                       one_way=True)


def gateway_pause(stage: Stage) -> None:
    watch = HistoryWatch(stage.history_dir)
    stage.sleep(stage.timing.warmup)
    wait_for_holders(stage, "gw1", watch, STREAM_TTL_MS)
    pause_gateway(stage, "gw1", max(stage.timing.hold_fault, STREAM_TTL_MS / 1000 + 2))


def gateway_kill(stage: Stage) -> None:
    """Killed while it holds a streamed lock of chaos:k1, which the lockers
    always wait for: they must get it once its lease ends, not before."""
    watch = HistoryWatch(stage.history_dir)
    stage.sleep(stage.timing.warmup)
    if not stage.wait_for(lambda: watch.held_on("gw1", "stream", STREAM_TTL_MS + 1000, key=LOCK_KEYS[1]), 40, 0.02):
        wait_for_holders(stage, "gw1", watch, STREAM_TTL_MS)
    stage.info["cut_gateway"] = "gw1"
    stage.info["plain_at_cut"] = watch.held_on("gw1", "plain")
    # Dead for longer than a streamed lease: its locks' waiters get them.
    stage.info["cut_id"] = kill_gateway(stage, "gw1", STREAM_TTL_MS / 1000 + 4)


def client_pause(stage: Stage) -> None:
    """Kleppmann's example, twice: the victim has read the row and is about
    to write it back when it stops; its lease ends; the next holder reads
    the row; the victim wakes at that moment and writes what it read, plus
    one, before the next holder writes."""
    watch = HistoryWatch(stage.history_dir)
    stage.sleep(stage.timing.warmup)
    for round_ in range(2):
        if round_:
            stage.sleep(3)
        watch.poll()  # only a read from now on counts
        read = stage.wait_for(lambda: next((r for r in watch.poll() if r["client"] == VICTIM and r["op"] == "read"
                                            and r["outcome"] == "ok"), None), 20, 0.005)
        if not read:
            raise HarnessError(f"{VICTIM} never read the row")
        start = now_ms()
        paused = stage.nemesis.pause(f"client-{VICTIM}")
        key, lease_end = read["key"], watch.last_grant[VICTIM]["expires_at_ms"]
        successor = stage.wait_for(lambda: next((r for r in watch.poll() if r["op"] == "read" and r["key"] == key
                                                 and r["client"] != VICTIM and r["start"] >= lease_end), None),
                                   PLAIN_TTL_MS / 1000 + 8, 0.005)
        stage.nemesis.heal(paused)
        if successor:
            stage.nemesis.mark(f"{VICTIM} woken as {successor['client']} read")
        stage.expect_activity(f"while {VICTIM} was paused (round {round_ + 1})", start, now_ms(), keys=[key],
                              purchases=False)


def slow_client_links(stage: Stage) -> None:
    stage.sleep(stage.timing.warmup)
    slow_clients(stage, stage.timing.hold_fault + 4)


def primary_failover(stage: Stage, after_promotion: float = 6) -> None:
    """Split once gw1 holds a streamed lock its holder means to keep past
    the promotion: its renewals go on against the old primary meanwhile,
    and must not count (or be confirmed) while no replica has them."""
    watch = HistoryWatch(stage.history_dir)
    stage.sleep(stage.timing.warmup)
    stage.wait_for(lambda: watch.held_on("gw1", "stream", 5000), 30, 0.02)
    failover(stage, after_promotion=after_promotion)


def skewed_failover(stage: Stage) -> None:
    """The same; the promoted replica's clock being behind, the leases it
    took over last that much longer, so the split lasts past them."""
    primary_failover(stage, after_promotion=SKEW_MS / 1000 + 4)


def primary_failover_after_grant(stage: Stage) -> None:
    """The split 1 s into a plain lock's lease (of 10 s, held 5 to 7 s):
    the promotion comes while its holder still works."""
    watch = HistoryWatch(stage.history_dir)
    stage.sleep(stage.timing.warmup)
    watch.poll()
    if not stage.wait_for(lambda: any(r["op"] == "acquire" and r["outcome"] == "granted" and r["kind"] == "plain"
                                      for r in watch.poll()), 20, 0.01):
        raise HarnessError("no plain lock was granted")
    stage.sleep(1)
    failover(stage)


def primary_failover_keeping_replica(stage: Stage) -> None:
    watch = HistoryWatch(stage.history_dir)
    stage.sleep(stage.timing.warmup)
    stage.wait_for(lambda: watch.held_on("gw1", "stream", 5000), 30, 0.02)
    failover(stage, keep="r3")


def primary_pause(stage: Stage) -> None:
    stage.sleep(stage.timing.warmup)
    pause_primary(stage, 8)


def cluster_primary_killed(stage: Stage) -> None:
    """What a machine's death does to the primary serving chaos:k0 (and the
    sale): while a holder works under chaos:k0, the primary's link to its
    replica is cut one way, so what it takes from then on reaches no
    replica; right after the next grant of chaos:k0 it is killed (SIGKILL);
    its replica takes over; the node is started again (from its AOF) and
    rejoins as a replica. (A killed process alone loses little: the kernel
    still delivers what it had sent.)"""
    world = stage.world
    watch = HistoryWatch(stage.history_dir)
    stage.sleep(stage.timing.warmup)
    victim = world.slot_owner(LOCK_KEYS[0])
    if victim is None:
        raise HarnessError(f"no primary serves {LOCK_KEYS[0]}")
    nodes = world.cluster_nodes()
    victim_id = next(node["id"] for node in nodes if node["host"] == victim)
    replica = next(node["host"] for node in nodes if node["master_id"] == victim_id)
    survivors = [key for key in LOCK_KEYS if world.slot_owner(key) != victim]
    if world.slot_owner(f"{{{SKU}}}") == victim:
        world.notes.append(f"the killed primary ({victim}) served {', '.join(k for k in LOCK_KEYS if k not in survivors)}"
                           " and the sale")
    # Cut while a holder A works: its release and the next grant (to B)
    # reach no replica; the promoted one still has A's lease, which ends
    # before B is done.
    watch.poll()
    granted_k0 = lambda: any(r["op"] == "acquire" and r["outcome"] == "granted" and r["key"] == LOCK_KEYS[0]
                             for r in watch.poll())
    if not stage.wait_for(granted_k0, 20, 0.005):
        raise HarnessError(f"no grant of {LOCK_KEYS[0]}")
    cut = stage.nemesis.partition([victim], [replica], one_way=True)
    # With replica confirmation no grant gets through the cut: the kill
    # comes after 12 s then.
    stage.wait_for(granted_k0, 12, 0.005)
    killed = stage.nemesis.kill(f"redis-{victim}")
    successor = stage.wait_for(lambda: world.slot_owner(LOCK_KEYS[0]) not in (None, victim) and
                               world.slot_owner(LOCK_KEYS[0]), 30, 0.2)
    if not successor:
        raise HarnessError(f"no replica took over from {victim}")
    stage.nemesis.mark(f"{successor} promoted")
    stage.nemesis.heal(cut)
    start = now_ms()
    stage.sleep(8)
    # With replica confirmation the new primary, alone, confirms nothing
    # until the old one is back as its replica: only other slots can act.
    confirmed = bool(world.setup.wait_replicas)
    stage.expect_activity(f"after {successor}'s promotion, before {victim} restarted", start, now_ms(),
                          keys=survivors if confirmed else None, purchases=not confirmed)
    stage.nemesis.heal(killed)
    if not stage.wait_for(lambda: any(
            node["host"] == victim and node["role"] == "replica" and node["link"] == "connected"
            and not node["failed"] for node in world.cluster_nodes()), 30, 0.2):
        raise HarnessError(f"{victim} did not rejoin as a replica")
    stage.nemesis.mark(f"{victim} a replica")


def orders_database_faults(stage: Stage) -> None:
    """The order hand-off's database cut off from the gateways, then killed
    (SIGKILL to every PostgreSQL process) while a batch is being stored, and
    started again (crash recovery). A trigger makes each stored row take
    5 ms, so the backlog's batches last long enough to be killed in."""
    world = stage.world
    stage.sleep(stage.timing.warmup)
    if not stage.wait_for(lambda: world.pg_execute("SELECT to_regclass('orders') IS NOT NULL", fetch=True)[0][0],
                          30, 0.2):
        raise HarnessError("the hand-off never created its orders table")
    world.pg_execute("CREATE FUNCTION slow_store() RETURNS trigger LANGUAGE plpgsql AS "
                     "$$ BEGIN PERFORM pg_sleep(0.005); RETURN NEW; END $$")
    world.pg_execute("CREATE TRIGGER slow_store BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION slow_store()")
    start = now_ms()
    cut = stage.nemesis.partition(["pg"], GATEWAYS)
    stage.sleep(stage.timing.hold_fault)
    stage.nemesis.heal(cut)
    stage.expect_activity("while PostgreSQL was cut off from the gateways", start, now_ms())
    mid_batch = stage.wait_for(world.batch_being_stored, 20, 0.01)
    start = now_ms()
    killed = stage.nemesis.kill("postgres", group=True)
    stage.nemesis.mark("killed mid-batch" if mid_batch else "killed (no batch seen)")
    stage.info["killed_mid_batch"] = bool(mid_batch)
    stage.sleep(3)
    stage.nemesis.heal(killed)
    world.wait_postgres()
    stage.nemesis.mark("PostgreSQL back")
    stage.expect_activity("while PostgreSQL was down", start, now_ms())
    if not mid_batch:
        world.notes.append("no batch was being stored when PostgreSQL was killed")


# The one-write hand-off (lua/lib/queue.lua): the head of a lock's queue is
# granted its whole lease outright when its gateway renewed its presence
# within 0.5 s, else offered the place for a second. So a waiter whose
# gateway dies at its turn holds the lock for its lease at most, and only
# if the gateway died less than 0.5 s before the grant; a second otherwise.
HANDOFF_KEY = LOCK_KEYS[0]
# The gateway whose waiter's turn each fault lands at: killed in
# handoff-kill, stopped in handoff-pause.
WAITERS_GATEWAY = "gw2"
# The other gateways' lockers work long enough for a fault to be timed
# before their release. (Both: the fair queue settles into a fixed
# rotation of the lockers, where a gw2 waiter may always follow a gw3
# holder and never a gw1 one.)
HOLDER_WORK_MS = 700
DEAD_WAITER_TTL_MS = 2000
# As the packaged systemd unit starts a gateway that died again (RestartSec=1s).
RESTART_AFTER_S = 1.0
AT_GRANT = "at the grant"
# Where each round's kill lands: this many ms before a holder's release
# (the gateway's presence was renewed 0 to 300 ms before its death, and a
# grant is outright when it was renewed at most 500 ms before: 50 and 100
# are granted outright, 300 mostly, 600 offered), or at the grant message to
# one of its waiters, which the gateway hears at the same moment (the
# kill wins the race or the answer does). The short run takes the first
# rounds: a round lasts about 7 s, most of it the restarted gateway's
# clients coming back (they keep off it for 2 s) and queueing again.
HANDOFF_ROUNDS = (100, AT_GRANT, 600, 300, AT_GRANT, 50, AT_GRANT, 600)


def kill_before_release(stage: Stage, watch: HistoryWatch, before_ms: int) -> int:
    """SIGKILL to WAITERS_GATEWAY `before_ms` before a holder from another
    gateway releases the key, while a waiter of WAITERS_GATEWAY is the next
    to be served: the release grants the place to a waiter nobody will
    answer (or, killed long enough before, passes it over)."""
    wait_before_release(stage, watch, before_ms)
    return stage.nemesis.kill(f"lockgate-{WAITERS_GATEWAY}")


def wait_before_release(stage: Stage, watch: HistoryWatch, before_ms: int) -> None:
    """Until `before_ms` before a holder from another gateway than
    WAITERS_GATEWAY releases the key, while a waiter of WAITERS_GATEWAY is
    the next to be served."""
    world = stage.world
    watch.poll()  # only a read from now on counts

    def holder_read() -> dict | None:
        for record in watch.poll():
            if record["op"] != "read" or record["key"] != HANDOFF_KEY or record["outcome"] != "ok":
                continue
            grant = watch.open.get((record["client"], record["fencing_token"]))
            # A locker of another gateway (it works HOLDER_WORK_MS), through
            # another gateway; it releases once its work is done: there
            # must be time left before that.
            if (grant is None or grant.get("home") in (None, WAITERS_GATEWAY) or grant["gateway"] == WAITERS_GATEWAY
                    or record["end"] + HOLDER_WORK_MS - before_ms < now_ms() + 20):
                continue
            waiter = next_served(world, HANDOFF_KEY)
            if waiter is not None and gateway_of(waiter["inst"]) == WAITERS_GATEWAY:
                return record
        return None

    read = stage.wait_for(holder_read, 30, 0.005)
    if not read:
        raise HarnessError(f"no holder from {', '.join(others(WAITERS_GATEWAY))} read the row of {HANDOFF_KEY} "
                           f"while a waiter of {WAITERS_GATEWAY} was the next to be served")
    stage.sleep(max(0.0, (read["end"] + HOLDER_WORK_MS - before_ms - now_ms()) / 1000))


def kill_at_grant(stage: Stage, listener: GrantListener) -> int:
    """SIGKILL to WAITERS_GATEWAY the moment the queue publishes a grant of
    the key to one of its waiters."""
    fired = threading.Event()
    killed = {}

    def kill(_grant: dict) -> None:
        killed["fault"] = stage.nemesis.kill(f"lockgate-{WAITERS_GATEWAY}")
        fired.set()

    listener.arm(WAITERS_GATEWAY, kill)
    if not stage.wait_for(fired.is_set, 30, 0.01):
        listener.disarm()
        if not fired.wait(1):
            raise HarnessError(f"no waiter of {WAITERS_GATEWAY} was granted {HANDOFF_KEY}")
    return killed["fault"]


def handoff_kills(stage: Stage) -> None:
    """Round after round, the gateway of the waiter whose turn comes next
    is killed (SIGKILL) just before the holder releases, or at the grant;
    it is started again a second later. The checker measures how long the
    key then stayed with nobody alive holding it."""
    world = stage.world
    watch = HistoryWatch(stage.history_dir)
    listener = GrantListener(world, HANDOFF_KEY, stage.history_dir)
    listener.start()
    kills = []
    stage.info["dead_waiters"] = {"key": HANDOFF_KEY, "gateway": WAITERS_GATEWAY, "ttl_ms": DEAD_WAITER_TTL_MS,
                                  "kills": kills}
    process = world.procs[f"lockgate-{WAITERS_GATEWAY}"]
    try:
        stage.sleep(stage.timing.warmup)
        start = now_ms()
        for where in HANDOFF_ROUNDS[:stage.timing.rounds]:
            if where == AT_GRANT:
                fault = kill_at_grant(stage, listener)
            else:
                fault = kill_before_release(stage, watch, where)
            kills.append({"fault": fault, "planned": where if where == AT_GRANT else f"{where} ms before a release"})
            stage.sleep(RESTART_AFTER_S)
            stage.nemesis.heal(fault)
            world.wait_ready(process, world.gateway_url(WAITERS_GATEWAY))
        stage.expect_activity(f"while {WAITERS_GATEWAY} was killed and started again", start, now_ms(),
                              gateways=others(WAITERS_GATEWAY))
        # The grants of the last kill's aftermath are heard before the
        # listener stops: until a client was granted the key again.
        restarted = now_ms()
        stage.wait_for(lambda: any(r["op"] == "acquire" and r["outcome"] == "granted" and r["key"] == HANDOFF_KEY
                                   and r["end"] > restarted for r in watch.poll()),
                       DEAD_WAITER_TTL_MS / 1000 + 5, 0.05)
    finally:
        listener.stop()


# How long after the grant a gateway stopped around the hand-off is
# continued: under 0.5 s it answers the grant it heard late as made
# outright (no write), beyond that it claims the place anew.
PAUSE_ROUNDS = (400, 800, 450, 300, 700, 400, 450, 800)


def handoff_pauses(stage: Stage) -> None:
    """Round after round, the gateway of the waiter whose turn comes next
    is stopped (SIGSTOP) 100 ms before the holder's release, so that it
    hears the grant late, and continued a few hundred ms after the grant."""
    world = stage.world
    watch = HistoryWatch(stage.history_dir)
    listener = GrantListener(world, HANDOFF_KEY, stage.history_dir)
    listener.start()
    pauses = []
    stage.info["paused_waiters"] = {"key": HANDOFF_KEY, "gateway": WAITERS_GATEWAY, "pauses": pauses}
    try:
        stage.sleep(stage.timing.warmup)
        start = now_ms()
        for late_ms in PAUSE_ROUNDS[:stage.timing.rounds]:
            wait_before_release(stage, watch, 100)
            heard = {}
            granted = threading.Event()

            def on_grant(grant: dict, heard=heard, granted=granted) -> None:
                heard.update(grant)
                granted.set()

            listener.arm(WAITERS_GATEWAY, on_grant)
            paused = stage.nemesis.pause(f"lockgate-{WAITERS_GATEWAY}")
            if stage.wait_for(granted.is_set, HOLDER_WORK_MS / 1000, 0.002):
                stage.sleep(max(0.0, (heard["start"] + late_ms - now_ms()) / 1000))
            listener.disarm()
            stage.nemesis.heal(paused)
            pauses.append({"fault": paused, "late_ms": late_ms, "grant": heard or None})
            # Until the paused gateway's waiter let go (its lockers work
            # past their lease): the next round starts from a settled queue.
            stage.sleep(PAUSED_WORK_MS / 1000)
        stage.expect_activity(f"while {WAITERS_GATEWAY} was paused, round after round", start, now_ms(),
                              gateways=others(WAITERS_GATEWAY))
    finally:
        listener.stop()


CONFIRMED_2 = Setup(replicas=2, wait_replicas=1)
# Streamed holders on two keys only (one shared with the lockers): a
# stream held through a failover has others waiting for its key.
CONTENDED = Workload(stream_keys=("chaos:k1", "chaos:k2"))
# Leases longer than a promotion, held through it: a grant the new primary
# never saw is still held when it grants the key again. Every locker on
# chaos:k0, so that someone always waits for it.
LONG_LEASES = Workload(locker_keys=("chaos:k0",), plain_ttl_ms=12000, plain_wait_ms=9000, work_ms=(7000, 9000),
                       stream_ttl_ms=8000, hold_s=(2, 4))
# Every locker on the hand-off's key (no streamer takes it), waiting longer
# than a dead waiter can hold it; those of WAITERS_GATEWAY work briefly and ask
# for the lease the bound is counted from, the others work long enough for
# a kill to be timed before their release.
DEAD_WAITER_LOAD = Workload(locker_keys=(HANDOFF_KEY,), plain_wait_ms=9000,
                            work_ms=(HOLDER_WORK_MS, HOLDER_WORK_MS), home_work_ms={WAITERS_GATEWAY: (50, 50)},
                            home_ttl_ms={WAITERS_GATEWAY: DEAD_WAITER_TTL_MS})

# The same, but the paused gateway's lockers work past their lease, so that
# each holds, as far as it can know, until its lease ends: the next holder
# must come after that.
PAUSED_WORK_MS = DEAD_WAITER_TTL_MS + 300
PAUSED_WAITER_LOAD = replace(DEAD_WAITER_LOAD, home_work_ms={WAITERS_GATEWAY: (PAUSED_WORK_MS, PAUSED_WORK_MS)})

SCENARIOS = [
    Scenario("gateway-partition", "gw1 cut off from Redis while it holds streamed and plain locks", gateway_partition,
             must_hold=safety(plus=("told-lost",)),
             checks=[checker.streams_told_lost_in_time, checker.others_keep_granting]),
    Scenario("gateway-deaf", "one way: Redis's and the sentinels' packets to gw1 dropped, gw1's delivered",
             gateway_deaf, must_hold=safety(plus=("told-lost",)), checks=[checker.streams_told_lost_in_time]),
    Scenario("gateway-pause", "gw1 paused (SIGSTOP) past the leases, then resumed", gateway_pause),
    Scenario("gateway-kill", "gw1 killed (SIGKILL) while it holds streamed locks others wait for, restarted",
             gateway_kill, workload=Workload(stream_keys=("chaos:k1", "chaos:k2")),
             must_hold=safety(plus=("lease-kept",)), checks=[checker.lease_kept_after_gateway_death]),
    Scenario("handoff-kill", f"{WAITERS_GATEWAY} killed (SIGKILL) at its waiter's turn for a lock, just before the "
             f"holder's release or at the grant, and started again {RESTART_AFTER_S:g} s later, round after round",
             handoff_kills, workload=DEAD_WAITER_LOAD, must_hold=safety(plus=("passed-on",)),
             checks=[checker.dead_waiters_passed_on]),
    Scenario("handoff-pause", f"{WAITERS_GATEWAY} stopped (SIGSTOP) 100 ms before the release that grants its "
             "waiter a lock and continued 300 to 800 ms after the grant, round after round; its lockers work past "
             "their lease", handoff_pauses, workload=PAUSED_WAITER_LOAD, must_hold=safety(plus=("waited-report",)),
             checks=[checker.paused_waiters_answered]),
    Scenario("client-pause", f"a client ({VICTIM}) paused between its read and its write until the next holder read",
             client_pause, workload=Workload(work_ms=(300, 400)), victim=VICTIM,
             expected_break=("fence-write", "no-fence")),
    Scenario("slow-clients", "1.5 to 3.5 s delay on every packet between the clients and the gateways (lease 2 s)",
             slow_client_links, workload=Workload(work_ms=(50, 1000), slack_s=8)),
    Scenario("failover", "the primary cut off with gw1, a replica promoted by Sentinel; no replica confirmation",
             primary_failover, setup=Setup(replicas=2), workload=CONTENDED,
             must_hold=("fence-read", "lease-report"), expected_break=("exclusion", "purchases")),
    Scenario("failover-wait", "the same, with two replicas and replica-confirmed grants (--redis-wait-replicas 1)",
             primary_failover, setup=CONFIRMED_2, workload=CONTENDED),
    Scenario("failover-wait-split", "the primary cut off with gw1 and one of its two replicas, which confirms its "
             "grants (--redis-wait-replicas 1); the other replica promoted", primary_failover_keeping_replica,
             setup=CONFIRMED_2, workload=CONTENDED, must_hold=("fence-read", "lease-report", "token-order"),
             expected_break=("purchases",)),
    Scenario("skew-failover", f"failover to a replica whose clock is {SKEW_MS / 1000:.0f} s behind; no replica "
             "confirmation", skewed_failover, setup=Setup(replicas=2, skew_ms={"r2": -SKEW_MS, "r3": -SKEW_MS}),
             workload=CONTENDED,
             must_hold=("fence-read",), expected_break=("token-order", "exclusion", "purchases", "lease-report")),
    Scenario("skew-failover-wait", f"failover to a replica whose clock is {SKEW_MS / 1000:.0f} s behind, with "
             "replica confirmation", skewed_failover, workload=CONTENDED,
             setup=replace(CONFIRMED_2, skew_ms={"r2": -SKEW_MS, "r3": -SKEW_MS}),
             must_hold=safety(without=("lease-report",)), expected_break=("lease-report",)),
    Scenario("skew-ahead-failover-wait", f"failover to a replica whose clock is {SKEW_MS / 1000:.0f} s ahead, with "
             "replica confirmation and leases longer than the failover", primary_failover_after_grant,
             setup=replace(CONFIRMED_2, skew_ms={"r2": SKEW_MS, "r3": SKEW_MS}), workload=LONG_LEASES,
             must_hold=("fence-read", "purchases", "oversell", "token-order"),
             expected_break=("exclusion", "lease-report")),
    Scenario("primary-pause", "the primary paused (SIGSTOP) past Sentinel's down-after, a replica promoted, the old "
             "primary resumed; no replica confirmation", primary_pause, setup=Setup(replicas=2),
             must_hold=("fence-read", "lease-report", "token-order")),
    Scenario("primary-pause-wait", "the same, with replica-confirmed grants (--redis-wait-replicas 1)",
             primary_pause, setup=CONFIRMED_2),
    Scenario("cluster-kill", "a Redis Cluster primary cut off from its replica (one way) and killed (SIGKILL) right "
             "after a grant; leases of 12 s; its replica promoted, the node restarted from its AOF",
             cluster_primary_killed,
             setup=Setup(layout="cluster", aof=True), workload=LONG_LEASES,
             must_hold=("fence-read", "lease-report", "token-order"), expected_break=("exclusion", "purchases")),
    Scenario("cluster-kill-wait", "the same, with replica-confirmed grants (--redis-wait-replicas 1)",
             cluster_primary_killed, setup=Setup(layout="cluster", aof=True, wait_replicas=1),
             workload=LONG_LEASES),
    Scenario("handoff", "the order hand-off's PostgreSQL cut off from the gateways, then killed mid-batch and "
             "restarted (durable commits)", orders_database_faults, setup=Setup(handoff=True),
             must_hold=safety(plus=("handoff",)), checks=[checker.handoff_exactly_once]),
]
SHORT = ["gateway-partition", "client-pause", "failover-wait", "handoff-kill"]


# A random schedule: faults drawn from a catalogue, as Jepsen's nemesis
# schedules them, on the Sentinel layout with two replicas and replica
# confirmation, where every safety property must hold.

def random_catalogue(rng: random.Random) -> list[tuple[str, Callable[[Stage], None]]]:
    gateway = rng.choice(GATEWAYS)
    locker = f"L{rng.randint(1, 6)}"
    return [
        (f"cut {gateway} off from Redis", lambda s: cut_gateway(s, gateway, rng.uniform(5, 12))),
        (f"make {gateway} deaf to Redis", lambda s: cut_gateway(s, gateway, rng.uniform(5, 10), one_way=True)),
        (f"pause {gateway}", lambda s: pause_gateway(s, gateway, rng.uniform(4, 10))),
        (f"kill {gateway}", lambda s: kill_gateway(s, gateway, rng.uniform(2, 7))),
        ("fail the primary over", lambda s: failover(s, gateway, after_promotion=rng.uniform(3, 8))),
        ("pause the primary", lambda s: pause_primary(s, rng.uniform(5, 9))),
        ("kill a replica", lambda s: kill_replica(s, rng.uniform(3, 8), rng)),
        ("slow the client links", lambda s: slow_clients(s, rng.uniform(6, 12))),
        (f"pause client {locker}", lambda s: pause_client(s, locker, rng.uniform(3, 6))),
    ]


def pause_client(stage: Stage, client: str, seconds: float) -> None:
    start = now_ms()
    fault = stage.nemesis.pause(f"client-{client}")
    stage.sleep(seconds)
    stage.nemesis.heal(fault)
    stage.expect_activity(f"while {client} was paused", start, now_ms())


def settle(stage: Stage) -> None:
    """Until every replica streams from the primary again: each fault
    starts from a whole system (a failover right after another finds no
    replica to confirm anything, which says nothing new)."""
    world = stage.world
    if not stage.wait_for(lambda: world.replicas_online() == len(world.redis_hosts) - 1, 60, 0.5):
        raise HarnessError("the replicas did not all come back to the primary")


def random_schedule(minutes: float, seed: int) -> Callable[[Stage], None]:
    def schedule(stage: Stage) -> None:
        rng = random.Random(seed)
        stage.sleep(stage.timing.warmup)
        deadline = time.monotonic() + minutes * 60
        drawn = []
        while time.monotonic() < deadline:
            settle(stage)
            name, fault = rng.choice(random_catalogue(rng))
            drawn.append(name)
            stage.nemesis.mark(name)
            fault(stage)
            stage.sleep(rng.uniform(2, 6))
        stage.world.notes.append(f"seed {seed}: " + "; ".join(drawn))
    return schedule


def random_scenario(minutes: float, seed: int) -> Scenario:
    return Scenario("random", f"{minutes:g} minutes of faults drawn at random (seed {seed}), two replicas, "
                    "replica-confirmed grants", random_schedule(minutes, seed), setup=CONFIRMED_2, minutes=minutes)


def by_name(name: str) -> Scenario:
    for scenario in SCENARIOS:
        if scenario.name == name:
            return scenario
    raise KeyError(name)
