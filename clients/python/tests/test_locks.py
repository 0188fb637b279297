"""The synchronous streamed lock: acquire, wait, hold past the lease, lose it
in every way the tests can cause, release it whatever the block did."""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import List

import pytest

from lockgate import Gateway, GatewayUnavailable, InvalidRequest, LockHeld, LockLost
from lockgate._protocol import safety_margin
from servers import in_a_forked_child, wait_until


def test_acquire_hold_and_release(gw: Gateway, key: str) -> None:
    with gw.lock(key, ttl=5, value="host-a:9000") as lock:
        assert lock.key == key
        assert isinstance(lock.fencing_token, int) and lock.fencing_token > 0
        assert uuid.UUID(lock.token or "")
        assert not lock.lost.is_set()
        lock.check()
        info = gw.inspect(key)
        assert info is not None and info.held
        assert info.fencing_token == lock.fencing_token
        assert [lease.value for lease in info.leases] == ["host-a:9000"]
    assert gw.inspect(key) is None
    with pytest.raises(LockLost):
        lock.check()  # released: no longer held


def test_held_lock_refuses_and_wait_runs_out(gw: Gateway, key: str) -> None:
    with gw.lock(key, ttl=5):
        with pytest.raises(LockHeld) as refused:
            gw.lock(key).acquire()
        assert refused.value.slug == "lock-held"
        assert refused.value.problem["status"] == 409
        assert 0 < (refused.value.retry_after or 0) <= 5

        started = time.monotonic()
        with pytest.raises(LockHeld):
            with gw.lock(key, wait=0.4):
                pytest.fail("the body ran without the lock")
        assert 0.3 <= time.monotonic() - started < 3


def test_waiter_gets_the_lock_once_released(gw: Gateway, key: str) -> None:
    holder = gw.lock(key, ttl=5).acquire()
    threading.Timer(0.3, holder.release).start()
    started = time.monotonic()
    with gw.lock(key, ttl=5, wait=5) as waiter:
        assert time.monotonic() - started < 3
        assert waiter.fencing_token > holder.fencing_token  # type: ignore[operator]


def test_a_waiter_is_told_its_place_in_the_queue(gw: Gateway, key: str) -> None:
    holder = gw.lock(key, ttl=5).acquire()
    first = gw.lock(key, ttl=5, wait=10)
    first_waits = threading.Thread(target=first.acquire, daemon=True)
    first_waits.start()
    wait_until(lambda: first.position == 1, 5, "the first waiter to queue")
    places: List[int] = []
    second = gw.lock(key, ttl=5, wait=10, on_queued=places.append)
    second_waits = threading.Thread(target=second.acquire, daemon=True)
    second_waits.start()
    wait_until(lambda: places == [2], 5, "the second waiter to be told its place")
    holder.release()  # the first is granted, the second moves up
    first_waits.join(5)
    wait_until(lambda: places == [2, 1], 5, "the second waiter to be told it is next")
    assert second.position == 1 and first.position is None
    first.release()
    second_waits.join(5)
    assert second.token is not None and second.position is None and places == [2, 1]
    second.release()


def test_a_held_lock_replaces_its_value(gw: Gateway, key: str) -> None:
    with gw.lock(key, ttl=5, value="10.0.0.7:9000") as lock:
        lock.set_value("10.0.0.8:9000")
        info = gw.inspect(key)
        assert info is not None and [lease.value for lease in info.leases] == ["10.0.0.8:9000"]
        assert lock.value == "10.0.0.8:9000"
        lock.set_value(None)
        info = gw.inspect(key)
        assert info is not None and info.leases[0].value is None
    with pytest.raises(LockLost):
        lock.set_value("too late")  # released: nothing to set it on


def test_streamed_renewals_keep_it_past_its_lease(gw: Gateway, key: str) -> None:
    with gw.lock(key, ttl=0.6) as lock:
        granted_until = lock.expires_at_ms
        assert granted_until == lock.grant["expires_at_ms"]
        time.sleep(1.8)  # three leases
        lock.check()
        assert lock.remaining > 0
        assert lock.expires_at_ms is not None and lock.expires_at_ms >= granted_until + 1000
        info = gw.inspect(key)
        assert info is not None and info.fencing_token == lock.fencing_token
    assert gw.inspect(key) is None


def test_key_deleted_in_redis_is_lost(gw: Gateway, redis, key: str) -> None:
    called = threading.Event()
    with pytest.raises(LockLost) as raised:
        with gw.lock(key, ttl=0.9, on_lost=lambda lock: called.set()) as lock:
            names = redis.keys(f"*lock:{{{key}}}*")
            assert names, redis.keys()
            redis.cli("DEL", *names)
            assert lock.lost.wait(3), "the loss went unnoticed"
            with pytest.raises(LockLost) as checked:
                lock.check()
            assert checked.value.reason == "lock-gone"
    assert raised.value.reason == "lock-gone"
    assert called.is_set()
    assert gw.inspect(key) is None


