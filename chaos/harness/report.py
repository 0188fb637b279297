"""Results people can read: the table (terminal and Markdown) and a timeline
picture per scenario (SVG, written by hand: bars and rectangles need no
plotting library)."""

from __future__ import annotations

from html import escape
from pathlib import Path

from .checker import Result
from .verdicts import PROPERTIES

COLUMNS = [
    ("scenario", "scenario"),
    ("operations", "operations"),
    ("faults", "faults"),
    ("unavailable_s", "unavailable s"),
    ("overlaps", "overlaps"),
    ("lost_plain", "lost: no fence"),
    ("lost_w", "lost: fence at write"),
    ("lost_r", "lost: fence at read"),
    ("refused", "stale refused (write/read)"),
    ("tokens_backwards", "tokens backwards"),
    ("purchases_lost", "purchases lost"),
    ("oversold", "oversold"),
    ("verdict", "verdict"),
]


def verdict(result: Result) -> str:
    return result.verdict or ("HARNESS ERROR" if result.error else "?")


def cell(result: Result, attribute: str) -> str:
    if attribute == "scenario":
        return result.scenario
    if attribute == "verdict":
        return verdict(result)
    if result.error:
        return "-"
    if attribute == "refused":
        return f"{result.refused_w}/{result.refused_r}"
    if attribute == "unavailable_s":
        return "-" if result.unavailable_s is None else f"{result.unavailable_s:.1f}"
    if attribute == "tokens_backwards":
        return str(result.tokens_backwards + result.tokens_duplicate)
    return str(getattr(result, attribute))


def rows(results: list[Result]) -> list[list[str]]:
    return [[cell(result, attribute) for attribute, _ in COLUMNS] for result in results]


def text_table(results: list[Result]) -> str:
    header = [title for _, title in COLUMNS]
    body = rows(results)
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def line(cells):
        return "  ".join(cell.ljust(width) if i in (0, len(cells) - 1) else cell.rjust(width)
                         for i, (cell, width) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(header), line(["-" * width for width in widths]), *map(line, body)])


def declared(scenario) -> list[str]:
    """What the scenario says must hold and expects to break, and how it came out."""
    return ["must hold: " + ", ".join(f"`{name}`" for name in scenario.must_hold),
            "expected to break: " + (", ".join(f"`{name}`" for name in scenario.expected_break) or "nothing")]


def markdown(results: list[Result], scenarios: dict, header_notes: list[str]) -> str:
    lines = ["# lockgate fault harness: results", ""]
    lines += [f"{note}" for note in header_notes] + [""] if header_notes else []
    lines += ["| " + " | ".join(title for _, title in COLUMNS) + " |",
              "|" + "|".join("---" if i in (0, len(COLUMNS) - 1) else "---:" for i in range(len(COLUMNS))) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows(results)]
    lines += ["", "The properties (`python -m harness run` declares which must hold where):", ""]
    lines += [f"* `{name}`: {text}" for name, text in PROPERTIES.items()]
    lines.append("")
    for result in results:
        scenario = scenarios[result.scenario]
        lines += [f"## {result.scenario}: {verdict(result)}", "", scenario.summary + ".", ""]
        lines += [f"* {line}" for line in declared(scenario)]
        lines.append("")
        if result.error:
            lines += ["Harness error:", "", "```", result.error.strip(), "```", ""]
        if result.props:
            lines += ["| property | | measured |", "|---|---|---|"]
            for name in PROPERTIES:
                prop = result.props.get(name)
                if prop is None:
                    continue
                state = {True: "held", False: "**broke**", None: "not measured"}[prop.held]
                role = ("must hold" if name in scenario.must_hold else
                        "expected to break" if name in scenario.expected_break else "reported")
                lines.append(f"| `{name}` ({role}) | {state} | {prop.detail} |")
            lines.append("")
        if result.activity:
            lines += ["| activity required | seconds | grants | purchases |", "|---|---:|---:|---:|"]
            for window in result.activity:
                bought = "-" if window["purchases"] is None else str(window["purchases"])
                flag = "" if window["ok"] else " **(none)**"
                lines.append(f"| {window['label']}{flag} | {window['seconds']} | {window['grants']} | {bought} |")
            lines.append("")
        for failure in result.failures:
            lines.append(f"* **{failure}**")
        for shown in result.expected:
            lines.append(f"* broke as expected: {shown}")
        for note in result.notes:
            lines.append(f"* {note}")
        lines += ["", f"![timeline of {result.scenario}]({result.scenario}.svg)", ""]
    return "\n".join(lines)


# The timeline.

WIDTH, LEFT, RIGHT, TOP, ROW, BOTTOM = 1100, 70, 20, 76, 18, 40
COLOURS = {"plain": "#4C78A8", "stream": "#54A24B", "overlap": "#E45756", "unheard": "#F58518"}
UNHEARD = "dead"  # the row of grants to waiters whose gateway died before answering them


