"""The fault harness's command line (chaos/run.sh calls it).

    python -m harness run --binary PATH --python PATH --out DIR
        [--short] [--only NAME,... | --random MINUTES [--seed N]] [--sabotage fence|confirm|lease]
    python -m harness list
    python -m harness selftest
    python -m harness cleanup [--run ID | --stale]
"""

from __future__ import annotations

import argparse
import datetime
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import netns, report, runner, selftest
from .scenarios import SCENARIOS, SHORT, Timing, by_name, random_scenario
from .verdicts import PROPERTIES
from .topology import RunContext

TOOLS = ["ip", "iptables", "iptables-restore", "redis-server", "redis-cli", "redis-sentinel", "setpriv", "cc"]


def install_signal_handlers(stopping: threading.Event) -> None:
    """The first SIGINT or SIGTERM stops the run (cleanup included); later
    ones are ignored so that they cannot cut the cleanup short."""

    def on_signal(signum, _frame):
        if stopping.is_set():
            return
        stopping.set()
        runner.say(f"{signal.Signals(signum).name}: stopping, removing every host")
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)


def remove_workdirs(run_id: str | None = None, stale: bool = False) -> None:
    """Scratch directories of one run, of dead runs, or of all runs."""
    for path in Path(tempfile.gettempdir()).glob("lockgate-chaos-*-*"):
        owner = path.name.split("-")[2]
        if not owner.isdigit() or (run_id is not None and owner != run_id):
            continue
        if stale and netns.alive(int(owner)):
            continue
        shutil.rmtree(path, ignore_errors=True)


def preflight(binary: Path) -> None:
    if os.geteuid() != 0:
        sys.exit("chaos: network namespaces need root")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        sys.exit(f"chaos: missing {', '.join(missing)} (chaos/run.sh installs them)")
    if not os.access(binary, os.X_OK):
        sys.exit(f"chaos: no gateway binary at {binary} (set LOCKGATE_BIN)")


def source_stamp(repo: Path) -> str:
    """The commit the run is of (`git rev-parse --short HEAD`), and whether
    the tree had changes beyond it."""
    def git(*argv: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(repo), *argv], capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + (" with uncommitted changes" if git("status", "--porcelain") else "")


