"""Watching a lock (resuming after a dropped connection) and electing a
leader (the next one takes over with a larger term)."""

from __future__ import annotations

import queue
import threading
import time
from typing import List, Optional

import pytest

import httpx

from lockgate import Gateway, InvalidRequest, Leader, LockEvent, LockHeld, LockLost


def _follow(watcher, into: "queue.Queue[LockEvent]") -> threading.Thread:
    def run() -> None:
        for event in watcher:
            into.put(event)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _next(events: "queue.Queue", timeout: float = 5.0):
    return events.get(timeout=timeout)


def test_watcher_resumes_after_a_dropped_connection(gateway, proxy_to, gw: Gateway, key: str) -> None:
    proxy = proxy_to(gateway.port)
    events: "queue.Queue[LockEvent]" = queue.Queue()
    watcher = Gateway(proxy.url).watch(key, reconnect_timeout=10)
    thread = _follow(watcher, events)
    try:
        assert _next(events).type == "snapshot"
        first = gw.acquire(key, ttl=5, value="one")
        seen = _next(events)
        assert (seen.type, seen.fencing_token, seen.value) == ("acquired", first.fencing_token, "one")

        # The connection drops, and for a while no new one gets through:
        # what happens meanwhile must still arrive, once.
        proxy.refuse(True)
        proxy.cut()
        time.sleep(0.2)
        first.release()
        second = gw.acquire(key, ttl=5, value="two")
        second.release()
        proxy.refuse(False)

        missed = [_next(events) for _ in range(3)]
        assert [(e.type, e.fencing_token) for e in missed] == [
            ("released", first.fencing_token),
            ("acquired", second.fencing_token),
            ("released", second.fencing_token),
        ]
        assert watcher.reconnects >= 1
        assert events.empty()  # no snapshot again, nothing twice
        ids = [seen.id] + [e.id for e in missed]
        assert all(ids) and len(set(ids)) == len(ids)
    finally:
        watcher.close()
        thread.join(5)


def test_watcher_does_not_retry_a_refusal(make_stack, proxy_to) -> None:
    """A 4xx says the request is wrong as it stands: the watcher raises it
    at once instead of asking again until its reconnect timeout."""
    redis, _ = make_stack()
    _, gateway = make_stack(redis, "--api-keys", "client-key")
    proxy = proxy_to(gateway.port)
    with Gateway(proxy.url, api_key="client-key") as gw:
        started = time.monotonic()
        with pytest.raises(InvalidRequest) as refused:
            next(iter(gw.watch("no spaces allowed", reconnect_timeout=30)))
        assert (refused.value.status, refused.value.slug) == (422, "invalid-key")
        assert proxy.connections == 1
        assert time.monotonic() - started < 3
    with Gateway(proxy.url) as anonymous:
        with pytest.raises(InvalidRequest) as unauthorized:
            next(iter(anonymous.watch("test:watch-refused", reconnect_timeout=30)))
        assert unauthorized.value.status == 401
        assert proxy.connections == 2


def test_watcher_retries_an_unavailable_backend(make_stack, proxy_to, key: str) -> None:
    """A 503 may pass: the watcher asks again until the gateway serves it."""
    redis, gateway = make_stack()
    proxy = proxy_to(gateway.port)
    events: "queue.Queue[LockEvent]" = queue.Queue()
    watcher = Gateway(proxy.url).watch(key, reconnect_timeout=20)
    redis.freeze()
    try:
        thread = _follow(watcher, events)
        wait_until_connections(proxy, 2, timeout=10)  # refused once at least
    finally:
        redis.thaw()
    try:
        assert _next(events, 10).type == "snapshot"
    finally:
        watcher.close()
        thread.join(5)


def wait_until_connections(proxy, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while proxy.connections < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"only {proxy.connections} connections")
        time.sleep(0.05)


