"""What a peer of the anchors benchmark says of itself, read without ever
failing the run: an answer that is late, short or missing gives "?".

    python3 loadtest/anchors/probe.py zookeeper-version PORT
"""

import socket
import sys

# The whole answer of a four-letter word, however it comes: ZooKeeper
# writes it and closes the connection, in one segment or several.
def read_all(port, word, timeout=2.0):
    with socket.create_connection(("127.0.0.1", port), timeout) as conn:
        conn.settimeout(timeout)
        conn.sendall(word)
        chunks = []
        while True:
            chunk = conn.recv(4096)
            if not chunk:
                return b"".join(chunks).decode("utf-8", errors="replace")
            chunks.append(chunk)


def version_in_srvr(text):
    """`Zookeeper version: 3.8.0-5a02a05eddb59aee6ac762f7ea82e92a68eb9c0f, built on ...`
    gives 3.8.0; anything else "?"."""
    for line in text.splitlines():
        name, _, value = line.partition(": ")
        if name.strip().lower() == "zookeeper version" and value:
            return value.split("-")[0].split(",")[0].strip() or "?"
    return "?"


def zookeeper_version(port):
    try:
        return version_in_srvr(read_all(port, b"srvr"))
    except OSError:
        return "?"


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "zookeeper-version":
        sys.exit(__doc__)
    print(zookeeper_version(int(sys.argv[2])))
