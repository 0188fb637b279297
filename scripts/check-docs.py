#!/usr/bin/env python3
"""Runs the docs' marked examples against a real gateway; fails where an answer is not what they show.

    scripts/check-docs.py [-v] [--keep] [DOC.md ...]   default: README.md docs/using.md

It starts a redis-server and a gateway (LOCKGATE_BIN, default
target/release/lockgate) on free ports, as `make run` has it: an admin
token in .run/admin-token and the order hand-off into
sqlite://.run/orders.db, in a scratch directory that stands for the
checkout (its target/release/lockgate is the binary). Then it types every
command of the marked blocks into one bash session, the documents in the
order given, each from top to bottom. Each `localhost:PORT` or
`127.0.0.1:PORT` gets a free port of its own (8080 is the gateway's), and
LOCKGATE_REDIS_URL points the session's `lockgate` commands at the test's
Redis, as the default points them at `make run`'s.

The marks are HTML comments, which a reader of the rendered page does not see:

    <!-- check -->                     before a ```console block: run it
    <!-- check skip: REASON -->        before a ```console block: do not
    <!-- check restart: NAME=VALUE --> restart the gateway with NAME set to
                                       VALUE as the shell expands it (what
                                       the docs ask the reader to do by hand)

Every ```console block with a `$ ` command needs one of the first two, so
that a new example is checked, or skipped, on purpose.

In a block, `$ ` starts a command (`\\` at the end of a line continues it);
the lines up to the next command are what the terminal shows after it,
`  # comments` left out. What the terminal shows is compared with them:

* `HTTP/1.1 NNN ...` and headers: the status, and each header shown is there;
* JSON: the same field names (`...` among them: there may be more) and the
  same types of values, not the values themselves, except booleans and a
  problem document's `type` and `status`; `...` as a value is anything;
* Server-Sent Events: the first events are the ones shown, in order, each
  one's data as JSON above (more may follow: renewals, say);
* other text: line by line, but for long numbers and UUIDs.

A command ending in `&` runs on in the background, and what it prints is
awaited; output shown ending in `^C` is awaited, then the command is
interrupted. A command shown without output must succeed; its output is not
compared. A read (a GET, sqlite3, cat, `orders reconcile`) that differs is
run again for a few seconds, since a reader types slower than the order
hand-off stores. A string the docs show in an answer (a token) stands, in
the commands after it, for the one the gateway really gave.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DOCS = ["README.md", "docs/using.md"]
GATEWAY_PORT = 8080  # the docs' gateway: `make run`'s

FOREGROUND_TIMEOUT = 90.0  # a command that waits for a lock may take a while
AWAIT_TIMEOUT = 15.0  # for a background job's output, or the output before a ^C
READ_RETRY = 5.0  # a read that differs is run again for this long

MARK = re.compile(r"^<!--\s*check(?:\s+(skip|restart)\s*:\s*(.*?))?\s*-->$")
FENCE = re.compile(r"^(```+|~~~+)\s*([\w-]*)")
ADDRESS = re.compile(r"\b(localhost|127\.0\.0\.1):(\d{4,5})\b")
OUTPUT_COMMENT = re.compile(r"(\s{2,}|^\s*)#( .*)?$")
HTTP_STATUS = re.compile(r"^HTTP/[\d.]+ (\d{3})")
UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
LONG_NUMBER = re.compile(r"\d{6,}")


class DocsError(Exception):
    """A document that cannot be checked as written."""


# ------------------------------------------------------------------ the Markdown


@dataclass
class Command:
    """A `$ ` command of a block, and the lines the docs show after it."""

    line: int  # of the `$ `, from 1
    text: str  # as typed, continuation lines included
    output: List[str]
    interrupt: bool  # the output shown ends in ^C


@dataclass
class Block:
    """A marked ```console block, or a restart mark."""

    doc: str
    line: int  # of the mark
    kind: str  # "check", "skip" or "restart"
    note: str = ""  # the skip's reason, or the restart's NAME=VALUE
    commands: List[Command] = field(default_factory=list)


def read_blocks(doc: str, text: str) -> List[Block]:
    """The marks and marked console blocks of a document, in order."""
    lines = text.split("\n")
    blocks: List[Block] = []
    unmarked: List[str] = []
    pending: Optional[Block] = None  # a check or skip mark, before its block
    i = 0
    while i < len(lines):
        mark = MARK.match(lines[i].strip())
        fence = FENCE.match(lines[i])
        if mark:
            block = Block(doc, i + 1, mark.group(1) or "check", (mark.group(2) or "").strip())
            if block.kind != "restart":
                pending = block
            elif re.match(r"^[A-Z_][A-Z0-9_]*=", block.note):
                blocks.append(block)
            else:
                raise DocsError(f"{doc}:{i + 1}: a restart mark takes NAME=VALUE")
        elif fence:
            end = i + 1
            while end < len(lines) and not lines[end].startswith(fence.group(1)):
                end += 1
            body = lines[i + 1 : end]
            if fence.group(2) == "console" and any(line.startswith("$ ") for line in body):
                if pending is None:
                    unmarked.append(f"{doc}:{i + 1}")
                else:
                    pending.commands = read_commands(doc, body, i + 2)
                    blocks.append(pending)
                    pending = None
            i = end
        if pending is not None and not mark and i < len(lines) and lines[i].strip():
            raise DocsError(f"{doc}:{pending.line}: the mark is not followed by a ```console block")
        i += 1
    if unmarked:
        raise DocsError(
            f"console blocks without a mark: {', '.join(unmarked)}; put <!-- check --> "
            "or <!-- check skip: REASON --> on the line before each"
        )
    return blocks


