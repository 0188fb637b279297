"""Runs one scenario from start to end: build the world, seed the rows and
the sale, start the clients, run the nemesis schedule, stop the clients,
read back what Redis and PostgreSQL hold, check, judge, take the world down."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
import traceback
import uuid
from urllib.parse import quote

from . import checker, history, report, verdicts
from .checker import Result
from .history import Writer, now_ms
from .nemesis import Nemesis, Stage
from .scenarios import LOCK_KEYS, SKU, Scenario, Timing
from .topology import GATEWAYS, HarnessError, RunContext, World, http_call

BUYER_RATE = 10  # purchases per second per buyer
DRAIN_CHUNK = 100  # units the drain buys per purchase (the sale's per-user limit)
LEASE_SABOTAGE = 3  # `--sabotage lease`: how many times longer the leases set per home gateway are asked


def say(message: str) -> None:
    print(f"chaos: {message}", file=sys.stderr, flush=True)


def workload_config(ctx: RunContext, world: World, scenario: Scenario, history_dir, stop_file,
                    seconds: float) -> dict:
    load = scenario.workload
    clients = {}
    for i in range(6):
        name, home = f"L{i + 1}", GATEWAYS[i % 3]
        ttl_ms = load.home_ttl_ms.get(home, load.plain_ttl_ms)
        if ctx.sabotage == "lease" and home in load.home_ttl_ms:
            # Leases longer than the scenario set, which its checks still
            # hold the grants to: as if the gateway granted more than asked.
            ttl_ms *= LEASE_SABOTAGE
        clients[name] = {"kind": "locker", "home": home, "keys": list(load.locker_keys),
                         "ttl_ms": ttl_ms, "wait_ms": load.plain_wait_ms,
                         "work_ms": load.victim_work_ms if name == scenario.victim
                         else load.home_work_ms.get(home, load.work_ms)}
    # Streamed holders hold for seconds: most of their keys are their own, so
    # that the plain holders are not starved waiting behind them; chaos:k1
    # they share with the lockers.
    for i in range(3):
        clients[f"S{i + 1}"] = {"kind": "streamer", "home": GATEWAYS[i], "keys": list(load.stream_keys),
                                # Waiting longer than anyone holds: a streamer
                                # that asks gets a lock.
                                "ttl_ms": load.stream_ttl_ms, "wait_ms": 9000, "hold_s": list(load.hold_s),
                                "write_every_ms": 300, "work_ms": [20, 20]}
    for i in range(2):
        clients[f"B{i + 1}"] = {"kind": "buyer", "home": GATEWAYS[i], "rate": BUYER_RATE}
    return {
        "gateways": {name: world.gateway_url(name) for name in GATEWAYS},
        "pg": world.pg_dsn, "keys": LOCK_KEYS, "sku": SKU, "seed": ctx.run_id,
        "slack_s": load.slack_s, "sabotage": ctx.sabotage,
        # A backstop only: the runner ends the clients with the stop file.
        "deadline": time.time() + seconds + 900,
        "history_dir": str(history_dir), "stop_file": str(stop_file), "clients": clients,
    }


def seed(world: World, stock: int) -> None:
    # One counter per way of guarding it (see workload.py), each with its fence.
    world.pg_execute("CREATE TABLE counters (id int PRIMARY KEY, plain bigint NOT NULL DEFAULT 0, "
                     "value_w bigint NOT NULL DEFAULT 0, fence_w bigint NOT NULL DEFAULT 0, "
                     "value_r bigint NOT NULL DEFAULT 0, fence_r bigint NOT NULL DEFAULT 0)")
    world.pg_execute("INSERT INTO counters (id) SELECT generate_series(0, %s)", (len(LOCK_KEYS) - 1,))
    status, body = world.call(http_call, f"{world.gateway_url('gw2')}/seckill/{SKU}", "PUT",
                              {"stock": stock, "per_user_limit": DRAIN_CHUNK},
                              {"Authorization": f"Bearer {world.ctx.admin_token}"})
    if status != 200:
        raise HarnessError(f"the sale could not be set up: {status} {body}")


def final_rows(world: World) -> dict[str, dict]:
    rows = world.pg_execute("SELECT id, plain, value_w, value_r FROM counters ORDER BY id", fetch=True)
    return {LOCK_KEYS[row[0]]: {"plain": row[1], "value_w": row[2], "value_r": row[3]} for row in rows}


def audit_handoff(world: World, stage: Stage, audit_url: str) -> set[str]:
    """Once the hand-off has stored every order (`pending` 0, waited up to
    60 s): the rows the database holds, and `lockgate orders reconcile`."""
    began = time.monotonic()
    pending = None
    while time.monotonic() - began < 60:
        status, sale = world.call(http_call, f"{audit_url}/seckill/{SKU}")
        pending = sale.get("pending") if status == 200 else None
        if pending == 0:
            break
        time.sleep(0.5)
    rows = world.pg_execute("SELECT order_id, count(*) FROM orders WHERE sku = %s GROUP BY order_id", (SKU,),
                            fetch=True)
    status, output = world.reconcile(SKU)
    stored = {row[0] for row in rows}
    stage.info["handoff"] = {"stored": stored, "pending": pending, "waited_s": time.monotonic() - began,
                             "duplicates": sum(1 for row in rows if row[1] > 1),
                             "reconcile_status": status, "reconcile": output}
    return stored


def audit_sale(world: World, url: str):
    """The sale as Redis holds it now, through a gateway on today's primary."""
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


