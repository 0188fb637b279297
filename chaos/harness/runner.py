"""Runs one scenario from start to end: build the world, seed the row and
the sale, start the clients, run the nemesis schedule, stop the clients,
read back what Redis and PostgreSQL hold, check, take the world down."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
import traceback
from urllib.parse import quote

from . import checker, history, report
from .checker import Result
from .history import Writer, now_ms
from .nemesis import Nemesis, Stage
from .scenarios import LOCK_KEYS, PLAIN_TTL_MS, SKU, STREAM_TTL_MS, Scenario, Timing
from .topology import GATEWAYS, HarnessError, RunContext, World, http_call

BUYER_RATE = 10  # purchases per second per buyer


def say(message: str) -> None:
    print(f"chaos: {message}", file=sys.stderr, flush=True)


def workload_config(ctx: RunContext, world: World, scenario: Scenario, history_dir, stop_file) -> dict:
    clients = {}
    for i in range(6):
        name = f"L{i + 1}"
        clients[name] = {"kind": "locker", "home": GATEWAYS[i % 3], "keys": LOCK_KEYS[:2],
                         "ttl_ms": PLAIN_TTL_MS, "wait_ms": 3000,
                         "work_ms": 1000 if name == scenario.victim else 50}
    # Streamed holders hold for seconds: they have keys of their own, so
    # that the plain holders are not starved waiting behind them, and as many
    # keys as there are of them, so that they seldom starve one another.
    for i in range(3):
        clients[f"S{i + 1}"] = {"kind": "streamer", "home": GATEWAYS[i], "keys": LOCK_KEYS[2:],
                                # Waiting longer than anyone holds: a streamer
                                # that asks gets a lock.
                                "ttl_ms": STREAM_TTL_MS, "wait_ms": 9000, "hold_s": [3, 8],
                                "write_every_ms": 300, "work_ms": 20}
    for i in range(2):
        clients[f"B{i + 1}"] = {"kind": "buyer", "home": GATEWAYS[i], "rate": BUYER_RATE}
    return {
        "gateways": {name: world.gateway_url(name) for name in GATEWAYS},
        "pg": world.pg_dsn, "keys": LOCK_KEYS, "sku": SKU, "seed": ctx.run_id,
        # A backstop only: the runner ends the clients with the stop file.
        "deadline": time.time() + 900,
        "history_dir": str(history_dir), "stop_file": str(stop_file), "clients": clients,
    }


def seed(world: World, stock: int) -> None:
    world.pg_execute("CREATE TABLE counters (id int PRIMARY KEY, value bigint NOT NULL DEFAULT 0, "
                     "fence bigint NOT NULL DEFAULT 0, plain bigint NOT NULL DEFAULT 0)")
    world.pg_execute("INSERT INTO counters (id) SELECT generate_series(0, %s)", (len(LOCK_KEYS) - 1,))
    status, body = world.call(http_call, f"{world.gateway_url('gw2')}/seckill/{SKU}", "PUT",
                              {"stock": stock, "per_user_limit": 1},
                              {"Authorization": f"Bearer {world.ctx.admin_token}"})
    if status != 200:
        raise HarnessError(f"the sale could not be set up: {status} {body}")


def final_rows(world: World) -> dict[str, dict]:
    rows = world.pg_execute("SELECT id, value, fence, plain FROM counters ORDER BY id", fetch=True)
    return {LOCK_KEYS[row[0]]: {"value": row[1], "fence": row[2], "plain": row[3]} for row in rows}


def audit_sale(world: World):
    """The sale as Redis holds it now, through a gateway on today's primary."""
    url = world.start_audit_gateway()
    status, sale = world.call(http_call, f"{url}/seckill/{SKU}")
    if status != 200:
        raise HarnessError(f"GET /seckill/{SKU} answered {status}: {sale}")
    orders, cursor = [], None
    while True:
        query = "?limit=1000" + (f"&cursor={quote(cursor, safe='')}" if cursor else "")
        status, page = world.call(http_call, f"{url}/seckill/{SKU}/orders{query}")
        if status != 200:
            raise HarnessError(f"GET /seckill/{SKU}/orders answered {status}: {page}")
        orders += page["orders"]
        cursor = page.get("next_cursor")
        if not cursor:
            return sale, orders