def read_commands(doc: str, body: List[str], first_line: int) -> List[Command]:
    """The commands of a console block whose first line is `first_line`."""
    commands: List[Command] = []
    i = 0
    while i < len(body):
        if not body[i].startswith("$ "):
            i += 1  # words before the first command
            continue
        start, text = i, body[i][2:]
        while text.endswith("\\") and i + 1 < len(body):
            i += 1
            text += "\n" + body[i]
        i += 1
        output: List[str] = []
        while i < len(body) and not body[i].startswith("$ "):
            shown = OUTPUT_COMMENT.sub("", body[i]).rstrip()
            if shown or not body[i].strip():  # a line of only a comment shows nothing
                output.append(shown)
            i += 1
        while output and not output[-1]:
            output.pop()
        interrupt = bool(output) and output[-1] == "^C"
        if interrupt:
            output.pop()
            while output and not output[-1]:
                output.pop()
        command = Command(first_line + start, text, output, interrupt)
        try:
            shown_documents(output)
        except ValueError as err:
            raise DocsError(f"{doc}:{command.line}: the answer shown cannot be read: {err}")
        commands.append(command)
    return commands


# --------------------------------------------------------- JSON as the docs show it


class Anything:
    """`...` as a value: any value will do."""

    def __repr__(self) -> str:
        return "..."


ANYTHING = Anything()


class OpenObject(Dict[str, Any]):
    """An object shown with `...` among its members: it may have more."""


class OpenArray(List[Any]):
    """An array shown with `...` among its elements: it may have more."""


