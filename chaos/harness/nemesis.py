"""The nemesis: faults injected into a world, each recorded with its time.

* partition: iptables DROP rules inside the hosts' namespaces, in a chain of
  their own (CHAOS-CUT) that healing flushes. DROP, not REJECT: packets
  vanish, so connections hang until their timeouts, as on a real network.
  Both ways, or one way (what one side sends never arrives; what it
  receives does).
* pause / resume: SIGSTOP and SIGCONT to a process.
* kill / restart: SIGKILL (to its whole process group, for PostgreSQL's
  postmaster and backends), then the same command line again.
* slow: each packet between two groups of hosts, either way, dropped with a
  probability and held for a delay (with jitter: packets overtake each
  other). Loss is an iptables `statistic` rule; the delay is `netdelay.py`
  behind an NFQUEUE rule (CHAOS-SLOW), which works on kernels built without
  sch_netem, where `tc ... netem` cannot.
* mark: a point in time worth drawing (a replica promoted), not a fault.

Every injection writes a `fault` record and its heal a `heal` record (the
same `id`), each with its time in `start`, to the nemesis's history file.
"""

from __future__ import annotations

import itertools
import threading
import time

from .history import Writer, now_ms
from .topology import HarnessError, World

NFQUEUE_NUMBER = 7


class Nemesis:
    def __init__(self, world: World, history: Writer):
        self.world, self.history = world, history
        self.injected = 0
        self.active: dict[int, tuple[str, callable]] = {}
        self.ids = itertools.count(1)
        self.chains_ready: set[str] = set()
        self.lock = threading.Lock()

    # Recording.

    def _begin(self, fault: str, detail: str, heal) -> int:
        fault_id = next(self.ids)
        with self.lock:
            self.injected += 1
            self.active[fault_id] = (fault, heal)
        self.history.write({"client": "nemesis", "op": "fault", "id": fault_id, "fault": fault,
                            "detail": detail, "start": now_ms()})
        return fault_id

    def heal(self, fault_id: int) -> None:
        with self.lock:
            entry = self.active.pop(fault_id, None)
        if entry is None:
            return
        fault, heal = entry
        heal()
        self.history.write({"client": "nemesis", "op": "heal", "id": fault_id, "fault": fault, "start": now_ms()})

    def heal_all(self) -> None:
        for fault_id in list(self.active):
            self.heal(fault_id)

    def mark(self, what: str, detail: str = "") -> None:
        self.history.write({"client": "nemesis", "op": "mark", "mark": what, "detail": detail, "start": now_ms()})

    # Firewall rules inside a host.

    def _chains(self, host: str) -> None:
        if host in self.chains_ready:
            return
        self.world.hosts[host].run("iptables-restore", "--noflush", input="\n".join([
            "*filter", ":CHAOS-CUT - [0:0]", ":CHAOS-SLOW - [0:0]",
            "-I INPUT 1 -j CHAOS-CUT", "-I OUTPUT 1 -j CHAOS-CUT",
            "-A INPUT -j CHAOS-SLOW", "-A OUTPUT -j CHAOS-SLOW", "COMMIT", ""]))
        self.chains_ready.add(host)

    def _append(self, host: str, chain: str, rules: list[str]) -> None:
        self._chains(host)
        lines = ["*filter"] + [f"-A {chain} {rule}" for rule in rules] + ["COMMIT", ""]
        self.world.hosts[host].run("iptables-restore", "--noflush", input="\n".join(lines))

    def _flush(self, host: str, chain: str) -> None:
        self.world.hosts[host].run("iptables", "-F", chain)

    # Faults.

    def partition(self, side_a: list[str], side_b: list[str], one_way: bool = False) -> int:
        """No packet between any host of side_a and any of side_b; with
        `one_way`, no packet from side_a to side_b (side_b's still arrive)."""
        touched = side_a + side_b
        if one_way:
            # Dropped where they are sent: the receiver's answers still leave.
            for host in side_a:
                self._append(host, "CHAOS-CUT", [f"-d {self.world.ip(other)} -j DROP" for other in side_b])
            touched = side_a
        else:
            for host, others in [(h, side_b) for h in side_a] + [(h, side_a) for h in side_b]:
                rules = []
                for other in others:
                    ip = self.world.ip(other)
                    rules += [f"-s {ip} -j DROP", f"-d {ip} -j DROP"]
                self._append(host, "CHAOS-CUT", rules)

        def heal():
            for host in touched:
                self._flush(host, "CHAOS-CUT")

        arrow = " -/-> " if one_way else " | "
        return self._begin("partition", f"{' '.join(side_a)}{arrow}{' '.join(side_b)}", heal)

    def pause(self, process_name: str) -> int:
        process = self.world.procs[process_name]
        process.pause()
        return self._begin("pause", process_name, process.resume)

    def kill(self, process_name: str, group: bool = False) -> int:
        """SIGKILL now (to the process group with `group`); healing restarts
        it with the same command line."""
        process = self.world.procs[process_name]
        process.kill(group=group)
        return self._begin("kill", process_name, process.start)

    def slow(self, side_a: list[str], side_b: list[str], delay_ms: int, loss: float, jitter_ms: int = 0) -> int:
        """Delay and loss on every packet between side_a and side_b, both ways.
        The rules go in side_a's hosts (both directions are seen there)."""
        delayers = []
        for host in side_a:
            delayer = self.world.spawn(host, f"netdelay-{host}", [
                str(self.world.ctx.python), "-B", "-m", "harness.netdelay",
                "--queue", str(NFQUEUE_NUMBER), "--delay-ms", str(delay_ms), "--jitter-ms", str(jitter_ms)],
                env={"PYTHONPATH": str(self.world.ctx.chaos_dir)})
            delayers.append(delayer)
        for delayer in delayers:
            # `--queue-bypass` lets packets through while nothing is bound, so
            # the rules wait for the program to say it is listening.
            self.world.wait_until(f"{delayer.name} to bind", lambda d=delayer: "netdelay:" in d.log.read_text()
                                  or not d.running(), 10, every=0.05)
            if not delayer.running():
                raise HarnessError(f"{delayer.name} exited: {delayer.log.read_text()[-500:]}")
        for host in side_a:
            rules = []
            for other in side_b:
                ip = self.world.ip(other)
                for match in (f"-d {ip}", f"-s {ip}"):
                    if loss:
                        rules.append(f"{match} -m statistic --mode random --probability {loss} -j DROP")
                    rules.append(f"{match} -j NFQUEUE --queue-num {NFQUEUE_NUMBER} --queue-bypass")
            self._append(host, "CHAOS-SLOW", rules)

        def heal():
            for host in side_a:
                self._flush(host, "CHAOS-SLOW")
            for delayer in delayers:
                delayer.stop()

        spread = f" ± {jitter_ms}" if jitter_ms else ""
        detail = f"{' '.join(side_a)} <-> {' '.join(side_b)}: {delay_ms}{spread} ms" + (f", {loss:.0%} loss" if loss else "")
        return self._begin("slow", detail, heal)


