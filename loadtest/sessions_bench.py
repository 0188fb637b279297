"""Sessions and batches under measurement: a keepalive's Redis commands, the release of an expired session's locks, deadlock detection's latency, and a randomized run that checks mutual exclusion and every deadlock refusal.

    sessions_bench.py keepalive --url URL --redis-port PORT [--locks 1,100,10000]
    sessions_bench.py expiry    --keeper-url URL --keeper-pid PID --url URL [--locks 1000]
    sessions_bench.py deadlock  --url URL [--rounds 20]
    sessions_bench.py random    --url URL --kind batches|sessions [--seconds 60] [--clients 16]

Each mode prints one JSON line. Python's standard library only (one
keep-alive connection per client thread), so its own speed is no figure:
the figures are Redis's commands, times measured on the gateway's answers,
and the checks.
"""

import argparse
import http.client
import json
import os
import random
import signal
import statistics
import subprocess
import threading
import time
import urllib.parse


class Gateway:
    """One keep-alive HTTP connection to a gateway."""

    def __init__(self, url, timeout=120):
        parsed = urllib.parse.urlparse(url)
        self.conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=timeout)

    def call(self, method, path, body=None, headers=None):
        headers = dict(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        self.conn.request(method, path, body=data, headers=headers)
        response = self.conn.getresponse()
        raw = response.read()
        return response.status, (json.loads(raw) if raw else None)

    def release(self, key, token):
        status, body = self.call("DELETE", f"/locks/{key}", headers={"Lock-Token": token})
        if status not in (200, 204):
            raise RuntimeError(f"release of {key}: {status} {body}")


def now_ms():
    return time.time() * 1000


def pct(values, q):
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))], 2)


def open_session(gateway, ttl_ms=600000):
    status, body = gateway.call("POST", "/sessions", {"ttl_ms": ttl_ms})
    assert status == 201, (status, body)
    return body["id"]


def attach(url, session, keys, threads=4):
    """Takes every key in the session, 64 a batch, on a few connections."""
    batches = [keys[i:i + 64] for i in range(0, len(keys), 64)]

    def work(part):
        gateway = Gateway(url)
        for batch in part:
            status, body = gateway.call("POST", "/locks/batch", {
                "locks": [{"key": key} for key in batch], "session": session})
            assert status == 201, (status, body)

    workers = [threading.Thread(target=work, args=(batches[i::threads],)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


# --- keepalive: Redis commands per keepalive with 1, 100, 10 000 locks ---

def commandstats(port):
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "commandstats"],
                         capture_output=True, text=True, check=True).stdout
    stats = {}
    for line in out.splitlines():
        if line.startswith("cmdstat_"):
            name, fields = line[len("cmdstat_"):].split(":", 1)
            values = dict(item.split("=") for item in fields.split(","))
            stats[name] = (int(values["calls"]), int(values["usec"]))
    return stats


def reset_stats(port):
    subprocess.run(["redis-cli", "-p", str(port), "CONFIG", "RESETSTAT"],
                   capture_output=True, check=True)


# The benchmark's own reads of Redis, not the gateway's.
OWN_COMMANDS = {"info", "config|resetstat", "config|get"}


def keepalive(args):
    gateway = Gateway(args.url)
    rows = []
    for count in [int(n) for n in args.locks.split(",")]:
        session = open_session(gateway)
        attach(args.url, session, [f"keepalive:{count}:{i}" for i in range(count)])
        # What the gateway does in Redis on its own meanwhile (sweeps, the
        # deadlock detector), per second, to subtract.
        reset_stats(args.redis_port)
        time.sleep(args.idle_seconds)
        idle = commandstats(args.redis_port)
        reset_stats(args.redis_port)
        started = time.monotonic()
        for _ in range(args.keepalives):
            status, body = gateway.call("PUT", f"/sessions/{session}", {"ttl_ms": 600000})
            assert status == 200 and body["locks"] == count, (status, body)
        spent = time.monotonic() - started
        stats = commandstats(args.redis_port)
        per_keepalive, usec = {}, 0.0
        for name, (calls, micros) in stats.items():
            if name in OWN_COMMANDS:
                continue
            idle_calls, idle_usec = idle.get(name, (0, 0))
            scale = spent / args.idle_seconds
            calls_each = (calls - idle_calls * scale) / args.keepalives
            if calls_each >= 0.05:
                per_keepalive[name] = round(calls_each, 2)
            usec += max(micros - idle_usec * scale, 0) / args.keepalives
        rows.append({"locks": count, "commands_per_keepalive": per_keepalive,
                     "calls_per_keepalive": round(sum(per_keepalive.values()), 2),
                     "redis_usec_per_keepalive": round(usec, 1)})
        gateway.call("DELETE", f"/sessions/{session}")
    print(json.dumps({"mode": "keepalive", "keepalives": args.keepalives, "rows": rows}))