def drain_sale(world: World, history_dir) -> None:
    """Buys what is left of the sale, up to DRAIN_CHUNK units per new user,
    through the first gateway that answers, recording each purchase like a
    buyer's (client `drain`), until the sale has no stock left."""
    writer = Writer(history_dir / "drain.jsonl")

    def buy(user: str, quantity: int) -> None:
        key, start = str(uuid.uuid4()), now_ms()
        status, answer, attempts, name = None, None, [], None
        for name in GATEWAYS * 2:
            try:
                status, answer = http_call(f"{world.gateway_url(name)}/seckill/{SKU}/orders", "POST",
                                           {"user_id": user, "quantity": quantity}, {"Idempotency-Key": key},
                                           timeout=3)
            except Exception as exc:  # noqa: BLE001 - an unreachable gateway: the next
                attempts.append([name, type(exc).__name__])
                continue
            attempts.append([name, status])
            if status != 503:
                break
        confirmed = status in (200, 201)
        slug = answer.get("type", "").rsplit("/", 1)[-1] if isinstance(answer, dict) else ""
        writer.write({"client": "drain", "op": "purchase", "key": key, "user": user, "start": start,
                      "end": now_ms(), "outcome": "confirmed" if confirmed else slug or f"status-{status}",
                      "status": status, "attempts": attempts, "gateway": name, "quantity": quantity,
                      "order_id": answer.get("order_id") if confirmed else None})

    def drain() -> None:
        for n in range(1, 1000):
            try:
                status, sale = http_call(f"{world.gateway_url('gw2')}/seckill/{SKU}", timeout=3)
            except Exception:  # noqa: BLE001 - buy a chunk anyway: its answer says what is left
                status, sale = None, None
            left = sale.get("stock", 0) if status == 200 and isinstance(sale, dict) else DRAIN_CHUNK
            if left <= 0:
                return
            buy(f"drain-u{n}", min(DRAIN_CHUNK, left))

    try:
        world.call(drain)
    finally:
        writer.close()


def stop_clients(clients, stop_file, patience: float) -> list[str]:
    """Asks the clients to finish their operation in hand and leave (within
    `patience` seconds); returns what went wrong with any of them."""
    stop_file.touch()
    deadline = time.monotonic() + patience
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


def start_clients(ctx: RunContext, world: World, scenario: Scenario, history_dir, seconds: float):
    stop_file = world.dir / "stop"
    config = workload_config(ctx, world, scenario, history_dir, stop_file, seconds)
    config_path = world.dir / "workload.json"
    config_path.write_text(json.dumps(config))
    env = {"PYTHONPATH": str(ctx.chaos_dir), "PATH": "/usr/bin:/bin"}
    clients = [world.spawn("cl", f"client-{name}",
                           [str(ctx.python), "-B", "-m", "harness.workload", str(config_path), name], env=env)
               for name in config["clients"]]
    return clients, stop_file


def run(ctx: RunContext, scenario: Scenario, timing: Timing, stopping: threading.Event) -> Result:
    world = World(ctx, scenario.name, scenario.setup)
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
        expected_s = scenario.expected_seconds(timing)
        # More than the buyers can buy before the end, however long the
        # schedule waits for its moments (`drain_sale` buys the rest).
        seed(world, stock=int(BUYER_RATE * 2 * (expected_s + 120) * 1.5))
        clients, stop_file = start_clients(ctx, world, scenario, history_dir, expected_s)
        t0 = now_ms()
        say(f"{scenario.name}: clients running, nemesis on")
        scenario.schedule(stage)
        # The buyers buy after the heal; then the rest of the stock is
        # bought at once, so that the sale is sold out while they go on
        # (overselling shows only in a sale that sells out).
        stage.sleep(timing.after / 2)
        drain_sale(world, history_dir)
        stage.sleep(timing.after / 2)
        load = scenario.workload
        # The longest a client can be inside one operation: a wait, its
        # answer's delay, the work under the lock.
        longest_work = max([load.work_ms[1], *(work[1] for work in load.home_work_ms.values())])
        patience = 15 + load.plain_wait_ms / 1000 + longest_work / 1000 + 2 * load.slack_s
        problems = stop_clients(clients, stop_file, patience)
        t1 = now_ms()
        nemesis.heal_all()
        crashed = world.exited()
        say(f"{scenario.name}: checking")
        audit_url = world.start_audit_gateway()
        stored = audit_handoff(world, stage, audit_url) if scenario.setup.handoff else None
        sale, orders = audit_sale(world, audit_url)
        records = history.read(history_dir)
        history.write_merged(history_dir.parent / f"{scenario.name}.jsonl", records)
        result = checker.check(scenario, records, final_rows(world), sale, orders, stored, stage.info, t0, t1)
        result.notes += world.notes
        if crashed:
            result.failures.append("processes ended by no one's hand: " + ", ".join(crashed))
        if problems:
            result.error = "\n".join(problems)
        verdicts.judge(result, scenario.must_hold, scenario.expected_break)
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
    report.write_timeline(ctx.out_dir, result, scenario.summary, ctx.stamp)
    return result


def failed(scenario: Scenario, world: World, history_dir, stage: Stage, t0: float) -> Result:
    """The result of a scenario the harness could not finish: the error, how
    the world's processes had ended, and what history there is to draw."""
    error = traceback.format_exc()
    ended = world.exited()
    if ended:
        error += "processes that had ended: " + ", ".join(ended) + "\n"
    t1 = now_ms()
    result = Result(scenario.name, error=error, t0=t0, t1=t1, verdict="HARNESS ERROR")
    try:
        partial = checker.check(scenario, history.read(history_dir), {}, None, None, None, stage.info, t0, t1)
        result.holds, result.fault_spans, result.marks = partial.holds, partial.fault_spans, partial.marks
    except Exception:  # noqa: BLE001 - the picture is a courtesy here
        pass
    return result
