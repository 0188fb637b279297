"""The clients: each one a process on the client host, recording a history.

    python -m harness.workload CONFIG.json CLIENT_ID

Three kinds, as the config names them:

* `locker`: takes a plain lock (`POST /locks` with `wait_ms`), does a
  read-modify-write of the key's row in PostgreSQL, and releases. It never
  checks its lease before writing: it stands for the client of Kleppmann's
  example, whose pause the fence must catch.
* `streamer`: holds a streamed lock (`Accept: text/event-stream`) for a few
  seconds, doing the same read-modify-write every few hundred milliseconds.
  It stops when told `lost`, and when no renewal has been heard by the time
  its lease could end (as `lockgate run` does), then closes the
  connection, which releases the lock.
* `buyer`: buys one unit per new user with a fresh `Idempotency-Key`,
  retrying 503s and timeouts on the next gateway with the same key.

The row holds one counter per way of guarding it, each a resource of its
own; every read-modify-write adds one to each:

* `plain`: the value read, plus one, written whatever happened meanwhile.
* `value_w`, fence checked at write: `SET value_w = <read> + 1, fence_w =
  token WHERE fence_w <= token`. A holder whose token is older than the
  last writer's is refused, but an older holder that writes after a newer
  one read and before it wrote is not: the newer one then overwrites it.
* `value_r`, fence raised at every access: the read takes the row `FOR
  UPDATE`, refuses when `fence_r` is above the token and raises `fence_r`
  to it, in one transaction; the write checks it again. A newer holder's
  read shuts out every older holder's write, so no update can be lost
  while tokens are unique.

A client picks its home gateway, and after a 503, a timeout or a refused
connection the next one for a while, as a load balancer with passive health
checks would. Every operation is one history record (see `history.py`).
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import random
import signal
import socket
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import quote, urlsplit

import psycopg

from .history import Writer, now_ms

UNHEALTHY_FOR_S = 2.0


def load_event_stream_parser():
    """The Python client's Server-Sent Events reader, loaded from its one
    file (clients/python/src/lockgate/sse.py, standard library only), so
    that the harness reads streams with the same code as the client without
    importing the client's package and its HTTP dependencies."""
    path = Path(__file__).resolve().parents[2] / "clients" / "python" / "src" / "lockgate" / "sse.py"
    spec = importlib.util.spec_from_file_location("lockgate_sse", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module.EventStreamParser


EventStreamParser = load_event_stream_parser()


class Stop(Exception):
    """SIGTERM: leave the loop (a streamed lock is released on the way out)."""


class Gateways:
    """The gateways a client talks to, with passive health checking."""

    def __init__(self, urls: dict[str, str], home: str):
        names = sorted(urls)
        start = names.index(home)
        self.order = names[start:] + names[:start]
        self.urls = urls
        self.bad_until = {name: 0.0 for name in names}
        self.connections: dict[str, http.client.HTTPConnection] = {}

    def pick(self) -> str:
        now = time.monotonic()
        for name in self.order:
            if self.bad_until[name] <= now:
                return name
        return min(self.order, key=lambda name: self.bad_until[name])

    def mark_bad(self, name: str) -> None:
        self.bad_until[name] = time.monotonic() + UNHEALTHY_FOR_S
        self.drop(name)

    def drop(self, name: str) -> None:
        connection = self.connections.pop(name, None)
        if connection is not None:
            connection.close()

    def connect(self, name: str, timeout: float) -> http.client.HTTPConnection:
        parts = urlsplit(self.urls[name])
        return http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)

    def request(self, name: str, method: str, path: str, body=None, headers=None, timeout: float = 3.0):
        """One request on a kept-alive connection: (status, headers, JSON body or None).
        Raises OSError (timeouts included) and http.client errors."""
        connection = self.connections.get(name)
        if connection is None:
            connection = self.connect(name, timeout)
            self.connections[name] = connection
        connection.timeout = timeout
        if connection.sock is not None:
            connection.sock.settimeout(timeout)
        data = None if body is None else json.dumps(body).encode()
        all_headers = {"content-type": "application/json"} if data is not None else {}
        all_headers.update(headers or {})
        try:
            connection.request(method, path, body=data, headers=all_headers)
            response = connection.getresponse()
            raw = response.read()
        except Exception:
            self.drop(name)
            raise
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        return response.status, response.headers, parsed


