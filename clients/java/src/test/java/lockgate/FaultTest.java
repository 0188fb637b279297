package lockgate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/** Gateways that die or freeze under a held lock, each test with its own Redis and gateway. */
class FaultTest {
    @Test
    void a_killed_gateway_loses_the_lock_and_interrupts_its_work(TestInfo info) throws Exception {
        try (Servers.Stack stack = Servers.own()) {
            Gateway gw = stack.client();
            String key = Servers.key(info.getDisplayName());
            CountDownLatch working = new CountDownLatch(1);
            CompletableFuture<LossReason> told = new CompletableFuture<>();
            CompletableFuture<Object> outcome = CompletableFuture.supplyAsync(() -> {
                try {
                    return gw.withLock(key, LockOptions.ttl(Duration.ofSeconds(30)), held -> {
                        held.lost().thenAccept(told::complete);
                        working.countDown();
                        Thread.sleep(60_000);
                        return "finished";
                    });
                } catch (Exception e) {
                    return e;
                }
            });
            assertTrue(working.await(10, TimeUnit.SECONDS));
            long killed = System.nanoTime();
            stack.gateway().kill();
            LockLostException lost = assertInstanceOf(LockLostException.class, outcome.get(10, TimeUnit.SECONDS));
            assertTrue(System.nanoTime() - killed < TimeUnit.SECONDS.toNanos(5), "told when the stream broke");
            assertEquals(LossReason.CONNECTION_LOST, lost.reason());
            assertEquals(LossReason.CONNECTION_LOST, told.get(5, TimeUnit.SECONDS));
        }
    }

    @Test
    void a_frozen_gateway_loses_the_lock_by_its_lease(TestInfo info) throws Exception {
        try (Servers.Stack stack = Servers.own()) {
            Gateway gw = stack.client();
            String key = Servers.key(info.getDisplayName());
            HeldLock held = gw.acquire(key, LockOptions.ttl(Duration.ofSeconds(3)));
            stack.gateway().freeze();
            long frozen = System.nanoTime();
            try {
                assertEquals(LossReason.LEASE_EXPIRED, held.lost().get(10, TimeUnit.SECONDS));
                long after = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - frozen);
                // The margin of a 3 s lease is 1 s: lost by 2 s after the last renewal, before Redis could grant it.
                assertTrue(after < 3000, "lost before the lease could have ended, after " + after + " ms");
            } finally {
                stack.gateway().thaw();
            }
        }
    }

    @Test
    void a_gateway_shutting_down_lets_go_and_says_so(TestInfo info) throws Exception {
        try (Servers.Stack stack = Servers.own()) {
            Gateway gw = stack.client();
            HeldLock held = gw.acquire(Servers.key(info.getDisplayName()), LockOptions.defaults());
            stack.gateway().stop();
            LossReason reason = held.lost().get(10, TimeUnit.SECONDS);
            assertTrue(reason == LossReason.SHUTTING_DOWN || reason == LossReason.CONNECTION_LOST, reason::toString);
        }
    }

    @Test
    void a_session_whose_gateway_is_killed_loses_its_locks(TestInfo info) throws Exception {
        try (Servers.Stack stack = Servers.own()) {
            Gateway gw = stack.client();
            Session session = gw.session(Duration.ofSeconds(10));
            HeldLock held = session.acquire(Servers.key(info.getDisplayName()), LockOptions.defaults());
            stack.gateway().kill();
            assertEquals(LossReason.CONNECTION_LOST, session.lost().get(10, TimeUnit.SECONDS));
            // Its own stream broke too: whichever was heard first.
            LossReason reason = held.lost().get(10, TimeUnit.SECONDS);
            assertTrue(reason == LossReason.SESSION_ENDED || reason == LossReason.CONNECTION_LOST, reason::toString);
        }
    }
}
