"""What a schedule reads of a lock's fair queue in Redis (`lua/lib/queue.lua`):
which waiter a place freed now would go to, and the grants the queue
publishes to the waiters' gateways.

A waiter's entry names its gateway as the queue knows it, `<instance
id>#<nonce of that start>`, so a gateway started again under its id is
another instance to the queue. A grant from the queue is published on
`<prefix>granted:{<key>}:<instance>` as `<waiter id> <fencing token>
<lease end> [outright] [traceparent]`: `outright` when the waiter was
granted its whole lease in one write, else it was offered the place, to
claim. The listener hears every such message of one lock (a pattern
subscription on the primary), so the checker knows, of each grant no
client ever heard of, to whom it went, how long it stood and whether it
was made outright.

Sentinel layout only: in a Redis Cluster the queue publishes to sharded
channels (SPUBLISH), which a pattern cannot follow.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Callable

from . import resp
from .history import Writer, now_ms
from .netns import netns_executor
from .topology import REDIS_PORT, HarnessError, World

PREFIX = "lockgate:"


def gateway_of(instance: str) -> str:
    """The gateway (`--instance-id`) of an instance as the queue names it."""
    return instance.split("#", 1)[0]


def next_served(world: World, key: str) -> dict | None:
    """The waiter of `key`'s queue that a place freed now would go to, as
    its entry says (with its `id`), or None: the first whose wait is not
    over and whose instance's presence stands (the queue passes over the
    others, a dead gateway's among them, which keep their places)."""
    primary = world.primary_host()
    if primary is None:
        return None
    ids = world.redis(primary, "ZRANGE", f"{PREFIX}queue:{{{key}}}", 0, -1) or []
    flat = world.redis(primary, "HGETALL", f"{PREFIX}waiters:{{{key}}}") or []
    fields = dict(zip(flat[0::2], flat[1::2]))
    # Every host reads the kernel's clock, Redis too (its clock is moved
    # only where a scenario says so).
    now = now_ms()
    for waiter_id in ids:
        if waiter_id not in fields:
            continue
        waiter = json.loads(fields[waiter_id])
        if waiter["deadline"] >= now and int(fields.get(f"@{waiter['inst']}", 0)) >= now:
            waiter["id"] = waiter_id
            return waiter
    return None


class GrantListener:
    """Hears every grant the queue of `key` publishes, records each as a
    `queue-grant` record of its own history file, and, when armed, calls
    back at the first grant to a waiter of one gateway (from its own
    thread, at once: Redis sends the message to the gateway, a subscriber
    of the channel itself, just before this pattern's subscriber)."""

    def __init__(self, world: World, key: str, history_dir: Path):
        self.world, self.key = world, key
        self.writer = Writer(history_dir / "queue-grants.jsonl")
        self.lock = threading.Lock()
        self.armed: tuple[str, Callable[[dict], None]] | None = None
        self.sock: socket.socket | None = None
        self.subscribed = threading.Event()
        self.executor = netns_executor(world.hosts["cl"].ns, workers=1)

    def start(self) -> None:
        primary = self.world.primary_host()
        if primary is None:
            raise HarnessError("no sentinel names a primary")
        self.executor.submit(self._listen, self.world.ip(primary))
        if not self.subscribed.wait(10):
            raise HarnessError(f"could not subscribe to the grants of {self.key}")

    def arm(self, gateway: str, callback: Callable[[dict], None]) -> None:
        with self.lock:
            self.armed = (gateway, callback)

    def disarm(self) -> None:
        with self.lock:
            self.armed = None

    def stop(self) -> None:
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.executor.shutdown(wait=True)
        self.writer.close()

    def _listen(self, host: str) -> None:
        pattern = f"{PREFIX}granted:{{{self.key}}}:*"
        self.sock = socket.create_connection((host, REDIS_PORT), timeout=5)
        self.sock.settimeout(None)  # a quiet lock sends nothing for a while
        stream = self.sock.makefile("rb")
        self.sock.sendall(resp.encode("PSUBSCRIBE", pattern))
        try:
            while True:
                message = resp.read(stream)
                if message[0] == "psubscribe":
                    self.subscribed.set()
                elif message[0] == "pmessage":
                    self.heard(message[2], message[3], now_ms())
        except (OSError, resp.RedisError):
            return  # stopped: the socket was shut down

    def heard(self, channel: str, payload: str, at: float) -> None:
        instance = channel.removeprefix(f"{PREFIX}granted:{{{self.key}}}:")
        parts = payload.split(" ")
        if len(parts) < 3 or parts[1] == "ready":
            return  # a batch's waiter told its lock is ready: no grant
        record = self.writer.write({
            "client": "queue", "op": "queue-grant", "key": self.key, "instance": instance,
            "gateway": gateway_of(instance), "waiter": parts[0], "fencing_token": int(parts[1]),
            "expires_at_ms": int(parts[2]), "outright": len(parts) > 3 and parts[3] == "outright",
            "start": at, "end": at})
        with self.lock:
            armed = self.armed
            if armed is not None and armed[0] == record["gateway"]:
                self.armed = None
            else:
                armed = None
        if armed is not None:
            armed[1](record)
