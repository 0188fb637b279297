"""The anchors benchmark's probes against real sockets: a peer that answers
nothing, late or in pieces gives "?" or its version, never an exception
(an IndexError here once ended a whole run after four systems had been
measured)."""

import socket
import threading
import unittest
from pathlib import Path
import sys

sys.path.insert(0, str(Path(__file__).parent))
import probe  # noqa: E402

SRVR = (b"Zookeeper version: 3.8.0-5a02a05eddb59aee6ac762f7ea82e92a68eb9c0f, "
        b"built on 2022-02-25 08:49 UTC\nLatency min/avg/max: 0/0.0/0\nMode: standalone\n")


def serve_once(answer):
    """A port whose first connection reads the word, then gets `answer`
    (a list of pieces, sent apart), then is closed."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def run():
        conn, _ = server.accept()
        with conn:
            conn.recv(16)
            for piece in answer:
                conn.sendall(piece)
        server.close()

    threading.Thread(target=run, daemon=True).start()
    return port


class ZookeeperVersion(unittest.TestCase):
    def test_a_whole_answer_gives_the_version(self):
        self.assertEqual(probe.zookeeper_version(serve_once([SRVR])), "3.8.0")

    def test_an_answer_in_pieces_is_read_whole(self):
        port = serve_once([SRVR[:5], SRVR[5:40], SRVR[40:]])
        self.assertEqual(probe.zookeeper_version(port), "3.8.0")

    def test_a_peer_that_answers_nothing_gives_a_question_mark(self):
        self.assertEqual(probe.zookeeper_version(serve_once([])), "?")

    def test_a_port_nobody_listens_on_gives_a_question_mark(self):
        with socket.create_server(("127.0.0.1", 0)) as unused:
            port = unused.getsockname()[1]
        self.assertEqual(probe.zookeeper_version(port), "?")

    def test_another_answer_gives_a_question_mark(self):
        self.assertEqual(probe.zookeeper_version(serve_once([b"imok"])), "?")


if __name__ == "__main__":
    unittest.main()
