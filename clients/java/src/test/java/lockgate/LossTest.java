package lockgate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/** A lost lock told: its future completes with the reason, the work under it is interrupted, unlock throws. */
class LossTest {
    private final Servers.Stack stack = Servers.shared();
    private final Gateway gw = stack.client();

    @Test
    void a_revoked_lock_interrupts_the_work_under_it(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        CountDownLatch working = new CountDownLatch(1);
        AtomicBoolean sawInterrupt = new AtomicBoolean();
        CompletableFuture<LossReason> told = new CompletableFuture<>();
        CompletableFuture<Object> outcome = CompletableFuture.supplyAsync(() -> {
            try {
                return gw.withLock(key, LockOptions.ttl(Duration.ofSeconds(10)), held -> {
                    held.lost().thenAccept(told::complete);
                    working.countDown();
                    try {
                        Thread.sleep(30_000);
                    } catch (InterruptedException e) {
                        sawInterrupt.set(true);
                        throw e;
                    }
                    return "finished";
                });
            } catch (Exception e) {
                return e;
            }
        });
        assertTrue(working.await(10, TimeUnit.SECONDS));
        long revoked = System.nanoTime();
        assertTrue(stack.admin().revoke(key));
        Object result = outcome.get(10, TimeUnit.SECONDS);
        assertTrue(System.nanoTime() - revoked < TimeUnit.SECONDS.toNanos(5), "interrupted at once, not at the end");
        LockLostException lost = assertInstanceOf(LockLostException.class, result);
        assertEquals(LossReason.REVOKED, lost.reason());
        assertEquals(key, lost.key().orElseThrow());
        assertTrue(sawInterrupt.get(), "the work's sleep was interrupted");
        assertInstanceOf(InterruptedException.class, lost.getSuppressed()[0], "the work's own exception is kept");
        assertEquals(LossReason.REVOKED, told.get(5, TimeUnit.SECONDS));
    }

    @Test
    void the_work_thread_is_not_left_interrupted_after_the_block(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        CompletableFuture<Boolean> interruptedAfter = CompletableFuture.supplyAsync(() -> {
            try {
                gw.withLock(key, () -> {
                    stack.admin().revoke(key);
                    Thread.sleep(10_000);
                    return null;
                });
            } catch (LockLostException expected) {
                return Thread.currentThread().isInterrupted();
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
            throw new IllegalStateException("no loss");
        });
        assertFalse(interruptedAfter.get(15, TimeUnit.SECONDS));
    }

    @Test
    void work_that_ignores_interrupts_still_ends_in_the_loss(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        LockLostException lost = assertThrows(LockLostException.class, () -> gw.withLock(key, held -> {
            stack.admin().revoke(key);
            Servers.eventually(5000, "the loss", () -> !held.isHeld());
            return "done anyway";
        }));
        assertEquals(LossReason.REVOKED, lost.reason());
    }

    @Test
    void work_that_returns_nothing_runs_under_the_lock_too(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        long[] fence = new long[1];
        gw.runWithLock(key, held -> fence[0] = held.fencingToken());
        assertTrue(fence[0] > 0);
        LockLostException e = assertThrows(LockLostException.class, () -> gw.runWithLock(key, held -> {
            stack.admin().revoke(key);
            Thread.sleep(10_000);
        }));
        assertEquals(LossReason.REVOKED, e.reason());
    }

    @Test
    void work_that_fails_on_its_own_keeps_its_exception(TestInfo info) {
        String key = Servers.key(info.getDisplayName());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> gw.withLock(key, held -> {
            throw new IllegalArgumentException("the work's own");
        }));
        assertEquals("the work's own", e.getMessage());
        assertTrue(gw.inspect(key).isEmpty(), "released all the same");
    }

    @Test
    void a_lock_whose_redis_key_is_deleted_is_lost_at_the_next_renewal(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        // A lease long enough that its deadline (5 s) comes well after the next renewal (2 s).
        DistributedLock lock = gw.lock(key, LockOptions.ttl(Duration.ofSeconds(6)));
        lock.lock();
        CompletableFuture<LossReason> lost = lock.lost();
        stack.redis().command("DEL", "lockgate:lock:{" + key + "}");
        assertEquals(LossReason.LOCK_GONE, lost.get(5, TimeUnit.SECONDS));
        assertFalse(lock.isHeldByCurrentThread());
        LockLostException e = assertThrows(LockLostException.class, lock::unlock,
                "unlock tells that the work was not protected, as Redisson's unlock does");
        assertEquals(LossReason.LOCK_GONE, e.reason());
        assertThrows(IllegalMonitorStateException.class, lock::unlock, "and the thread holds nothing more");
    }

    @Test
    void a_release_with_the_token_elsewhere_is_told(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        HeldLock held = gw.acquire(key, LockOptions.defaults());
        assertEquals(0, gw.release(key, held.token()));
        assertEquals(LossReason.RELEASED_ELSEWHERE, held.lost().get(5, TimeUnit.SECONDS));
        assertThrows(LockLostException.class, held::check);
        assertThrows(LockLostException.class, held::close);
        held.close();
    }

    @Test
    void a_released_lock_is_never_lost(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        HeldLock held = gw.acquire(key, LockOptions.defaults());
        CompletableFuture<LossReason> lost = held.lost();
        held.close();
        assertTrue(lost.isCancelled() || waitCancelled(lost), "cancelled: it will never be lost");
        assertThrows(IllegalStateException.class, held::check);
        assertThrows(UnsupportedOperationException.class, () -> lost.complete(LossReason.REVOKED));
    }

    private static boolean waitCancelled(CompletableFuture<?> future) {
        Servers.eventually(2000, "cancelled", future::isCancelled);
        return true;
    }

    @Test
    void a_revocation_by_fencing_token_leaves_another_holder_alone(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        CountingLock pool = gw.semaphore(key, 2);
        HeldLock first = pool.acquire();
        HeldLock second = pool.acquire();
        assertTrue(stack.admin().revoke(key, first.fencingToken()));
        assertEquals(LossReason.REVOKED, first.lost().get(5, TimeUnit.SECONDS));
        Thread.sleep(200);
        assertTrue(second.isHeld());
        assertFalse(stack.admin().revoke(key, first.fencingToken()), "that hold is gone");
        second.close();
        assertFalse(stack.admin().revoke(key), "free");
    }
}