class Stage:
    """What a scenario's nemesis schedule works with: the world, the nemesis,
    and interruptible sleeps (Ctrl-C must not wait out a long fault)."""

    def __init__(self, world: World, nemesis: Nemesis, history_dir, stop: threading.Event, timing):
        self.world, self.nemesis, self.history_dir, self.stop, self.timing = (
            world, nemesis, history_dir, stop, timing)
        self.info: dict = {"activity": []}

    def expect_activity(self, label: str, start_ms: float, end_ms: float, gateways=None, keys=None,
                        purchases: bool = True) -> None:
        """The checker is to find grants (by `gateways`, of `keys`, when
        given) heard of between the two times, and purchases confirmed
        then unless `purchases` is false; the scenario is vacuous otherwise."""
        self.info["activity"].append({"label": label, "start": start_ms, "end": end_ms, "gateways": gateways,
                                      "keys": keys, "purchases": purchases})

    def sleep(self, seconds: float) -> None:
        if self.stop.wait(seconds):
            raise Interrupted()

    def wait_for(self, check, timeout: float, every: float = 0.1):
        """Calls check() until it returns something true, which is returned,
        or `timeout` passes (None). An exception counts as "not yet": a node
        being killed or promoted may refuse the question for a moment."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                result = check()
            except Exception:  # noqa: BLE001
                result = None
            if result:
                return result
            self.sleep(every)
        return None


class Interrupted(KeyboardInterrupt):
    """The run is stopping: leave the schedule (the runner heals what is left)."""
