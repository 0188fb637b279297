#!/usr/bin/env python3
"""Writes the Debian package's copyright file (DEP-5, from LICENSE) and its
Debian-format changelog (from CHANGELOG.md), so that neither is a second
copy to keep in step: packaging/debian-docs.py OUT_DIR [MAINTAINER]."""

import email.utils
import re
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEP5 = "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"


def copyright_file() -> str:
    lines = (ROOT / "LICENSE").read_text().splitlines()
    if not lines or lines[0].strip() != "MIT License":
        sys.exit("debian-docs: LICENSE does not start with 'MIT License'")
    holder = next(l for l in lines if l.startswith("Copyright"))
    body = lines[lines.index(holder) + 1 :]
    while body and not body[0].strip():
        body.pop(0)
    text = "\n".join(f" {l}" if l.strip() else " ." for l in body).rstrip()
    return (
        f"Format: {DEP5}\n"
        "Upstream-Name: lockgate\n\n"
        "Files: *\n"
        f"Copyright: {holder.removeprefix('Copyright (c)').strip()}\n"
        "License: Expat\n\n"
        f"License: Expat\n{text}\n"
    )


def releases():
    """(version, date or None, [(heading, item)]) per section of CHANGELOG.md."""
    found = []
    heading = ""
    for line in (ROOT / "CHANGELOG.md").read_text().splitlines():
        release = re.match(r"## \[([^]]+)\] - (.+)", line)
        if release:
            date = release.group(2).strip()
            found.append((release.group(1), None if date == "Unreleased" else date, []))
            heading = ""
        elif not found:
            continue
        elif line.startswith("### "):
            heading = line[4:].strip()
        elif line.startswith("- "):
            found[-1][2].append((heading, line[2:].strip()))
        elif line.startswith("  ") and found[-1][2] and line.strip():
            h, item = found[-1][2][-1]
            found[-1][2][-1] = (h, f"{item} {line.strip()}")
    return found


def plain(markdown: str) -> str:
    """Markdown links and code spans as plain text."""
    text = re.sub(r"\[([^]]+)\]\([^)]+\)", r"\1", markdown)
    return text.replace("`", "").replace("**", "")


def changelog(maintainer: str) -> str:
    # An unreleased section is dated by the last commit, so that two builds
    # of one commit make the same package.
    last_commit = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%ct"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()
    entries = []
    for version, date, items in releases():
        when = (
            datetime.fromtimestamp(int(last_commit or 0), timezone.utc)
            if date is None
            else datetime.fromisoformat(date).replace(tzinfo=timezone.utc)
        )
        stamp = email.utils.format_datetime(when)
        lines = [f"lockgate ({version}) {'UNRELEASED' if date is None else 'unstable'}; urgency=medium", ""]
        for heading, item in items:
            wrapped = textwrap.wrap(
                f"{heading}: {plain(item)}" if heading else plain(item),
                width=76, initial_indent="  * ", subsequent_indent="    ",
                break_on_hyphens=False,
            )
            lines.extend(wrapped)
        lines += ["", f" -- {maintainer}  {stamp}", ""]
        entries.append("\n".join(lines))
    return "\n".join(entries)


def main() -> None:
    out = Path(sys.argv[1])
    maintainer = sys.argv[2] if len(sys.argv) > 2 else "The lockgate authors <lockgate@example.org>"
    out.mkdir(parents=True, exist_ok=True)
    (out / "copyright").write_text(copyright_file())
    (out / "changelog").write_text(changelog(maintainer))


if __name__ == "__main__":
    main()
