package lockgate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/** Plain leases: extended by their holder, retried with one Idempotency-Key when an answer is lost. */
class LeaseTest {
    private final Servers.Stack stack = Servers.shared();
    private final Gateway gw = stack.client();

    @Test
    void a_lease_is_extended_reentered_and_released_hold_by_hold(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        // A 6 s lease counts as lost 1 s early (its margin): extended after 1 s, it lasts past 5 s.
        Lease lease = gw.lease(key, LockOptions.ttl(Duration.ofSeconds(6)));
        assertFalse(lease.replayed());
        Thread.sleep(1000);
        lease.extend(Duration.ofSeconds(6));
        Thread.sleep(4500);
        assertTrue(lease.isHeld(), "the extension moved its end");
        assertEquals(2, lease.reenter());
        assertEquals(lease.fencingToken(), gw.inspect(key).orElseThrow().fencingToken(), "re-entry keeps it");
        assertEquals(1, lease.release());
        assertTrue(gw.inspect(key).isPresent());
        assertEquals(0, lease.release());
        assertTrue(gw.inspect(key).isEmpty());
        assertFalse(lease.isHeld());
    }

    @Test
    void a_lease_nobody_extends_is_lost_by_its_deadline(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        Lease lease = gw.lease(key, LockOptions.ttl(Duration.ofMillis(1500)));
        assertEquals(LossReason.LEASE_EXPIRED, lease.lost().get(5, TimeUnit.SECONDS));
        assertThrows(LockLostException.class, () -> lease.extend(Duration.ofSeconds(1)));
    }

    @Test
    void an_extension_after_the_end_is_the_loss(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        Lease lease = gw.lease(key, LockOptions.ttl(Duration.ofSeconds(30)));
        stack.redis().command("DEL", "lockgate:lock:{" + key + "}");
        LockLostException e = assertThrows(LockLostException.class, () -> lease.extend(Duration.ofSeconds(30)));
        assertEquals(LossReason.LOCK_GONE, e.reason());
        assertEquals(LossReason.LOCK_GONE, lease.lost().get(5, TimeUnit.SECONDS));
    }

    @Test
    void a_lost_answer_is_retried_with_the_same_idempotency_key_and_answered_the_same_grant(TestInfo info)
            throws Exception {
        String key = Servers.key(info.getDisplayName());
        try (Proxy proxy = new Proxy(stack.gateway().address)) {
            proxy.dropAnswers(1);
            Gateway through = Gateway.create(proxy.url());
            Lease lease = through.lease(key, LockOptions.ttl(Duration.ofSeconds(30)));
            assertTrue(lease.replayed(), "answered again, not granted again");
            List<String> dropped = proxy.droppedAnswers();
            assertEquals(1, dropped.size());
            assertTrue(dropped.get(0).startsWith("HTTP/1.1 201"), dropped.get(0));
            assertTrue(dropped.get(0).contains(lease.token()), "the lost answer carried this very grant");
            LockStatus status = gw.inspect(key).orElseThrow();
            assertEquals(1, status.holders());
            assertEquals(1, status.holds());
            assertEquals(lease.fencingToken(), status.fencingToken());
            lease.close();
        }
        assertTrue(gw.inspect(key).isEmpty());
    }

    @Test
    void the_same_idempotency_key_with_another_body_is_refused(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        String idempotencyKey = "java-" + key;
        try (Lease lease = gw.lease(key, LockOptions.ttl(Duration.ofSeconds(30)).withIdempotencyKey(idempotencyKey))) {
            Lease again = gw.lease(key, LockOptions.ttl(Duration.ofSeconds(30)).withIdempotencyKey(idempotencyKey));
            assertTrue(again.replayed());
            assertEquals(lease.token(), again.token());
            assertThrows(IdempotencyKeyReusedException.class,
                    () -> gw.lease(key, LockOptions.ttl(Duration.ofSeconds(20)).withIdempotencyKey(idempotencyKey)));
        }
    }

    @Test
    void a_streamed_lock_takes_no_idempotency_key(TestInfo info) {
        assertThrows(InvalidRequestException.class, () -> gw.acquire(Servers.key(info.getDisplayName()),
                LockOptions.defaults().withIdempotencyKey("k")));
    }
}
