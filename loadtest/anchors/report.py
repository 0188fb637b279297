"""The anchors benchmark's table: lockgate beside the lock services it is measured against, from the phases run.sh recorded.

    python3 report.py RESULTS.jsonl VERSIONS.json SETTINGS.json OUT.json

RESULTS.jsonl has one line per phase run (or per peer that could not run):
{"system", "column", "phase", "driver": <the driver's JSON line>,
"server_cpu_ms", "rss_idle_kib", "rss_peak_kib"} or {"system", "column",
"phase", "missing": why}. Prints the table in Markdown, then the targets
against lockgate, and writes every figure with the versions to OUT.json.
"""

import json
import sys

SYSTEMS = [
    ("lockgate", "lockgate"),
    ("etcd", "etcd lock API"),
    ("zookeeper", "ZooKeeper + Curator InterProcessMutex"),
    ("redlock", "redlock (npm)"),
    ("redis-lock", "python-redis-lock (PyPI)"),
]
COLUMNS = ["durable", "memory"]
LABELS = ["durable", "in memory"]


def load(path):
    with open(path) as file:
        return [json.loads(line) for line in file if line.strip()]


def main():
    results_path, versions_path, settings_path, out_path = sys.argv[1:5]
    results = load(results_path)
    with open(versions_path) as file:
        versions = json.load(file)
    with open(settings_path) as file:
        settings = json.load(file)
    runs = {(r["system"], r["column"], r["phase"]): r for r in results}

    def run(system, column, phase):
        return runs.get((system, column, phase))

    def figure(system, column, phase, compute):
        """A cell's text: the figure, or why there is none."""
        r = run(system, column, phase)
        if r is None:
            return "not run"
        if "missing" in r:
            return r["missing"]
        try:
            return compute(r)
        except (KeyError, ZeroDivisionError, TypeError):
            return "no result"

    def waiting(r):
        """How many of the clients were waiting while memory was read."""
        driver = r["driver"]
        return driver.get("waiting", driver.get("waiters", waiters) - driver.get("ended_early", 0))

    def memory(r):
        above = (r["rss_peak_kib"] - r["rss_idle_kib"]) / 1024
        text = f"{above:,.1f} ({above * 1024 / waiting(r):,.1f} KiB each)"
        if waiting(r) != waiters:
            text += f"; {waiting(r):,} waiting of {waiters:,} asked for"
            if r["driver"].get("asked", waiters) < waiters:
                text += f" (no more queued in {settings['queue_seconds']} s)"
        return text

    per_1000 = lambda cpu_ms, done: f"{cpu_ms * 1000 / done:,.0f}"
    # Which of a system's server processes is its Redis (run.sh measures
    # lockgate's gateway, then its Redis): the part of the cost that a
    # lock library on Redis pays too.
    redis_process = {"lockgate": 1, "redlock": 0, "redis-lock": 0}

    def redis_share(r):
        index = redis_process.get(r["system"])
        if index is None:
            return "no Redis"
        return per_1000(r["server_cpu_ms_each"][index], r["driver"]["done"])
    clients = settings["clients"]
    waiters = settings["waiters"]
    figures = [
        ("lock cycles/s", "cycles", lambda r: f'{r["driver"]["per_second"]:,}'),
        ("hand-offs/s", "relay", lambda r: f'{r["driver"]["handoffs_per_second"]:,}'),
        ("hand-off p50 / p99 (ms)", "relay",
         lambda r: f'{r["driver"]["handoff_p50_ms"]:.2f} / {r["driver"]["handoff_p99_ms"]:.2f}'),
        ("re-grants", "relay", lambda r: f'{r["driver"]["regrants"] / max(r["driver"]["done"], 1):.0%}'),
        ("wait p99 / longest (ms)", "relay",
         lambda r: f'{r["driver"]["wait_p99_ms"]:,.1f} / {r["driver"]["wait_max_ms"]:,.0f}'),
        ("server CPU per 1 000 cycles (ms)", "cycles",
         lambda r: per_1000(r["server_cpu_ms"], r["driver"]["done"])),
        ("of which Redis (ms)", "cycles", redis_share),
        ("server CPU per 1 000 contended grants (ms)", "relay",
         lambda r: per_1000(r["server_cpu_ms"], r["driver"]["done"])),
        ("load generator CPU per 1 000 cycles (ms)", "cycles",
         lambda r: per_1000(r["driver"]["generator_cpu_ms"], r["driver"]["done"])),
        (f"server memory with {waiters:,} waiting (MiB above idle)", "waiters", memory),
    ]

    print(f"lockgate beside the lock services people pick instead: {settings['cores']} cores, "
          f"{settings['date']}, {settings['seconds']} s per phase, {clients} clients, "
          "one node each, everything on this machine (load average "
          f"{settings['load_before']} before the run, {settings['load_after']} after it).")
    print("Durable: etcd and ZooKeeper with their default fsync on " + settings["disk_fs"]
          + ", Redis with appendfsync always (lockgate on that Redis too). In memory: data on "
          + settings["memory_fs"] + " (ZooKeeper forceSync=no), Redis without persistence.")
    print("Lock cycles: a key per client. Hand-offs: all clients on one key, each releasing at once "
          "and asking again; a hand-off is a grant to another client than the one that released, "
          "timed from that release; re-grants are grants back to the client that had just released "
          "(their share of grants); the wait is from asking to the grant.")
    print()
    print("| system | data | " + " | ".join(name for name, _, _ in figures) + " |")
    print("|---|---" + "|---" * len(figures) + "|")
    for system, name in SYSTEMS:
        for column in COLUMNS:
            row = [figure(system, column, phase, compute) for _, phase, compute in figures]
            # A system that did not run at all: its reason once.
            if all(r is not None and "missing" in r for r in (run(system, column, p) for _, p, _ in figures)) \
                    and len(set(row)) == 1:
                row = [row[0]] + ["–"] * (len(row) - 1)
            label = LABELS[COLUMNS.index(column)]
            print(f"| {name} | {label} | " + " | ".join(row) + " |")
    print()
    print("| system | server processes measured | load generator | versions |")
    print("|---|---|---|---|")
    for system, name in SYSTEMS:
        v = versions[system]
        print(f'| {name} | {v["servers"]} | {v["driver"]} | {v["version"]} |')
    print()

    targets = []

    def ratio(phase, field, peer, column):
        ours, theirs = run("lockgate", column, phase), run(peer, column, phase)
        if not ours or not theirs or "missing" in ours or "missing" in theirs:
            return None
        return ours["driver"][field] / max(theirs["driver"][field], 1)

    for phase, field, peer, peer_name, target in [
        ("cycles", "per_second", "etcd", "etcd", 3),
        ("cycles", "per_second", "zookeeper", "Curator", 2),
        ("relay", "handoffs_per_second", "etcd", "etcd", 2),
        ("relay", "handoffs_per_second", "zookeeper", "Curator", 2),
    ]:
        ratios = {column: ratio(phase, field, peer, column) for column in COLUMNS}
        texts = [f"{label} {ratios[c]:.2f}x" if ratios[c] is not None else f"{label} n/a"
                 for c, label in zip(COLUMNS, LABELS)]
        met = all(r is not None and r >= target for r in ratios.values())
        verdict = "met" if met else "NOT met"
        if any(r is None for r in ratios.values()):
            met, verdict = None, "not measured"
        what = "uncontended cycles" if phase == "cycles" else "contended hand-offs"
        line = f"lockgate {what} over {peer_name}: {' / '.join(texts)} (target at least {target}x): {verdict}"
        print("* " + line)
        targets.append({"target": line, "ratios": ratios, "met": met})
    p99 = {c: (run("lockgate", c, "relay") or {}).get("driver", {}).get("handoff_p99_ms") for c in COLUMNS}
    met = all(v is not None and v <= 5 for v in p99.values())
    texts = [f"{label} {p99[c]:.2f} ms" if p99[c] is not None else f"{label} n/a"
             for c, label in zip(COLUMNS, LABELS)]
    line = f"lockgate hand-off p99: {' / '.join(texts)} (target at most 5 ms): {'met' if met else 'NOT met'}"
    print("* " + line)
    targets.append({"target": line, "p99_ms": p99, "met": met})
    for column, label in zip(COLUMNS, LABELS):
        costs = {}
        for system, name in SYSTEMS:
            r = run(system, column, "cycles")
            if r and "missing" not in r and r["driver"].get("done"):
                costs[name] = r["server_cpu_ms"] * 1000 / r["driver"]["done"]
        if costs:
            lowest = min(costs, key=costs.get)
            met = lowest == "lockgate"
            ranked = ", ".join(f"{name} {cost:,.0f}" for name, cost in sorted(costs.items(), key=lambda c: c[1]))
            line = (f"lowest server CPU per uncontended cycle, {label}: {lowest} "
                    f"(ms per 1 000 cycles: {ranked}): {'met' if met else 'NOT met'}")
            print("* " + line)
            targets.append({"target": line, "met": met})

    with open(out_path, "w") as file:
        json.dump({"settings": settings, "versions": versions, "results": results,
                   "targets": targets}, file, indent=1)


if __name__ == "__main__":
    main()