class ShownJson:
    """JSON where `...` stands for members, elements or a value left out."""

    def __init__(self, text: str):
        self.text = text
        self.at = 0

    @classmethod
    def parse(cls, text: str) -> Any:
        parser = cls(text)
        value = parser.value()
        if parser.peek():
            raise ValueError(f"{parser.rest()!r} after the JSON")
        return value

    def peek(self) -> str:
        while self.at < len(self.text) and self.text[self.at] in " \t\r\n":
            self.at += 1
        return self.text[self.at : self.at + 1]

    def rest(self) -> str:
        return self.text[self.at : self.at + 30]

    def take(self, token: str) -> bool:
        if self.peek() and self.text.startswith(token, self.at):
            self.at += len(token)
            return True
        return False

    def expect(self, token: str) -> None:
        if not self.take(token):
            raise ValueError(f"expected {token!r} at {self.rest()!r}")

    def scalar(self) -> Any:
        self.peek()
        try:
            value, self.at = json.JSONDecoder().raw_decode(self.text, self.at)
        except ValueError:
            raise ValueError(f"no JSON value at {self.rest()!r}") from None
        return value

    def value(self) -> Any:
        if self.take("..."):
            return ANYTHING
        if self.take("{"):
            return self.members()
        if self.take("["):
            return self.elements()
        return self.scalar()

    def members(self) -> Any:
        members: Dict[str, Any] = {}
        is_open = False
        while not self.take("}"):
            if self.take("..."):
                is_open = True
            else:
                key = self.scalar()
                self.expect(":")
                members[key] = self.value()
            if not self.take(","):
                self.expect("}")
                break
        return OpenObject(members) if is_open else members

    def elements(self) -> Any:
        elements: List[Any] = []
        is_open = False
        while not self.take("]"):
            if self.take("..."):
                is_open = True
            else:
                elements.append(self.value())
            if not self.take(","):
                self.expect("]")
                break
        return OpenArray(elements) if is_open else elements


def kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def shape_differences(shown: Any, real: Any, path: str = "$") -> List[str]:
    """Where `real` does not have the shape the docs show (`shown`)."""
    if shown is ANYTHING:
        return []
    if kind_of(shown) != kind_of(real):
        return [f"{path}: the docs show {kind_of(shown)}, the gateway answered "
                f"{kind_of(real)} ({json.dumps(real)[:80]})"]
    if isinstance(shown, bool) and shown != real:
        return [f"{path}: the docs show {json.dumps(shown)}, the gateway answered {json.dumps(real)}"]
    found: List[str] = []
    if isinstance(shown, dict):
        found += [f"{path}: the docs show the field {key!r}, the gateway's answer has none"
                  for key in shown if key not in real]
        if not isinstance(shown, OpenObject):
            found += [f"{path}: the gateway's answer has the field {key!r}, which the docs do not show"
                      for key in real if key not in shown]
        if str(shown.get("type", "")).startswith("/problems/"):
            found += [f"{path}.{key}: the docs show {json.dumps(shown[key])}, the gateway answered "
                      f"{json.dumps(real[key])}"
                      for key in ("type", "status")
                      if key in shown and key in real and shown[key] != real[key]]
        for key in shown:
            if key in real:
                found += shape_differences(shown[key], real[key], f"{path}.{key}")
    elif isinstance(shown, list):
        if len(real) < len(shown):
            found.append(f"{path}: the docs show {len(shown)} element(s), the gateway answered {len(real)}")
        for index, (a, b) in enumerate(zip(shown, real)):
            found += shape_differences(a, b, f"{path}[{index}]")
    return found


def given_strings(shown: Any, real: Any) -> List[Tuple[str, str]]:
    """(what the docs show, what the gateway gave) for the strings in the same
    places that differ: tokens, which a later command may name."""
    if isinstance(shown, str) and isinstance(real, str):
        return [(shown, real)] if shown != real and len(shown) >= 8 and "..." not in shown else []
    if isinstance(shown, dict) and isinstance(real, dict):
        return [pair for key in shown if key in real for pair in given_strings(shown[key], real[key])]
    if isinstance(shown, list) and isinstance(real, list):
        return [pair for a, b in zip(shown, real) for pair in given_strings(a, b)]
    return []


# ----------------------------------------------------------- what a terminal shows


@dataclass
class Outcome:
    """What differed, and the tokens the gateway gave for the ones shown;
    `unfinished` when more output could still make it agree."""

    differences: List[str]
    strings: List[Tuple[str, str]] = field(default_factory=list)
    unfinished: bool = False


@dataclass
class Event:
    name: str
    data: str
    id: Optional[str]