def test_flushed_redis_is_lost(make_stack, key: str) -> None:
    redis, gateway = make_stack()
    with Gateway(gateway.url) as gw:
        with pytest.raises(LockLost):
            with gw.lock(key, ttl=0.9) as lock:
                redis.cli("FLUSHALL")
                assert lock.lost.wait(3)


def test_frozen_redis_stops_the_body_within_a_lease(make_stack, key: str) -> None:
    redis, gateway = make_stack()
    ttl = 1.0
    with Gateway(gateway.url) as gw:
        with pytest.raises(LockLost):
            with gw.lock(key, ttl=ttl) as lock:
                redis.freeze()
                frozen_at = time.monotonic()
                try:
                    while time.monotonic() - frozen_at < 10:
                        lock.check()
                        time.sleep(0.02)
                finally:
                    stopped_after = time.monotonic() - frozen_at
                    redis.thaw()
    # The last renewal was at most ttl/3 before the freeze.
    assert stopped_after < ttl + 1.0


def test_frozen_gateway_is_lost_by_the_clients_own_deadline(make_stack, key: str) -> None:
    _, gateway = make_stack()
    ttl = 1.0
    with Gateway(gateway.url) as gw:
        with pytest.raises(LockLost) as raised:
            with gw.lock(key, ttl=ttl) as lock:
                gateway.freeze()  # no event, no error, no closed connection
                frozen_at = time.monotonic()
                try:
                    assert lock.lost.wait(ttl + 2)
                    noticed_after = time.monotonic() - frozen_at
                finally:
                    gateway.thaw()
        assert raised.value.reason == "lease-expired"
        # A safety margin before the lease could end after the last renewal,
        # which came at most ttl/3 before the freeze: not before that.
        assert ttl - safety_margin(ttl) - ttl / 3 - 0.1 < noticed_after <= ttl + 1.0


def test_own_deadline_stops_the_holder_well_before_anyone_else_holds_it(make_stack, key: str) -> None:
    """A frozen gateway renews nothing and says nothing: the holder's own
    deadline must go off a safety margin (1 s for this lease) before the
    lease ends, when another client may be granted the lock."""
    redis, gateway_a = make_stack()
    _, gateway_b = make_stack(redis)
    ttl = 3.0
    lost_at: List[float] = []
    granted_at: List[float] = []
    with Gateway(gateway_a.url) as gw_a, Gateway(gateway_b.url) as gw_b:

        def wait_for_the_lock() -> None:
            lease = gw_b.acquire(key, ttl=5, wait=ttl + 5)
            granted_at.append(time.monotonic())
            lease.release()

        def someone_waits() -> bool:
            info = gw_b.inspect(key)
            return bool(info and info.waiters)

        waiter = threading.Thread(target=wait_for_the_lock, daemon=True)
        with pytest.raises(LockLost) as raised:
            with gw_a.lock(key, ttl=ttl, on_lost=lambda lock: lost_at.append(time.monotonic())):
                waiter.start()
                wait_until(someone_waits, 5, "the waiter to queue")
                gateway_a.freeze()  # its lease runs out in Redis; nobody tells the holder
                try:
                    waiter.join(ttl + 5)
                finally:
                    gateway_a.thaw()
        assert raised.value.reason == "lease-expired"
    assert lost_at and granted_at, "the holder never stopped, or the waiter was never granted"
    # Without the margin the two are a few milliseconds apart, either way.
    assert granted_at[0] - lost_at[0] > 0.5


def test_release_on_exception_keeps_the_exception(gw: Gateway, key: str) -> None:
    with pytest.raises(ValueError, match="from the body"):
        with gw.lock(key, ttl=5):
            raise ValueError("from the body")
    assert gw.inspect(key) is None


def test_failed_release_never_replaces_the_body_exception(gw: Gateway, redis, key: str) -> None:
    with pytest.raises(ValueError, match="from the body") as raised:
        with gw.lock(key, ttl=30):
            # Gone before the next renewal (10 s away) could notice: the
            # release is the first to find out.
            redis.cli("DEL", *redis.keys(f"*lock:{{{key}}}*"))
            raise ValueError("from the body")
    notes = getattr(raised.value, "__notes__", None)
    if notes is not None:  # Python 3.11+
        assert any("lockgate" in note for note in notes)


def test_killed_gateway_loses_the_lock_cleanly(make_stack, key: str) -> None:
    _, gateway = make_stack()
    with Gateway(gateway.url) as gw:
        started = time.monotonic()
        with pytest.raises(LockLost) as raised:
            with gw.lock(key, ttl=2) as lock:
                gateway.kill()
                assert lock.lost.wait(5)
        assert raised.value.reason == "connection-lost"
        assert time.monotonic() - started < 2
    # An unhandled exception in the lock's threads would fail the test
    # (see filterwarnings in pyproject.toml).