def failure(exc: Exception) -> str:
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timeout"
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    return f"error:{type(exc).__name__}"


def outcome_of(status: int, body) -> str:
    slug = ""
    if isinstance(body, dict) and isinstance(body.get("type"), str):
        slug = body["type"].rsplit("/", 1)[-1]
    if status == 503:
        return f"unavailable:{slug}" if slug else "unavailable"
    if status == 409:
        return slug or "conflict"
    if status == 404:
        return slug or "not-found"
    return f"status-{status}"


class Client:
    def __init__(self, config: dict, client_id: str):
        self.config = config
        self.id = client_id
        self.spec = config["clients"][client_id]
        self.deadline = config["deadline"]
        self.history = Writer(Path(config["history_dir"]) / f"{client_id}.jsonl")
        self.gateways = Gateways(config["gateways"], self.spec["home"])
        self.rows = config["keys"]  # a key's row id is its place here
        self.keys = self.spec.get("keys", self.rows)
        self.stop_file = Path(config["stop_file"])
        self.random = random.Random(f"{config['seed']}-{client_id}")
        # Added to every request's timeout where the scenario delays the
        # link between clients and gateways.
        self.slack_s = config.get("slack_s", 0)
        # For showing that the checker catches it: the fence raised at read
        # neither refuses nor raises (`--sabotage fence`).
        self.fence_off = config.get("sabotage") == "fence"
        self.db = None

    def record(self, **fields) -> dict:
        return self.history.write({"client": self.id, **fields})

    def running(self) -> bool:
        return time.time() < self.deadline and not self.stop_file.exists()

    def pg(self):
        if self.db is None or self.db.closed:
            self.db = psycopg.connect(self.config["pg"], autocommit=True, connect_timeout=3)
        return self.db

    # The row: one read and one write per critical section, each of the
    # three counters guarded its own way.

    def read_row(self, key: str, fencing_token: int) -> dict | None:
        row_id = self.rows.index(key)
        start = now_ms()
        try:
            db = self.pg()
            with db.transaction():
                plain, value_w, value_r, fence_r = db.execute(
                    "SELECT plain, value_w, value_r, fence_r FROM counters WHERE id = %s FOR UPDATE",
                    (row_id,)).fetchone()
                raised = self.fence_off or fence_r <= fencing_token
                if raised and not self.fence_off:
                    db.execute("UPDATE counters SET fence_r = %s WHERE id = %s", (fencing_token, row_id))
        except psycopg.Error as exc:
            self.db = None
            self.record(op="read", key=key, start=start, end=now_ms(), fencing_token=fencing_token,
                        outcome=f"db-error:{type(exc).__name__}")
            return None
        return self.record(op="read", key=key, start=start, end=now_ms(), fencing_token=fencing_token,
                           outcome="ok", plain=plain, value_w=value_w, value_r=value_r, fence_r=fence_r,
                           read_r="ok" if raised else "refused")

    def write_row(self, key: str, fencing_token: int, read: dict) -> None:
        row_id = self.rows.index(key)
        start = now_ms()
        done = {}
        try:
            db = self.pg()
            done["fenced_w"] = "ok" if db.execute(
                "UPDATE counters SET value_w = %s, fence_w = %s WHERE id = %s AND fence_w <= %s",
                (read["value_w"] + 1, fencing_token, row_id, fencing_token)).rowcount == 1 else "refused"
            if read["read_r"] != "ok":
                done["fenced_r"] = "shut-out"  # refused at its read: nothing to write
            else:
                guard = "" if self.fence_off else " AND fence_r <= %s"
                params = (read["value_r"] + 1, row_id) + (() if self.fence_off else (fencing_token,))
                done["fenced_r"] = "ok" if db.execute(
                    f"UPDATE counters SET value_r = %s WHERE id = %s{guard}", params).rowcount == 1 else "refused"
            db.execute("UPDATE counters SET plain = %s WHERE id = %s", (read["plain"] + 1, row_id))
            done["plain"] = "ok"
        except psycopg.Error as exc:
            self.db = None
            self.record(op="write", key=key, start=start, end=now_ms(), fencing_token=fencing_token,
                        outcome=f"db-error:{type(exc).__name__}", **done)
            return
        self.record(op="write", key=key, start=start, end=now_ms(), fencing_token=fencing_token,
                    outcome="ok", **done)

    def read_modify_write(self, key: str, fencing_token: int, work_s: float) -> None:
        read = self.read_row(key, fencing_token)
        if read is None:
            return
        time.sleep(work_s)
        self.write_row(key, fencing_token, read)

    def pause(self, low: float, high: float) -> None:
        time.sleep(self.random.uniform(low, high))


