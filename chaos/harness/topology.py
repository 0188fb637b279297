"""The hosts of a scenario and what runs on them.

Two layouts, each node on a host of its own (10.77.0.0/24):

    sentinel   r1 .11 (primary)  r2 .12, r3 .13 (replicas: one or two)
               s1-s3 .21-.23 (sentinels)
    cluster    c1-c6 .61-.66 (three primaries with a replica each)
    both       gw1-gw3 .31-.33 (gateways, :8080)  cl .41 (clients)  pg .51 (PostgreSQL)

A `Setup` says what a scenario changes: replicas, replica confirmation,
Redis persistence, Redis clocks moved (`clockshift.c`), an order hand-off
into PostgreSQL. A `World` builds one layout, starts every process, and
takes it all down again. The runner reaches the hosts through threads
placed in the client host's namespace (`World.call`), as a client would.
"""

from __future__ import annotations

import glob
import http.client
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

from . import resp
from .netns import Host, Network, Process, netns_executor, sh

SUBNET = "10.77.0"
OCTETS = {
    "r1": 11, "r2": 12, "r3": 13, "s1": 21, "s2": 22, "s3": 23,
    "gw1": 31, "gw2": 32, "gw3": 33, "cl": 41, "pg": 51,
    "c1": 61, "c2": 62, "c3": 63, "c4": 64, "c5": 65, "c6": 66,
}
GATEWAYS = ["gw1", "gw2", "gw3"]
SENTINELS = ["s1", "s2", "s3"]
CLUSTER_NODES = ["c1", "c2", "c3", "c4", "c5", "c6"]
REDIS_PORT = 6379
SENTINEL_PORT = 26379
GATEWAY_PORT = 8080
AUDIT_PORT = 8090
PROBE_PORT = 8089
SERVICE = "mymaster"


class HarnessError(Exception):
    """The harness itself failed (not the system under test)."""


@dataclass
class Setup:
    """What a scenario's world is made of, beyond its layout."""

    layout: str = "sentinel"  # or "cluster"
    replicas: int = 1  # Sentinel layout: r2, or r2 and r3
    wait_replicas: int = 0  # --redis-wait-replicas
    skew_ms: dict[str, int] = field(default_factory=dict)  # Redis host -> its clock's offset
    aof: bool = False  # the shipped persistence: appendonly yes, appendfsync always
    handoff: bool = False  # the gateways store the sale's orders in PostgreSQL


@dataclass
class RunContext:
    """What every scenario of one run shares."""

    run_id: str
    binary: Path
    python: Path  # the venv's, with psycopg
    chaos_dir: Path  # put on PYTHONPATH for the client processes
    workdir: Path  # this run's scratch space, removed at exit
    out_dir: Path  # results, pictures and the last logs
    admin_token: str
    sentinel_mode: str = "auto"  # auto, yes, no
    sentinel_support: bool | None = None
    pg_template: Path | None = None
    clockshift: Path | None = None
    sabotage: str | None = None  # "fence" or "confirm": see `python -m harness run --help`
    stamp: str = ""  # the run's commit and date, on every timeline

    def clockshift_library(self) -> Path:
        """clockshift.c built once per run (a C compiler is all it needs)."""
        if self.clockshift is None:
            library = self.workdir / "clockshift.so"
            sh("cc", "-shared", "-fPIC", "-O2", "-o", str(library), str(self.chaos_dir / "harness" / "clockshift.c"),
               timeout=120)
            library.chmod(0o755)
            self.clockshift = library
        return self.clockshift

    def postgres_bin(self, name: str) -> str:
        found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                       key=lambda path: int(path.split("/")[4]))
        if not found:
            raise HarnessError(f"PostgreSQL's {name} is not installed")
        return found[-1]

    def prepare_postgres(self) -> Path:
        """initdb once per run; each world starts from a copy."""
        if self.pg_template is None:
            template = self.workdir / "pg-template"
            sh("install", "-d", "-o", "postgres", "-g", "postgres", "-m", "700", str(template))
            as_postgres = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]
            sh(*as_postgres, self.postgres_bin("initdb"), "-D", str(template), "-U", "postgres",
               "-A", "trust", "--no-sync", "-E", "UTF8", timeout=120)
            with open(template / "pg_hba.conf", "a") as hba:
                hba.write(f"host all all {SUBNET}.0/24 trust\n")
            self.pg_template = template
        return self.pg_template


