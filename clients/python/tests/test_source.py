"""The client's source: the sync client is what scripts/unasync.py writes
from the asyncio one, and the whole package type-checks (mypy --strict),
which also holds the code to the API's documents in `lockgate._api`."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
UNASYNC = HERE / "scripts" / "unasync.py"


def _unasync_module():
    spec = importlib.util.spec_from_file_location("unasync", UNASYNC)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sync_client_is_written_from_the_async_one() -> None:
    result = subprocess.run(
        [sys.executable, str(UNASYNC), "--check"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, f"run scripts/unasync.py:\n{result.stderr}"


def test_unasync_rewrites_async_code_into_sync_code() -> None:
    unasync = _unasync_module()
    source = (
        unasync.SOURCE_MARK + "\n"
        "class AsyncWatcher:\n"
        "    async def __anext__(self) -> AsyncIterator[Event]:\n"
        "        async with self._lock:\n"
        "            async for chunk in response.aiter_bytes():\n"
        "                await response.aclose()\n"
        "        raise StopAsyncIteration\n"
    )
    assert unasync.unasync(source, "watch.py").splitlines() == [
        unasync.GENERATED_MARK.format(name="watch.py"),
        "class Watcher:",
        "    def __next__(self) -> Iterator[Event]:",
        "        with self._lock:",
        "            for chunk in response.iter_bytes():",
        "                response.close()",
        "        raise StopIteration",
    ]


def test_the_package_type_checks() -> None:
    cache = Path(sys.prefix) / ".mypy_cache"  # in the virtualenv, out of the tree
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), str(HERE / "src" / "lockgate")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=HERE,
    )
    assert result.returncode == 0, result.stdout + result.stderr
