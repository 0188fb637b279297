#!/usr/bin/env python3
"""The live half of scripts/test-observability.sh, with the standard library only.

  observability.py targets PROMETHEUS N
      waits until Prometheus scrapes N targets of the job lockgate, all up
  observability.py load SECONDS CA_FILE ADMIN_TOKEN SALE_GATEWAY GATEWAY...
      lock cycles, waits, conflicts, sessions (deleted and expired), streamed
      locks, a watcher and purchases (some rate limited) through the gateways,
      so that every series moves
  observability.py check PROMETHEUS RULES_FILE DASHBOARD RUNBOOK
      evaluates every rule's expression and every dashboard target through
      Prometheus's HTTP API, and names any series that does not exist
"""

import http.client
import json
import random
import re
import ssl
import sys
import threading
import time
import urllib.parse
import urllib.request

# --- Prometheus -----------------------------------------------------------


def api(prometheus, path, **params):
    url = f"{prometheus}{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def query(prometheus, expr):
    """The answer's samples, or raises with Prometheus's error."""
    try:
        answer = api(prometheus, "/api/v1/query", query=expr)
    except urllib.error.HTTPError as err:
        answer = json.load(err)
    if answer.get("status") != "success":
        raise ValueError(f"{answer.get('errorType')}: {answer.get('error')}")
    return answer["data"]["result"]


def wait_for_targets(prometheus, want):
    deadline = time.monotonic() + 30
    while True:
        try:
            targets = api(prometheus, "/api/v1/targets", state="active")["data"]["activeTargets"]
        except OSError:
            targets = []
        ours = [t for t in targets if t["labels"].get("job") == "lockgate"]
        if len(ours) == want and all(t["health"] == "up" for t in ours):
            return
        if time.monotonic() > deadline:
            for t in ours:
                print(f"  target {t['scrapeUrl']}: {t['health']} {t.get('lastError', '')}", file=sys.stderr)
            sys.exit(f"Prometheus does not scrape {want} lockgate targets, all up")
        time.sleep(0.5)


# --- Load -----------------------------------------------------------------


class Gateway:
    """One gateway, over HTTP or HTTPS (trusting CA_FILE)."""

    def __init__(self, url, context):
        parts = urllib.parse.urlsplit(url)
        self.url, self.https, self.host, self.port = url, parts.scheme == "https", parts.hostname, parts.port
        self.context = context

    def connect(self, timeout=10):
        if self.https:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.context)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def call(self, method, path, body=None, headers=None, timeout=10):
        conn = self.connect(timeout)
        try:
            head = {"content-type": "application/json"} if body is not None else {}
            head.update(headers or {})
            conn.request(method, path, json.dumps(body) if body is not None else None, head)
            answer = conn.getresponse()
            data = answer.read()
            return answer.status, (json.loads(data) if data and data[:1] in b"{[" else None)
        finally:
            conn.close()

    def stream(self, method, path, body, seconds):
        """Holds a streamed response open for `seconds`, reading what comes."""
        conn = self.connect()
        try:
            head = {"accept": "text/event-stream"}
            if body is not None:
                head["content-type"] = "application/json"
            conn.request(method, path, json.dumps(body) if body is not None else None, head)
            answer = conn.getresponse()
            until = time.monotonic() + seconds
            while (left := until - time.monotonic()) > 0:
                conn.sock.settimeout(left)
                try:
                    if not answer.fp.readline():
                        break
                except TimeoutError:
                    break
        finally:
            conn.close()


def forever(stop, step, pause):
    """Runs step() until stop is set; a failed request is counted, not fatal."""
    errors = 0
    while not stop.is_set():
        try:
            step()
        except (OSError, http.client.HTTPException):
            errors += 1
            if errors > 50:
                raise
        stop.wait(pause)