# --- expiry: an expired session's 1000 locks, the keeper killed ---

def expiry(args):
    keeper = Gateway(args.keeper_url)
    keeper.conn.request("POST", "/sessions", body=json.dumps({"ttl_ms": args.ttl_ms}),
                        headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
    stream = keeper.conn.getresponse()
    assert stream.status == 201 or stream.status == 200, stream.status
    state = {"id": None, "expires_at_ms": None}
    opened = threading.Event()

    def read_events():
        event = None
        for raw in stream:
            line = raw.decode().strip()
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                data = json.loads(line.split(":", 1)[1])
                if event == "opened":
                    state["id"] = data["id"]
                    opened.set()
                state["expires_at_ms"] = data.get("expires_at_ms", state["expires_at_ms"])

    threading.Thread(target=read_events, daemon=True).start()
    assert opened.wait(10), "no opened event"
    session = state["id"]
    keys = [f"expiry:{i}" for i in range(args.locks)]
    attach(args.keeper_url, session, keys)
    granted = {}
    answers = {}

    def wait_for(key):
        gateway = Gateway(args.url)
        status, body = gateway.call("POST", "/locks", {"key": key, "ttl_ms": 30000, "wait_ms": 30000})
        answers[key] = status
        if status == 201:
            granted[key] = now_ms()

    waiters = [threading.Thread(target=wait_for, args=(key,)) for key in keys]
    for waiter in waiters:
        waiter.start()
    time.sleep(args.settle_seconds)
    os.kill(args.keeper_pid, signal.SIGKILL)
    killed = now_ms()
    # The session's end as Redis has it, read through the surviving gateway.
    status, body = Gateway(args.url).call("GET", f"/sessions/{session}")
    expires_at = body["expires_at_ms"] if status == 200 else state["expires_at_ms"]
    for waiter in waiters:
        waiter.join()
    delays = [granted[key] - expires_at for key in granted]
    print(json.dumps({
        "mode": "expiry", "locks": args.locks, "ttl_ms": args.ttl_ms,
        "granted": len(granted), "not_granted": {str(s): list(answers.values()).count(s)
                                                 for s in set(answers.values()) if s != 201},
        "killed_before_expiry_ms": round(expires_at - killed),
        "release_after_expiry_min_ms": pct(delays, 0), "release_after_expiry_p50_ms": pct(delays, 0.5),
        "release_after_expiry_p99_ms": pct(delays, 0.99), "release_after_expiry_max_ms": pct(delays, 1.0),
        "spread_ms": round(max(delays) - min(delays), 1) if delays else None}))


# --- deadlock: the closing request's time to its 409 deadlock ---

def deadlock(args):
    first, second = Gateway(args.url), Gateway(args.url)
    latencies, refused_other, refused_older = [], 0, 0
    for n in range(args.rounds):
        x, y = f"deadlock:{n}:x", f"deadlock:{n}:y"
        s1, s2 = open_session(first), open_session(second)
        assert first.call("POST", "/locks", {"key": x, "session": s1})[0] == 201
        assert second.call("POST", "/locks", {"key": y, "session": s2})[0] == 201
        outcome = {}

        def older():
            gateway = Gateway(args.url)
            outcome["older"] = gateway.call("POST", "/locks", {"key": y, "session": s1, "wait_ms": 10000})
            outcome["older_at"] = time.monotonic()

        waiter = threading.Thread(target=older)
        waiter.start()
        time.sleep(0.3)
        closing = time.monotonic()
        status, body = second.call("POST", "/locks", {"key": x, "session": s2, "wait_ms": 10000})
        answered = time.monotonic()
        if status == 409 and body.get("type", "").endswith("deadlock"):
            latencies.append((answered - closing) * 1000)
            second.call("DELETE", f"/sessions/{s2}")
        else:
            refused_other += 1
            first.call("DELETE", f"/sessions/{s1}")
        waiter.join()
        if outcome["older"][0] == 409:
            refused_older += 1
            latencies.append((outcome["older_at"] - closing) * 1000)
        first.call("DELETE", f"/sessions/{s1}")
        second.call("DELETE", f"/sessions/{s2}")
    print(json.dumps({"mode": "deadlock", "rounds": args.rounds, "refused_closing": args.rounds - refused_other,
                      "refused_older_instead": refused_older,
                      "p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99),
                      "max_ms": pct(latencies, 1.0), "min_ms": pct(latencies, 0)}))


# --- random: batches of overlapping keys; sessions in random order ---

class Ledger:
    """Who holds or may hold each key, and who waits for what, as the
    clients saw it. A hold is counted from the moment its request is sent
    until its release is answered (the widest the server's hold can be), so
    a cycle the server reports must show here if it was real."""

    def __init__(self):
        self.lock = threading.Lock()
        self.holder = {}        # key -> client holding it (granted, not yet released)
        self.may_hold = {}      # key -> set of clients that hold or may hold it
        self.waits = {}         # client -> key it waits for (request in flight)
        self.overlaps = []

    def asking(self, client, keys):
        with self.lock:
            for key in keys:
                self.may_hold.setdefault(key, set()).add(client)
            if len(keys) == 1:
                self.waits[client] = keys[0]

    def answered(self, client, keys, granted):
        with self.lock:
            self.waits.pop(client, None)
            for key in keys:
                if granted:
                    if key in self.holder:
                        self.overlaps.append({"key": key, "holders": [self.holder[key], client],
                                              "at_ms": now_ms()})
                    self.holder[key] = client
                else:
                    self.may_hold.get(key, set()).discard(client)

    def releasing(self, client, key):
        with self.lock:
            if self.holder.get(key) == client:
                del self.holder[key]

    def released(self, client, key):
        with self.lock:
            self.may_hold.get(key, set()).discard(client)

    def cycle_through(self, client):
        """Whether the wait-for graph (client -> key it waits for -> anyone
        who may hold that key -> ...) has a cycle back to `client`."""
        with self.lock:
            seen, frontier = set(), [client]
            while frontier:
                current = frontier.pop()
                key = self.waits.get(current)
                if key is None:
                    continue
                for other in self.may_hold.get(key, ()):
                    if other == current:
                        continue
                    if other == client:
                        return True
                    if other not in seen:
                        seen.add(other)
                        frontier.append(other)
            return False


def random_run(args):
    rng = random.Random(args.seed)
    ledger = Ledger()
    keys = [f"random:{args.kind}:{i}" for i in range(args.keys)]
    counts = {"granted": 0, "held": 0, "deadlock": 0, "deadlock_unconfirmed": 0, "stuck": 0,
              "errors": 0, "other": {}}
    counts_lock = threading.Lock()
    deadline = time.monotonic() + args.seconds
    unconfirmed = []

    def count(name, n=1):
        with counts_lock:
            counts[name] += n

    def batch_client(client, seed):
        rng = random.Random(seed)
        gateway = Gateway(args.url)
        while time.monotonic() < deadline:
            chosen = rng.sample(keys, rng.randint(2, args.batch_max))
            wait_ms = rng.choice([0, 50, 500, 2000])
            ledger.asking(client, chosen)
            asked = time.monotonic()
            status, body = gateway.call("POST", "/locks/batch", {
                "locks": [{"key": key} for key in chosen], "ttl_ms": 30000, "wait_ms": wait_ms})
            took = (time.monotonic() - asked) * 1000
            ledger.answered(client, chosen, status == 201)
            if took > wait_ms + args.stuck_slack_ms:
                count("stuck")
            if status == 201:
                count("granted")
                time.sleep(rng.uniform(0, 0.003))
                for key in chosen:
                    ledger.releasing(client, key)
                    gateway.release(key, body["token"])
                    ledger.released(client, key)
            elif status == 409 and body.get("type", "").endswith("lock-held"):
                count("held")
            else:
                with counts_lock:
                    counts["other"][str(status)] = counts["other"].get(str(status), 0) + 1

    def session_client(client, seed):
        rng = random.Random(seed)
        gateway = Gateway(args.url)
        session = open_session(gateway)
        while time.monotonic() < deadline:
            chosen = rng.sample(keys, rng.randint(2, args.batch_max))
            held = []
            for key in chosen:
                wait_ms = rng.choice([200, 1000, 3000])
                ledger.asking(client, [key])
                asked = time.monotonic()
                status, body = gateway.call("POST", "/locks", {
                    "key": key, "ttl_ms": 30000, "wait_ms": wait_ms, "session": session})
                took = (time.monotonic() - asked) * 1000
                is_deadlock = status == 409 and body.get("type", "").endswith("deadlock")
                real = ledger.cycle_through(client) if is_deadlock else None
                ledger.answered(client, [key], status == 201)
                if took > wait_ms + args.stuck_slack_ms:
                    count("stuck")
                if status == 201:
                    count("granted")
                    held.append((key, body["token"]))
                    time.sleep(rng.uniform(0, 0.005))
                    continue
                if is_deadlock:
                    count("deadlock")
                    if not real:
                        count("deadlock_unconfirmed")
                        unconfirmed.append({"client": client, "key": key, "cycle": body.get("cycle")})
                elif status == 409:
                    count("held")
                else:
                    with counts_lock:
                        counts["other"][str(status)] = counts["other"].get(str(status), 0) + 1
                break
            for key, token in reversed(held):
                ledger.releasing(client, key)
                gateway.release(key, token)
                ledger.released(client, key)
        gateway.call("DELETE", f"/sessions/{session}")

    target = batch_client if args.kind == "batches" else session_client
    failures = []

    def guarded(client, seed):
        try:
            target(client, seed)
        except Exception as failure:  # noqa: BLE001 - reported, and fails the run
            failures.append(repr(failure))

    started = time.monotonic()
    workers = [threading.Thread(target=guarded, args=(c, rng.random())) for c in range(args.clients)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.monotonic() - started
    print(json.dumps({
        "mode": f"random-{args.kind}", "clients": args.clients, "keys": args.keys,
        "seconds": round(elapsed, 1), "granted_per_second": round(counts["granted"] / elapsed),
        **{name: counts[name] for name in ("granted", "held", "deadlock", "deadlock_unconfirmed",
                                           "stuck")},
        "other_answers": counts["other"], "overlaps": len(ledger.overlaps),
        "overlap_examples": ledger.overlaps[:3], "unconfirmed_examples": unconfirmed[:3],
        "client_failures": failures[:3]}))


def main():
    parser = argparse.ArgumentParser()
    modes = parser.add_subparsers(dest="mode", required=True)
    p = modes.add_parser("keepalive")
    p.add_argument("--url", required=True)
    p.add_argument("--redis-port", required=True)
    p.add_argument("--locks", default="1,100,10000")
    p.add_argument("--keepalives", type=int, default=200)
    p.add_argument("--idle-seconds", type=float, default=2.0)
    p = modes.add_parser("expiry")
    p.add_argument("--keeper-url", required=True)
    p.add_argument("--keeper-pid", type=int, required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--locks", type=int, default=1000)
    p.add_argument("--ttl-ms", type=int, default=3000)
    p.add_argument("--settle-seconds", type=float, default=3.0)
    p = modes.add_parser("deadlock")
    p.add_argument("--url", required=True)
    p.add_argument("--rounds", type=int, default=20)
    p = modes.add_parser("random")
    p.add_argument("--url", required=True)
    p.add_argument("--kind", choices=["batches", "sessions"], required=True)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--keys", type=int, default=12)
    p.add_argument("--batch-max", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    # A wait answered this much past its wait_ms is stuck.
    p.add_argument("--stuck-slack-ms", type=float, default=1000)
    args = parser.parse_args()
    {"keepalive": keepalive, "expiry": expiry, "deadlock": deadlock, "random": random_run}[args.mode](args)


if __name__ == "__main__":
    main()
