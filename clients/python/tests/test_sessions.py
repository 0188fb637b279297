"""Sessions: many locks on one lease that the gateway keeps alive while the
client stays connected; the session's end releases them all, its loss
(ended by the gateway, a broken stream, a silent gateway) loses them all,
and a cycle of waits between sessions is refused as a deadlock."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from typing import Any, List

import httpx
import pytest

from lockgate import (
    AsyncGateway,
    Deadlock,
    Gateway,
    LockgateError,
    LockHeld,
    LockLost,
    SessionNotFound,
)
from lockgate._protocol import problem_error
from servers import in_a_forked_child, wait_until


def session_on_gateway(url: str, session_id: str) -> httpx.Response:
    """`GET /sessions/{id}`, as another client with the id would ask."""
    return httpx.get(f"{url}/sessions/{session_id}", timeout=5)


def delete_session(url: str, session_id: str) -> None:
    """Ends the session from outside, as another holder of its id may."""
    assert httpx.delete(f"{url}/sessions/{session_id}", timeout=5).status_code == 204


def has_waiters(gw: Gateway, key: str) -> bool:
    info = gw.inspect(key)
    return bool(info and info.waiters)


# -- sync ------------------------------------------------------------------


def test_every_kind_of_lock_hangs_on_the_session_and_ends_with_it(gateway, gw: Gateway, key: str) -> None:
    exclusive, shared, counting = f"{key}:x", f"{key}:s", f"{key}:c"
    with gw.session(ttl=1.5, value="worker-7") as session:
        assert session.id and uuid.UUID(session.id)
        assert session.id not in repr(session)
        assert session.expires_at_ms and session.lock_delay == 0
        writer = session.lock(exclusive).acquire()
        reader = session.lock(shared, mode="shared").acquire()
        with session.lock(counting, limit=2) as place:
            assert place.session is session
            with pytest.raises(LockHeld):
                gw.lock(exclusive).acquire()  # held in the session, for everyone
            seen = session_on_gateway(gateway.url, session.id).json()
            assert sorted(lock["key"] for lock in seen["locks"]) == sorted([exclusive, shared, counting])
            assert seen["value"] == "worker-7"
            # Past the lease, twice: the gateway renews nothing of the locks,
            # only the session, and the client does not count them lost.
            started_at = session.expires_at_ms
            time.sleep(3.0)
            for lock in (writer, reader, place):
                lock.check()
                assert lock.remaining > 0
                assert lock.expires_at_ms == session.expires_at_ms  # the session's lease is theirs
            session.check()
            assert session.expires_at_ms > started_at + 1000
            info = gw.inspect(exclusive)
            assert info is not None and info.fencing_token == writer.fencing_token
        assert gw.inspect(counting) is None  # its own block released it
        assert gw.inspect(exclusive) is not None
        session_id = session.id
    # Leaving the block ended the session, and both locks left in it with it.
    assert gw.inspect(exclusive) is None and gw.inspect(shared) is None
    assert session_on_gateway(gateway.url, session_id).status_code == 404
    for lock in (writer, reader):
        assert not lock.lost.is_set()  # released with the session, not lost
        with pytest.raises(LockLost) as released:
            lock.check()
        assert released.value.reason == "released"
    with pytest.raises(LockLost):
        session.check()
    # An ended session takes no more locks: the gateway no longer knows it.
    with pytest.raises(SessionNotFound) as unknown:
        session.lock(key).acquire()
    assert unknown.value.slug == "session-not-found" and unknown.value.status == 404


def test_a_lock_in_a_session_waits_like_any_other(gw: Gateway, key: str) -> None:
    with gw.session(ttl=5) as first, gw.session(ttl=5) as second:
        holder = first.lock(key).acquire()
        threading.Timer(0.3, holder.release).start()
        started = time.monotonic()
        with second.lock(key, wait=5) as waiter:
            assert 0.2 < time.monotonic() - started < 3
            assert waiter.fencing_token > holder.fencing_token  # type: ignore[operator]
        with pytest.raises(LockHeld):
            with first.lock(key):
                with second.lock(key, wait=0.3):
                    pytest.fail("the body ran without the lock")


def test_unknown_session_is_refused(gateway) -> None:
    # A well-formed id no session has: what the gateway answers, as the
    # client reads it.
    response = httpx.post(
        f"{gateway.url}/locks", json={"key": "test:unknown-session", "session": str(uuid.uuid4())}, timeout=5
    )
    error = problem_error(response)
    assert isinstance(error, SessionNotFound) and isinstance(error, LockgateError)
    assert (error.status, error.slug) == (404, "session-not-found")


def test_a_broken_session_stream_loses_its_locks(gateway, proxy_to, gw: Gateway, key: str) -> None:
    proxy = proxy_to(gateway.port)
    lost: List[str] = []
    reached_the_end = False
    with Gateway(proxy.url) as through_proxy:
        with pytest.raises(LockLost) as raised:
            with through_proxy.session(ttl=10, on_lost=lambda s: lost.append(s.lost_reason or "")) as session:
                assert proxy.connections == 1  # the session's stream
                with session.lock(key) as lock:
                    proxy.cut_connection(1)  # only the session's stream breaks
                    assert session.lost.wait(3), "the broken stream went unnoticed"
                    assert lock.lost.wait(3), "the session's loss did not reach its lock"
                    with pytest.raises(LockLost) as checked:
                        lock.check()
                    assert checked.value.reason == "session-ended"
                    reached_the_end = True
        assert reached_the_end
        assert raised.value.reason == "session-ended"
        assert session.lost_reason == "connection-lost" and lost == ["connection-lost"]
        with pytest.raises(LockLost) as session_lost:
            session.check()
        assert session_lost.value.reason == "connection-lost"
    # The gateway ended the session as its stream closed: the lock is free
    # long before the session's 10 s lease.
    wait_until(lambda: gw.inspect(key) is None, 3, "the lock to be freed")


def test_a_session_ended_elsewhere_is_told_to_its_locks(gateway, gw: Gateway, key: str) -> None:
    with pytest.raises(LockLost) as raised:
        with gw.session(ttl=10) as session:
            lock = session.lock(key).acquire()
            delete_session(gateway.url, session.id or "")
            assert lock.lost.wait(3)
            assert session.lost.wait(3)
            assert lock.lost_reason == "session-ended"
            # The gateway's word for it (`ended`), not a broken stream: "deleted",
            # or "expired" when its sweep finds the session gone before the
            # DELETE's own notice reaches the stream.
            assert session.lost_reason in ("deleted", "expired")
    # No body exception: leaving the block tells the session's loss.
    assert raised.value.reason == session.lost_reason
    assert gw.inspect(key) is None


def test_a_waiting_lock_whose_session_ends_is_answered(gateway, gw: Gateway, key: str) -> None:
    errors: List[BaseException] = []
    with gw.lock(key, ttl=10), pytest.raises(LockLost):  # the session's loss, at its block's end
        with gw.session(ttl=10) as session:

            def wait() -> None:
                try:
                    session.lock(key, wait=20).acquire()
                except BaseException as exc:
                    errors.append(exc)

            waiter = threading.Thread(target=wait, daemon=True)
            waiter.start()
            wait_until(lambda: has_waiters(gw, key), 5, "the waiter to queue")
            ended_at = time.monotonic()
            delete_session(gateway.url, session.id or "")
            waiter.join(5)
            assert errors and isinstance(errors[0], SessionNotFound), errors
            assert time.monotonic() - ended_at < 3


def test_a_silent_gateway_loses_the_session_by_its_own_deadline(make_stack, key: str) -> None:
    _, gateway = make_stack()
    ttl = 1.5
    with Gateway(gateway.url) as gw:
        with pytest.raises(LockLost):
            with gw.session(ttl=ttl) as session:
                with session.lock(key) as lock:
                    gateway.freeze()  # no event, no error, no closed connection
                    frozen_at = time.monotonic()
                    try:
                        assert lock.lost.wait(ttl + 2)
                        noticed_after = time.monotonic() - frozen_at
                    finally:
                        gateway.thaw()
        assert session.lost_reason == "lease-expired"
        assert lock.lost_reason == "session-ended"
        # The session's deadline: a safety margin before its lease could
        # end after the last renewal, which came at most ttl/3 before.
        assert noticed_after <= ttl + 1.0


def test_a_cycle_of_session_waits_is_a_deadlock(gw: Gateway, key: str) -> None:
    first_key, second_key = f"{key}:a", f"{key}:b"
    granted: List[Any] = []
    with gw.session(ttl=10) as first:
        with first.lock(first_key):
            with gw.session(ttl=10) as second:
                second.lock(second_key).acquire()

                def first_waits() -> None:
                    with first.lock(second_key, wait=10) as lock:
                        granted.append(lock.fencing_token)

                waiting = threading.Thread(target=first_waits, daemon=True)
                waiting.start()
                wait_until(lambda: has_waiters(gw, second_key), 5, "the first session to queue")
                started = time.monotonic()
                with pytest.raises(Deadlock) as refused:
                    second.lock(first_key, wait=10).acquire()
                assert time.monotonic() - started < 3
                assert sorted(refused.value.cycle) == sorted([first_key, second_key])
                assert refused.value.slug == "deadlock" and refused.value.status == 409
                assert not granted  # the other wait goes on
            # The second session ended, and its lock with it: the first is served.
            waiting.join(5)
            assert len(granted) == 1


def test_locks_hang_on_a_session_opened_elsewhere_by_its_id(gateway, gw: Gateway, key: str) -> None:
    single, a, b, plain = f"{key}:one", f"{key}:a", f"{key}:b", f"{key}:plain"
    opener = Gateway(gateway.url)
    session = opener.session(ttl=2).open()
    session_id = session.id or ""  # handed over by its opener
    with pytest.raises(LockLost) as raised:
        with gw.lock(single, session=session_id) as lock, gw.lock_all([a, b], session=session_id) as locks:
            lease = gw.acquire(plain, session=session_id, ttl=0.5)  # the session's lease, not 0.5 s
            seen = session_on_gateway(gateway.url, session_id).json()
            assert sorted(held["key"] for held in seen["locks"]) == sorted([single, a, b, plain])
            assert lock.session is None and locks.session is None
            # This client follows no lease of the session's: only the
            # gateway's word ends what hangs on it.
            assert lock.remaining == float("inf") and locks.remaining == float("inf")
            assert lock.expires_at_ms is None and locks.expires_at_ms is None
            time.sleep(2.5)  # past the session's lease: its opener keeps it alive
            lock.check()
            locks.check()
            info = gw.inspect(plain)
            assert info is not None and info.leases[0].fencing_token == lease.fencing_token
            delete_session(gateway.url, session_id)  # its opener, or anyone with the id, ends it
            assert lock.lost.wait(3) and locks.lost.wait(3), "the session's end was not told"
            assert (lock.lost_reason, locks.lost_reason) == ("session-ended", "session-ended")
            assert gw.inspect(plain) is None
    assert raised.value.reason == "session-ended"
    assert session.lost.wait(3) and session.lost_reason in ("deleted", "expired")
    session.end()  # nothing left to end
    opener.close()
    for name in (single, a, b):
        assert gw.inspect(name) is None
    with pytest.raises(SessionNotFound):
        gw.lock(key, session=session_id).acquire()
    with pytest.raises(SessionNotFound):
        gw.lock_all([a, b], session=session_id).acquire()
    with pytest.raises(SessionNotFound):
        gw.acquire(key, session=session_id)


# -- asyncio ---------------------------------------------------------------


@pytest.mark.anyio
async def test_async_session_locks_end_with_it(gateway, key: str) -> None:
    async with AsyncGateway(gateway.url) as gw:
        async with gw.session(ttl=1.5) as session:
            assert session.id and session.id not in repr(session)
            writer = await session.lock(f"{key}:x").acquire()
            reader = await session.lock(f"{key}:s", mode="shared").acquire()
            async with session.lock(f"{key}:c", limit=3, wait=1) as place:
                await asyncio.sleep(2.5)  # past the session's lease: kept alive
                place.check()
            writer.check()
            reader.check()
        assert await gw.inspect(f"{key}:x") is None and await gw.inspect(f"{key}:s") is None
        with pytest.raises(LockLost) as released:
            writer.check()
        assert released.value.reason == "released"
        with pytest.raises(SessionNotFound):
            await session.lock(key).acquire()


@pytest.mark.anyio
async def test_async_lost_session_cancels_its_locks_bodies(gateway, proxy_to, key: str) -> None:
    task = asyncio.current_task()
    assert task is not None
    proxy = proxy_to(gateway.port)
    reached_the_end: List[str] = []
    async with AsyncGateway(proxy.url) as gw:
        with pytest.raises(LockLost) as raised:
            async with gw.session(ttl=10) as session:
                async with session.lock(f"{key}:a") as first:
                    async with session.lock(f"{key}:b", mode="shared") as second:
                        proxy.cut_connection(1)  # the session's stream
                        await asyncio.sleep(10)
                        reached_the_end.append("inner")
        assert reached_the_end == []
        assert raised.value.reason == "session-ended"
        assert (first.lost_reason, second.lost_reason) == ("session-ended", "session-ended")
        assert session.lost.is_set() and session.lost_reason == "connection-lost"
        cancelling = getattr(task, "cancelling", None)
        assert (cancelling() if cancelling else 0) == 0  # our cancellations were taken back
        await asyncio.sleep(0)
    async with AsyncGateway(gateway.url) as direct:
        for name in (f"{key}:a", f"{key}:b"):
            for _ in range(100):
                if await direct.inspect(name) is None:
                    break
                await asyncio.sleep(0.05)
            assert await direct.inspect(name) is None


@pytest.mark.anyio
async def test_async_session_ended_by_the_gateway_cancels_the_body(gateway, key: str) -> None:
    async with AsyncGateway(gateway.url) as gw:
        started = time.monotonic()
        with pytest.raises(LockLost) as raised:
            async with gw.session(ttl=10) as session:
                async with session.lock(key):
                    await asyncio.get_running_loop().run_in_executor(
                        None, delete_session, gateway.url, session.id or ""
                    )
                    await asyncio.sleep(10)
        assert raised.value.reason == "session-ended"
        assert session.lost_reason in ("deleted", "expired")  # as the gateway told it
        assert time.monotonic() - started < 5


@pytest.mark.anyio
async def test_async_silent_gateway_cancels_the_bodies_by_the_sessions_deadline(make_stack, key: str) -> None:
    _, gateway = make_stack()
    ttl = 1.5
    async with AsyncGateway(gateway.url) as gw:
        with pytest.raises(LockLost) as raised:
            async with gw.session(ttl=ttl) as session:
                async with session.lock(key) as lock:
                    gateway.freeze()  # nothing more comes: only the session's deadline can tell
                    frozen_at = time.monotonic()
                    try:
                        await asyncio.sleep(10)
                    finally:
                        stopped_after = time.monotonic() - frozen_at
                        gateway.thaw()
        assert raised.value.reason == "session-ended"
        assert (session.lost_reason, lock.lost_reason) == ("lease-expired", "session-ended")
        assert stopped_after <= ttl + 1.0


@pytest.mark.anyio
async def test_async_deadlock_between_sessions(gateway, key: str) -> None:
    first_key, second_key = f"{key}:a", f"{key}:b"
    async with AsyncGateway(gateway.url) as gw:
        async with gw.session(ttl=10) as first, gw.session(ttl=10) as second:
            held_by_first = await first.lock(first_key).acquire()
            await second.lock(second_key).acquire()
            waiting = asyncio.ensure_future(first.lock(second_key, wait=10).acquire())
            for _ in range(100):
                info = await gw.inspect(second_key)
                if info is not None and info.waiters:
                    break
                await asyncio.sleep(0.05)
            with pytest.raises(Deadlock) as refused:
                await second.lock(first_key, wait=10).acquire()
            assert set(refused.value.cycle) == {first_key, second_key}
            assert not waiting.done()
            await second.end()  # frees the second key: the first's wait is served
            granted = await asyncio.wait_for(waiting, 5)
            assert granted.session is first
            held_by_first.check()
            granted.check()


def test_sync_and_async_sessions_exclude_each_other(gateway, key: str) -> None:
    async def hold() -> None:
        async with AsyncGateway(gateway.url) as gw:
            async with gw.session(ttl=5) as session:
                async with session.lock(key):
                    with Gateway(gateway.url) as sync_gw, sync_gw.session(ttl=5) as other:
                        with pytest.raises(LockHeld):
                            other.lock(key).acquire()

    asyncio.run(hold())


@pytest.mark.filterwarnings("ignore:.*use of fork\\(\\) may lead to deadlocks:DeprecationWarning")
def test_forked_child_does_not_end_the_parents_session(gateway, gw: Gateway, key: str) -> None:
    with gw.session(ttl=1.5) as session:
        lock = session.lock(key).acquire()

        def child() -> List[str]:
            report = []
            for handle in (session, lock):
                try:
                    handle.check()
                    report.append("held")
                except LockLost as exc:
                    report.append(exc.reason or "?")
            session.__exit__(None, None, None)  # does nothing in the child
            return report

        assert in_a_forked_child(child) == ["forked", "forked"]
        time.sleep(2.0)  # past the lease: still kept alive for the parent
        session.check()
        lock.check()
        assert session_on_gateway(gateway.url, session.id or "").status_code == 200
    assert gw.inspect(key) is None
