"""The few Redis commands the runner sends (ROLE, SENTINEL, CLUSTER), in RESP,
and the messages of a subscription (`fairqueue.GrantListener`).

A connection per command: the runner asks rarely, and a fresh socket opened
from a thread of the right namespace (see `netns.netns_executor`) is the
simplest way to be sure which network it goes through.
"""

from __future__ import annotations

import socket


class RedisError(Exception):
    pass


def command(host: str, port: int, *args, timeout: float = 2.0):
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(encode(*args))
        return read(sock.makefile("rb"))


def encode(*args) -> bytes:
    payload = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = str(arg).encode()
        payload.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(payload)


def read(stream):
    """One reply (or, on a subscribed connection, one message) from `stream`."""
    line = stream.readline()
    if not line:
        raise RedisError("connection closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RedisError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        length = int(rest)
        if length < 0:
            return None
        data = stream.read(length + 2)[:-2]
        return data.decode(errors="replace")
    if kind == b"*":
        length = int(rest)
        if length < 0:
            return None
        return [read(stream) for _ in range(length)]
    raise RedisError(f"unexpected reply {line!r}")