def load(seconds, ca_file, admin_token, sale_url, urls):
    context = ssl.create_default_context(cafile=ca_file)
    gateways = [Gateway(url, context) for url in urls]
    sale = Gateway(sale_url, context)
    status, _ = sale.call("PUT", "/seckill/phone", {"stock": 300, "per_user_limit": 2},
                          {"authorization": f"Bearer {admin_token}"})
    if status != 200:
        sys.exit(f"creating the sale answered {status}")
    stop = threading.Event()
    counts = {"requests": 0}
    count_lock = threading.Lock()

    def counted(n=1):
        with count_lock:
            counts["requests"] += n

    def cycles(gw, name):
        n = [0]

        def step():
            n[0] += 1
            key = f"{name}:{n[0] % 16}"
            status, grant = gw.call("POST", "/locks", {"key": key, "ttl_ms": 5000})
            if status == 201:
                gw.call("POST", "/locks", {"key": key, "token": grant["token"]})  # re-entry
                gw.call("GET", f"/locks/{key}")
                gw.call("DELETE", f"/locks/{key}", headers={"lock-token": grant["token"]})
                gw.call("DELETE", f"/locks/{key}", headers={"lock-token": grant["token"]})
            counted(5)
        forever(stop, step, 0.05)

    def waits(holder, waiter):
        def step():
            status, grant = holder.call("POST", "/locks", {"key": "contended", "ttl_ms": 10000})
            if status != 201:
                return
            granted = {}

            def wait():
                granted["answer"] = waiter.call("POST", "/locks", {"key": "contended", "ttl_ms": 5000, "wait_ms": 5000})
            t = threading.Thread(target=wait)
            t.start()
            waiter.call("POST", "/locks", {"key": "contended"})  # a conflict: no wait
            time.sleep(random.uniform(0.2, 0.8))
            holder.call("DELETE", "/locks/contended", headers={"lock-token": grant["token"]})
            t.join()
            status, got = granted.get("answer", (0, None))
            if status == 201:
                waiter.call("DELETE", "/locks/contended", headers={"lock-token": got["token"]})
            counted(4)
        forever(stop, step, 0.1)

    def sessions(gw):
        n = [0]

        def step():
            n[0] += 1
            # Every third session is left to expire (its lease is 1 s).
            expire = n[0] % 3 == 0
            status, session = gw.call("POST", "/sessions", {"ttl_ms": 1000 if expire else 10000})
            if status != 201:
                return
            gw.call("POST", "/locks", {"key": f"session:{n[0]}", "session": session["id"]})
            gw.call("PUT", f"/sessions/{session['id']}")
            if not expire:
                gw.call("DELETE", f"/sessions/{session['id']}")
            counted(4)
        forever(stop, step, 0.5)

    def streamed(gw):
        def step():
            # Renewed every 0.5 s for 3 s, then released as the connection closes.
            gw.stream("POST", "/locks", {"key": "streamed", "ttl_ms": 1500, "wait_ms": 5000}, 3)
            counted()
        forever(stop, step, 0.1)

    def watcher(gw):
        def step():
            gw.stream("GET", "/locks/contended/events", None, max(1.0, seconds / 2))
            counted()
        forever(stop, step, 0.1)

    def buyers():
        n = [0]

        def step():
            n[0] += 1
            gw = gateways[n[0] % len(gateways)]
            gw.call("POST", "/seckill/phone/orders", {"user_id": f"u-{n[0] % 200}", "quantity": 1},
                    {"idempotency-key": f"order-{n[0]}"})
            counted()
        forever(stop, step, 0.03)

    def greedy():
        # One user past the rate (20/s, burst 40) and the cap: 429 and 409.
        def step():
            for _ in range(50):
                sale.call("POST", "/seckill/phone/orders", {"user_id": "greedy", "quantity": 1})
            counted(50)
        forever(stop, step, 5)

    jobs = [(cycles, (gw, f"cycle-{i}")) for i, gw in enumerate(gateways)]
    jobs += [(sessions, (gw,)) for gw in gateways]
    jobs += [
        (waits, (gateways[0], gateways[1 % len(gateways)])),
        (waits, (gateways[-1], gateways[0])),
        (streamed, (gateways[1 % len(gateways)],)),
        (watcher, (gateways[0],)),
        (buyers, ()),
        (greedy, ()),
    ]
    failures = []

    def guarded(job, args):
        try:
            job(*args)
        except Exception as err:  # reported once the others stop
            failures.append(f"{job.__name__}: {err!r}")
    workers = [threading.Thread(target=guarded, args=job) for job in jobs]
    for worker in workers:
        worker.start()
    time.sleep(seconds)
    stop.set()
    for worker in workers:
        worker.join()
    if failures:
        sys.exit("load failed: " + "; ".join(failures))
    print(f"load: {counts['requests']} requests in {seconds} s through {len(gateways)} gateways")


# --- Checking the expressions ---------------------------------------------

KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "bool", "offset", "inf", "nan"}


