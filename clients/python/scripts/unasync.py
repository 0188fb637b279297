#!/usr/bin/env python3
"""Writes the sync client from the asyncio one: each module of
src/lockgate/_async/ becomes the module of the same name in
src/lockgate/_sync/, with `async`/`await` taken out and the asyncio names
made sync ones (httpcore's way of keeping one source for both).

    python scripts/unasync.py            # rewrite src/lockgate/_sync/
    python scripts/unasync.py --check    # exit 1 if it is not what the source makes

`_concurrency.py` is not written: each side has its own, by hand, under the
same names (tasks and timers in asyncio, threads in the sync client).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Dict, List, Tuple

SOURCE = Path(__file__).resolve().parents[1] / "src" / "lockgate" / "_async"
TARGET = SOURCE.parent / "_sync"
HAND_WRITTEN = {"_concurrency.py"}

#: The first line of every async source module, and what it becomes.
SOURCE_MARK = "# The source of both clients: scripts/unasync.py writes the sync one (lockgate/_sync/) from it."
GENERATED_MARK = "# Written by scripts/unasync.py from lockgate/_async/{name}: edit that file, not this one."

#: In order; each a regular expression and its replacement.
SUBSTITUTIONS: List[Tuple[str, str]] = [
    (r"\basync def\b", "def"),
    (r"\basync for\b", "for"),
    (r"\basync with\b", "with"),
    (r"\bawait ", ""),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\b__aiter__\b", "__iter__"),
    (r"\b__anext__\b", "__next__"),
    (r"\bStopAsyncIteration\b", "StopIteration"),
    (r"\baclose\b", "close"),
    (r"\baread\b", "read"),
    (r"\baiter_bytes\b", "iter_bytes"),
    # AsyncGateway, AsyncLock, AsyncIterator, httpx.AsyncClient, ...
    (r"\bAsync(?=[A-Z])", ""),
]


def unasync(text: str, name: str) -> str:
    first, _, rest = text.partition("\n")
    if first != SOURCE_MARK:
        raise SystemExit(f"{SOURCE / name}: the first line must be {SOURCE_MARK!r}")
    for pattern, replacement in SUBSTITUTIONS:
        rest = re.sub(pattern, replacement, rest)
    return GENERATED_MARK.format(name=name) + "\n" + rest


def generated() -> Dict[Path, str]:
    return {
        TARGET / path.name: unasync(path.read_text(encoding="utf-8"), path.name)
        for path in sorted(SOURCE.glob("*.py"))
        if path.name not in HAND_WRITTEN
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check that the sync client is up to date")
    args = parser.parse_args()
    modules = generated()
    stale = [path for path, text in modules.items() if not path.exists() or path.read_text(encoding="utf-8") != text]
    strays = [
        path for path in sorted(TARGET.glob("*.py")) if path not in modules and path.name not in HAND_WRITTEN
    ]
    if args.check:
        for path in stale:
            print(f"{path}: not what scripts/unasync.py writes from the async source", file=sys.stderr)
        for path in strays:
            print(f"{path}: no async source writes it", file=sys.stderr)
        return 1 if stale or strays else 0
    for path in stale:
        path.write_text(modules[path], encoding="utf-8")
        print(f"wrote {path}")
    for path in strays:
        print(f"{path}: no async source writes it (remove it?)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
