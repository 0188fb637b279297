"""The history of a scenario: JSON lines, one file per writer.

Every client process and the nemesis append to their own file (no two
writers share one), flushing each line, so the nemesis can watch the
clients' progress while they run and a killed writer loses nothing written.
Times are Unix epoch milliseconds from the machine's clock: every host
shares one kernel, so the clients, the gateways and the nemesis read the
same clock. Redis reads it too, unless a scenario moves a Redis server's
clock (see `clockshift.c`); that is why the checker bounds every lease the
gateway reports by the client's own times (`checker.lease_end`).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path


def now_ms() -> float:
    return round(time.time() * 1000, 3)


class Writer:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", buffering=1)
        self._lock = threading.Lock()

    def write(self, record: dict) -> dict:
        line = json.dumps(record, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
        return record

    def close(self) -> None:
        self._file.close()


def read(directory: Path) -> list[dict]:
    """Every record of every file in `directory`, ordered by start time."""
    records = []
    for path in sorted(directory.glob("*.jsonl")):
        with open(path) as lines:
            for line in lines:
                line = line.strip()
                if line:
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError:
                        # A line cut short by a killed writer.
                        pass
    records.sort(key=lambda record: record.get("start", record.get("time", 0)))
    return records


def write_merged(path: Path, records: list[dict]) -> None:
    """One file with every record of a scenario, in order, for reading."""
    with open(path, "w") as out:
        for record in records:
            out.write(json.dumps(record, separators=(",", ":")) + "\n")


class Tail:
    """Follows one history file as it grows (for the nemesis)."""

    def __init__(self, path: Path):
        self.path, self.offset, self.partial = path, 0, ""

    def new_records(self) -> list[dict]:
        if not self.path.exists():
            return []
        with open(self.path) as handle:
            handle.seek(self.offset)
            chunk = handle.read()
            self.offset = handle.tell()
        text = self.partial + chunk
        lines = text.split("\n")
        self.partial = lines.pop()
        return [json.loads(line) for line in lines if line.strip()]