def metric_names(expr):
    """The metric names a PromQL expression selects (not its functions or labels)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        token = m.group(0)
        if e[m.end():].lstrip().startswith("(") or token.lower() in KEYWORDS:
            continue
        names.add(token)
    return names


def grafana_to_promql(expr):
    """A dashboard target as Prometheus would get it: every instance, 1m windows."""
    for variable in ("${instance}", "$instance"):
        expr = expr.replace(variable, ".*")
    for variable in ("${__rate_interval}", "$__rate_interval", "${__interval}", "$__interval", "$__range"):
        expr = expr.replace(variable, "1m")
    return expr


def anchors(runbook):
    """GitHub's anchors of the runbook's headings."""
    found = set()
    for line in open(runbook, encoding="utf-8"):
        m = re.match(r"#+\s+(.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            found.add(slug)
    return found


def panels(dashboard):
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def check(prometheus, rules_file, dashboard_file, runbook):
    problems = []
    series_exist = {}

    def exists(name):
        if name not in series_exist:
            series_exist[name] = bool(query(prometheus, f'count({{__name__="{name}"}})'))
        return series_exist[name]

    # The rules as Prometheus loaded them.
    declared = len(re.findall(r"^\s*- alert:", open(rules_file, encoding="utf-8").read(), re.M))
    groups = api(prometheus, "/api/v1/rules")["data"]["groups"]
    group = next((g for g in groups if g["name"] == "lockgate"), None)
    if group is None:
        sys.exit(f"the rule group lockgate is not loaded (groups: {[g['name'] for g in groups]})")
    rules = group["rules"]
    if len(rules) != declared:
        problems.append(f"{len(rules)} rules loaded, {declared} in {rules_file}")
    known = anchors(runbook)
    missing_by_name = {}
    for rule in rules:
        name = rule["name"]
        if rule.get("health") != "ok":
            problems.append(f"rule {name}: health {rule.get('health')} {rule.get('lastError', '')}")
        labels, notes = rule.get("labels", {}), rule.get("annotations", {})
        if labels.get("severity") not in ("page", "ticket"):
            problems.append(f"rule {name}: severity {labels.get('severity')!r}, not page or ticket")
        for field in ("summary", "description", "runbook_url"):
            if not notes.get(field):
                problems.append(f"rule {name}: no annotation {field}")
        anchor = notes.get("runbook_url", "").partition("#")[2]
        if anchor not in known:
            problems.append(f"rule {name}: its runbook_url's anchor #{anchor} is no heading of {runbook}")
        try:
            query(prometheus, rule["query"])
        except ValueError as err:
            problems.append(f"rule {name}: its expression fails: {err}")
            continue
        for metric in sorted(metric_names(rule["query"])):
            if not exists(metric):
                missing_by_name.setdefault(metric, []).append(f"rule {name}")

    # Every target of every panel, which must answer at least one sample.
    dashboard = json.load(open(dashboard_file, encoding="utf-8"))
    targets = 0
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            if "expr" not in target:
                continue
            targets += 1
            where = f"panel {panel['title']!r} ({target.get('refId')})"
            expr = grafana_to_promql(target["expr"])
            try:
                samples = query(prometheus, expr)
            except ValueError as err:
                problems.append(f"{where}: its expression fails: {err}")
                continue
            absent = [m for m in sorted(metric_names(expr)) if not exists(m)]
            for metric in absent:
                missing_by_name.setdefault(metric, []).append(where)
            if not samples and not absent:
                problems.append(f"{where}: no sample from {expr}")
    variable = next(v for v in dashboard["templating"]["list"] if v["name"] == "instance")
    instances = api(prometheus, "/api/v1/series", **{"match[]": "lockgate_build_info"})["data"]
    if not instances:
        problems.append(f"the instance variable's {variable['definition']} finds no instance")

    for metric, users in sorted(missing_by_name.items()):
        problems.append(f"no series {metric} (named by {', '.join(users)})")
    if problems:
        print("observability check failed:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        if missing_by_name:
            print(f"  series missing: {' '.join(sorted(missing_by_name))}", file=sys.stderr)
        sys.exit(1)
    print(f"{len(rules)} rule expressions and {targets} panel expressions checked, "
          f"{len(series_exist)} metric names, {len({s.get('instance') for s in instances})} instances")


def main(argv):
    if len(argv) >= 3 and argv[0] == "targets":
        wait_for_targets(argv[1], int(argv[2]))
    elif len(argv) >= 6 and argv[0] == "load":
        load(float(argv[1]), argv[2], argv[3], argv[4], argv[5:])
    elif len(argv) == 5 and argv[0] == "check":
        check(*argv[1:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
