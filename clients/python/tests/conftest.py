"""Fixtures: a real redis-server and lockgate gateway shared by the tests
that leave them as they found them, and fresh ones for the tests that
freeze, flush or kill them."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Callable, Iterator, List, Tuple

import pytest

from lockgate import Gateway
from servers import GatewayServer, Proxy, RedisServer

if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
    raise RuntimeError("the tests need redis-server and redis-cli")


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("servers")


@pytest.fixture(scope="session")
def redis(workdir: Path) -> Iterator[RedisServer]:
    server = RedisServer(workdir).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gateway(workdir: Path, redis: RedisServer) -> Iterator[GatewayServer]:
    server = GatewayServer(workdir, redis).start()
    yield server
    server.stop()


Stack = Tuple[RedisServer, GatewayServer]


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    """Starts a Redis of its own and gateways on it, for a test that harms
    them; `make_stack()` gives (redis, gateway), `make_stack(redis)` another
    gateway on the same Redis."""
    started: List[object] = []

    def make(redis: "RedisServer | None" = None, *args: str) -> Stack:
        if redis is None:
            redis = RedisServer(tmp_path).start()
            started.append(redis)
        gateway = GatewayServer(tmp_path, redis, *args).start()
        started.append(gateway)
        return redis, gateway

    yield make
    for server in reversed(started):
        server.stop()  # type: ignore[attr-defined]


@pytest.fixture
def gw(gateway: GatewayServer) -> Iterator[Gateway]:
    client = Gateway(gateway.url, timeout=5.0)
    yield client
    client.close()


@pytest.fixture
def key(request: pytest.FixtureRequest) -> str:
    """A lock key no other test uses."""
    return f"test:{request.node.name[:60]}:{uuid.uuid4().hex[:8]}".replace("[", ".").replace("]", "")


@pytest.fixture
def proxy_to() -> Iterator[Callable[[int], Proxy]]:
    proxies: List[Proxy] = []

    def make(port: int) -> Proxy:
        proxy = Proxy(port)
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
