"""The real processes the tests run against: redis-server, the lockgate
gateway, and a small TCP proxy that can drop connections on purpose."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[3]


def gateway_binary() -> str:
    return os.environ.get("LOCKGATE_BIN") or str(REPO / "target" / "release" / "lockgate")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def in_a_forked_child(child: Callable[[], List[str]]) -> List[str]:
    """Runs `child` in a forked child process and gives back the words it
    reported; the test fails if the child did not end cleanly."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(read_end)
            os.write(write_end, " ".join(child()).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    report = os.read(read_end, 1000).decode().split()
    os.close(read_end)
    assert status == 0, f"the child ended with {status}"
    return report


def wait_until(predicate, timeout: float, what: str, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(interval)


class RedisServer:
    """A throwaway redis-server without persistence."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = 0
        self.process: Optional[subprocess.Popen] = None
        self.frozen = False

    def start(self) -> "RedisServer":
        for _ in range(5):
            self.port = free_port()
            log = open(self.workdir / f"redis-{self.port}.log", "wb")
            self.process = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no"],
                cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
            )
            log.close()
            try:
                wait_until(lambda: self._ping(), 5.0, "redis-server")
                return self
            except TimeoutError:
                self.stop()  # the port was taken meanwhile: try another
        raise RuntimeError("could not start redis-server")

    def _ping(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise TimeoutError("redis-server exited")
        try:
            return self.cli("PING") == "PONG"
        except subprocess.SubprocessError:
            return False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def cli(self, *args: str) -> str:
        result = subprocess.run(
            ["redis-cli", "-p", str(self.port), *args],
            capture_output=True, text=True, timeout=5, check=True,
        )
        return result.stdout.strip()

    def keys(self, pattern: str = "*") -> List[str]:
        out = self.cli("--scan", "--pattern", pattern)
        return [line for line in out.splitlines() if line]

    def freeze(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        if self.process is not None and self.frozen:
            self.process.send_signal(signal.SIGCONT)
            self.frozen = False

    def stop(self) -> None:
        if self.process is None:
            return
        self.thaw()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class GatewayServer:
    """One lockgate gateway process on a port it picks itself."""

    def __init__(self, workdir: Path, redis: RedisServer, *extra_args: str) -> None:
        self.workdir = workdir
        self.redis = redis
        self.extra_args = extra_args
        self.process: Optional[subprocess.Popen] = None
        self.address = ""
        self.log_path = workdir / "gateway.log"

    def start(self) -> "GatewayServer":
        binary = gateway_binary()
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"no lockgate binary at {binary}: build it, or set LOCKGATE_BIN")
        self.log_path = self.workdir / f"gateway-{time.monotonic_ns()}.log"
        log = open(self.log_path, "wb")
        env = dict(os.environ, NO_COLOR="1", RUST_LOG=os.environ.get("RUST_LOG", "info"))
        self.process = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--redis-url", self.redis.url,
             "--redis-timeout-ms", "1000", "--shutdown-timeout-ms", "2000", *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )
        log.close()
        self.address = wait_until(self._serving, 10.0, "the gateway to serve")
        return self

    def _serving(self) -> Optional[str]:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"the gateway exited: {self.log_path.read_text()[-2000:]}")
        match = re.search(r"lockgate serving addr=(\S+)", self.log_path.read_text(errors="replace"))
        return match.group(1) if match else None

    @property
    def url(self) -> str:
        scheme = "https" if "--tls-cert" in self.extra_args else "http"
        return f"{scheme}://{self.address}"

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    def freeze(self) -> None:
        """SIGSTOP: the gateway says nothing more, and its sockets stay open."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: the gateway renews and releases nothing more."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.thaw()
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class Proxy:
    """A TCP proxy to `upstream` that the test can make misbehave.

    `drop_responses(n)`: the next n connections forward the request, wait
    for the upstream's answer and close without passing it on (an answer
    lost on the way back). `cut()`: closes every open connection;
    `cut_connection(n)` only the n-th accepted (from 1), such as one
    streamed request's. `refuse(True)`: new connections are closed at once.
    `rewrite_requests(old, new)`: what clients send has `old` replaced by
    `new` on its way (a header, say).
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.dropped = 0
        #: What the upstream answered on each dropped connection (its
        #: first read: the whole of a small answer).
        self.dropped_answers: List[bytes] = []
        self._drop_next = 0
        self._refusing = False
        self._rewrites: List[Tuple[bytes, bytes]] = []
        self._open: List[socket.socket] = []
        #: Each accepted connection's two sockets, in the order accepted.
        self._pairs: Dict[int, Tuple[socket.socket, socket.socket]] = {}
        self._guard = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def drop_responses(self, count: int) -> None:
        with self._guard:
            self._drop_next = count

    def rewrite_requests(self, old: bytes, new: bytes) -> None:
        with self._guard:
            self._rewrites.append((old, new))

    def refuse(self, refusing: bool) -> None:
        with self._guard:
            self._refusing = refusing

    def cut(self) -> None:
        with self._guard:
            sockets, self._open = self._open, []
        for sock in sockets:
            _shut(sock)

    def cut_connection(self, number: int) -> None:
        with self._guard:
            pair = self._pairs.pop(number, None)
        for sock in pair or ():
            _shut(sock)

    def close(self) -> None:
        self._closed = True
        _shut(self.listener)
        self.cut()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._guard:
                self.connections += 1
                number = self.connections
                if self._refusing:
                    _shut(client)
                    continue
                drop = self._drop_next > 0
                if drop:
                    self._drop_next -= 1
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                _shut(client)
                continue
            with self._guard:
                self._open += [client, upstream]
                self._pairs[number] = (client, upstream)
            threading.Thread(target=self._pump, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, drop), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, drop: Optional[bool]) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if drop:
                    # The gateway has answered: the request took effect.
                    # The answer never reaches the client.
                    with self._guard:
                        self.dropped += 1
                        self.dropped_answers.append(data)
                    break
                if drop is None:  # from the client
                    with self._guard:
                        for old, new in self._rewrites:
                            data = data.replace(old, new)
                target.sendall(data)
        except OSError:
            pass
        finally:
            _shut(source)
            _shut(target)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def gateway_serves_tls() -> bool:
    """Whether the gateway binary has `serve --tls-cert`."""
    binary = gateway_binary()
    if not os.access(binary, os.X_OK):
        return False
    usage = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, timeout=30)
    return "--tls-cert" in usage.stdout


def make_certificates(directory: Path) -> Dict[str, Path]:
    """A private CA, a server certificate for 127.0.0.1 and localhost, and a
    client certificate (CN `lockgate-test-client`), all signed by the CA,
    made with openssl: the PEM paths by name (`ca`, `server`, `server_key`,
    `client`, `client_key`)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {name: directory / f"{name}.pem" for name in ("ca", "ca_key", "server", "server_key", "client", "client_key")}

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", str(paths["ca_key"]), "-out", str(paths["ca"]),
            "-days", "2", "-subj", "/CN=lockgate test CA")
    for name, subject, extensions in (
        ("server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
        ("client", "/CN=lockgate-test-client", "subjectAltName=DNS:lockgate-test-client\nextendedKeyUsage=clientAuth\n"),
    ):
        request, extfile = directory / f"{name}.csr", directory / f"{name}.ext"
        extfile.write_text(extensions)
        openssl("req", *ec, "-keyout", str(paths[f"{name}_key"]), "-out", str(request), "-subj", subject)
        openssl("x509", "-req", "-in", str(request), "-CA", str(paths["ca"]), "-CAkey", str(paths["ca_key"]),
                "-CAcreateserial", "-out", str(paths[name]), "-days", "2", "-extfile", str(extfile))
    return paths