def svg(result: Result, summary: str, stamp: str = "") -> str:
    clients = sorted({hold.client for hold in result.holds} | {c for _, c in result.refused_writes})
    if result.unheard_grants:
        clients.append(UNHEARD)
    rows_of = {client: i for i, client in enumerate(clients)}
    height = TOP + ROW * max(len(clients), 1) + BOTTOM + 12 * len(result.fault_spans)
    t0, t1 = result.t0, max(result.t1, result.t0 + 1)
    span = t1 - t0

    def x(t: float) -> float:
        return LEFT + (min(max(t, t0), t1) - t0) / span * (WIDTH - LEFT - RIGHT)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'font-family="sans-serif" font-size="11">',
             '<rect width="100%" height="100%" fill="white"/>',
             f'<text x="{LEFT}" y="16" font-size="14" font-weight="bold">{escape(result.scenario)}</text>',
             f'<text x="{LEFT}" y="32">{escape(summary)}</text>',
             f'<text x="{WIDTH - RIGHT}" y="16" text-anchor="end" fill="#555">{escape(stamp)}</text>',
             f'<text x="{LEFT}" y="47" fill="#555">holders of each lock over time, one row per client: '
             f'blue plain, green streamed, red overlapping another holder, pale: still at work after the lease</text>',
             f'<text x="{LEFT}" y="60" fill="#555">grey: faults; dashed: a replica promoted or demoted; '
             f'x: a stale write a fence refused; ◆: told lost; ▼: a grant whose fencing token went backwards'
             + ('; orange (row "dead"): a grant no client heard of, its waiter\'s gateway killed'
                if result.unheard_grants else '') + '</text>']
    bottom = TOP + ROW * len(clients)
    for i, (start, end, label) in enumerate(result.fault_spans):
        parts.append(f'<rect x="{x(start):.1f}" y="{TOP}" width="{max(x(end) - x(start), 1):.1f}" '
                     f'height="{bottom - TOP}" fill="#999" fill-opacity="0.25"><title>{escape(label)}</title></rect>')
        parts.append(f'<text x="{x(start) + 2:.1f}" y="{bottom + 28 + 12 * i}" fill="#555">{escape(label)}</text>')
    for at, label in result.marks:
        parts.append(f'<line x1="{x(at):.1f}" x2="{x(at):.1f}" y1="{TOP}" y2="{bottom}" stroke="#333" '
                     f'stroke-dasharray="3,3"><title>{escape(label)}</title></line>')
        parts.append(f'<text x="{x(at) + 2:.1f}" y="{TOP - 3}" fill="#333">{escape(label)}</text>')
    for client, i in rows_of.items():
        y = TOP + i * ROW
        parts.append(f'<text x="{LEFT - 6}" y="{y + ROW - 5}" text-anchor="end">{escape(client)}</text>')
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y + ROW}" y2="{y + ROW}" stroke="#eee"/>')
    for hold in result.holds:
        y = TOP + rows_of[hold.client] * ROW + 3
        overrun_from = max(hold.start, hold.lease_end)
        if hold.given_back > overrun_from:
            parts.append(f'<rect x="{x(overrun_from):.1f}" y="{y}" '
                         f'width="{max(x(hold.given_back) - x(overrun_from), 1):.1f}" height="{ROW - 6}" '
                         f'fill="{COLOURS[hold.kind]}" fill-opacity="0.3"><title>{escape(hold.key)}: '
                         f'its client still at work after the lease ended</title></rect>')
        if hold.end <= hold.start:
            continue
        colour = COLOURS["overlap" if hold.overlapped else hold.kind]
        parts.append(f'<rect x="{x(hold.start):.1f}" y="{y}" width="{max(x(hold.end) - x(hold.start), 1):.1f}" '
                     f'height="{ROW - 6}" fill="{colour}"><title>{escape(hold.key)} via {hold.gateway}, '
                     f'fencing token {hold.fencing_token}</title></rect>')
    for start, end, label in result.unheard_grants:
        y = TOP + rows_of[UNHEARD] * ROW + 3
        parts.append(f'<rect x="{x(start):.1f}" y="{y}" width="{max(x(end) - x(start), 1):.1f}" height="{ROW - 6}" '
                     f'fill="{COLOURS["unheard"]}"><title>{escape(label)}</title></rect>')
    for at, client in result.refused_writes:
        cx, cy = x(at), TOP + rows_of[client] * ROW + ROW / 2
        parts.append(f'<path d="M{cx - 4:.1f},{cy - 4:.1f} L{cx + 4:.1f},{cy + 4:.1f} M{cx - 4:.1f},{cy + 4:.1f} '
                     f'L{cx + 4:.1f},{cy - 4:.1f}" stroke="black" stroke-width="2"/>')
    for at, client in result.told_lost:
        if client in rows_of:
            cx, cy = x(at), TOP + rows_of[client] * ROW + ROW / 2
            parts.append(f'<path d="M{cx:.1f},{cy - 5:.1f} L{cx + 5:.1f},{cy:.1f} L{cx:.1f},{cy + 5:.1f} '
                         f'L{cx - 5:.1f},{cy:.1f} Z" fill="orange" stroke="black" stroke-width="0.5"/>')
    for at, client in result.backwards_grants:
        if client in rows_of:
            cx, cy = x(at), TOP + rows_of[client] * ROW + 3
            parts.append(f'<path d="M{cx - 5:.1f},{cy:.1f} L{cx + 5:.1f},{cy:.1f} L{cx:.1f},{cy + 8:.1f} Z" '
                         f'fill="purple"/>')
    step = 5 if span <= 120_000 else 30
    for second in range(0, int(span / 1000) + 1, step):
        tx = x(t0 + second * 1000)
        parts.append(f'<line x1="{tx:.1f}" x2="{tx:.1f}" y1="{bottom}" y2="{bottom + 4}" stroke="black"/>')
        parts.append(f'<text x="{tx:.1f}" y="{bottom + 14}" text-anchor="middle">{second} s</text>')
    parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{bottom}" y2="{bottom}" stroke="black"/>')
    parts.append("</svg>")
    return "\n".join(parts)


def write(out_dir: Path, results: list[Result], scenarios: dict, header_notes: list[str]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "results.md"
    path.write_text(markdown(results, scenarios, header_notes))
    return path


def write_timeline(out_dir: Path, result: Result, summary: str, stamp: str = "") -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{result.scenario}.svg").write_text(svg(result, summary, stamp))
