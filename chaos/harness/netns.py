"""Test hosts made of network namespaces, and the processes that run on them.

A run owns a bridge in a namespace of its own and one namespace per host,
each joined to the bridge by a veth pair (`eth0` inside the host). Nothing is
added to the root namespace, and the hosts have no default route, so their
traffic stays between them. Namespace names are `lgc<run id>-<host>`; the run
id is the runner's pid, so two live runs never collide and the leftovers of
a run that died can be told apart from a live one's.

Every process of a host is started with `ip netns exec`. Removing a host
kills whatever still runs in its namespace (`ip netns pids`), so nothing
started there can outlive the run, whoever started it.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import re
import signal
import subprocess
import time
from pathlib import Path

PREFIX = "lgc"
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def sh(*argv: str, check: bool = True, timeout: float = 30, input: str | None = None) -> subprocess.CompletedProcess:
    """Runs a command to completion, its output captured."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def namespaces() -> list[str]:
    listed = sh("ip", "netns", "list").stdout.splitlines()
    return [line.split()[0] for line in listed if line.strip()]


def pids_in(ns: str) -> list[int]:
    done = sh("ip", "netns", "pids", ns, check=False)
    return [int(pid) for pid in done.stdout.split()]


def remove_namespace(ns: str) -> None:
    """Kills everything running in `ns`, then deletes it (and its links)."""
    for _ in range(50):
        pids = pids_in(ns)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)  # ends stopped processes too
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    sh("ip", "netns", "delete", ns, check=False)


def cleanup(run_id: str | None = None, stale: bool = False) -> list[str]:
    """Removes the namespaces of one run, of every dead run (`stale`), or of
    every run (neither given). Returns the names removed."""
    removed = []
    pattern = re.compile(rf"^{PREFIX}(\d+)-")
    for ns in namespaces():
        match = pattern.match(ns)
        if not match:
            continue
        owner = match.group(1)
        if run_id is not None and owner != run_id:
            continue
        if stale and alive(int(owner)):
            continue
        # Hosts first: their veth pairs go with them, then the bridge.
        removed.append(ns)
    for ns in sorted(removed, key=lambda name: name.endswith("-net")):
        remove_namespace(ns)
    return removed


def alive(pid: int) -> bool:
    """Is `pid` a running harness (not a zombie, not a reused pid)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state != "Z" and b"harness" in cmdline


def netns_executor(ns: str, workers: int = 4) -> concurrent.futures.ThreadPoolExecutor:
    """Threads that live in `ns`: every socket they open belongs to it.

    setns() moves only the calling thread, so the runner itself stays in the
    root namespace while these threads talk to the hosts. (The root namespace
    must not be used for that: its default route may lead anywhere.)
    """

    def enter() -> None:
        fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns into {ns}: {os.strerror(err)}")
        finally:
            os.close(fd)

    return concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix=ns, initializer=enter)


class Process:
    """A process on a host: started, paused, resumed, killed, restarted."""

    def __init__(self, host: "Host", name: str, argv: list[str], log: Path, env: dict | None, cwd: str | None):
        self.host, self.name, self.argv, self.log, self.env, self.cwd = host, name, argv, log, env, cwd
        self.popen: subprocess.Popen | None = None
        self.ended_on_purpose = False  # stopped or killed by the harness itself
        self.start()

    def start(self) -> None:
        self.ended_on_purpose = False
        with open(self.log, "ab") as out:
            # `ip netns exec` execs the command in place, so the pid is the
            # command's own (SIGSTOP reaches it, not a wrapper). A session of
            # its own keeps a terminal's Ctrl-C away from it: the runner stops
            # it, in order.
            self.popen = subprocess.Popen(
                ["ip", "netns", "exec", self.host.ns, *self.argv],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=self.env, cwd=self.cwd, start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, signum: int) -> None:
        if self.running():
            os.kill(self.pid, signum)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def kill(self, group: bool = False) -> None:
        """SIGKILL; with `group`, to every process of its process group (it
        leads one: a postmaster's backends go with it, as in a crash)."""
        self.ended_on_purpose = True
        if group and self.running():
            os.killpg(self.pid, signal.SIGKILL)
        else:
            self.signal(signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait(10)

    def stop(self, grace: float = 5) -> None:
        """SIGTERM (after SIGCONT, should it be paused), SIGKILL after `grace`."""
        if not self.running():
            return
        self.ended_on_purpose = True
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill()

    def restart(self) -> None:
        if self.running():
            self.kill()
        self.start()


class Host:
    """One namespace with one address on the bridge."""

    def __init__(self, name: str, ns: str, ip: str, logs: Path):
        self.name, self.ns, self.ip, self.logs = name, ns, ip, logs
        self.processes: list[Process] = []

    def run(self, *argv: str, check: bool = True, timeout: float = 30,
            input: str | None = None) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", self.ns, *argv, check=check, timeout=timeout, input=input)

    def spawn(self, name: str, argv: list[str], env: dict | None = None, cwd: str | None = None) -> Process:
        process = Process(self, name, argv, self.logs / f"{name}.log", env, cwd)
        self.processes.append(process)
        return process

    def __repr__(self) -> str:
        return f"Host({self.name} {self.ip})"


class Network:
    """The bridge and the hosts of one run."""

    def __init__(self, run_id: str, subnet: str, logs: Path):
        self.run_id, self.subnet, self.logs = run_id, subnet, logs
        self.bridge_ns = f"{PREFIX}{run_id}-net"
        self.hosts: dict[str, Host] = {}

    def create(self) -> None:
        sh("ip", "netns", "add", self.bridge_ns)
        sh("ip", "-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.bridge_ns, "link", "set", "br0", "up")

    def add_host(self, name: str, octet: int) -> Host:
        ns = f"{PREFIX}{self.run_id}-{name}"
        ip = f"{self.subnet}.{octet}"
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        # Made inside the bridge's namespace with its peer placed in the
        # host's, so no link ever appears in the root namespace.
        sh("ip", "-n", self.bridge_ns, "link", "add", f"v-{name}", "type", "veth",
           "peer", "name", "eth0", "netns", ns)
        sh("ip", "-n", self.bridge_ns, "link", "set", f"v-{name}", "master", "br0", "up")
        sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        host = Host(name, ns, ip, self.logs)
        self.hosts[name] = host
        return host

    def destroy(self) -> None:
        """Stops every process in order, then removes every namespace."""
        for host in self.hosts.values():
            for process in host.processes:
                try:
                    process.stop(grace=3)
                except Exception:  # noqa: BLE001 - removal below kills it anyway
                    pass
        for host in self.hosts.values():
            remove_namespace(host.ns)
        remove_namespace(self.bridge_ns)
        self.hosts.clear()
