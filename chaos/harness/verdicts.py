"""Verdicts: what each scenario says must hold and what it expects to
break, weighed against what the checker measured (as Jepsen's
`workloads-expected-to-pass`).

A scenario's verdict is, in this order:

* `HARNESS ERROR`: the harness itself failed;
* `VACUOUS`: a window where the side that can still act must have granted
  locks (and sold units) saw none, or a property the scenario must hold
  found nothing to be measured on: its zeros would be those of no activity;
* `BROKEN`: a property that must hold broke;
* `unexpectedly safe`: every must-hold held but a property expected to
  break did not (reported; the run does not fail for it);
* `ok`.

`make chaos` exits non-zero when any scenario is HARNESS ERROR, VACUOUS or
BROKEN.
"""

from __future__ import annotations

from .checker import Result

# Every property the checker states, by the name scenarios declare it with.
PROPERTIES = {
    "exclusion": "no two holders of a key at once (client-observed intervals)",
    "fence-read": "no update lost with the fence raised at every access",
    "fence-write": "no update lost with the fence checked at write only",
    "no-fence": "no update lost without a fence",
    "purchases": "no purchase answered 201 lost",
    "oversell": "no unit sold beyond the stock",
    "token-order": "fencing tokens rise in the real-time order of the grants, none given twice",
    "lease-report": "each expires_at_ms within its request's start and arrival, plus ttl_ms",
    "told-lost": "streamed holders on the faulty gateway told `lost` before their lease could end",
    "lease-kept": "a dead gateway's streamed locks granted again only after their lease",
    "passed-on": "a lock granted to a waiter whose gateway was killed at its turn goes on to the next waiter "
                 "within the waiter's lease + 0.5 s + a tending round (a second where the gateway died earlier)",
    "waited-report": "a grant heard late: its request's start plus the waited_ms it reports no later than its "
                     "lease began",
    "handoff": "every order answered 201 stored exactly once, reconcile clean",
}

# What every scenario must hold unless it says otherwise.
SAFETY = ("exclusion", "fence-read", "purchases", "oversell", "token-order", "lease-report")


def judge(result: Result, must_hold: tuple[str, ...], expected_break: tuple[str, ...]) -> None:
    """Sets the result's verdict, its failures (why not ok) and the
    expected breaks as they showed."""
    if result.error:
        result.verdict = "HARNESS ERROR"
        return
    vacuous = [f"no activity {a['label']} ({a['seconds']} s): {a['grants']} grants"
               + ("" if a["purchases"] is None else f", {a['purchases']} purchases")
               for a in result.activity if not a["ok"]]
    broken = list(result.failures)  # what the harness found beyond the properties
    for name in must_hold:
        prop = result.props.get(name)
        if prop is None or prop.held is None:
            vacuous.append(f"{name}: nothing to measure it on" + (f" ({prop.detail})" if prop else ""))
        elif not prop.held:
            broken.append(f"{name}: {prop.detail}")
    safe = []
    for name in expected_break:
        prop = result.props.get(name)
        if prop is not None and prop.held is False:
            result.expected.append(f"{name}: {prop.detail}")
        else:
            safe.append(name)
    result.failures = [f"vacuous: {v}" for v in vacuous] + [f"broken: {b}" for b in broken]
    if vacuous:
        result.verdict = "VACUOUS"
    elif broken:
        result.verdict = "BROKEN"
    elif safe:
        result.verdict = "unexpectedly safe"
        result.notes.append("expected to break, held: " + ", ".join(safe))
    else:
        result.verdict = "ok"
