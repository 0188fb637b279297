"""Several locks at once (`lock_all`: all or none, one token, a wait for
the last one, held through a streamed batch the gateway renews, all
released together, lost together when one of them is, in a session or
not), the upgrade and downgrade of a held lock, and the permits of a
counting lock, sync and asyncio, against the real gateway."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import List

import httpx
import pytest

from lockgate import AsyncGateway, Deadlock, Gateway, GatewayUnavailable, LockHeld, LockLost
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


def test_lock_all_is_renewed_by_the_gateway_past_its_lease(gateway, proxy_to, key: str) -> None:
    a, b = f"{key}:a", f"{key}:b"
    proxy = proxy_to(gateway.port)
    with Gateway(proxy.url, timeout=5) as gw, gw.lock_all([a, b], ttl=0.6) as locks:
        first = locks.fencing_tokens
        granted_until = locks.expires_at_ms
        assert granted_until == locks.grant["expires_at_ms"]
        time.sleep(1.5)  # over two leases
        locks.check()
        assert 0 < locks.remaining <= 0.6
        assert locks.expires_at_ms is not None and locks.expires_at_ms >= granted_until + 800
        # One connection all along, the streamed batch's: the client sent
        # no renewal of its own (a request would have needed another, as a
        # stream's connection is never pooled).
        assert proxy.connections == 1
        with Gateway(gateway.url, timeout=5) as direct:
            for k in (a, b):
                info = direct.inspect(k)
                assert info is not None and info.fencing_token == first[k]


def test_a_set_whose_stream_breaks_is_lost_and_given_back_at_once(gateway, proxy_to, gw: Gateway, key: str) -> None:
    a, b = f"{key}:a", f"{key}:b"
    proxy = proxy_to(gateway.port)
    with Gateway(proxy.url, timeout=5) as through_proxy:
        with pytest.raises(LockLost) as raised:
            with through_proxy.lock_all([a, b], ttl=30) as locks:
                proxy.cut_connection(1)  # the batch's stream
                assert locks.lost.wait(3), "the broken stream went unnoticed"
                cut_at = time.monotonic()
        assert raised.value.reason == "connection-lost"
    # The gateway gave both back as the connection closed, not at the end
    # of their 30 s leases.
    wait_until(lambda: not held(gw, a) and not held(gw, b), 3, "the set to be given back")
    assert time.monotonic() - cut_at < 3


def test_lock_all_is_lost_when_one_of_its_locks_is_released_elsewhere(gw: Gateway, key: str) -> None:
    a, b = f"{key}:a", f"{key}:b"
    seen: list = []
    with pytest.raises(LockLost) as raised:
        with gw.lock_all([a, b], ttl=1.5, on_lost=seen.append) as locks:
            assert locks.token is not None
            gw.release(b, locks.token)  # someone with the token let one go
            assert locks.lost.wait(5), "the set was not found lost"
            assert (locks.lost_reason, locks.lost_key) == ("released", b)
            with pytest.raises(LockLost) as checked:
                locks.check()
            assert checked.value.key == b
    assert raised.value.reason == "released"
    assert seen == [locks] and locks.on_lost == seen.append
    # The gateway gave the other one back as the set ended.
    wait_until(lambda: not held(gw, a), 3, "the set's other lock to be given back")


def test_a_revoked_lock_loses_the_set_and_the_gateway_gives_back_the_rest(make_stack, redis, key: str) -> None:
    a, b, c = f"{key}:a", f"{key}:b", f"{key}:c"
    _, gateway = make_stack(redis, "--admin-token", "admin-token")
    with Gateway(gateway.url, timeout=5) as gw:
        with pytest.raises(LockLost) as raised:
            with gw.lock_all([a, b, c], ttl=30) as locks:
                assert gw.revoke(b, "admin-token")
                assert locks.lost.wait(3), "the revocation went unnoticed"
                assert (locks.lost_reason, locks.lost_key) == ("revoked", b)
                assert locks.remaining == 0
                with pytest.raises(LockLost) as checked:
                    locks.check()
                assert (checked.value.reason, checked.value.key) == ("revoked", b)
        assert (raised.value.reason, raised.value.key) == ("revoked", b)
        wait_until(lambda: not held(gw, a) and not held(gw, c), 3, "the rest of the set to be given back")
        with gw.lock_all([a, b, c], ttl=5):  # free for anyone now
            pass


def test_a_set_is_lost_by_the_clients_own_deadline_when_its_gateway_falls_silent(make_stack, key: str) -> None:
    _, gateway = make_stack()
    ttl = 1.0
    lost_at: List[float] = []
    with Gateway(gateway.url) as gw:
        with pytest.raises(LockLost) as raised:
            with gw.lock_all([f"{key}:a", f"{key}:b"], ttl=ttl, on_lost=lambda _: lost_at.append(time.monotonic())):
                frozen_at = time.monotonic()
                gateway.freeze()  # no event, no error, no closed connection
                try:
                    wait_until(lambda: lost_at, ttl + 2, "the set's own deadline")
                finally:
                    gateway.thaw()
        assert raised.value.reason == "lease-expired"
        # A safety margin before the lease could end after the last
        # renewal, which came at most ttl/3 before the freeze.
        assert lost_at[0] - frozen_at <= ttl + 1.0


def test_a_set_granted_without_a_stream_is_given_back(gateway, proxy_to, gw: Gateway, key: str) -> None:
    """A gateway older than the streamed batch (in a rolling upgrade, behind
    the same address) answers it as a plain batch: granted, and renewed by
    nothing. Such a gateway is what a real one is to a request whose
    `Accept` the proxy takes out."""
    a, b = f"{key}:a", f"{key}:b"
    proxy = proxy_to(gateway.port)
    proxy.rewrite_requests(b"Accept: text/event-stream\r\n", b"Accept: application/json\r\n")
    with Gateway(proxy.url, timeout=5) as old:
        with pytest.raises(GatewayUnavailable) as refused:
            with old.lock_all([a, b], ttl=30):
                pytest.fail("the body ran under locks nothing renews")
        assert "without a stream" in str(refused.value)
    assert not held(gw, a) and not held(gw, b)  # given back, not left to their 30 s leases


def test_lock_all_in_a_session_hangs_on_it(gw: Gateway, key: str) -> None:
    a, b = f"{key}:a", f"{key}:b"
    with gw.session(ttl=2) as session:
        locks = session.lock_all([a, b]).acquire()
        assert session.id and locks.session is session
        status = httpx.get(f"{gw.url}/sessions/{session.id}", timeout=5).json()
        assert sorted(lock["key"] for lock in status["locks"]) == [a, b]
        time.sleep(2.5)  # past the session's lease: its keepalive holds the set
        locks.check()
        assert locks.remaining > 0
    # Ended with the session: released with it, not lost.
    assert locks.lost_reason is None
    with pytest.raises(LockLost) as released:
        locks.check()
    assert released.value.reason == "released"
    assert not held(gw, a) and not held(gw, b)


def test_a_set_in_a_session_ended_elsewhere_is_lost_with_it(gw: Gateway, key: str) -> None:
    a, b = f"{key}:a", f"{key}:b"
    with pytest.raises(LockLost) as raised:
        with gw.session(ttl=10) as session:
            with gw.lock(f"{key}:alone", ttl=10):  # not in the session: kept
                with session.lock_all([a, b]) as locks:
                    deleted = httpx.delete(f"{gw.url}/sessions/{session.id}", timeout=5)
                    assert deleted.status_code == 204
                    assert locks.lost.wait(3), "the session's end did not reach the set"
                    assert locks.lost_reason == "session-ended"
                    assert session.lost.wait(3)
                    assert not held(gw, a) and not held(gw, b)
                    assert held(gw, f"{key}:alone")
    assert raised.value.reason == "session-ended"


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
            with pytest.raises(LockLost) as raised:
                async with gw.lock_all([a, b], ttl=1.5) as locks:
                    assert locks.token is not None
                    await gw.release(a, locks.token)
                    await asyncio.sleep(30)  # cancelled by the loss
            assert time.monotonic() - started < 10
            assert (raised.value.reason, locks.lost_key) == ("released", a)
            for _ in range(100):  # the gateway gives the other one back
                if await gw.inspect(b) is None:
                    break
                await asyncio.sleep(0.03)
            assert await gw.inspect(b) is None

            # Past its lease, renewed by the gateway; then ended with its session.
            with pytest.raises(LockLost) as ended:
                async with gw.session(ttl=10) as session:
                    async with gw.lock_all([a, b], ttl=0.6) as locks:
                        await asyncio.sleep(1.5)
                        locks.check()
                    async with session.lock_all([a, b]) as locks:
                        await asyncio.get_running_loop().run_in_executor(
                            None, lambda: httpx.delete(f"{gateway.url}/sessions/{session.id}", timeout=5)
                        )
                        await asyncio.sleep(30)  # cancelled by the session's end
            assert ended.value.reason == "session-ended" and locks.lost_reason == "session-ended"
            assert time.monotonic() - started < 20

            lease = await gw.acquire(f"{key}:rw", mode="shared")
            await lease.upgrade()
            assert lease.mode == "exclusive"
            await lease.downgrade()
            assert lease.mode == "shared"
            await lease.release()

    asyncio.run(main())