def output_kind(shown: List[str]) -> str:
    first = next((line.strip() for line in shown if line.strip()), "")
    if not first:
        return "none"
    if HTTP_STATUS.match(first):
        return "http"
    if re.match(r"^(event|data|id):|^: ", first):
        return "events"
    return "json" if first[0] in "{[" else "text"


def split_http(shown: List[str]) -> Tuple[List[str], List[str]]:
    """The header lines and body lines of an HTTP answer the docs show."""
    headers: List[str] = []
    body: List[str] = []
    for line in shown[1:]:
        if not body and re.match(r"^[A-Za-z0-9-]+:\s", line):
            headers.append(line.split(":", 1)[0])
        elif line.strip():
            body.append(line)
    return headers, body


def read_events(lines: List[str], shown: bool) -> List[Event]:
    """Server-Sent Events; in the docs (`shown`) an indented line goes on
    with the data line before it, and a blank line between events may lack."""
    events: List[Event] = []
    name: str = "message"
    data: List[str] = []
    ident: Optional[str] = None

    def dispatch() -> None:
        nonlocal name, data, ident
        if data:
            events.append(Event(name, "\n".join(data), ident))
        name, data, ident = "message", [], None

    for line in lines:
        if not line.strip():
            dispatch()
        elif line.startswith(":"):
            continue  # a comment
        elif shown and line[0] in " \t" and data:
            data[-1] += "\n" + line
        else:
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if shown and key in ("event", "id") and data:
                dispatch()
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
            elif key == "id":
                ident = value
    dispatch()
    return events


def shown_documents(shown: List[str]) -> List[Any]:
    """The JSON documents of what the docs show (a ValueError when one
    cannot be read)."""
    kind = output_kind(shown)
    if kind == "json":
        return [ShownJson.parse("\n".join(shown))]
    if kind == "http":
        body = split_http(shown)[1]
        return [ShownJson.parse("\n".join(body))] if body else []
    if kind == "events":
        return [ShownJson.parse(event.data) for event in read_events(shown, shown=True)]
    return []


def compare(shown: List[str], printed: str) -> Outcome:
    """What the docs show after a command beside what the terminal showed."""
    printed = printed.replace("\r\n", "\n")
    kind = output_kind(shown)
    if kind == "http":
        return compare_http(shown, printed)
    if kind == "events":
        return compare_events(shown, printed)
    if kind == "json":
        return compare_json("\n".join(shown), printed)
    if kind == "text":
        return compare_text(shown, printed)
    return Outcome([])


def compare_json(shown_text: str, printed: str, path: str = "$") -> Outcome:
    shown = ShownJson.parse(shown_text)
    try:
        real = json.loads(printed)
    except ValueError:
        return Outcome([f"the docs show JSON, the terminal shows {printed.strip()[:200]!r}"], unfinished=True)
    return Outcome(shape_differences(shown, real, path), given_strings(shown, real))


def compare_http(shown: List[str], printed: str) -> Outcome:
    head, _, body = printed.partition("\n\n")
    head_lines = head.split("\n")
    status = HTTP_STATUS.match(head_lines[0])
    if not status:
        return Outcome([f"the docs show an HTTP answer, the terminal shows {printed.strip()[:200]!r}"],
                       unfinished=True)
    found: List[str] = []
    shown_status = HTTP_STATUS.match(shown[0].strip())
    if shown_status and shown_status.group(1) != status.group(1):
        found.append(f"status: the docs show {shown_status.group(1)}, the gateway answered {status.group(1)}")
    names = {line.split(":", 1)[0].strip().lower() for line in head_lines[1:] if ":" in line}
    headers, body_lines = split_http(shown)
    found += [f"header: the docs show {name}, the gateway's answer has none"
              for name in headers if name.lower() not in names]
    if not body_lines:
        return Outcome(found)
    outcome = compare_json("\n".join(body_lines), body)
    return Outcome(found + outcome.differences, outcome.strings, outcome.unfinished)


