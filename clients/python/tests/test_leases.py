"""Plain leases: acquire, extend, re-enter, release with a token, and the
idempotent retry of an acquisition whose answer was lost."""

from __future__ import annotations

import json
import uuid

import pytest

from lockgate import Gateway, LockHeld, LockLost, NotOwner


def test_acquire_extend_reenter_release(gw: Gateway, key: str) -> None:
    lease = gw.acquire(key, ttl=1, value="worker-1")
    assert lease.holds == 1 and lease.ttl == 1.0 and not lease.replayed
    lease.extend(20)
    info = gw.inspect(key)
    assert info is not None and info.ttl is not None and info.ttl > 10
    assert info.leases[0].value == "worker-1"

    again = gw.acquire(key, token=lease.token, ttl=20)
    assert again.holds == 2 and again.fencing_token == lease.fencing_token
    lease.set_value("worker-1b")
    assert gw.inspect(key).leases[0].value == "worker-1b"  # type: ignore[union-attr]

    assert lease.release() == 1
    assert lease.release() == 0
    assert gw.inspect(key) is None
    with pytest.raises(LockLost) as gone:
        lease.extend(5)
    assert gone.value.slug == "lock-not-found"


def test_other_owners_are_refused(gw: Gateway, key: str) -> None:
    with gw.acquire(key, ttl=5) as lease:
        with pytest.raises(LockHeld):
            gw.acquire(key)
        stranger = str(uuid.uuid4())
        with pytest.raises(NotOwner) as refused:
            gw.release(key, stranger)
        assert refused.value.problem["type"] == "/problems/not-owner"
        with pytest.raises(NotOwner):
            gw.extend(key, stranger, 5)
        assert lease.holds == 1
    assert gw.inspect(key) is None


def test_retried_acquire_gets_the_same_grant(gateway, proxy_to, gw: Gateway, key: str) -> None:
    proxy = proxy_to(gateway.port)
    proxy.drop_responses(1)  # the first answer is lost on its way back
    with Gateway(proxy.url, retries=2) as flaky:
        lease = flaky.acquire(key, ttl=10)
        assert proxy.dropped == 1
        assert proxy.connections >= 2
        assert lease.replayed  # the gateway answered the first grant again
        lost_answer = json.loads(proxy.dropped_answers[0].split(b"\r\n\r\n", 1)[1])
        assert (lost_answer["token"], lost_answer["fencing_token"]) == (lease.token, lease.fencing_token)
        info = gw.inspect(key)
        assert info is not None and info.holders == 1
        assert info.fencing_token == lease.fencing_token
        # The token the retry got is the grant's own: it releases the lock.
        assert lease.release() == 0
    assert gw.inspect(key) is None


def test_idempotency_key_is_fresh_per_acquisition(gw: Gateway, key: str) -> None:
    first = gw.acquire(key, ttl=5)
    first.release()
    second = gw.acquire(key, ttl=5)
    assert not second.replayed
    assert second.token != first.token and second.fencing_token > first.fencing_token
    second.release()
