package lockgate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Lock;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/** The lock as a {@link Lock}: taking, waiting, refusing, re-entering, releasing, through the real gateway. */
class LockTest {
    private final Gateway gw = Servers.shared().client();
    private final Servers.Stack stack = Servers.shared();

    private static String key(TestInfo info) {
        return Servers.key(info.getDisplayName());
    }

    @Test
    void a_lock_is_held_until_unlocked_and_free_at_once_after(TestInfo info) throws Exception {
        String key = key(info);
        DistributedLock lock = gw.lock(key, LockOptions.ttl(Duration.ofSeconds(5)));
        lock.lock();
        try {
            assertTrue(lock.isHeldByCurrentThread());
            LockStatus status = gw.inspect(key).orElseThrow();
            assertEquals(lock.fencingToken(), status.fencingToken());
            assertEquals(1, status.holders());
        } finally {
            lock.unlock();
        }
        assertTrue(gw.inspect(key).isEmpty(), "free as soon as unlock returns");
        assertFalse(lock.isHeldByCurrentThread());
    }

    @Test
    void try_lock_is_refused_while_another_owner_holds_it_and_granted_once_it_is_free(TestInfo info)
            throws Exception {
        String key = key(info);
        DistributedLock mine = gw.lock(key);
        DistributedLock theirs = Servers.shared().client().lock(key);
        assertTrue(mine.tryLock());
        ExecutorService other = Executors.newSingleThreadExecutor();
        try {
            assertFalse(other.submit(() -> theirs.tryLock()).get());
            long started = System.nanoTime();
            Future<Boolean> waiting = other.submit(() -> theirs.tryLock(10, TimeUnit.SECONDS));
            Thread.sleep(300);
            mine.unlock();
            assertTrue(waiting.get(10, TimeUnit.SECONDS));
            assertTrue(System.nanoTime() - started < TimeUnit.SECONDS.toNanos(5), "woken by the release, not a poll");
            other.submit(theirs::unlock).get();
        } finally {
            other.shutdownNow();
        }
    }

