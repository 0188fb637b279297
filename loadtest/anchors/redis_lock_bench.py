"""The python-redis-lock load of the anchors benchmark: PyPI's python-redis-lock on one Redis, driven the way lockbench drives lockgate, reporting its own CPU.

    python redis_lock_bench.py cycles --redis redis://127.0.0.1:6379 --clients 50 --seconds 5
    python redis_lock_bench.py relay  --redis redis://127.0.0.1:6379 --clients 50 --seconds 5
    python redis_lock_bench.py waiters --redis redis://127.0.0.1:6379 --clients 10000 --seconds 3

Every client is a thread with a connection of its own (as separate
application instances would have). A waiting client blocks in Redis
(BLPOP on the lock's signal list, which a release pushes to), so it is told
at once. cycles: a key per client, acquire + release as fast as it can.
relay: one key, each client releasing as soon as it is granted and asking
again; the time from each release to the next grant. waiters: this many
clients waiting on one held key, kept waiting for --seconds once all have
asked (the caller reads Redis's memory meanwhile). Prints one JSON line
with lockbench's fields. The threads share one interpreter lock, so the
driver's CPU is reported beside its figures.
"""

import argparse
import json
import math
import os
import sys
import threading
import time

import redis
import redis_lock

EXPIRE_SECONDS = 30


def percentile(sorted_values, p):
    if not sorted_values:
        return 0
    return sorted_values[max(math.ceil(len(sorted_values) * p) - 1, 0)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["cycles", "relay", "waiters"])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=5)
    args = parser.parse_args()
    if args.mode == "waiters":
        park_waiters(args)
        return
    relay = args.mode == "relay"

    connections = [redis.Redis.from_url(args.redis) for _ in range(args.clients)]
    for i, connection in enumerate(connections):
        # One cycle each before the clock starts: connected, scripts loaded.
        lock = redis_lock.Lock(connection, f"bench:warm:{i}", expire=EXPIRE_SECONDS)
        lock.acquire()
        lock.release()

    # When the lock was last released (None: not yet) and by which client,
    # each hand-off's delay after it and each grant's wait from asking, in
    # µs. The lock is exclusive, so grants and releases alternate. A grant to
    # the client that released last is a re-grant, not a hand-off: the
    # others went on waiting.
    state = {"released": None, "by": -1, "regrants": 0, "done": 0}
    delays, waits, failures = [], [], []
    guard = threading.Lock()
    start = time.monotonic()
    deadline = start + args.seconds
    cpu_start = time.process_time()

    def client(i):
        name = "bench:relay" if relay else f"bench:cycle:{i}"
        lock = redis_lock.Lock(connections[i], name, expire=EXPIRE_SECONDS)
        try:
            while time.monotonic() < deadline:
                asked = time.monotonic()
                lock.acquire()
                granted = time.monotonic()
                with guard:
                    if relay:
                        waits.append((granted - asked) * 1e6)
                        if state["released"] is not None:
                            if state["by"] == i:
                                state["regrants"] += 1
                            else:
                                delays.append((granted - state["released"]) * 1e6)
                    state["released"], state["by"] = time.monotonic(), i
                lock.release()
                with guard:
                    state["done"] += 1
        except Exception as failure:  # reported after the run, not lost in a thread
            failures.append(failure)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - start
    cpu_ms = (time.process_time() - cpu_start) * 1000
    if failures:
        raise failures[0]

    done = state["done"]
    result = {
        "mode": f"redis-lock-{args.mode}",
        "done": done,
        "seconds": round(elapsed, 2),
        "per_second": round(done / elapsed),
        "generator_cpu_ms": round(cpu_ms),
    }
    if relay:
        delays.sort()
        waits.sort()
        result.update(
            handoffs=len(delays),
            handoffs_per_second=round(len(delays) / elapsed),
            regrants=state["regrants"],
            handoff_p50_ms=round(percentile(delays, 0.5) / 1000, 2),
            handoff_p99_ms=round(percentile(delays, 0.99) / 1000, 2),
            wait_p50_ms=round(percentile(waits, 0.5) / 1000, 2),
            wait_p99_ms=round(percentile(waits, 0.99) / 1000, 2),
            wait_max_ms=round(percentile(waits, 1) / 1000, 2),
        )
    print(json.dumps(result))


def park_waiters(args):
    """Waiters blocked in Redis on one held key, each on a connection of its own."""
    started = time.monotonic()
    watcher = redis.Redis.from_url(args.redis)
    holder = redis_lock.Lock(watcher, "bench:waiters", expire=120)
    holder.acquire()

    def wait():
        lock = redis_lock.Lock(redis.Redis.from_url(args.redis), "bench:waiters", expire=120)
        lock.acquire(timeout=60)

    def blocked():
        return watcher.info("clients")["blocked_clients"]

    # Thousands of threads: small stacks, and none keeps the process alive.
    threading.stack_size(256 * 1024)
    for _ in range(args.clients):
        threading.Thread(target=wait, daemon=True).start()
    # Until every waiter blocks in Redis (or a minute passes).
    asking = time.monotonic()
    while blocked() < args.clients and time.monotonic() - asking < 60:
        time.sleep(0.2)
    time.sleep(args.seconds)
    waiting = blocked()
    holder.release()
    print(json.dumps({"mode": "redis-lock-waiters", "waiters": args.clients, "waiting": waiting,
                      "seconds": round(time.monotonic() - started, 2)}))
    sys.stdout.flush()
    # The waiters are blocked in BLPOP; they need not be woken one by one.
    os._exit(0)


if __name__ == "__main__":
    main()