def compare_events(shown_lines: List[str], printed: str) -> Outcome:
    shown = read_events(shown_lines, shown=True)
    real = read_events(printed.split("\n"), shown=False)
    found: List[str] = []
    strings: List[Tuple[str, str]] = []
    for index, event in enumerate(shown):
        where = f"event {index + 1}"
        if index >= len(real):
            found.append(f"{where}: the docs show `{event.name}`, the stream sent no more events")
            return Outcome(found, strings, unfinished=True)
        if event.name != real[index].name:
            found.append(f"{where}: the docs show `{event.name}`, the stream sent `{real[index].name}`")
            break
        if event.id is not None and real[index].id is None:
            found.append(f"{where} ({event.name}): the docs show an id, the stream sent none")
        outcome = compare_json(event.data, real[index].data, f"{where} ({event.name}) $")
        found += outcome.differences
        strings += outcome.strings
    return Outcome(found, strings)


def normal_text(line: str) -> str:
    """A line without what changes from run to run (UUIDs, times, fencing
    tokens, epochs)."""
    return LONG_NUMBER.sub("N", UUID.sub("UUID", line.rstrip()))


def compare_text(shown: List[str], printed: str) -> Outcome:
    real = printed.rstrip("\n").split("\n") if printed.strip() else []
    for index in range(max(len(shown), len(real))):
        a = shown[index] if index < len(shown) else "(nothing)"
        b = real[index] if index < len(real) else "(nothing)"
        if normal_text(a) != normal_text(b):
            return Outcome([f"line {index + 1}: the docs show {a!r}, the terminal shows {b!r}"],
                           unfinished=index >= len(real) - 1)  # the last line may be half written
    return Outcome([])


# --------------------------------------------------------- the gateway and Redis


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(ready: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def gateway_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def stop(process: Optional["subprocess.Popen[bytes]"]) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class Stack:
    """redis-server and the gateway on free ports, serving a scratch checkout."""

    def __init__(self, binary: Path, checkout: Path):
        self.binary = binary
        self.checkout = checkout
        self.redis_port = free_port()
        self.gateway_port = free_port()
        self.extra_env: Dict[str, str] = {}
        self.redis: Optional["subprocess.Popen[bytes]"] = None
        self.gateway: Optional["subprocess.Popen[bytes]"] = None

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}"

    def start(self) -> None:
        run = self.checkout / ".run"
        run.mkdir(parents=True)
        (run / "admin-token").write_text(secrets.token_hex(16))
        (run / "admin-token").chmod(0o600)
        (self.checkout / "target" / "release").mkdir(parents=True)
        (self.checkout / "target" / "release" / "lockgate").symlink_to(self.binary)
        with open(self.checkout / "redis.log", "ab") as log:
            self.redis = subprocess.Popen(
                ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", str(self.checkout)],
                stdout=log, stderr=subprocess.STDOUT,
            )
        wait_until(lambda: redis_answers(self.redis_port), 10, "redis-server")
        self.start_gateway()

    def start_gateway(self) -> None:
        # Nothing of the caller's own gateway settings.
        env = {name: value for name, value in os.environ.items() if not name.startswith("LOCKGATE_")}
        env.update(
            LOCKGATE_LISTEN=f"127.0.0.1:{self.gateway_port}",
            LOCKGATE_REDIS_URL=self.redis_url,
            LOCKGATE_ADMIN_TOKEN=(self.checkout / ".run" / "admin-token").read_text(),
            LOCKGATE_ORDERS_DATABASE="sqlite://.run/orders.db",
            NO_COLOR="1",
            **self.extra_env,
        )
        with open(self.checkout / "gateway.log", "ab") as log:
            self.gateway = subprocess.Popen(
                [str(self.binary), "serve"], cwd=self.checkout, env=env,
                stdout=log, stderr=subprocess.STDOUT,
            )
        wait_until(lambda: self.gateway_alive() and gateway_ready(self.gateway_port), 20, "the gateway")

    def gateway_alive(self) -> bool:
        if self.gateway is not None and self.gateway.poll() is not None:
            tail = (self.checkout / "gateway.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the gateway exited with status {self.gateway.returncode}:\n{tail}")
        return True

    def restart_gateway(self, extra: Dict[str, str]) -> None:
        self.extra_env.update(extra)
        stop(self.gateway)
        self.start_gateway()

    def stop(self) -> None:
        stop(self.gateway)
        stop(self.redis)