class Locker(Client):
    def run(self) -> None:
        while self.running():
            key = self.random.choice(self.keys)
            grant = self.acquire(key)
            if grant is None:
                self.pause(0.05, 0.2)
                continue
            work_s = self.random.uniform(*self.spec["work_ms"]) / 1000
            self.read_modify_write(key, grant["fencing_token"], work_s)
            self.release(key, grant)
            self.pause(0.01, 0.05)

    def acquire(self, key: str) -> dict | None:
        ttl_ms, wait_ms = self.spec["ttl_ms"], self.spec["wait_ms"]
        name = self.gateways.pick()
        start = now_ms()
        try:
            status, headers, body = self.gateways.request(
                name, "POST", "/locks", {"key": key, "ttl_ms": ttl_ms, "wait_ms": wait_ms},
                timeout=wait_ms / 1000 + 3 + self.slack_s)
        except Exception as exc:  # noqa: BLE001 - every failure is an outcome
            self.gateways.mark_bad(name)
            self.record(op="acquire", kind="plain", key=key, gateway=name, start=start, end=now_ms(),
                        outcome=failure(exc), ttl_ms=ttl_ms)
            return None
        end = now_ms()
        if status != 201:
            if status == 503:
                self.gateways.mark_bad(name)
            self.record(op="acquire", kind="plain", key=key, gateway=name, start=start, end=end,
                        outcome=outcome_of(status, body), ttl_ms=ttl_ms)
            return None
        return self.record(op="acquire", kind="plain", key=key, gateway=name, start=start, end=end,
                           outcome="granted", instance=headers.get("x-instance-id"),
                           token=body["token"], fencing_token=body["fencing_token"],
                           expires_at_ms=body["expires_at_ms"], waited_ms=body.get("waited_ms", 0),
                           ttl_ms=ttl_ms, home=self.spec["home"])

    def release(self, key: str, grant: dict) -> None:
        # The release goes where the grant came from first, but any gateway
        # can release it; a partitioned one answers 503 and the next is tried.
        start = now_ms()
        outcome, name = "unreleased", grant["gateway"]
        for _ in range(2):
            try:
                status, _, body = self.gateways.request(
                    name, "DELETE", f"/locks/{quote(key, safe=':')}",
                    headers={"Lock-Token": grant["token"]}, timeout=3 + self.slack_s)
            except Exception as exc:  # noqa: BLE001
                self.gateways.mark_bad(name)
                outcome = failure(exc)
            else:
                outcome = "released" if status in (200, 204) else outcome_of(status, body)
                if status != 503:
                    break
                self.gateways.mark_bad(name)
            if not self.running():
                break
            name = self.gateways.pick()
        self.record(op="release", key=key, gateway=name, start=start, end=now_ms(),
                    fencing_token=grant["fencing_token"], outcome=outcome)


class LeaseClock:
    """When a streamed lease could end at the earliest, on this client's
    clock, whatever the Redis clock says (the rule of the Python client's
    `LeaseClock`): the grant is placed at the earliest moment it could have
    been made (the request's sending plus the time the gateway says it
    waited); a renewal's end is mapped through it, and bounded by the
    renewal's arrival plus the lease."""

    def __init__(self, sent_at_ms: float, grant: dict, granted_at_ms: float):
        self.ttl = grant["ttl_ms"]
        self.anchor = min(granted_at_ms, sent_at_ms + grant.get("waited_ms", 0))
        self.granted_redis = grant["expires_at_ms"] - self.ttl
        self.deadline = min(max(grant["expires_at_ms"], self.anchor + self.ttl), granted_at_ms + self.ttl)

    def renewed(self, expires_at_ms: float, at_ms: float) -> float:
        mapped = self.anchor + (expires_at_ms - self.granted_redis)
        self.deadline = max(self.deadline, min(max(expires_at_ms, mapped), at_ms + self.ttl))
        return self.deadline


