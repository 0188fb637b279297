"""The asyncio client: a lost lock cancels the block's body and the block
raises LockLost; a cancellation from elsewhere stays a cancellation."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any, Dict, List

import pytest

from lockgate import AsyncGateway, Gateway, LockHeld, LockLost

pytestmark = pytest.mark.anyio


def _cancelling(task: "asyncio.Task[Any]") -> int:
    cancelling = getattr(task, "cancelling", None)
    return cancelling() if cancelling is not None else 0


async def test_acquire_hold_release(gateway, key: str) -> None:
    async with AsyncGateway(gateway.url) as gw:
        async with gw.lock(key, ttl=0.6, value="a") as lock:
            assert lock.fencing_token and lock.token
            with pytest.raises(LockHeld):
                await gw.lock(key).acquire()
            await asyncio.sleep(1.5)  # renewed past its lease
            lock.check()
            info = await gw.inspect(key)
            assert info is not None and info.fencing_token == lock.fencing_token
        assert await gw.inspect(key) is None

        started = time.monotonic()
        async with gw.lock(key, ttl=5):
            with pytest.raises(LockHeld):
                async with gw.lock(key, wait=0.4):
                    pytest.fail("the body ran without the lock")
        assert 0.3 <= time.monotonic() - started < 3


async def test_a_waiter_is_told_its_place_and_a_holder_replaces_its_value(gateway, key: str) -> None:
    async with AsyncGateway(gateway.url) as gw:
        places: List[int] = []
        async with gw.lock(key, ttl=5, value="10.0.0.7:9000") as holder:
            waiting = asyncio.ensure_future(gw.lock(key, ttl=5, wait=10, on_queued=places.append).acquire())
            for _ in range(250):
                if places:
                    break
                await asyncio.sleep(0.02)
            assert places == [1]
            await holder.set_value("10.0.0.8:9000")
            info = await gw.inspect(key)
            assert info is not None and info.leases[0].value == "10.0.0.8:9000"
        waiter = await asyncio.wait_for(waiting, 5)
        assert waiter.position is None and places == [1]
        await waiter.release()


async def test_lost_lock_cancels_the_body(gateway, redis, key: str) -> None:
    task = asyncio.current_task()
    assert task is not None
    reached_the_end = False
    async with AsyncGateway(gateway.url) as gw:
        started = time.monotonic()
        with pytest.raises(LockLost) as raised:
            async with gw.lock(key, ttl=0.9) as lock:
                redis.cli("DEL", *redis.keys(f"*lock:{{{key}}}*"))
                await asyncio.sleep(10)
                reached_the_end = True
        assert not reached_the_end
        assert raised.value.reason == "lock-gone"
        assert lock.lost.is_set()
        assert time.monotonic() - started < 3
        assert _cancelling(task) == 0  # our cancellation was taken back
        await asyncio.sleep(0)  # and no cancellation is left pending


async def test_frozen_redis_cancels_the_body_within_a_lease(make_stack, key: str) -> None:
    redis, gateway = make_stack()
    ttl = 1.0
    async with AsyncGateway(gateway.url) as gw:
        with pytest.raises(LockLost):
            async with gw.lock(key, ttl=ttl):
                redis.freeze()
                frozen_at = time.monotonic()
                try:
                    await asyncio.sleep(10)
                finally:
                    stopped_after = time.monotonic() - frozen_at
                    redis.thaw()
        assert stopped_after < ttl + 1.0


async def test_outside_cancellation_is_not_a_loss(gateway, key: str) -> None:
    async with AsyncGateway(gateway.url) as gw:
        entered = asyncio.Event()

        async def work() -> None:
            async with gw.lock(key, ttl=5):
                entered.set()
                await asyncio.sleep(10)

        task = asyncio.ensure_future(work())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await gw.inspect(key) is None  # released on the way out


@pytest.mark.skipif(sys.version_info < (3, 11), reason="needs Task.uncancel to tell the two apart")
async def test_loss_and_outside_cancellation_together_stay_a_cancellation(gateway, redis, key: str) -> None:
    async with AsyncGateway(gateway.url) as gw:
        lost = asyncio.Event()

        async def work() -> None:
            async with gw.lock(key, ttl=0.9) as lock:
                redis.cli("DEL", *redis.keys(f"*lock:{{{key}}}*"))
                try:
                    await asyncio.sleep(10)
                finally:
                    lost.set()
                    await asyncio.sleep(0.05)
                    assert lock.lost.is_set()

        task = asyncio.ensure_future(work())
        await lost.wait()
        task.cancel()  # someone else cancels it too
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_release_on_exception_keeps_it(gateway, key: str) -> None:
    async with AsyncGateway(gateway.url) as gw:
        with pytest.raises(ValueError, match="from the body"):
            async with gw.lock(key, ttl=5):
                raise ValueError("from the body")
        assert await gw.inspect(key) is None


async def test_killed_gateway_is_a_loss_with_nothing_unhandled(make_stack, key: str) -> None:
    _, gateway = make_stack()
    loop = asyncio.get_running_loop()
    unhandled: List[Dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    try:
        async with AsyncGateway(gateway.url) as gw:
            with pytest.raises(LockLost) as raised:
                async with gw.lock(key, ttl=2):
                    gateway.kill()
                    await asyncio.sleep(10)
            assert raised.value.reason == "connection-lost"
        await asyncio.sleep(0.1)
        import gc

        gc.collect()
        await asyncio.sleep(0)
        assert unhandled == []
    finally:
        loop.set_exception_handler(previous)


async def test_retried_acquire_gets_the_same_grant(gateway, proxy_to, key: str) -> None:
    proxy = proxy_to(gateway.port)
    proxy.drop_responses(1)
    async with AsyncGateway(proxy.url) as flaky:
        lease = await flaky.acquire(key, ttl=10)
        assert proxy.dropped == 1 and lease.replayed
        info = await flaky.inspect(key)
        assert info is not None and info.holders == 1 and info.fencing_token == lease.fencing_token
        async with lease:
            pass
        assert await flaky.inspect(key) is None


async def test_election_hands_over_when_the_leaders_connection_drops(make_stack, proxy_to, key: str) -> None:
    redis, gateway_a = make_stack()
    _, gateway_b = make_stack(redis)
    leaders_line = proxy_to(gateway_a.port)  # the leader reaches its gateway through this
    async with AsyncGateway(leaders_line.url) as gw_a, AsyncGateway(gateway_b.url) as gw_b:
        watcher = gw_b.watch(key)
        events = asyncio.Queue()  # type: asyncio.Queue

        async def follow() -> None:
            async for event in watcher:
                await events.put(event)

        following = asyncio.ensure_future(follow())
        second = gw_b.election(key, value="b", ttl=5).campaign(timeout=10)
        try:
            assert (await asyncio.wait_for(events.get(), 5)).type == "snapshot"
            with pytest.raises(LockLost) as raised:
                async with gw_a.election(key, value="a", ttl=5).campaign() as first:
                    seen = await asyncio.wait_for(events.get(), 5)
                    assert (seen.type, seen.value, seen.fencing_token) == ("acquired", "a", first.term)
                    campaigning = asyncio.ensure_future(second.acquire())
                    await asyncio.sleep(0.3)
                    assert not campaigning.done()
                    leaders_line.cut()
                    await asyncio.sleep(10)
            assert raised.value.reason == "connection-lost"
            # The gateway saw its leader leave and released at once: the
            # waiting candidate is elected long before the 5 s lease ends.
            await asyncio.wait_for(campaigning, 2)
            assert second.term > first.term  # type: ignore[operator]
            leader = await gw_b.election(key).leader()
            assert leader is not None and (leader.value, leader.term) == ("b", second.term)
            await second.resign()
            kinds = [(await asyncio.wait_for(events.get(), 5)).type for _ in range(3)]
            assert kinds == ["released", "acquired", "released"]
        finally:
            await second.release()
            await watcher.aclose()
            following.cancel()
            await asyncio.gather(following, return_exceptions=True)


def test_sync_and_async_share_one_lock(gateway, key: str) -> None:
    """A lock held by the async client is held for the sync one too."""

    async def hold() -> None:
        async with AsyncGateway(gateway.url) as gw:
            async with gw.lock(key, ttl=5):
                with Gateway(gateway.url) as sync_gw:
                    with pytest.raises(LockHeld):
                        sync_gw.lock(key).acquire()

    asyncio.run(hold())