# ------------------------------------------------------------ the reader's terminal


def running(pid: int) -> bool:
    """Whether a process runs (a zombie, not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def interruptible() -> None:
    """As a terminal's shell starts: ^C and ^\\ at their defaults. A script
    started as a background job (`make test &`, nohup, some CI runners)
    inherits SIGINT ignored, and a shell cannot undo a signal ignored when
    it starts, so the ^C the docs show would end nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


class Terminal:
    """One bash session, standing for the reader's terminal: what every
    command prints, its background jobs' too, lands in one transcript."""

    def __init__(self, checkout: Path, control: Path, env: Dict[str, str]):
        self.control = control
        self.transcript = control / "transcript"
        self.count = 0
        with open(self.transcript, "ab") as out, open(control / "shell.log", "ab") as err:
            self.shell = subprocess.Popen(
                ["bash", "--noprofile", "--norc"], cwd=checkout, env=env,
                stdin=subprocess.PIPE, stdout=out, stderr=err, start_new_session=True,
                preexec_fn=interruptible,
            )

    def size(self) -> int:
        return self.transcript.stat().st_size

    def printed_since(self, offset: int) -> str:
        with open(self.transcript, "rb") as transcript:
            transcript.seek(offset)
            return transcript.read().decode("utf-8", errors="replace")

    def send(self, text: str) -> Path:
        """Starts a command; returns the file its exit status will be in."""
        self.count += 1
        status = self.control / f"status.{self.count}"
        # A group keeps `$!`, variables and jobs in this shell; stdin is not
        # the shell's, and stderr shows as it would in a terminal.
        script = (f"{{ {text}\n}} </dev/null 2>&1\n"
                  f"printf '%s' \"$?\" >'{status}.tmp'; mv '{status}.tmp' '{status}'\n")
        assert self.shell.stdin is not None
        self.shell.stdin.write(script.encode())
        self.shell.stdin.flush()
        return status

    def children(self) -> Set[int]:
        """The shell's running children: its background jobs, and the
        command in the foreground."""
        try:
            text = Path(f"/proc/{self.shell.pid}/task/{self.shell.pid}/children").read_text()
        except OSError:
            return set()
        return {int(pid) for pid in text.split() if running(int(pid))}

    def wait(self, status: Path, timeout: float) -> Optional[int]:
        """The command's exit status, or None if it has not ended in time."""
        deadline = time.monotonic() + timeout
        while not status.exists():
            if self.shell.poll() is not None:
                raise RuntimeError("the shell exited")
            if time.monotonic() > deadline:
                return None
            time.sleep(0.02)
        return int(status.read_text())

    def close(self) -> None:
        try:
            os.killpg(self.shell.pid, signal.SIGTERM)  # the jobs left running too
        except OSError:
            pass
        stop(self.shell)


# -------------------------------------------------------------------- the check


class Mismatch(Exception):
    """A command whose answer is not what the docs show."""

    def __init__(self, doc: str, command: Command, details: List[str], printed: str):
        super().__init__(doc, command.line)
        self.doc, self.command, self.details, self.printed = doc, command, details, printed

    def __str__(self) -> str:
        lines = [f"{self.doc}:{self.command.line}: the answer is not what the docs show",
                 f"  command: {first_line(self.command.text)}"]
        lines += [f"  {detail}" for detail in self.details]
        lines.append("  the terminal showed:")
        printed = self.printed.strip("\n") or "(nothing)"
        lines += [f"    {line}" for line in printed.split("\n")[:30]]
        return "\n".join(lines)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def first_line(text: str) -> str:
    return text.split("\n")[0] + (" ..." if "\n" in text else "")


def without_comment(line: str) -> str:
    """A shell line without its `# comment` (a `#` starting a word, outside quotes)."""
    quote = None
    for index, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1] in " \t"):
            return line[:index].rstrip()
    return line.rstrip()