def test_watcher_and_inspect_show_a_lock_delay(gateway, gw: Gateway, key: str) -> None:
    # A session nobody keeps alive, with a lock-delay, opened as any HTTP
    # client would: when it expires, its lock stays free for the delay.
    opened = httpx.post(f"{gateway.url}/sessions", json={"ttl_ms": 1000, "lock_delay_ms": 2000}, timeout=5)
    assert opened.status_code == 201
    events: "queue.Queue[LockEvent]" = queue.Queue()
    watcher = gw.watch(key)
    thread = _follow(watcher, events)
    try:
        assert _next(events).type == "snapshot"
        granted = httpx.post(f"{gateway.url}/locks", json={"key": key, "session": opened.json()["id"]}, timeout=5)
        assert granted.status_code == 201
        kinds = [_next(events) for _ in range(3)]
        assert [event.type for event in kinds] == ["acquired", "expired", "delayed"]
        delayed = kinds[2]
        assert delayed.key == key and delayed.delayed_until_ms
        info = gw.inspect(key)
        assert info is not None and not info.held and info.delayed_until_ms == delayed.delayed_until_ms
        with pytest.raises(LockHeld) as refused:
            gw.acquire(key)
        assert 0 < (refused.value.retry_after or 0) <= 2
        with gw.acquire(key, ttl=5, wait=5):  # granted once the delay is over
            pass
    finally:
        watcher.close()
        thread.join(5)


def test_election_hands_over_when_the_leader_dies(make_stack, key: str) -> None:
    redis, gateway_a = make_stack()
    _, gateway_b = make_stack(redis)
    ttl = 1.0
    with Gateway(gateway_a.url) as gw_a, Gateway(gateway_b.url) as gw_b:
        leaders: "queue.Queue[Optional[Leader]]" = queue.Queue()
        observer = gw_b.election(key).observe()
        following = threading.Thread(target=lambda: [leaders.put(leader) for leader in observer], daemon=True)
        following.start()
        second = gw_b.election(key, value="10.0.0.8:9000", ttl=ttl).campaign(timeout=20)
        candidate = threading.Thread(target=second.acquire, daemon=True)
        try:
            assert leaders.get(timeout=5) is None  # nobody leads yet

            with pytest.raises(LockLost):
                with gw_a.election(key, value="10.0.0.7:9000", ttl=ttl).campaign() as first:
                    assert first.term and first.term > 0
                    elected = leaders.get(timeout=5)
                    assert elected is not None
                    assert (elected.value, elected.term) == ("10.0.0.7:9000", first.term)

                    candidate.start()  # the second candidate waits in line
                    wait_for_waiter(gw_b, key)
                    assert second.term is None

                    gateway_a.kill()  # the leader's gateway dies: nobody renews its lease
                    killed_at = time.monotonic()
                    assert first.lost.wait(5)

            candidate.join(ttl + 5)
            assert second.term is not None, "the other candidate was not elected"
            assert time.monotonic() - killed_at < ttl + 2
            assert second.term > first.term
            leader = gw_b.election(key).leader()
            assert leader == Leader("10.0.0.8:9000", second.term, leader.expires_at_ms if leader else None)

            # The observer saw the handover: the old leader gone, the new one in.
            changes: List[Optional[Leader]] = []
            while not changes or changes[-1] is None or changes[-1].term != second.term:
                changes.append(leaders.get(timeout=5))
            assert changes[-1].value == "10.0.0.8:9000"  # type: ignore[union-attr]

            # The leader publishes a new address without a new election.
            second.proclaim("10.0.0.9:9000")
            proclaimed = gw_b.election(key).leader()
            assert proclaimed is not None and (proclaimed.value, proclaimed.term) == ("10.0.0.9:9000", second.term)
            while changes[-1] is None or changes[-1].value != "10.0.0.9:9000":
                changes.append(leaders.get(timeout=5))
            assert changes[-1].term == second.term

            second.resign()
            assert gw_b.election(key).leader() is None
        finally:
            observer.close()
            following.join(5)
            second.release()


def wait_for_waiter(gw: Gateway, key: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = gw.inspect(key)
        if info is not None and info.waiters:
            return
        time.sleep(0.02)
    raise AssertionError("the candidate never queued")
