"""Several locks at once (`lock_all`: all or none, one token, a wait for
the last one, all released together, lost when one of them is), the
upgrade and downgrade of a held lock, and the permits of a counting lock,
sync and asyncio, against the real gateway."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from lockgate import AsyncGateway, Deadlock, Gateway, LockHeld, LockLost
from servers import wait_until


def held(gw: Gateway, key: str) -> bool:
    return gw.inspect(key) is not None


# -- several locks at once ---------------------------------------------------


def test_lock_all_takes_every_lock_for_one_token_and_releases_them_all(gw: Gateway, key: str) -> None:
    a, b, pool = f"{key}:a", f"{key}:b", f"{key}:pool"
    with gw.lock_all([a, {"key": b, "mode": "shared"}, {"key": pool, "limit": 3, "permits": 2}], ttl=5) as locks:
        assert locks.token and [lock.key for lock in locks.locks] == [a, b, pool]
        assert [lock.mode for lock in locks.locks] == ["exclusive", "shared", "exclusive"]
        tokens = locks.fencing_tokens
        assert all(tokens[k] > 0 for k in (a, b, pool))
        for k in (a, b, pool):
            info = gw.inspect(k)
            assert info is not None and info.fencing_token == tokens[k]
        pool_info = gw.inspect(pool)
        assert pool_info is not None and pool_info.leases[0].permits == 2
        with pytest.raises(LockHeld):
            gw.acquire(a)
        locks.check()
    assert not any(held(gw, k) for k in (a, b, pool))
    with pytest.raises(LockLost):
        locks.check()


def test_lock_all_is_all_or_none_and_names_the_held_key(gw: Gateway, key: str) -> None:
    a, b = f"{key}:a", f"{key}:b"
    with gw.acquire(b, ttl=5):
        with pytest.raises(LockHeld) as refused:
            gw.lock_all([a, b]).acquire()
        assert refused.value.problem["key"] == b
        assert not held(gw, a), "a refused batch left a lock held"


def test_lock_all_waits_for_the_last_lock_and_takes_all_at_once(gw: Gateway, key: str) -> None:
    a, b = f"{key}:a", f"{key}:b"
    other = gw.acquire(b, ttl=10)
    result: dict = {}

    def take() -> None:
        with gw.lock_all([a, b], wait=10) as locks:
            result["tokens"] = locks.fencing_tokens
            result["waited"] = locks.grant["waited_ms"]

    thread = threading.Thread(target=take)
    thread.start()
    wait_until(lambda: bool((gw.inspect(b) or None) and gw.inspect(b).waiters), 5.0, "the batch to wait")  # type: ignore[union-attr]
    assert not held(gw, a), "part of a waiting batch is held"
    other.release()
    thread.join(10)
    assert result["tokens"][b] > other.fencing_token
    assert result["waited"] > 0


def test_lock_all_keeps_its_locks_past_their_lease(gw: Gateway, key: str) -> None:
    a, b = f"{key}:a", f"{key}:b"
    with gw.lock_all([a, b], ttl=0.6) as locks:
        first = locks.fencing_tokens
        time.sleep(1.5)  # over two leases: only the client's renewals keep them
        locks.check()
        for k in (a, b):
            info = gw.inspect(k)
            assert info is not None and info.fencing_token == first[k]


def test_lock_all_is_lost_when_one_of_its_locks_is_gone(gw: Gateway, key: str) -> None:
    a, b = f"{key}:a", f"{key}:b"
    seen: list = []
    with pytest.raises(LockLost):
        with gw.lock_all([a, b], ttl=1.5, on_lost=seen.append) as locks:
            assert locks.token is not None
            gw.release(b, locks.token)  # someone with the token let one go
            assert locks.lost.wait(5), "the set was not found lost"
            assert locks.lost_reason == "lock-gone"
            locks.check()
    assert seen == [locks]
    assert not held(gw, a), "the lost set's other lock was not released"


def test_lock_all_in_a_session_hangs_on_it(gw: Gateway, key: str) -> None:
    a, b = f"{key}:a", f"{key}:b"
    with gw.session(ttl=2) as session:
        locks = session.lock_all([a, b]).acquire()
        assert session.id
        status = httpx.get(f"{gw.url}/sessions/{session.id}", timeout=5).json()
        assert sorted(lock["key"] for lock in status["locks"]) == [a, b]
    assert locks.lost_reason is None
    assert not held(gw, a) and not held(gw, b)


# -- upgrade, downgrade, permits -------------------------------------------


def test_a_streamed_shared_lock_upgrades_and_downgrades(gw: Gateway, key: str) -> None:
    with gw.lock(key, mode="shared", ttl=3) as lock:
        shared_token = lock.fencing_token
        assert shared_token is not None
        lock.upgrade()
        assert lock.mode == "exclusive" and lock.fencing_token > shared_token
        info = gw.inspect(key)
        assert info is not None and info.mode == "exclusive"
        with pytest.raises(LockHeld):
            gw.acquire(key, mode="shared")
        upgraded = lock.fencing_token
        lock.downgrade()
        assert lock.mode == "shared" and lock.fencing_token == upgraded
        with gw.acquire(key, mode="shared"):
            info = gw.inspect(key)
            assert info is not None and info.holders == 2
        time.sleep(1.2)  # the stream still renews the changed hold
        lock.check()


def test_a_second_upgrader_is_refused_as_a_deadlock(gw: Gateway, key: str) -> None:
    first = gw.acquire(key, mode="shared", ttl=10)
    second = gw.acquire(key, mode="shared", ttl=10)
    outcome: dict = {}

    def upgrade_first() -> None:
        outcome["first"] = first.upgrade(wait=10)

    thread = threading.Thread(target=upgrade_first)
    thread.start()
    time.sleep(0.3)
    with pytest.raises(Deadlock) as refused:
        second.upgrade(wait=5)
    assert refused.value.problem.get("cycle") == [key]
    second.release()
    thread.join(10)
    assert first.mode == "exclusive" and first.fencing_token > second.fencing_token
    first.release()
    # An upgrade whose wait runs out keeps the shared place.
    third = gw.acquire(key, mode="shared", ttl=10)
    fourth = gw.acquire(key, mode="shared", ttl=10)
    with pytest.raises(LockHeld):
        third.upgrade(wait=0.2)
    info = gw.inspect(key)
    assert info is not None and info.holders == 2 and info.mode == "shared"
    third.release()
    fourth.release()


def test_permits_take_several_places_of_a_counting_lock(gw: Gateway, key: str) -> None:
    with gw.lock(key, limit=5, permits=3) as big:
        assert big.permits == 3
        info = gw.inspect(key)
        assert info is not None and info.limit == 5 and info.leases[0].permits == 3
        with pytest.raises(LockHeld):
            gw.acquire(key, limit=5, permits=3)
        with gw.acquire(key, limit=5, permits=2) as rest:
            assert rest.permits == 2
            info = gw.inspect(key)
            assert info is not None and sorted(lease.permits or 0 for lease in info.leases) == [2, 3]


# -- asyncio ---------------------------------------------------------------


def test_async_lock_all_cancels_the_body_when_lost(gateway, key: str) -> None:
    a, b = f"{key}:a", f"{key}:b"

    async def main() -> None:
        async with AsyncGateway(gateway.url, timeout=5) as gw:
            async with gw.lock_all([a, {"key": b, "mode": "shared"}], ttl=5) as locks:
                assert set(locks.fencing_tokens) == {a, b}
                with pytest.raises(LockHeld):
                    await gw.acquire(a)
            assert await gw.inspect(a) is None and await gw.inspect(b) is None

            started = time.monotonic()
            with pytest.raises(LockLost):
                async with gw.lock_all([a, b], ttl=1.5) as locks:
                    assert locks.token is not None
                    await gw.release(a, locks.token)
                    await asyncio.sleep(30)  # cancelled by the loss
            assert time.monotonic() - started < 10
            assert await gw.inspect(b) is None

            lease = await gw.acquire(f"{key}:rw", mode="shared")
            await lease.upgrade()
            assert lease.mode == "exclusive"
            await lease.downgrade()
            assert lease.mode == "shared"
            await lease.release()

    asyncio.run(main())