def in_background(command: str) -> bool:
    """Whether the command ends by starting a job (`... &`, `... & name=$!`)."""
    last = without_comment(command.split("\n")[-1])
    return last.endswith("&") or re.search(r"&\s*\w+=\$!$", last) is not None


def is_read(command: str) -> bool:
    """Whether a command changes nothing, so that it may be run again."""
    words = command.split()
    if not words or in_background(command):
        return False
    if words[0] == "curl":
        return re.search(r"\s-X\s*(?!GET\b)\w|\s(-d|--data\S*)\s", command) is None
    return words[0] in ("sqlite3", "cat") or "orders reconcile" in command


class Checker:
    """Types the docs' commands into the terminal and compares the answers."""

    def __init__(self, stack: Stack, terminal: Terminal, verbose: bool):
        self.stack = stack
        self.terminal = terminal
        self.verbose = verbose
        self.ports: Dict[int, int] = {GATEWAY_PORT: stack.gateway_port}
        self.strings: Dict[str, str] = {}

    def local(self, text: str) -> str:
        """A command with the docs' ports and tokens made the test's."""
        def port(match: "re.Match[str]") -> str:
            shown = int(match.group(2))
            if shown not in self.ports:
                self.ports[shown] = free_port()
            return f"{match.group(1)}:{self.ports[shown]}"

        text = ADDRESS.sub(port, text)
        for shown, real in self.strings.items():
            text = text.replace(shown, real)
        return text

    def restart(self, block: Block) -> None:
        name, value = block.note.split("=", 1)
        saved = self.terminal.control / "restart-value"
        # Expanded as the shell expands an assignment (NAME=VALUE make run).
        status = self.terminal.send(
            f"restart_value={value}; printf '%s' \"$restart_value\" >'{saved}'; unset restart_value")
        if self.terminal.wait(status, FOREGROUND_TIMEOUT) != 0:
            raise DocsError(f"{block.doc}:{block.line}: the restart mark's value could not be expanded")
        self.stack.restart_gateway({name: saved.read_text()})

    def run(self, block: Block, command: Command) -> None:
        started = time.monotonic()
        text = self.local(command.text)
        outcome, printed = self.attempt(block, command, text)
        deadline = time.monotonic() + READ_RETRY
        while outcome.differences and is_read(command.text) and time.monotonic() < deadline:
            time.sleep(0.2)
            outcome, printed = self.attempt(block, command, text)
        if outcome.differences:
            raise Mismatch(block.doc, command, outcome.differences, printed)
        self.strings.update(outcome.strings)
        if self.verbose:
            took = time.monotonic() - started
            print(f"  ok {block.doc}:{command.line} ({took:.1f} s) {first_line(command.text)}")

    def attempt(self, block: Block, command: Command, text: str) -> Tuple[Outcome, str]:
        """Runs the command once: what differed, and what the terminal showed."""
        offset = self.terminal.size()
        before = self.terminal.children()
        status = self.terminal.send(text)

        def now() -> Tuple[Outcome, str]:
            printed = self.terminal.printed_since(offset)
            return compare(command.output, printed), printed

        def awaited() -> Tuple[Outcome, str]:
            """What the docs show once it is there, or what differs after a while."""
            deadline = time.monotonic() + AWAIT_TIMEOUT
            result = now()
            while result[0].unfinished and time.monotonic() < deadline:
                time.sleep(0.05)
                result = now()
            return result

        if command.interrupt or in_background(text):
            result = awaited()
            if command.interrupt:  # ^C: the foreground command only
                for pid in self.terminal.children() - before:
                    try:
                        os.kill(pid, signal.SIGINT)
                    except OSError:
                        pass
            if self.terminal.wait(status, FOREGROUND_TIMEOUT) is None:
                raise Mismatch(block.doc, command, ["the command did not end after ^C"], now()[1])
            if "lockgate serve" in text:
                self.await_gateway(text)
            return result
        code = self.terminal.wait(status, FOREGROUND_TIMEOUT)
        result = now()
        if result[0].differences and not is_read(command.text) and self.terminal.children():
            result = awaited()  # what the docs show may be a background job's, still to come
        if code is None:
            return Outcome([f"the command did not end within {FOREGROUND_TIMEOUT:.0f} s"]), result[1]
        if code != 0:
            return Outcome([f"the command exited with status {code}"] + result[0].differences), result[1]
        return result

    def await_gateway(self, text: str) -> None:
        """A gateway started in the background: wait until it is ready, as a
        reader would before using it."""
        match = re.search(r"--listen[ =](?:localhost|127\.0\.0\.1):(\d+)", text)
        if match:
            port = int(match.group(1))
            wait_until(lambda: gateway_ready(port), 20, f"the gateway on port {port}")


