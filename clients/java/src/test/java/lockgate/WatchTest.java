package lockgate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/** Watching a lock: its events in order, resumed with Last-Event-ID, none missed or twice. */
class WatchTest {
    private final Servers.Stack stack = Servers.shared();
    private final Gateway gw = stack.client();

    private static WatchEvent next(Watcher watcher) throws InterruptedException {
        WatchEvent event = watcher.poll(Duration.ofSeconds(10));
        assertNotNull(event, "an event within 10 s");
        return event;
    }

    @Test
    void a_watch_sees_a_snapshot_then_every_change(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        try (Watcher watcher = gw.watch(key)) {
            WatchEvent snapshot = next(watcher);
            assertEquals(WatchEvent.Type.SNAPSHOT, snapshot.type());
            assertFalse(snapshot.snapshot().orElseThrow().held());
            long fence;
            try (HeldLock held = gw.acquire(key, LockOptions.defaults().withValue("10.0.0.7:9000"))) {
                fence = held.fencingToken();
                WatchEvent acquired = next(watcher);
                assertEquals(WatchEvent.Type.ACQUIRED, acquired.type());
                assertEquals(fence, acquired.fencingToken());
                assertEquals("10.0.0.7:9000", acquired.value().orElseThrow());
                held.setValue("10.0.0.7:9001");
                WatchEvent value = next(watcher);
                assertEquals(WatchEvent.Type.VALUE, value.type());
                assertEquals("10.0.0.7:9001", value.value().orElseThrow());
            }
            WatchEvent released = next(watcher);
            assertEquals(WatchEvent.Type.RELEASED, released.type());
            assertEquals(fence, released.fencingToken());
            assertFalse(released.id().isEmpty());
        }
    }

    @Test
    void a_watch_resumed_after_an_event_gets_every_event_after_it_and_none_twice(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        String resumeAfter;
        long first;
        try (Watcher watcher = gw.watch(key)) {
            next(watcher);
            HeldLock held = gw.acquire(key, LockOptions.defaults());
            first = held.fencingToken();
            assertEquals(WatchEvent.Type.ACQUIRED, next(watcher).type());
            resumeAfter = watcher.lastEventId();
            held.close();
        }
        long second;
        try (HeldLock again = gw.acquire(key, LockOptions.defaults())) {
            second = again.fencingToken();
        }
        try (Watcher resumed = gw.watch(key, resumeAfter)) {
            WatchEvent released = next(resumed);
            assertEquals(WatchEvent.Type.RELEASED, released.type(), "the event after the resumed one, no snapshot");
            assertEquals(first, released.fencingToken());
            WatchEvent acquired = next(resumed);
            assertEquals(WatchEvent.Type.ACQUIRED, acquired.type());
            assertEquals(second, acquired.fencingToken());
            assertEquals(WatchEvent.Type.RELEASED, next(resumed).type());
        }
    }

    @Test
    void a_dropped_connection_is_made_again_and_resumed(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        try (Proxy proxy = new Proxy(stack.gateway().address)) {
            Gateway through = Gateway.create(proxy.url());
            try (Watcher watcher = through.watch(key)) {
                assertEquals(WatchEvent.Type.SNAPSHOT, next(watcher).type());
                proxy.cut();
                long fence;
                try (HeldLock held = gw.acquire(key, LockOptions.defaults())) {
                    fence = held.fencingToken();
                }
                WatchEvent acquired = next(watcher);
                assertEquals(WatchEvent.Type.ACQUIRED, acquired.type(), "resumed: no second snapshot");
                assertEquals(fence, acquired.fencingToken());
                assertEquals(WatchEvent.Type.RELEASED, next(watcher).type());
            }
        }
    }

    @Test
    void a_revocation_is_seen_by_watchers(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        HeldLock held = gw.acquire(key, LockOptions.defaults());
        try (Watcher watcher = gw.watch(key)) {
            WatchEvent snapshot = next(watcher);
            assertTrue(snapshot.snapshot().orElseThrow().held());
            stack.admin().revoke(key);
            WatchEvent revoked = next(watcher);
            assertEquals(WatchEvent.Type.REVOKED, revoked.type());
            assertEquals(held.fencingToken(), revoked.fencingToken());
        }
        assertThrows(LockLostException.class, held::close);
    }

    @Test
    void a_refused_watch_is_thrown_at_once() {
        assertThrows(InvalidKeyException.class, () -> gw.watch("no spaces"));
    }

    @Test
    void a_closed_watch_wakes_its_reader(TestInfo info) throws Exception {
        Watcher watcher = gw.watch(Servers.key(info.getDisplayName()));
        next(watcher);
        watcher.close();
        assertThrows(IllegalStateException.class, watcher::take);
    }
}