def command_run(args) -> int:
    binary = Path(args.binary).resolve()
    preflight(binary)
    if selftest.main():
        sys.exit("chaos: the checker failed its self-test (python -m harness selftest)")
    if args.random:
        seed = args.seed if args.seed is not None else secrets.randbelow(1_000_000)
        runner.say(f"random schedule: {args.random:g} minutes, seed {seed} "
                   f"(replay: --random {args.random:g} --seed {seed})")
        scenarios = [random_scenario(args.random, seed)]
    else:
        names = args.only.split(",") if args.only else (SHORT if args.short else [s.name for s in SCENARIOS])
        unknown = [name for name in names if name not in {s.name for s in SCENARIOS}]
        if unknown:
            sys.exit(f"chaos: no scenario {', '.join(unknown)} (python -m harness list)")
        scenarios = [by_name(name) for name in names]
    timing = Timing.short() if args.short else Timing.full()
    out_dir = Path(args.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    removed = netns.cleanup(stale=True)
    remove_workdirs(stale=True)
    if removed:
        runner.say(f"removed {len(removed)} namespaces left by runs that died")
    stopping = threading.Event()
    install_signal_handlers(stopping)
    workdir = Path(tempfile.mkdtemp(prefix=f"lockgate-chaos-{os.getpid()}-"))
    workdir.chmod(0o755)
    chaos_dir = Path(__file__).resolve().parent.parent
    began_at = datetime.datetime.now().astimezone()
    commit = source_stamp(chaos_dir.parent)
    ctx = RunContext(run_id=str(os.getpid()), binary=binary, python=Path(args.python).absolute(),
                     chaos_dir=chaos_dir, workdir=workdir, out_dir=out_dir,
                     admin_token=secrets.token_hex(16), sentinel_mode=args.sentinel, sabotage=args.sabotage,
                     stamp=f"commit {commit}, {began_at:%Y-%m-%d %H:%M %Z}")
    if args.sabotage:
        runner.say(f"SABOTAGED on purpose ({args.sabotage}): the verdicts should fail")
    started = time.monotonic()
    results = []
    try:
        for scenario in scenarios:
            began = time.monotonic()
            result = runner.run(ctx, scenario, timing, stopping)
            results.append(result)
            runner.say(f"{scenario.name}: {report.verdict(result)} ({time.monotonic() - began:.0f} s)")
            for failure in result.failures:
                runner.say(f"{scenario.name}: {failure}")
            if result.error:
                runner.say(f"{scenario.name}: harness error:\n{result.error}")
            if stopping.is_set():
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        runner.say("interrupted")
        return 130
    finally:
        leftovers = netns.cleanup(run_id=ctx.run_id)
        if leftovers:
            runner.say(f"removed {len(leftovers)} namespaces left behind")
        shutil.rmtree(workdir, ignore_errors=True)
    wall = time.monotonic() - started
    kind = f"random, {args.random:g} minutes" if args.random else (
        "selected scenarios" if args.only else "short" if args.short else "every scenario")
    if args.short and (args.only or args.random):
        kind += ", short timing"
    notes = [
        f"Run of commit `{commit}`, {began_at:%Y-%m-%d %H:%M %Z}: {kind}, {len(results)} scenarios in "
        f"{wall:.0f} s, on {os.cpu_count()} cores; gateway binary `{binary.name}`.",
        "",
        *([f"**Sabotaged on purpose** (`--sabotage {args.sabotage}`), to show that the verdicts can fail.", ""]
          if args.sabotage else []),
        "The gateways " + ("were given the Sentinel URL and follow a failover." if ctx.sentinel_support
                           else "take no `redis+sentinel://` URL (this binary refused one), so in the Sentinel "
                                "layout they were pointed at the first primary and did not follow the failover."),
        "",
        "Delay on links is made by `harness/netdelay.py` behind an iptables NFQUEUE rule, not by "
        "`tc ... netem`, so it works on kernels built without sch_netem.",
    ]
    path = report.write(out_dir, results, {s.name: s for s in scenarios}, notes)
    print(report.text_table(results))
    for result in results:
        for failure in result.failures:
            print(f"{result.scenario}: {failure}")
        for shown in result.expected:
            print(f"{result.scenario}: broke as expected: {shown}")
        if result.error:
            print(f"{result.scenario}: HARNESS ERROR (see {path})")
    passed = all(result.passed for result in results)
    print(f"\n{len(results)} scenarios in {wall:.0f} s, commit {commit}; "
          f"{'every must-hold held' if passed else 'FAILED'}; results in {path}, timelines beside it")
    return 0 if passed else 1


def command_list(args) -> int:
    for scenario in SCENARIOS:
        print(f"{scenario.name:26} {scenario.summary}")
        print(f"{'':26} must hold: {', '.join(scenario.must_hold)}")
        if scenario.expected_break:
            print(f"{'':26} expected to break: {', '.join(scenario.expected_break)}")
    print("\nproperties:")
    for name, text in PROPERTIES.items():
        print(f"  {name:14} {text}")
    return 0


def command_cleanup(args) -> int:
    removed = netns.cleanup(run_id=args.run, stale=args.stale)
    remove_workdirs(run_id=args.run, stale=args.stale)
    for name in removed:
        print(f"removed {name}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness", description="lockgate's fault harness")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the scenarios")
    run.add_argument("--binary", required=True, help="the lockgate binary")
    run.add_argument("--python", default=sys.executable, help="the Python (with psycopg) for the clients")
    run.add_argument("--out", required=True, help="where results, timelines, histories and logs go")
    run.add_argument("--short", action="store_true",
                     help=f"only {', '.join(SHORT)}, shorter (with --only: the scenarios named, shorter)")
    choice = run.add_mutually_exclusive_group()
    choice.add_argument("--only", help="comma-separated scenario names")
    choice.add_argument("--random", type=float, metavar="MINUTES",
                        help="faults drawn at random from the catalogue for this long")
    run.add_argument("--seed", type=int, help="the random schedule's seed (printed by every random run)")
    run.add_argument("--sabotage", choices=["fence", "confirm", "lease"],
                     help="for showing that the verdicts fail: 'fence' turns off the fence raised at read, "
                          "'confirm' starts the gateways without --redis-wait-replicas where the scenario "
                          "asks for it, 'lease' has the lockers ask for three times the lease the scenario "
                          "sets for their home gateway (handoff-kill), which its checks still count from")
    run.add_argument("--sentinel", choices=["auto", "yes", "no"], default="auto",
                     help="give the gateways the redis+sentinel:// URL: auto = if the binary takes one")
    run.set_defaults(handler=command_run)
    checking = commands.add_parser("selftest", help="the checker against histories with known answers")
    checking.set_defaults(handler=lambda _args: selftest.main())
    listing = commands.add_parser("list", help="the scenarios, what each must hold and expects to break")
    listing.set_defaults(handler=command_list)
    cleanup = commands.add_parser("cleanup", help="remove namespaces and processes of runs")
    cleanup.add_argument("--run", help="one run's id (its runner's pid)")
    cleanup.add_argument("--stale", action="store_true", help="only runs whose runner is gone")
    cleanup.set_defaults(handler=command_cleanup)
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