def test_gateway_shutdown_is_told(make_stack, key: str) -> None:
    _, gateway = make_stack()
    with Gateway(gateway.url) as gw:
        with pytest.raises(LockLost) as raised:
            with gw.lock(key, ttl=5) as lock:
                gateway.stop()  # SIGTERM: the gateway releases and says so
                assert lock.lost.wait(3)
        assert raised.value.reason == "shutting-down"


@pytest.mark.filterwarnings("ignore:.*use of fork\\(\\) may lead to deadlocks:DeprecationWarning")
def test_forked_child_neither_renews_nor_releases(gw: Gateway, key: str) -> None:
    with gw.lock(key, ttl=0.9) as lock:

        def child() -> List[str]:
            report = []
            try:
                lock.check()
                report.append("held")
            except LockLost as exc:
                report.append(exc.reason or "?")
            lock.release()  # does nothing in the child
            lock.__exit__(None, None, None)
            info = gw.inspect(key)  # the child's own connections
            return report + [str(info.fencing_token if info else None)]

        assert in_a_forked_child(child) == ["forked", str(lock.fencing_token)]
        time.sleep(1.2)  # past the lease: still renewed for the parent
        lock.check()
        info = gw.inspect(key)
        assert info is not None and info.fencing_token == lock.fencing_token
    assert gw.inspect(key) is None


def test_shared_and_counting_locks(gw: Gateway, key: str) -> None:
    with gw.lock(key, mode="shared", ttl=5) as reader1, gw.lock(key, mode="shared", ttl=5) as reader2:
        assert reader1.fencing_token != reader2.fencing_token
        with pytest.raises(LockHeld):
            gw.lock(key).acquire()
    semaphore = f"{key}:sem"
    with gw.lock(semaphore, limit=2, ttl=5), gw.lock(semaphore, limit=2, ttl=5):
        with pytest.raises(LockHeld):
            gw.lock(semaphore, limit=2).acquire()
        with pytest.raises(InvalidRequest) as mismatch:
            gw.lock(semaphore, limit=3).acquire()
        assert mismatch.value.slug == "limit-mismatch"


def test_refusals_map_to_errors(gateway, key: str) -> None:
    with Gateway(gateway.url) as gw:
        with pytest.raises(InvalidRequest) as invalid:
            gw.lock("no spaces allowed").acquire()
        assert invalid.value.slug == "invalid-key"
        assert invalid.value.problem["type"] == "/problems/invalid-key"
        with pytest.raises(InvalidRequest) as too_short:
            gw.lock(key, ttl=0.001).acquire()
        assert too_short.value.problem.get("field") == "ttl_ms"
    with Gateway("http://127.0.0.1:9", retries=0) as nowhere:
        with pytest.raises(GatewayUnavailable) as unavailable:
            nowhere.lock(key).acquire()
        assert unavailable.value.problem["type"] == "about:blank"


def test_api_key_revocation_and_listing(make_stack, redis, key: str) -> None:
    _, gateway = make_stack(redis, "--api-keys", "client-key", "--admin-token", "admin-token")
    with Gateway(gateway.url) as anonymous:
        with pytest.raises(InvalidRequest) as refused:
            anonymous.lock(key).acquire()
        assert refused.value.slug == "unauthorized" and refused.value.status == 401
    with Gateway(gateway.url, api_key="client-key") as gw:
        with pytest.raises(LockLost) as raised:
            with gw.lock(key, ttl=5) as lock, gw.lock(f"{key}:other", ttl=5):
                listed = sorted(info.key for info in gw.list_locks(key, page_size=1))
                assert listed == [key, f"{key}:other"]
                assert gw.revoke(key, "admin-token")
                assert lock.lost.wait(3)
        assert raised.value.reason == "revoked"
        assert not gw.revoke(key, "admin-token")  # nothing left to revoke


def test_revoking_one_hold_by_its_fencing_token(make_stack, redis, key: str) -> None:
    _, gateway = make_stack(redis, "--admin-token", "admin-token")
    with Gateway(gateway.url) as gw:
        with gw.lock(key, limit=2, ttl=5) as kept:
            with pytest.raises(LockLost) as raised:
                with gw.lock(key, limit=2, ttl=5) as stuck:
                    info = gw.inspect(key)
                    assert info is not None
                    assert {lease.fencing_token for lease in info.leases} == {kept.fencing_token, stuck.fencing_token}
                    # The operator ends the hold it saw stuck, and only that one.
                    assert gw.revoke(key, "admin-token", fencing_token=stuck.fencing_token)
                    assert stuck.lost.wait(3)
            assert raised.value.reason == "revoked"
            kept.check()
            info = gw.inspect(key)
            assert info is not None and [lease.fencing_token for lease in info.leases] == [kept.fencing_token]
            # That hold is gone: revoking it again ends nothing, least of
            # all the other holder's lock.
            assert not gw.revoke(key, "admin-token", fencing_token=stuck.fencing_token)
            time.sleep(0.3)
            kept.check()
            assert gw.inspect(key) is not None
