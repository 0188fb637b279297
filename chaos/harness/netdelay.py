"""Delays packets: a stand-in for `tc qdisc ... netem delay`.

Runs inside a host's network namespace, bound to an NFQUEUE queue that
iptables rules feed (`-j NFQUEUE --queue-num N --queue-bypass`). Each packet
is held for the delay, give or take a uniform jitter, and then accepted
(with jitter, in the order of their due times, so packets overtake each
other, as on a network with many paths). Kernels built
without sch_netem (some VM kernels) still have NFQUEUE, and this speaks its
netlink protocol directly, so it needs nothing beyond the standard library.
Loss is not done here: an iptables `statistic` rule drops before the queue.

    python -m harness.netdelay --queue 7 --delay-ms 100 [--jitter-ms 50]
"""

import argparse
import errno
import heapq
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NLM_F_REQUEST = 1
NLM_F_ACK = 4
NLMSG_ERROR = 2
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQNL_CFG_CMD_BIND = 1
NFQNL_CFG_CMD_UNBIND = 2
NFQNL_COPY_META = 1
NF_ACCEPT = 1


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def _message(kind: int, queue: int, attrs: bytes, seq: int, flags: int = NLM_F_REQUEST) -> bytes:
    body = struct.pack("!BBH", socket.AF_UNSPEC, 0, queue) + attrs
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, seq, 0) + body


def _attrs(data: bytes):
    offset = 0
    while offset + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, offset)
        if length < 4:
            return
        yield kind & 0x7FFF, data[offset + 4 : offset + length]
        offset += (length + 3) & ~3


class Queue:
    """One bound NFQUEUE queue, copying packet metadata only."""

    def __init__(self, number: int):
        self.number = number
        self.seq = 0
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind((0, 0))
        self._configure(_attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0)))
        self._configure(_attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META)))
        self._configure(_attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", 8192)))

    def _configure(self, attrs: bytes) -> None:
        self.seq += 1
        self.sock.send(_message(NFQNL_MSG_CONFIG, self.number, attrs, self.seq, NLM_F_REQUEST | NLM_F_ACK))
        while True:
            data = self.sock.recv(65536)
            length, kind, _, seq, _ = struct.unpack_from("=IHHII", data)
            if kind == NLMSG_ERROR and seq == self.seq:
                (code,) = struct.unpack_from("=i", data, 16)
                if code:
                    raise OSError(-code, f"NFQUEUE {self.number} configuration refused")
                return

    def packet_ids(self):
        """The ids of the packets queued since the last call (non-blocking)."""
        ids = []
        while True:
            try:
                data = self.sock.recv(1 << 16, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return ids
            except OSError as err:
                # The kernel's queue overflowed our socket: those packets
                # were dropped (or bypassed); carry on with the rest.
                if err.errno == errno.ENOBUFS:
                    continue
                raise
            offset = 0
            while offset + 16 <= len(data):
                length, kind, _, _, _ = struct.unpack_from("=IHHII", data, offset)
                if length < 16:
                    break
                if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                    for attr, payload in _attrs(data[offset + 20 : offset + length]):
                        if attr == NFQA_PACKET_HDR:
                            ids.append(struct.unpack_from("!I", payload)[0])
                offset += (length + 3) & ~3

    def accept(self, packet_id: int) -> None:
        self.seq += 1
        attrs = _attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, packet_id))
        self.sock.send(_message(NFQNL_MSG_VERDICT, self.number, attrs, self.seq))

    def close(self) -> None:
        try:
            self._configure(_attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_UNBIND, 0)))
        finally:
            self.sock.close()


def run(queue_number: int, delay_ms: float, jitter_ms: float = 0) -> None:
    queue = Queue(queue_number)
    held = []  # heap of (due, packet id)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    print(f"netdelay: queue {queue_number}, {delay_ms} ms, jitter {jitter_ms} ms", flush=True)
    try:
        while not stopping:
            timeout = max(0.0, held[0][0] - time.monotonic()) if held else 0.5
            try:
                select.select([queue.sock], [], [], timeout)
            except InterruptedError:
                pass
            now = time.monotonic()
            for packet_id in queue.packet_ids():
                delay = max(0.0, delay_ms + random.uniform(-jitter_ms, jitter_ms)) / 1000
                heapq.heappush(held, (now + delay, packet_id))
            while held and held[0][0] <= time.monotonic():
                queue.accept(heapq.heappop(held)[1])
    finally:
        # Let what is held through rather than drop it on the way out.
        while held:
            queue.accept(heapq.heappop(held)[1])
        queue.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, required=True)
    parser.add_argument("--jitter-ms", type=float, default=0)
    args = parser.parse_args(argv)
    run(args.queue, args.delay_ms, args.jitter_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