def stop_clients(clients, stop_file) -> list[str]:
    """Asks the clients to finish their operation in hand and leave; returns
    what went wrong with any of them."""
    stop_file.touch()
    deadline = time.monotonic() + 15
    for process in clients:
        while process.running() and time.monotonic() < deadline:
            time.sleep(0.1)
    problems = []
    for process in clients:
        if process.running():
            process.stop()
            problems.append(f"{process.name} did not stop when asked")
        elif process.popen.returncode != 0:
            tail = process.log.read_text(errors="replace")[-1500:]
            problems.append(f"{process.name} exited with {process.popen.returncode}:\n{tail}")
    return problems


def start_clients(ctx: RunContext, world: World, scenario: Scenario, history_dir):
    stop_file = world.dir / "stop"
    config = workload_config(ctx, world, scenario, history_dir, stop_file)
    config_path = world.dir / "workload.json"
    config_path.write_text(json.dumps(config))
    env = {"PYTHONPATH": str(ctx.chaos_dir), "PATH": "/usr/bin:/bin"}
    clients = [world.spawn("cl", f"client-{name}",
                           [str(ctx.python), "-B", "-m", "harness.workload", str(config_path), name], env=env)
               for name in config["clients"]]
    return clients, stop_file


def run(ctx: RunContext, scenario: Scenario, timing: Timing, stopping: threading.Event) -> Result:
    world = World(ctx, scenario.name, scenario.layout, scenario.wait_replicas)
    history_dir = ctx.out_dir / "history" / scenario.name
    shutil.rmtree(history_dir, ignore_errors=True)
    history_dir.mkdir(parents=True)
    nemesis_history = Writer(history_dir / "nemesis.jsonl")
    nemesis = Nemesis(world, nemesis_history)
    stage = Stage(world, nemesis, history_dir, stopping, timing)
    t0 = now_ms()
    try:
        say(f"{scenario.name}: building hosts")
        world.build()
        expected_s = timing.warmup + timing.hold_fault + timing.after + 4
        seed(world, stock=int(BUYER_RATE * 2 * expected_s * 0.8))
        clients, stop_file = start_clients(ctx, world, scenario, history_dir)
        t0 = now_ms()
        say(f"{scenario.name}: clients running, nemesis on")
        scenario.schedule(stage)
        stage.sleep(timing.after)
        problems = stop_clients(clients, stop_file)
        t1 = now_ms()
        nemesis.heal_all()
        crashed = world.exited()
        say(f"{scenario.name}: checking")
        sale, orders = audit_sale(world)
        records = history.read(history_dir)
        history.write_merged(history_dir.parent / f"{scenario.name}.jsonl", records)
        result = checker.check(scenario, records, final_rows(world), sale, orders, stage.info, t0, t1)
        result.notes += world.notes
        if crashed:
            result.failures.append("processes ended by no one's hand: " + ", ".join(crashed))
        if problems:
            result.error = "\n".join(problems)
    except KeyboardInterrupt:
        raise
    except Exception:  # noqa: BLE001 - reported as the scenario's harness error
        result = failed(scenario, world, history_dir, stage, t0)
    finally:
        try:
            nemesis.heal_all()
        except Exception:  # noqa: BLE001 - the namespaces go next anyway
            pass
        nemesis_history.close()
        say(f"{scenario.name}: taking hosts down")
        world.close()
    result.faults = nemesis.injected
    report.write_timeline(ctx.out_dir, result, scenario.summary)
    return result


def failed(scenario: Scenario, world: World, history_dir, stage: Stage, t0: float) -> Result:
    """The result of a scenario the harness could not finish: the error, how
    the world's processes had ended, and what history there is to draw."""
    error = traceback.format_exc()
    ended = world.exited()
    if ended:
        error += "processes that had ended: " + ", ".join(ended) + "\n"
    t1 = now_ms()
    result = Result(scenario.name, error=error, t0=t0, t1=t1)
    try:
        partial = checker.check(scenario, history.read(history_dir), {}, None, None, stage.info, t0, t1)
        result.holds, result.fault_spans, result.marks = partial.holds, partial.fault_spans, partial.marks
    except Exception:  # noqa: BLE001 - the picture is a courtesy here
        pass
    return result
