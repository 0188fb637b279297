"""The scenarios: a layout, the gateways' settings, a nemesis schedule, and
the checks beyond the ones every scenario gets (see `checker.check`).

Each schedule runs while the clients do: it lets them warm up, injects its
faults (waiting, where it matters, for the moment that makes the fault
bite: a gateway holding locks, a client inside its critical section), heals
them, and returns; the runner then lets the clients go on for a while.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import checker
from .history import Tail
from .nemesis import Stage
from .topology import CLUSTER_NODES, GATEWAYS, SENTINELS, HarnessError

LOCK_KEYS = ["chaos:k0", "chaos:k1", "chaos:k2", "chaos:k3", "chaos:k4"]
# In a cluster made by `redis-cli --cluster create`, the sale's slot and
# chaos:k0's fall to the same primary: the one the cluster scenario kills.
SKU = "chaos-sale"
PLAIN_TTL_MS = 2000
STREAM_TTL_MS = 3000
VICTIM = "L2"


@dataclass
class Timing:
    warmup: float  # clients run this long before the first fault
    after: float  # and this long after the last heal
    hold_fault: float  # how long a partition, pause or slow link lasts

    @staticmethod
    def full() -> "Timing":
        return Timing(warmup=10, after=10, hold_fault=10)

    @staticmethod
    def short() -> "Timing":
        return Timing(warmup=4, after=4, hold_fault=6)


@dataclass
class Scenario:
    name: str
    summary: str
    layout: str
    schedule: Callable[[Stage], None]
    wait_replicas: int = 0
    checks: list[Callable] = field(default_factory=list)
    victim: str | None = None  # a locker that works slowly, to be paused mid-write


class LiveHolds:
    """Which locks each gateway holds for its clients now, from the growing history."""

    def __init__(self, history_dir: Path):
        self.history_dir = history_dir
        self.tails: dict[Path, Tail] = {}
        self.open: dict[tuple, dict] = {}

    def poll(self) -> None:
        for path in self.history_dir.glob("*.jsonl"):
            if path.name != "nemesis.jsonl" and path not in self.tails:
                self.tails[path] = Tail(path)
        for tail in self.tails.values():
            for record in tail.new_records():
                ident = (record["client"], record.get("fencing_token"))
                if record["op"] == "acquire" and record["outcome"] == "granted":
                    self.open[ident] = record
                elif record["op"] in ("release", "stream-end"):
                    self.open.pop(ident, None)

    def held_on(self, gateway: str, kind: str, beyond_ms: float = 0) -> int:
        """Grants of `kind` open on `gateway`; for streams, only those whose
        holder means to hold them `beyond_ms` longer."""
        self.poll()
        horizon = time.time() * 1000 + beyond_ms
        return sum(1 for grant in self.open.values() if grant["gateway"] == gateway and grant["kind"] == kind
                   and grant.get("hold_until", horizon) >= horizon)


def redis_side(stage: Stage) -> list[str]:
    return ["r1", "r2", *SENTINELS] if stage.world.layout == "sentinel" else CLUSTER_NODES


def wait_for_holders(stage: Stage, gateway: str, live: LiveHolds) -> None:
    """Until `gateway` holds a plain lock and a streamed one whose holder
    means to keep it past the lease's end even if no renewal gets through
    (so it has to be told); failing that (15 s), any streamed holder."""
    beyond = STREAM_TTL_MS + 1000
    if stage.wait_for(lambda: live.held_on(gateway, "stream", beyond)
                      and live.held_on(gateway, "plain"), 15, 0.02):
        return
    if stage.wait_for(lambda: live.held_on(gateway, "stream", beyond), 5, 0.02):
        return
    stage.wait_for(lambda: live.held_on(gateway, "stream"), 5, 0.02)


def gateway_partition(stage: Stage) -> None:
    live = LiveHolds(stage.history_dir)
    stage.sleep(stage.timing.warmup)
    wait_for_holders(stage, "gw1", live)
    stage.info["plain_at_cut"] = live.held_on("gw1", "plain")
    stage.info["cut_gateway"] = "gw1"
    stage.info["cut_id"] = stage.nemesis.partition(["gw1"], redis_side(stage))
    # Longer than a streamed lease, so every stream on gw1 must end.
    stage.sleep(max(stage.timing.hold_fault, STREAM_TTL_MS / 1000 + 2))
    stage.nemesis.heal(stage.info["cut_id"])


def gateway_pause(stage: Stage) -> None:
    live = LiveHolds(stage.history_dir)
    stage.sleep(stage.timing.warmup)
    wait_for_holders(stage, "gw1", live)
    paused = stage.nemesis.pause("lockgate-gw1")
    stage.sleep(max(stage.timing.hold_fault, STREAM_TTL_MS / 1000 + 2))
    stage.nemesis.heal(paused)


def client_pause(stage: Stage) -> None:
    """Kleppmann's example: the victim has read the row and is about to write
    it back when it stops for longer than its lease; others take the lock and
    write; the victim wakes and writes what it read, plus one."""
    history = Tail(stage.history_dir / f"{VICTIM}.jsonl")
    stage.sleep(stage.timing.warmup)
    for round_ in range(2):
        if round_:
            stage.sleep(3)
        history.new_records()  # only a read from now on counts
        if not stage.wait_for(lambda: any(
                r["op"] == "read" and r["outcome"] == "ok" for r in history.new_records()), 15, 0.02):
            raise HarnessError(f"{VICTIM} never read the row")
        paused = stage.nemesis.pause(f"client-{VICTIM}")
        stage.sleep(PLAIN_TTL_MS / 1000 + 2.5)
        stage.nemesis.heal(paused)


def primary_failover(stage: Stage) -> None:
    """The network splits: the primary and gw1 on one side, the replica, the
    sentinels and the other gateways on the other (clients and PostgreSQL
    reach both). The sentinels promote the replica; gw1 meanwhile goes on
    with the old primary. Then the split heals and the old primary rejoins
    as a replica of the new one, dropping what it took alone."""
    world = stage.world
    stage.sleep(stage.timing.warmup)
    cut = stage.nemesis.partition(["r1", "gw1"], ["r2", *SENTINELS, "gw2", "gw3"])
    if not stage.wait_for(lambda: world.current_primary() == world.ip("r2"), 30, 0.2):
        raise HarnessError("the sentinels did not promote r2")
    stage.nemesis.mark("r2 promoted")
    stage.sleep(3)  # the old primary goes on alone for a while
    stage.nemesis.heal(cut)
    if not stage.wait_for(lambda: world.redis_role("r1")[0] == "slave", 30, 0.2):
        raise HarnessError("r1 did not become a replica again")
    stage.nemesis.mark("r1 a replica")
    if not world.follows_failover:
        world.notes.append("the gateways did not follow the failover (this binary takes no redis+sentinel:// URL): "
                           "they were pointed at the first primary, so gw2 and gw3 failed while cut off from it, "
                           "all three went on with it after the heal until the sentinels demoted it (dropping "
                           "what it had taken since the split), and every write failed after that")


def cluster_primary_killed(stage: Stage) -> None:
    """SIGKILL the primary that serves chaos:k0; its replica takes over; the
    killed node comes back (as a replica) a few seconds later."""
    world = stage.world
    stage.sleep(stage.timing.warmup)
    victim = world.slot_owner(LOCK_KEYS[0])
    if victim is None:
        raise HarnessError(f"no primary serves {LOCK_KEYS[0]}")
    if world.slot_owner(f"{{{SKU}}}") == victim:
        world.notes.append(f"the killed primary ({victim}) served {LOCK_KEYS[0]} and the sale")
    killed = stage.nemesis.kill(f"redis-{victim}")
    successor = stage.wait_for(lambda: world.slot_owner(LOCK_KEYS[0]) not in (None, victim),
                               30, 0.2)
    if not successor:
        raise HarnessError(f"no replica took over from {victim}")
    stage.nemesis.mark(f"{world.slot_owner(LOCK_KEYS[0])} promoted")
    stage.sleep(4)
    stage.nemesis.heal(killed)
    if not stage.wait_for(lambda: any(
            node["host"] == victim and node["role"] == "replica" and node["link"] == "connected"
            and not node["failed"] for node in world.cluster_nodes()), 30, 0.2):
        raise HarnessError(f"{victim} did not rejoin as a replica")
    stage.nemesis.mark(f"{victim} a replica")


def slow_network(stage: Stage) -> None:
    stage.sleep(stage.timing.warmup)
    slow = stage.nemesis.slow(GATEWAYS, redis_side(stage), delay_ms=100, loss=0.05)
    stage.sleep(stage.timing.hold_fault + 4)
    stage.nemesis.heal(slow)


SCENARIOS = [
    Scenario("gateway-partition", "gw1 cut off from Redis while it holds streamed and plain locks",
             "sentinel", gateway_partition,
             checks=[checker.streams_told_lost_in_time, checker.others_keep_granting]),
    Scenario("gateway-pause", "gw1 paused (SIGSTOP) past the leases, then resumed", "sentinel", gateway_pause),
    Scenario("client-pause", f"a client ({VICTIM}) paused past its lease between its read and its write",
             "sentinel", client_pause, victim=VICTIM),
    Scenario("failover", "the primary partitioned away with gw1, the replica promoted by Sentinel",
             "sentinel", primary_failover),
    Scenario("failover-wait", "the same, with replica-confirmed grants and purchases (--redis-wait-replicas 1)",
             "sentinel", primary_failover, wait_replicas=1),
    Scenario("cluster-kill", "a Redis Cluster primary killed (SIGKILL), its replica promoted, the node restarted",
             "cluster", cluster_primary_killed),
    Scenario("slow-net", "100 ms delay and 5 % loss on every packet between the gateways and Redis, both ways",
             "sentinel", slow_network),
]
SHORT = ["gateway-partition", "failover"]


def by_name(name: str) -> Scenario:
    for scenario in SCENARIOS:
        if scenario.name == name:
            return scenario
    raise KeyError(name)