class Stream:
    """One streamed lock: the response's events, read by a thread of its own."""

    def __init__(self, client: "Streamer", name: str, key: str, ttl_ms: int, wait_ms: int):
        self.client, self.name, self.key = client, name, key
        self.granted = threading.Event()
        self.done = threading.Event()
        self.grant: dict | None = None
        self.clock: LeaseClock | None = None
        self.renewals = 0
        self.ended_by: str | None = None  # lost, released, closed-by-gateway
        self.ended_at: float | None = None
        self.lost_reason: str | None = None
        self.deadline_when_told: float | None = None
        self.granted_at: float | None = None
        self.sent_at = now_ms()
        parts = urlsplit(client.config["gateways"][name])
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port,
                                                      timeout=wait_ms / 1000 + 3 + client.slack_s)
        try:
            self.connection.request("POST", "/locks", body=json.dumps(
                {"key": key, "ttl_ms": ttl_ms, "wait_ms": wait_ms}).encode(),
                headers={"content-type": "application/json", "accept": "text/event-stream"})
            self.response = self.connection.getresponse()
        except Exception:
            self.connection.close()
            raise
        self.status = self.response.status
        if self.status == 200:
            # A gateway that freezes sends nothing: the reader waits for as
            # long as the holder keeps the connection; closing it ends the read.
            self.connection.sock.settimeout(None)
            threading.Thread(target=self.read_events, daemon=True).start()

    def read_events(self) -> None:
        parser = EventStreamParser()
        try:
            while True:
                chunk = self.response.read1(65536)
                if not chunk:
                    break
                for event in parser.feed(chunk):
                    self.on_event(event.event, json.loads(event.data) if event.data else {}, now_ms())
        except (OSError, ValueError, http.client.HTTPException):
            pass
        finally:
            if self.ended_by is None and not self.done.is_set():
                self.ended_by, self.ended_at = "closed-by-gateway", now_ms()
            self.granted.set()

    def on_event(self, event: str, data: dict, at: float) -> None:
        if event == "acquired":
            self.grant = data
            self.granted_at = at
            self.clock = LeaseClock(self.sent_at, data, at)
            self.granted.set()
        elif event == "renewed" and self.clock is not None:
            self.clock.renewed(data["expires_at_ms"], at)
            self.renewals += 1
            self.client.record(op="renewed", key=self.key, gateway=self.name, start=at, end=at,
                               fencing_token=self.grant["fencing_token"], expires_at_ms=data["expires_at_ms"])
        elif event in ("lost", "released") and self.ended_by is None:
            self.ended_by, self.ended_at = event, at
            self.lost_reason = data.get("reason")
            self.deadline_when_told = self.clock.deadline if self.clock else None

    def close(self) -> None:
        self.done.set()
        try:
            if self.connection.sock is not None:
                self.connection.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.connection.close()