    @Test
    void try_lock_with_a_time_gives_up_when_the_wait_runs_out(TestInfo info) throws Exception {
        String key = key(info);
        try (HeldLock held = gw.acquire(key, LockOptions.defaults())) {
            DistributedLock other = gw.lock(key);
            CompletableFuture<Boolean> result = CompletableFuture.supplyAsync(() -> {
                try {
                    return other.tryLock(400, TimeUnit.MILLISECONDS);
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            });
            assertFalse(result.get(10, TimeUnit.SECONDS));
            assertTrue(held.isHeld());
        }
    }

    @Test
    void re_entry_counts_holds_in_this_thread_and_keeps_the_fencing_token(TestInfo info) {
        String key = key(info);
        DistributedLock lock = gw.lock(key);
        lock.lock();
        long fence = lock.fencingToken();
        lock.lock();
        assertTrue(lock.tryLock());
        assertEquals(3, lock.getHoldCount());
        assertEquals(fence, lock.fencingToken());
        assertEquals(1, gw.inspect(key).orElseThrow().holds(), "one grant on the gateway");
        lock.unlock();
        lock.unlock();
        assertTrue(gw.inspect(key).isPresent(), "still held after two of three unlocks");
        lock.unlock();
        assertTrue(gw.inspect(key).isEmpty());
        assertThrows(IllegalMonitorStateException.class, lock::unlock);
    }

    @Test
    void another_thread_of_this_process_is_another_owner(TestInfo info) throws Exception {
        String key = key(info);
        DistributedLock lock = gw.lock(key);
        lock.lock();
        try {
            ExecutorService other = Executors.newSingleThreadExecutor();
            try {
                assertFalse(other.submit(() -> lock.tryLock()).get());
                assertThrows(java.util.concurrent.ExecutionException.class, () -> other.submit(() -> {
                    lock.unlock();
                    return null;
                }).get(), "a thread that does not hold it cannot unlock it");
            } finally {
                other.shutdownNow();
            }
        } finally {
            lock.unlock();
        }
    }

    @Test
    void the_stream_keeps_a_lock_past_its_ttl(TestInfo info) throws Exception {
        String key = key(info);
        try (HeldLock held = gw.acquire(key, LockOptions.ttl(Duration.ofSeconds(3)))) {
            Thread.sleep(4000);
            assertTrue(held.isHeld());
            held.check();
            assertEquals(held.fencingToken(), gw.inspect(key).orElseThrow().fencingToken());
            assertTrue(held.remaining().toMillis() > 0);
        }
    }

    @Test
    void every_new_grant_has_a_larger_fencing_token(TestInfo info) throws Exception {
        String key = key(info);
        long previous = 0;
        for (int i = 0; i < 3; i++) {
            try (HeldLock held = gw.acquire(key, LockOptions.defaults())) {
                assertTrue(held.fencingToken() > previous);
                previous = held.fencingToken();
            }
        }
    }

    @Test
    void many_threads_take_turns_and_never_hold_it_together(TestInfo info) throws Exception {
        String key = key(info);
        DistributedLock lock = gw.lock(key, LockOptions.ttl(Duration.ofSeconds(5)));
        AtomicLong inside = new AtomicLong();
        AtomicLong overlaps = new AtomicLong();
        AtomicLong highestFence = new AtomicLong();
        ExecutorService pool = Executors.newFixedThreadPool(6);
        try {
            List<Future<Object>> runs = pool.invokeAll(java.util.Collections.nCopies(12, () -> {
                lock.lock();
                try {
                    if (inside.incrementAndGet() != 1) {
                        overlaps.incrementAndGet();
                    }
                    long fence = lock.fencingToken();
                    if (highestFence.getAndAccumulate(fence, Math::max) >= fence) {
                        overlaps.incrementAndGet();
                    }
                    Thread.sleep(20);
                    inside.decrementAndGet();
                } finally {
                    lock.unlock();
                }
                return null;
            }));
            for (Future<Object> run : runs) {
                run.get(60, TimeUnit.SECONDS);
            }
        } finally {
            pool.shutdownNow();
        }
        assertEquals(0, overlaps.get());
    }

    @Test
    void lock_interruptibly_gives_up_at_an_interrupt_and_holds_nothing(TestInfo info) throws Exception {
        String key = key(info);
        try (HeldLock held = gw.acquire(key, LockOptions.defaults())) {
            DistributedLock waiter = gw.lock(key);
            CountDownLatch queued = new CountDownLatch(1);
            DistributedLock counted = gw.lock(key, LockOptions.defaults().onQueued(position -> queued.countDown()));
            CompletableFuture<Throwable> outcome = new CompletableFuture<>();
            Thread thread = new Thread(() -> {
                try {
                    counted.lockInterruptibly();
                    outcome.complete(null);
                } catch (Throwable t) {
                    outcome.complete(t);
                }
            });
            thread.start();
            assertTrue(queued.await(10, TimeUnit.SECONDS), "queued behind the holder");
            thread.interrupt();
            assertTrue(outcome.get(10, TimeUnit.SECONDS) instanceof InterruptedException);
            Servers.eventually(3000, "the waiter left the queue",
                    () -> gw.inspect(key).orElseThrow().waiters().isEmpty());
            assertFalse(waiter.tryLock());
        }
    }

    @Test
    void lock_keeps_an_interrupt_for_later_and_takes_the_lock(TestInfo info) throws Exception {
        String key = key(info);
        DistributedLock lock = gw.lock(key);
        Thread.currentThread().interrupt();
        try {
            lock.lock();
            assertTrue(Thread.interrupted(), "the interrupt is kept");
            assertTrue(lock.isHeldByCurrentThread());
        } finally {
            Thread.interrupted();
            lock.unlock();
        }
    }

    @Test
    void new_condition_is_refused() {
        DistributedLock lock = gw.lock("java-test:conditions");
        UnsupportedOperationException e = assertThrows(UnsupportedOperationException.class, lock::newCondition);
        assertTrue(e.getMessage().contains("watch"));
    }

    @Test
    void try_with_resources_releases_the_lock(TestInfo info) {
        String key = key(info);
        DistributedLock lock = gw.lock(key);
        lock.lock();
        try (lock) {
            assertTrue(gw.inspect(key).isPresent());
        }
        assertTrue(gw.inspect(key).isEmpty());
    }

    @Test
    void a_value_is_shown_to_readers_and_can_be_replaced(TestInfo info) throws Exception {
        String key = key(info);
        try (HeldLock held = gw.acquire(key, LockOptions.defaults().withValue("10.0.0.7:9000"))) {
            assertEquals("10.0.0.7:9000", gw.inspect(key).orElseThrow().leases().get(0).value().orElseThrow());
            held.setValue("10.0.0.7:9001");
            assertEquals("10.0.0.7:9001", gw.inspect(key).orElseThrow().leases().get(0).value().orElseThrow());
            assertEquals("10.0.0.7:9001", held.value().orElseThrow());
        }
    }

    @Test
    void listing_finds_the_held_locks_of_a_prefix(TestInfo info) throws Exception {
        String prefix = key(info) + ":";
        try (HeldLock a = gw.acquire(prefix + "a", LockOptions.defaults());
                HeldLock b = gw.acquire(prefix + "b", LockOptions.defaults())) {
            List<String> keys = gw.list(prefix).map(LockStatus::key).sorted().toList();
            assertEquals(List.of(prefix + "a", prefix + "b"), keys);
            assertNotEquals(a.fencingToken(), b.fencingToken());
        }
        assertEquals(0, gw.list(prefix).count());
    }

    @Test
    void an_invalid_key_is_its_own_exception() {
        InvalidKeyException e = assertThrows(InvalidKeyException.class, () -> gw.lock("no spaces").lock());
        assertEquals("invalid-key", e.slug());
        assertEquals(422, e.status());
    }

    @Test
    void a_gateway_that_cannot_be_reached_is_unavailable() {
        Gateway nowhere = Gateway.create("http://127.0.0.1:" + Servers.freePort()).timeout(Duration.ofSeconds(2));
        GatewayUnavailableException e = assertThrows(GatewayUnavailableException.class,
                () -> nowhere.lock("java-test:nowhere").lock());
        assertEquals(0, e.status());
        assertTrue(stack.gateway().process.isAlive());
    }
}
