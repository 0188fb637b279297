package lockgate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/** Shared (read-write) and counting locks, upgrades and downgrades. */
class KindsTest {
    private final Gateway gw = Servers.shared().client();

    @Test
    void readers_share_the_lock_and_a_writer_waits_for_them(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        DistributedReadWriteLock rw = gw.readWriteLock(key);
        ExecutorService threads = Executors.newFixedThreadPool(3);
        try {
            rw.readLock().lock();
            assertTrue(threads.submit(() -> rw.readLock().tryLock()).get(), "a second reader comes in");
            assertEquals(2, gw.inspect(key).orElseThrow().holders());
            assertEquals(LockMode.SHARED, gw.inspect(key).orElseThrow().mode());
            assertFalse(threads.submit(() -> gw.readWriteLock(key).writeLock().tryLock()).get(), "no writer now");
            Future<Boolean> writer = threads.submit(() -> gw.readWriteLock(key).writeLock().tryLock(10, TimeUnit.SECONDS));
            Servers.eventually(5000, "the writer waits", () -> !gw.inspect(key).orElseThrow().waiters().isEmpty());
            assertFalse(threads.submit(() -> gw.readWriteLock(key).readLock().tryLock()).get(),
                    "a waiting writer holds back new readers");
            rw.readLock().unlock();
            assertFalse(writer.isDone(), "the other reader still reads");
            CompletableFuture.runAsync(() -> {}, threads).get();
        } finally {
            threads.shutdownNow();
        }
    }

    @Test
    void a_writer_may_read_and_keeps_reading_when_it_stops_writing(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        DistributedReadWriteLock rw = gw.readWriteLock(key);
        rw.writeLock().lock();
        long fence = rw.writeLock().fencingToken();
        rw.readLock().lock();
        rw.writeLock().unlock();
        LockStatus status = gw.inspect(key).orElseThrow();
        assertEquals(LockMode.SHARED, status.mode(), "downgraded, never let go");
        assertEquals(fence, status.fencingToken());
        assertTrue(rw.readLock().isHeldByCurrentThread());
        rw.readLock().unlock();
        assertTrue(gw.inspect(key).isEmpty());
    }

    @Test
    void a_reader_cannot_take_the_write_lock_but_can_upgrade(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        DistributedReadWriteLock rw = gw.readWriteLock(key);
        rw.readLock().lock();
        try {
            assertThrows(IllegalMonitorStateException.class, () -> rw.writeLock().lock());
            long before = rw.readLock().fencingToken();
            rw.readLock().upgrade(Duration.ofSeconds(5));
            assertEquals(LockMode.EXCLUSIVE, rw.readLock().mode());
            assertTrue(rw.readLock().fencingToken() > before, "an upgrade is a new grant");
            assertEquals(LockMode.EXCLUSIVE, gw.inspect(key).orElseThrow().mode());
            rw.readLock().downgrade();
            assertEquals(LockMode.SHARED, gw.inspect(key).orElseThrow().mode());
        } finally {
            rw.readLock().unlock();
        }
    }

    @Test
    void an_upgrade_that_cannot_have_the_lock_in_time_keeps_its_shared_hold(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        try (HeldLock mine = gw.acquire(key, LockOptions.shared()); HeldLock other = gw.acquire(key, LockOptions.shared())) {
            assertThrows(LockHeldException.class, () -> mine.upgrade(Duration.ofMillis(300)));
            assertTrue(mine.isHeld());
            assertEquals(LockMode.SHARED, mine.mode());
            assertTrue(other.isHeld());
        }
    }

    @Test
    void a_counting_lock_admits_its_limit_and_counts_permits(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        CountingLock pool = gw.semaphore(key, 3);
        assertEquals(3, pool.availablePermits());
        HeldLock two = pool.acquire(2);
        assertEquals(2, two.permits());
        assertEquals(1, pool.availablePermits());
        assertEquals(2, gw.inspect(key).orElseThrow().leases().get(0).permits());
        Optional<HeldLock> one = pool.tryAcquire(1);
        assertTrue(one.isPresent());
        assertTrue(pool.tryAcquire(1).isEmpty(), "full");
        assertTrue(pool.tryAcquire(1, Duration.ofMillis(200)).isEmpty());
        two.close();
        assertEquals(2, pool.availablePermits());
        one.get().close();
        assertEquals(3, pool.availablePermits());
    }

    @Test
    void holders_that_disagree_on_a_limit_are_told(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        try (HeldLock held = gw.semaphore(key, 2).acquire()) {
            LimitMismatchException e = assertThrows(LimitMismatchException.class, () -> gw.semaphore(key, 4).acquire());
            assertEquals(2L, e.problem().limit().orElseThrow());
            assertInstanceOf(InvalidRequestException.class, e);
        }
    }

    @Test
    void a_lock_of_several_places_serves_one_thread_per_place(TestInfo info) throws Exception {
        String key = Servers.key(info.getDisplayName());
        DistributedLock lock = gw.lock(key, LockOptions.limit(2));
        ExecutorService threads = Executors.newFixedThreadPool(3);
        try {
            assertTrue(threads.submit(() -> lock.tryLock()).get());
            assertTrue(threads.submit(() -> lock.tryLock()).get());
            assertFalse(threads.submit(() -> lock.tryLock()).get(), "two places, two holders");
        } finally {
            threads.shutdownNow();
        }
    }
}