class Streamer(Client):
    def run(self) -> None:
        while self.running():
            key = self.random.choice(self.keys)
            self.hold(key)
            self.pause(0.3, 1.0)

    def hold(self, key: str) -> None:
        ttl_ms, wait_ms = self.spec["ttl_ms"], self.spec["wait_ms"]
        name = self.gateways.pick()
        start = now_ms()
        try:
            stream = Stream(self, name, key, ttl_ms, wait_ms)
        except Exception as exc:  # noqa: BLE001
            self.gateways.mark_bad(name)
            self.record(op="acquire", kind="stream", key=key, gateway=name, start=start, end=now_ms(),
                        outcome=failure(exc), ttl_ms=ttl_ms)
            self.pause(0.1, 0.3)
            return
        if stream.status != 200:
            body = stream.response.read()
            stream.close()
            try:
                body = json.loads(body)
            except ValueError:
                body = None
            if stream.status == 503:
                self.gateways.mark_bad(name)
            self.record(op="acquire", kind="stream", key=key, gateway=name, start=start, end=now_ms(),
                        outcome=outcome_of(stream.status, body), ttl_ms=ttl_ms)
            return
        stream.granted.wait(wait_ms / 1000 + 3 + self.slack_s)
        if stream.grant is None:
            stream.close()
            self.record(op="acquire", kind="stream", key=key, gateway=name, start=start, end=now_ms(),
                        outcome="no-acquired-event", ttl_ms=ttl_ms)
            return
        token = stream.grant["fencing_token"]
        hold_until = time.time() + self.random.uniform(*self.spec["hold_s"])
        self.record(op="acquire", kind="stream", key=key, gateway=name, start=start, end=stream.granted_at,
                    outcome="granted", fencing_token=token, expires_at_ms=stream.grant["expires_at_ms"],
                    waited_ms=stream.grant.get("waited_ms", 0), ttl_ms=ttl_ms,
                    hold_until=round(hold_until * 1000, 3))
        end_reason = "closed"
        try:
            while time.time() < hold_until and self.running():
                if stream.ended_by is not None:
                    end_reason = stream.ended_by
                    break
                if now_ms() >= stream.clock.deadline:
                    # No renewal heard by the lease's end: the lock may be
                    # someone else's now, told or not.
                    end_reason = "silent"
                    break
                self.read_modify_write(key, token, self.random.uniform(*self.spec["work_ms"]) / 1000)
                time.sleep(self.spec["write_every_ms"] / 1000)
        finally:
            ended_at = stream.ended_at if stream.ended_by is not None else now_ms()
            stream.close()
            self.record(op="stream-end", key=key, gateway=name, start=stream.granted_at, end=ended_at,
                        fencing_token=token, outcome=end_reason, told=stream.ended_by,
                        lost_reason=stream.lost_reason, told_at=stream.ended_at,
                        deadline_when_told=stream.deadline_when_told, deadline=stream.clock.deadline,
                        renewals=stream.renewals)


class Buyer(Client):
    def run(self) -> None:
        sku = self.config["sku"]
        interval = 1 / self.spec["rate"]
        n = 0
        while self.running():
            began = time.monotonic()
            n += 1
            self.buy(sku, f"{self.id}-u{n}")
            time.sleep(max(0.0, interval - (time.monotonic() - began)))

    def buy(self, sku: str, user: str) -> None:
        key = str(uuid.uuid4())
        body = {"user_id": user, "quantity": 1}
        start = now_ms()
        attempts = []
        status, order, answer, name = None, None, None, None
        for _ in range(4):
            name = self.gateways.pick()
            try:
                status, _, answer = self.gateways.request(
                    name, "POST", f"/seckill/{sku}/orders", body, {"Idempotency-Key": key}, timeout=3 + self.slack_s)
            except Exception as exc:  # noqa: BLE001
                self.gateways.mark_bad(name)
                attempts.append([name, failure(exc)])
                status = None
            else:
                attempts.append([name, status])
                if status in (200, 201):
                    order = answer
                    break
                if status != 503:
                    break
                self.gateways.mark_bad(name)
            if not self.running():
                break
            time.sleep(0.1)
        if status in (200, 201):
            outcome = "confirmed"
        elif status is None or status == 503:
            outcome = "indeterminate"
        else:
            outcome = outcome_of(status, answer)
        self.record(op="purchase", key=key, user=user, start=start, end=now_ms(), outcome=outcome,
                    status=status, attempts=attempts, gateway=name, quantity=1,
                    order_id=order.get("order_id") if order else None)


KINDS = {"locker": Locker, "streamer": Streamer, "buyer": Buyer}


def main(argv: list[str]) -> int:
    config = json.loads(Path(argv[0]).read_text())
    client_id = argv[1]

    def stop(*_):
        raise Stop()

    signal.signal(signal.SIGTERM, stop)
    client = KINDS[config["clients"][client_id]["kind"]](config, client_id)
    try:
        client.run()
    except (Stop, KeyboardInterrupt):
        pass
    finally:
        client.history.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
