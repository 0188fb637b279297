package lockgate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/** Sessions: one lease for many locks, which end with it. */
class SessionTest {
    private final Servers.Stack stack = Servers.shared();
    private final Gateway gw = stack.client();

    @Test
    void a_sessions_locks_outlive_its_ttl_and_are_freed_together_by_close(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        Session session = gw.session(Duration.ofSeconds(3));
        HeldLock a = session.acquire(key + ":a", LockOptions.defaults());
        DistributedLock b = session.lock(key + ":b", LockOptions.shared());
        b.lock();
        HeldLock c = session.semaphore(key + ":c", 3).acquire(2);
        Thread.sleep(4000);
        assertTrue(session.isHeld() && a.isHeld() && b.isHeldByCurrentThread() && c.isHeld());
        assertTrue(gw.inspect(key + ":a").isPresent());
        CompletableFuture<LossReason> lost = a.lost();
        session.close();
        for (String suffix : new String[] {":a", ":b", ":c"}) {
            assertTrue(gw.inspect(key + suffix).isEmpty(), "freed with the session: " + suffix);
        }
        Servers.eventually(2000, "released, not lost", lost::isCancelled);
        assertFalse(a.isHeld());
        a.close();
        b.unlock();
    }

    @Test
    void a_session_deleted_elsewhere_loses_its_locks(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        Session session = gw.session(Duration.ofSeconds(5));
        HeldLock held = session.acquire(key, LockOptions.defaults());
        gw.transport().call("DELETE", "/sessions/" + session.id(), null, Map.of(), Duration.ZERO);
        assertEquals(LossReason.DELETED, session.lost().get(5, TimeUnit.SECONDS));
        LossReason reason = held.lost().get(5, TimeUnit.SECONDS);
        assertEquals(LossReason.SESSION_ENDED, reason);
        LockLostException e = assertThrows(LockLostException.class, held::check);
        assertEquals(LossReason.SESSION_ENDED, e.reason());
        assertThrows(LockLostException.class, session::close);
        assertTrue(gw.inspect(key).isEmpty());
    }

    @Test
    void work_in_a_session_is_interrupted_when_the_session_ends(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        Session session = gw.session(Duration.ofSeconds(5));
        LockLostException e = assertThrows(LockLostException.class, () -> session.withLock(key, LockOptions.defaults(),
                held -> {
                    gw.transport().call("DELETE", "/sessions/" + session.id(), null, Map.of(), Duration.ZERO);
                    Thread.sleep(10_000);
                    return null;
                }));
        assertEquals(LossReason.SESSION_ENDED, e.reason());
    }

    @Test
    void a_lock_can_hang_on_a_session_opened_elsewhere(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        try (Session session = gw.session(Duration.ofSeconds(5))) {
            HeldLock held = stack.client().acquire(key, LockOptions.defaults().inSession(session.id()));
            assertEquals(session.expiresAt().toEpochMilli() / 1000, held.expiresAt().toEpochMilli() / 1000,
                    "the session's lease");
            assertTrue(gw.inspect(key).orElseThrow().leases().get(0).session().isPresent());
        }
        Servers.eventually(3000, "freed with its session", () -> gw.inspect(key).isEmpty());
    }

    @Test
    void a_session_that_never_was_is_not_found(TestInfo info) {
        String key = Servers.key(info.getDisplayName());
        SessionNotFoundException e = assertThrows(SessionNotFoundException.class, () -> gw.acquire(key,
                LockOptions.defaults().inSession("7c1f0b2e-6a4d-4e8b-9f3a-2d5c6b7a8e90")));
        assertEquals(404, e.status());
    }

    @Test
    void a_deadlock_between_two_sessions_refuses_the_youngest_wait(TestInfo info) throws Exception {
        String x = Servers.key(info.getDisplayName()) + ":x";
        String y = Servers.key(info.getDisplayName()) + ":y";
        try (Session a = gw.session(Duration.ofSeconds(10)); Session b = gw.session(Duration.ofSeconds(10))) {
            a.acquire(x, LockOptions.defaults());
            b.acquire(y, LockOptions.defaults());
            CompletableFuture<Object> first = CompletableFuture.supplyAsync(() -> {
                try {
                    return a.acquire(y, LockOptions.defaults().withWait(Duration.ofSeconds(10)));
                } catch (Exception e) {
                    return e;
                }
            });
            Servers.eventually(5000, "a waits for y", () -> !gw.inspect(y).orElseThrow().waiters().isEmpty());
            DeadlockException e = assertThrows(DeadlockException.class,
                    () -> b.acquire(x, LockOptions.defaults().withWait(Duration.ofSeconds(10))));
            assertTrue(e.cycle().contains(x) && e.cycle().contains(y), e.cycle()::toString);
            assertFalse(first.isDone(), "the other wait goes on");
            b.close();
            assertInstanceOf(HeldLock.class, first.get(10, TimeUnit.SECONDS));
        }
    }
}