def check(docs: List[Tuple[str, List[Block]]], binary: Path, verbose: bool, scratch: Path) -> int:
    """Runs the documents' blocks in a scratch directory; the exit status."""
    checkout, control = scratch / "checkout", scratch / "control"
    control.mkdir()
    stack = Stack(binary, checkout)
    terminal: Optional[Terminal] = None
    started = time.monotonic()
    try:
        stack.start()
        env = {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TMPDIR") if name in os.environ}
        env.update(LOCKGATE_REDIS_URL=stack.redis_url, NO_COLOR="1")
        terminal = Terminal(checkout, control, env)
        checker = Checker(stack, terminal, verbose)
        total = 0
        for name, blocks in docs:
            for block in blocks:
                if block.kind == "restart":
                    checker.restart(block)
                for command in block.commands if block.kind == "check" else []:
                    checker.run(block, command)
            checked = [block for block in blocks if block.kind == "check"]
            skipped = [f"line {block.line}: {block.note}" for block in blocks if block.kind == "skip"]
            count = sum(len(block.commands) for block in checked)
            total += count
            print(f"check-docs: {name}: {count} commands in {plural(len(checked), 'block')} agree "
                  "with the gateway" + (f"; {plural(len(skipped), 'block')} skipped "
                                        f"({'; '.join(skipped)})" if skipped else ""))
        print(f"check-docs: {total} commands checked in {time.monotonic() - started:.1f} s")
        return 0
    except (Mismatch, DocsError, RuntimeError) as err:
        print(f"check-docs: {err}", file=sys.stderr)
        return 1
    finally:
        if terminal is not None:
            terminal.close()
        stack.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("docs", nargs="*", help="Markdown files (default: README.md docs/using.md)")
    parser.add_argument("-v", "--verbose", action="store_true", help="name each command as it passes")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (logs, transcript)")
    args = parser.parse_args()

    binary = Path(os.environ.get("LOCKGATE_BIN") or REPO / "target" / "release" / "lockgate").resolve()
    if not binary.is_file():
        print(f"check-docs: no gateway binary at {binary} (cargo build --release, or set LOCKGATE_BIN)",
              file=sys.stderr)
        return 2
    for tool in ("redis-server", "curl", "bash"):
        if shutil.which(tool) is None:
            print(f"check-docs: {tool} is not installed", file=sys.stderr)
            return 2
    docs: List[Tuple[str, List[Block]]] = []
    try:
        for path in [Path(doc) for doc in args.docs] or [REPO / doc for doc in DEFAULT_DOCS]:
            name = os.path.relpath(path) if path.resolve().is_relative_to(Path.cwd()) else str(path)
            docs.append((name, read_blocks(name, path.read_text())))
    except (DocsError, OSError) as err:
        print(f"check-docs: {err}", file=sys.stderr)
        return 1

    scratch = Path(tempfile.mkdtemp(prefix="lockgate-docs-"))
    status = check(docs, binary, args.verbose, scratch)
    if args.keep or status != 0:
        print(f"check-docs: the logs and the terminal's transcript are in {scratch}", file=sys.stderr)
    else:
        shutil.rmtree(scratch, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
