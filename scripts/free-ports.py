#!/usr/bin/env python3
"""Prints a port P such that P .. P+COUNT-1 are free on 127.0.0.1.

    scripts/free-ports.py COUNT           any such block
    scripts/free-ports.py COUNT --bus     a block whose Redis Cluster bus
                                          ports (10 000 higher) are free too
"""
import random
import socket
import sys


def free(port):
    probe = socket.socket()
    try:
        probe.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    bus = "--bus" in sys.argv
    while True:
        # Bus ports must stay below 65536; others may be anywhere.
        base = random.randrange(20000, 30000) if bus else random.randrange(20000, 60000)
        ports = list(range(base, base + count))
        if bus:
            ports += [port + 10000 for port in ports]
        if all(free(port) for port in ports):
            print(base)
            return


main()