def http_call(url: str, method: str = "GET", body=None, headers=None, timeout: float = 5.0):
    """(status, JSON body or None) of one request; for the runner, not the clients."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        all_headers = {"content-type": "application/json"} if data is not None else {}
        all_headers.update(headers or {})
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request(method, path, body=data, headers=all_headers)
        response = connection.getresponse()
        raw = response.read()
        try:
            return response.status, json.loads(raw) if raw else None
        except ValueError:
            return response.status, None
    finally:
        connection.close()


def key_slot(key: str) -> int:
    """Redis Cluster's slot of a key: CRC16 (XMODEM) of its hash tag, mod 16384."""
    opening = key.find("{")
    if opening >= 0:
        closing = key.find("}", opening + 1)
        if closing > opening + 1:
            key = key[opening + 1 : closing]
    crc = 0
    for byte in key.encode():
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1) & 0xFFFF
    return crc % 16384


@dataclass
class World:
    """One scenario's hosts, the processes on them, and the questions the
    runner asks them (through the client host's namespace)."""

    ctx: RunContext
    scenario: str
    setup: Setup
    net: Network | None = None
    hosts: dict[str, Host] = field(default_factory=dict)
    procs: dict[str, Process] = field(default_factory=dict)
    follows_failover: bool = False
    notes: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.dir = self.ctx.workdir / self.scenario
        self.logs = self.ctx.out_dir / "logs" / self.scenario
        self.executor = None
        self.layout = self.setup.layout

    @property
    def redis_hosts(self) -> list[str]:
        if self.layout == "cluster":
            return list(CLUSTER_NODES)
        return ["r1", "r2", "r3"][: 1 + self.setup.replicas]

    # Building and taking down.

    def build(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o755)  # postgres must reach its data directory
        if self.logs.exists():
            shutil.rmtree(self.logs)
        self.logs.mkdir(parents=True)
        self.net = Network(self.ctx.run_id, SUBNET, self.logs)
        self.net.create()
        names = GATEWAYS + ["cl", "pg"] + self.redis_hosts + (SENTINELS if self.layout == "sentinel" else [])
        for name in names:
            self.hosts[name] = self.net.add_host(name, OCTETS[name])
        self.executor = netns_executor(self.hosts["cl"].ns)
        self.start_postgres()
        if self.layout == "sentinel":
            self.start_sentinel_layout()
        else:
            self.start_cluster_layout()
        self.start_gateways()

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)
        if self.net is not None:
            self.net.destroy()
        shutil.rmtree(self.dir, ignore_errors=True)

    def call(self, fn, *args, **kwargs):
        """Runs fn on a thread inside the client host's network namespace."""
        return self.executor.submit(fn, *args, **kwargs).result(60)

    def exited(self) -> list[str]:
        """The processes of this world that ended without the harness ending
        them, with how: a crash, or something outside killing them."""
        ended = []
        for name, process in self.procs.items():
            if process.ended_on_purpose or name.startswith("client-"):
                continue
            if process.popen is not None and process.popen.poll() is not None:
                code = process.popen.returncode
                ended.append(f"{name} ({'signal ' + str(-code) if code < 0 else 'exit ' + str(code)})")
        return ended

    def ip(self, host: str) -> str:
        return self.hosts[host].ip

    def spawn(self, host: str, name: str, argv: list[str], **kwargs) -> Process:
        process = self.hosts[host].spawn(name, argv, **kwargs)
        self.procs[name] = process
        return process

    def wait_until(self, what: str, check, timeout: float, every: float = 0.2):
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            try:
                result = check()
                if result:
                    return result
            except HarnessError:
                raise
            except Exception as exc:  # noqa: BLE001 - retried until the deadline
                last_error = exc
            time.sleep(every)
        raise HarnessError(f"{self.scenario}: timed out waiting for {what}"
                           + (f" (last error: {last_error})" if last_error else ""))

    def redis(self, host: str, *args, port: int = REDIS_PORT, timeout: float = 2.0):
        return self.call(resp.command, self.ip(host), port, *args, timeout=timeout)

    # PostgreSQL.

    @property
    def pg_dsn(self) -> str:
        return f"host={self.ip('pg')} port=5432 user=postgres dbname=postgres connect_timeout=3"

    def start_postgres(self) -> None:
        data = self.dir / "pg"
        sh("cp", "-a", str(self.ctx.prepare_postgres()), str(data))
        self.spawn("pg", "postgres", [
            "setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups",
            self.ctx.postgres_bin("postgres"), "-D", str(data),
            "-c", f"listen_addresses={self.ip('pg')}", "-c", "port=5432",
            "-c", f"unix_socket_directories={data}",
            # Durable commits (the defaults, said aloud): the hand-off's
            # exactly-once rests on them, and PostgreSQL gets killed.
            "-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "full_page_writes=on",
            "-c", "shared_buffers=32MB", "-c", "max_connections=50",
        ])
        self.wait_postgres()

    def wait_postgres(self) -> None:
        self.wait_until("PostgreSQL", lambda: self.call(self._pg_ping), 60)

    @property
    def pg_url(self) -> str:
        return f"postgres://postgres@{self.ip('pg')}:5432/postgres"

    def _pg_ping(self) -> bool:
        with psycopg.connect(self.pg_dsn) as connection:
            connection.execute("SELECT 1")
        return True

    def pg_execute(self, sql: str, params=None, fetch: bool = False):
        def run():
            with psycopg.connect(self.pg_dsn, autocommit=True) as connection:
                cursor = connection.execute(sql, params)
                return cursor.fetchall() if fetch else None
        return self.call(run)

    # Redis with Sentinel.

    def redis_argv(self, directory: Path, *extra: str) -> list[str]:
        directory.mkdir(parents=True, exist_ok=True)
        # The shipped persistence (redis/redis.conf) where a scenario kills
        # Redis: a killed node comes back with what it answered.
        persistence = (["--appendonly", "yes", "--appendfsync", "always", "--aof-load-truncated", "yes"]
                       if self.setup.aof else ["--appendonly", "no"])
        return ["redis-server", "--bind", "0.0.0.0", "--port", str(REDIS_PORT), "--protected-mode", "no",
                "--save", "", *persistence, "--dir", str(directory), "--logfile", "", *extra]

    def redis_env(self, host: str) -> dict | None:
        """A Redis server's environment: with its clock moved when the
        scenario moves it."""
        if host not in self.setup.skew_ms:
            return None
        self.set_clock(host, self.setup.skew_ms[host])
        return {**os.environ, "LD_PRELOAD": str(self.ctx.clockshift_library()),
                "CHAOS_CLOCK_OFFSET_FILE": str(self.clock_file(host))}

    def clock_file(self, host: str) -> Path:
        return self.dir / f"{host}.clock-offset"

    def set_clock(self, host: str, offset_ms: int) -> None:
        """Sets a clock-shifted Redis server's offset (it reads it within 100 ms)."""
        path = self.clock_file(host)
        path.write_text(f"{offset_ms}\n")
        path.chmod(0o644)

    def spawn_redis(self, host: str, *extra: str) -> Process:
        return self.spawn(host, f"redis-{host}", self.redis_argv(self.dir / host, *extra), env=self.redis_env(host))

    def start_sentinel_layout(self) -> None:
        primary = self.ip("r1")
        self.spawn_redis("r1")
        for host in self.redis_hosts[1:]:
            self.spawn_redis(host, "--replicaof", primary, str(REDIS_PORT))
        for name in SENTINELS:
            directory = self.dir / name
            directory.mkdir(parents=True, exist_ok=True)
            conf = directory / "sentinel.conf"
            # Quick to notice and fail over: the scenarios wait for it.
            conf.write_text("\n".join([
                f"port {SENTINEL_PORT}", "bind 0.0.0.0", "protected-mode no", f"dir {directory}",
                f"sentinel monitor {SERVICE} {primary} {REDIS_PORT} 2",
                f"sentinel down-after-milliseconds {SERVICE} 1000",
                f"sentinel failover-timeout {SERVICE} 6000",
                f"sentinel parallel-syncs {SERVICE} 1", "",
            ]))
            self.spawn(name, f"sentinel-{name}", ["redis-sentinel", str(conf)])
        for host in self.redis_hosts[1:]:
            self.wait_until(f"{host} to sync", lambda host=host: self.redis_role(host)[0::3] == ["slave", "connected"],
                            20)
        # A sentinel learns of the others from their hellos (every 2 s);
        # until all know each other a failover cannot be agreed on.
        replicas = len(self.redis_hosts) - 1
        for name in SENTINELS:
            self.wait_until(f"{name} to know the others", lambda name=name: len(
                self.redis(name, "SENTINEL", "sentinels", SERVICE, port=SENTINEL_PORT)) >= 2
                and len(self.redis(name, "SENTINEL", "replicas", SERVICE, port=SENTINEL_PORT)) >= replicas, 20)

    def redis_role(self, host: str) -> list:
        return self.redis(host, "ROLE")

    def sentinel_url(self) -> str:
        sentinels = ",".join(f"{self.ip(name)}:{SENTINEL_PORT}" for name in SENTINELS)
        return f"redis+sentinel://{sentinels}/{SERVICE}"

    def replicas_online(self) -> int:
        """Replicas the primary of now streams to (INFO replication, state=online)."""
        primary = self.primary_host()
        if primary is None:
            return 0
        info = self.redis(primary, "INFO", "replication")
        return sum(1 for line in info.splitlines() if line.startswith("slave") and "state=online" in line)

    def host_of(self, ip: str | None) -> str | None:
        return next((name for name, host in self.hosts.items() if host.ip == ip), None)

    def primary_host(self) -> str | None:
        """The host the sentinels name as primary now."""
        return self.host_of(self.current_primary())

    def current_primary(self) -> str | None:
        """The primary the sentinels name now (an address), asking each in turn."""
        for name in SENTINELS:
            try:
                address = self.redis(name, "SENTINEL", "get-master-addr-by-name", SERVICE, port=SENTINEL_PORT)
                if address:
                    return address[0]
            except Exception:  # noqa: BLE001 - a partitioned sentinel: ask the next
                continue
        return None

    # Redis Cluster.

    def start_cluster_layout(self) -> None:
        for name in CLUSTER_NODES:
            self.spawn_redis(name, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                             "--cluster-node-timeout", "2000",
                             # Slots of a live primary keep being served while another's fail.
                             "--cluster-require-full-coverage", "no")
        for name in CLUSTER_NODES:
            self.wait_until(f"{name} to start", lambda name=name: self.redis(name, "PING") == "PONG", 10)
        addresses = [f"{self.ip(name)}:{REDIS_PORT}" for name in CLUSTER_NODES]
        self.hosts["cl"].run("redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "1",
                             "--cluster-yes", timeout=60)
        self.wait_until("the cluster to be ok", self.cluster_ready, 30)

    def cluster_nodes(self, asking: str | None = None) -> list[dict]:
        """CLUSTER NODES as dicts: host, role, link, slots, id, master id."""
        for name in [asking] if asking else CLUSTER_NODES:
            try:
                text = self.redis(name, "CLUSTER", "NODES")
                break
            except Exception:  # noqa: BLE001 - a killed node: ask another
                continue
        else:
            raise HarnessError("no cluster node answers")
        by_ip = {host.ip: name for name, host in self.hosts.items()}
        nodes = []
        for line in text.splitlines():
            parts = line.split()
            flags = parts[2].split(",")
            nodes.append({
                "id": parts[0], "host": by_ip.get(parts[1].split(":")[0]),
                "role": "master" if "master" in flags else "replica",
                "failed": "fail" in flags or "fail?" in flags,
                "master_id": parts[3], "link": parts[7], "slots": parts[8:],
            })
        return nodes

    def cluster_ready(self) -> bool:
        for name in CLUSTER_NODES:
            if "cluster_state:ok" not in self.redis(name, "CLUSTER", "INFO"):
                return False
        nodes = self.cluster_nodes()
        masters = [node for node in nodes if node["role"] == "master" and node["slots"]]
        replicas = [node for node in nodes if node["role"] == "replica" and node["link"] == "connected"]
        return len(masters) == 3 and len(replicas) == 3

    def slot_owner(self, lock_key: str) -> str | None:
        """The host of the primary serving a lock key's slot (its hash tag is
        the key), or None while no live primary does."""
        slot = key_slot(lock_key)
        for node in self.cluster_nodes():
            if node["role"] != "master" or node["failed"]:
                continue
            for span in node["slots"]:
                if span.startswith("["):
                    continue
                low, _, high = span.partition("-")
                if int(low) <= slot <= int(high or low):
                    return node["host"]
        return None

    # Gateways.

    def redis_target(self, for_audit: bool = False) -> list[str]:
        if self.layout == "cluster":
            nodes = ",".join(f"redis://{self.ip(name)}:{REDIS_PORT}" for name in CLUSTER_NODES)
            return ["--redis-cluster-nodes", nodes]
        if self.ctx.sentinel_support:
            return ["--redis-url", self.sentinel_url()]
        primary = self.current_primary() if for_audit else None
        return ["--redis-url", f"redis://{primary or self.ip('r1')}:{REDIS_PORT}"]

    def gateway_argv(self, name: str, port: int, target: list[str], serving: bool = True) -> list[str]:
        """A gateway's command line; `serving` for the scenario's gateways
        (with its replica confirmation and hand-off), not the probes."""
        argv = [str(self.ctx.binary), "serve", "--listen", f"0.0.0.0:{port}", "--instance-id", name,
                "--admin-token", self.ctx.admin_token, "--redis-timeout-ms", "1000",
                "--stream-keep-alive-ms", "1000", "--seckill-rate", "0", *target]
        if not serving:
            return argv
        # `--sabotage confirm` starts them without it, to show the verdicts fail.
        if self.setup.wait_replicas and self.ctx.sabotage != "confirm":
            argv += ["--redis-wait-replicas", str(self.setup.wait_replicas)]
        if self.setup.handoff:
            argv += ["--orders-database", self.pg_url, "--claim-idle-ms", "3000"]
        return argv

    def gateway_url(self, name: str, port: int = GATEWAY_PORT) -> str:
        return f"http://{self.ip(name)}:{port}"

    def ready(self, url: str) -> bool:
        try:
            return self.call(http_call, f"{url}/readyz", timeout=3)[0] == 200
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def wait_ready(self, process: Process, url: str) -> None:
        def check() -> bool:
            if not process.running():
                tail = process.log.read_text(errors="replace")[-600:]
                raise HarnessError(f"{process.name} exited ({process.popen.returncode}):\n{tail}")
            return self.ready(url)

        self.wait_until(f"{process.name} to be ready", check, 20)

    def start_gateways(self) -> None:
        if self.layout == "sentinel":
            self.detect_sentinel_support()
            self.follows_failover = bool(self.ctx.sentinel_support)
        target = self.redis_target()
        for name in GATEWAYS:
            self.spawn(name, f"lockgate-{name}", self.gateway_argv(name, GATEWAY_PORT, target),
                       env=self.gateway_env())
        for name in GATEWAYS:
            self.wait_ready(self.procs[f"lockgate-{name}"], self.gateway_url(name))

    def gateway_env(self) -> dict:
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "RUST_LOG": "info", "NO_COLOR": "1"}

    def detect_sentinel_support(self) -> None:
        """Does this binary take a redis+sentinel:// URL? Start one and see."""
        ctx = self.ctx
        if ctx.sentinel_support is not None:
            return
        if ctx.sentinel_mode in ("yes", "no"):
            ctx.sentinel_support = ctx.sentinel_mode == "yes"
            return
        probe = self.spawn("gw3", "lockgate-sentinel-probe", self.gateway_argv(
            "probe", PROBE_PORT, ["--redis-url", self.sentinel_url()], serving=False), env=self.gateway_env())
        url = self.gateway_url("gw3", PROBE_PORT)
        deadline = time.monotonic() + 10
        supported = False
        while time.monotonic() < deadline and probe.running():
            if self.ready(url):
                supported = True
                break
            time.sleep(0.2)
        probe.stop()
        probe.ended_on_purpose = True  # refusing the URL is an answer, not a crash
        ctx.sentinel_support = supported

    def start_audit_gateway(self) -> str:
        """A fresh gateway on the primary of now, to read what Redis holds."""
        audit = self.spawn("gw3", "lockgate-audit", self.gateway_argv(
            "audit", AUDIT_PORT, self.redis_target(for_audit=True), serving=False), env=self.gateway_env())
        url = self.gateway_url("gw3", AUDIT_PORT)
        self.wait_ready(audit, url)
        return url

    # The order hand-off.

    def reconcile(self, sku: str) -> tuple[int, str]:
        """`lockgate orders reconcile` from the client host: (exit status, output)."""
        done = self.hosts["cl"].run(str(self.ctx.binary), "orders", "reconcile", "--database", self.pg_url,
                                    "--sku", sku, *self.redis_target(for_audit=True), check=False, timeout=60)
        return done.returncode, (done.stdout + done.stderr)

    def batch_being_stored(self) -> bool:
        """Is a hand-off worker's INSERT of a batch running in PostgreSQL now?"""
        rows = self.pg_execute("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                               "AND query LIKE 'INSERT INTO orders%%'", fetch=True)
        return rows[0][0] > 0

