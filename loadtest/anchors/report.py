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
    ("lockgate-before", "lockgate, the build before"),
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
    # The build before, when the run measured it (BASELINE_BIN).
    systems = [s for s in SYSTEMS if s[0] != "lockgate-before" or any(r[0] == s[0] for r in runs)]

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

    def redis_work(system, column, phase):
        """Redis's work per grant of a relay phase: script calls, commands,
        and fsyncs (None in memory), each per grant; None when not counted."""
        r, counted = run(system, column, phase), run(system, column, phase + "-redis")
        if not r or not counted or "missing" in r or not r["driver"].get("done"):
            return None
        done = r["driver"]["done"]
        fsyncs = counted["fsyncs"]
        return {"script_calls": counted["redis"]["script_calls"] / done,
                "commands": counted["redis"]["commands"] / done,
                "fsyncs": None if fsyncs is None else fsyncs / done,
                "fsyncs_per_handoff": None if fsyncs is None else fsyncs / max(r["driver"]["handoffs"], 1)}

    def redis_cell(phase):
        def cell(r):
            work = redis_work(r["system"], r["column"], phase)
            if work is None:
                return "not counted"
            text = f'{work["script_calls"]:.2f} / {work["commands"]:.1f}'
            if work["fsyncs"] is not None:
                text += f' / {work["fsyncs"]:.2f}'
            return text
        return cell
    # Which of a system's server processes is its Redis (run.sh measures
    # lockgate's gateway, then its Redis): the part of the cost that a
    # lock library on Redis pays too.
    redis_process = {"lockgate": 1, "lockgate-before": 1, "redlock": 0, "redis-lock": 0}

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
        ("Redis per contended grant: script calls / commands / fsyncs (durable)", "relay", redis_cell("relay")),
        (f"the same, {settings.get('relay_clients', 20)} clients", "relay-20", redis_cell("relay-20")),
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
    for system, name in systems:
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
    for system, name in systems:
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
    ]:
        ratios = {column: ratio(phase, field, peer, column) for column in COLUMNS}
        texts = [f"{label} {ratios[c]:.2f}x" if ratios[c] is not None else f"{label} n/a"
                 for c, label in zip(COLUMNS, LABELS)]
        met = all(r is not None and r >= target for r in ratios.values())
        verdict = "met" if met else "NOT met"
        if any(r is None for r in ratios.values()):
            met, verdict = None, "not measured"
        line = f"lockgate uncontended cycles over {peer_name}: {' / '.join(texts)} (target at least {target}x): {verdict}"
        print("* " + line)
        targets.append({"target": line, "ratios": ratios, "met": met})

    def target(line, value, bound, at_least):
        """One target's line: `value` against `bound`, printed and kept."""
        if value is None:
            met, verdict = None, "not measured"
        else:
            met = value >= bound if at_least else value <= bound
            verdict = "met" if met else "NOT met"
        print(f"* {line}: {verdict}")
        targets.append({"target": line, "value": value, "met": met})

    # Contended hand-offs, each target in its own column (the relay phase).
    for column, label, peers, p99_bound in [
        ("durable", "durable", [("etcd", "etcd", 1.5), ("zookeeper", "Curator", 1.5)], 10),
        ("memory", "in memory", [("redis-lock", "python-redis-lock", 1), ("etcd", "etcd", 3)], 5),
    ]:
        for peer, peer_name, bound in peers:
            value = ratio("relay", "handoffs_per_second", peer, column)
            shown = f"{value:.2f}x" if value is not None else "n/a"
            target(f"lockgate hand-offs over {peer_name}, {label}: {shown} (target at least {bound}x)",
                   value, bound, True)
        r = run("lockgate", column, "relay")
        p99 = r["driver"].get("handoff_p99_ms") if r and "missing" not in r else None
        shown = f"{p99:.2f} ms" if p99 is not None else "n/a"
        target(f"lockgate hand-off p99, {label}: {shown} (target at most {p99_bound} ms)", p99, p99_bound, False)
    work = redis_work("lockgate", "durable", "relay")
    per_handoff = work and work["fsyncs_per_handoff"]
    shown = f"{per_handoff:.2f}" if per_handoff is not None else "n/a"
    target(f"Redis fsyncs per lockgate hand-off, durable: {shown} (target at most 1.0)", per_handoff, 1.0, False)
    work = redis_work("lockgate", "durable", "relay-20")
    for field, bound, what in [("script_calls", 2.3, "script calls"), ("fsyncs", 2.1, "fsyncs")]:
        value = work and work[field]
        shown = f"{value:.2f}" if value is not None else "n/a"
        target(f"{what} per contended lockgate cycle, {settings.get('relay_clients', 20)} clients, durable: "
               f"{shown} (target at most {bound})", value, bound, False)
    for column, label in zip(COLUMNS, LABELS):
        costs = {}
        for system, name in (s for s in systems if s[0] != "lockgate-before"):
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

    # Nothing else slower than the build before, measured in the same run.
    def before_ratio(column, phase, value):
        ours, before = run("lockgate", column, phase), run("lockgate-before", column, phase)
        if not ours or not before or "missing" in ours or "missing" in before:
            return None
        try:
            return value(ours) / value(before)
        except (KeyError, ZeroDivisionError, TypeError):
            return None

    if any(s[0] == "lockgate-before" for s in systems):
        per_cycle = lambda index: lambda r: r["server_cpu_ms_each"][index] / r["driver"]["done"]
        for column, label in zip(COLUMNS, LABELS):
            for what, phase, value, at_least in [
                ("uncontended cycles/s", "cycles", lambda r: r["driver"]["per_second"], True),
                ("gateway CPU per uncontended cycle", "cycles", per_cycle(0), False),
                ("Redis CPU per uncontended cycle", "cycles", per_cycle(1), False),
                (f"server memory with {waiters:,} waiting", "waiters",
                 lambda r: r["rss_peak_kib"] - r["rss_idle_kib"], False),
            ]:
                value = before_ratio(column, phase, value)
                shown = f"{value:.3f}x" if value is not None else "n/a"
                bound = 0.97 if at_least else 1.03
                target(f"{what}, {label}, against the build before: {shown} "
                       f"(target {'at least' if at_least else 'at most'} {bound})", value, bound, at_least)

    with open(out_path, "w") as file:
        json.dump({"settings": settings, "versions": versions, "results": results,
                   "targets": targets}, file, indent=1)


if __name__ == "__main__":
    main()
