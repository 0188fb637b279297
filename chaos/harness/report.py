"""Results people can read: the table (terminal and Markdown) and a timeline
picture per scenario (SVG, written by hand: bars and rectangles need no
plotting library)."""

from __future__ import annotations

from html import escape
from pathlib import Path

from .checker import Result

COLUMNS = [
    ("scenario", "scenario"),
    ("operations", "operations"),
    ("faults", "faults injected"),
    ("overlaps", "overlaps"),
    ("lost_plain", "lost updates, no fence"),
    ("lost_fenced", "lost updates, fence"),
    ("stale_refused", "stale writes refused"),
    ("purchases_lost", "purchases lost"),
    ("oversold", "units oversold"),
    ("verdict", "invariants"),
]


def verdict(result: Result) -> str:
    if result.error:
        return "HARNESS ERROR"
    return "ok" if not result.failures else "FAILED"


def rows(results: list[Result]) -> list[list[str]]:
    table = []
    for result in results:
        row = []
        for attribute, _ in COLUMNS:
            if attribute == "scenario":
                row.append(result.scenario)
            elif attribute == "verdict":
                row.append(verdict(result))
            elif result.error:
                row.append("-")
            else:
                row.append(str(getattr(result, attribute)))
        table.append(row)
    return table


def text_table(results: list[Result]) -> str:
    header = [title for _, title in COLUMNS]
    body = rows(results)
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def line(cells):
        return "  ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                         for i, (cell, width) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(header), line(["-" * width for width in widths]), *map(line, body)])


def markdown(results: list[Result], scenarios: dict, header_notes: list[str]) -> str:
    lines = ["# lockgate fault harness: results", ""]
    lines += [f"{note}" for note in header_notes] + [""] if header_notes else []
    lines += ["| " + " | ".join(title for _, title in COLUMNS) + " |",
              "|" + "|".join("---" if i == 0 else "---:" for i in range(len(COLUMNS))) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows(results)]
    lines.append("")
    for result in results:
        lines += [f"## {result.scenario}", "", scenarios[result.scenario].summary + ".", ""]
        if result.error:
            lines += ["Harness error:", "", "```", result.error.strip(), "```", ""]
        for failure in result.failures:
            lines.append(f"* **broken:** {failure}")
        for note in result.notes:
            lines.append(f"* {note}")
        lines += ["", f"![timeline of {result.scenario}]({result.scenario}.svg)", ""]
    return "\n".join(lines)


# The timeline.

WIDTH, LEFT, RIGHT, TOP, ROW, BOTTOM = 1100, 70, 20, 76, 18, 40
COLOURS = {"plain": "#4C78A8", "stream": "#54A24B", "overlap": "#E45756"}


def svg(result: Result, summary: str) -> str:
    clients = sorted({hold.client for hold in result.holds} | {c for _, c in result.refused_writes})
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
             f'<text x="{LEFT}" y="47" fill="#555">holders of each lock over time, one row per client: '
             f'blue plain, green streamed, red overlapping another holder, pale: still at work after the lease</text>',
             f'<text x="{LEFT}" y="60" fill="#555">grey: faults; dashed: a replica promoted or demoted; '
             f'x: a stale write the fence refused; ◆: told lost</text>']
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
    for at, client in result.refused_writes:
        cx, cy = x(at), TOP + rows_of[client] * ROW + ROW / 2
        parts.append(f'<path d="M{cx - 4:.1f},{cy - 4:.1f} L{cx + 4:.1f},{cy + 4:.1f} M{cx - 4:.1f},{cy + 4:.1f} '
                     f'L{cx + 4:.1f},{cy - 4:.1f}" stroke="black" stroke-width="2"/>')
    for at, client in result.told_lost:
        if client in rows_of:
            cx, cy = x(at), TOP + rows_of[client] * ROW + ROW / 2
            parts.append(f'<path d="M{cx:.1f},{cy - 5:.1f} L{cx + 5:.1f},{cy:.1f} L{cx:.1f},{cy + 5:.1f} '
                         f'L{cx - 5:.1f},{cy:.1f} Z" fill="orange" stroke="black" stroke-width="0.5"/>')
    for second in range(0, int(span / 1000) + 1, 5):
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


def write_timeline(out_dir: Path, result: Result, summary: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{result.scenario}.svg").write_text(svg(result, summary))
