// The ZooKeeper load of the anchors benchmark: Curator's InterProcessMutex driven the way lockbench drives lockgate, reporting its own CPU.
//
//   java -cp <curator and zookeeper jars>:<classes> CuratorBench cycles --connect 127.0.0.1:2181 --clients 50 --seconds 5
//   java ... CuratorBench relay --connect 127.0.0.1:2181 --clients 50 --seconds 5
//
// cycles: each client its own session (as separate application instances
// would be) and its own lock path; acquire + release as fast as it can.
// relay: every client on one lock path, each releasing as soon as it is
// granted and asking again; the time from each release to the next grant.
// Prints one JSON line, with the same fields as lockbench's.

import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorBench {
    public static void main(String[] args) throws Exception {
        String mode = args[0];
        String connect = "127.0.0.1:2181";
        int clients = 50;
        int seconds = 5;
        for (int i = 1; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--connect" -> connect = args[i + 1];
                case "--clients" -> clients = Integer.parseInt(args[i + 1]);
                case "--seconds" -> seconds = Integer.parseInt(args[i + 1]);
                default -> throw new IllegalArgumentException("unknown option " + args[i]);
            }
        }
        if (!mode.equals("cycles") && !mode.equals("relay")) {
            throw new IllegalArgumentException("mode is cycles or relay, not " + mode);
        }
        boolean relay = mode.equals("relay");

        List<CuratorFramework> sessions = new ArrayList<>();
        for (int i = 0; i < clients; i++) {
            CuratorFramework session = CuratorFrameworkFactory.newClient(
                connect, new ExponentialBackoffRetry(100, 3));
            session.start();
            sessions.add(session);
        }
        for (CuratorFramework session : sessions) {
            if (!session.blockUntilConnected(20, TimeUnit.SECONDS)) {
                throw new IllegalStateException("no ZooKeeper session at " + connect);
            }
        }
        // One lock call each before the clock starts, so the lock paths'
        // parents exist and the classes are loaded.
        for (int i = 0; i < clients; i++) {
            InterProcessMutex lock = new InterProcessMutex(sessions.get(i), path(relay, i));
            lock.acquire();
            lock.release();
        }

        AtomicLong done = new AtomicLong();
        // When the lock was last released (0: not yet) and by which client,
        // and each hand-off's delay after it, in µs. The lock is exclusive,
        // so grants and releases alternate: the release recorded before a
        // grant is the one it followed. A grant to the client that released
        // last is a re-grant, not a hand-off: the others went on waiting.
        AtomicLong released = new AtomicLong();
        AtomicLong releasedBy = new AtomicLong(-1);
        AtomicLong regrants = new AtomicLong();
        List<Long> delays = Collections.synchronizedList(new ArrayList<>());
        // Each grant's wait from asking, in µs.
        List<Long> waits = Collections.synchronizedList(new ArrayList<>());
        List<Throwable> failures = Collections.synchronizedList(new ArrayList<>());
        CountDownLatch finished = new CountDownLatch(clients);
        long cpuStart = processCpuNanos();
        long start = System.nanoTime();
        long deadline = start + TimeUnit.SECONDS.toNanos(seconds);
        for (int i = 0; i < clients; i++) {
            InterProcessMutex lock = new InterProcessMutex(sessions.get(i), path(relay, i));
            int id = i;
            Thread client = new Thread(() -> {
                try {
                    while (System.nanoTime() < deadline) {
                        long asked = System.nanoTime();
                        lock.acquire();
                        long grant = System.nanoTime();
                        waits.add((grant - asked) / 1000);
                        long previous = released.get();
                        if (relay && previous != 0) {
                            if (releasedBy.get() == id) {
                                regrants.incrementAndGet();
                            } else {
                                delays.add((grant - previous) / 1000);
                            }
                        }
                        released.set(System.nanoTime());
                        releasedBy.set(id);
                        lock.release();
                        done.incrementAndGet();
                    }
                } catch (Throwable failure) {
                    failures.add(failure);
                } finally {
                    finished.countDown();
                }
            });
            client.start();
        }
        finished.await();
        double elapsed = (System.nanoTime() - start) / 1e9;
        double cpuMs = (processCpuNanos() - cpuStart) / 1e6;
        for (CuratorFramework session : sessions) {
            session.close();
        }
        if (!failures.isEmpty()) {
            failures.get(0).printStackTrace();
            System.exit(1);
        }
        long cycles = done.get();
        StringBuilder line = new StringBuilder();
        line.append(String.format(
            "{\"mode\":\"curator-%s\",\"done\":%d,\"seconds\":%.2f,\"per_second\":%.0f,"
                + "\"generator_cpu_ms\":%.0f",
            mode, cycles, elapsed, cycles / elapsed, cpuMs));
        if (relay) {
            List<Long> sorted = new ArrayList<>(delays);
            Collections.sort(sorted);
            List<Long> waited = new ArrayList<>(waits);
            Collections.sort(waited);
            line.append(String.format(
                ",\"handoffs\":%d,\"handoffs_per_second\":%.0f,\"regrants\":%d,"
                    + "\"handoff_p50_ms\":%.2f,\"handoff_p99_ms\":%.2f",
                sorted.size(), sorted.size() / elapsed, regrants.get(),
                percentile(sorted, 0.50) / 1000.0, percentile(sorted, 0.99) / 1000.0));
            line.append(String.format(
                ",\"wait_p50_ms\":%.2f,\"wait_p99_ms\":%.2f,\"wait_max_ms\":%.2f",
                percentile(waited, 0.50) / 1000.0, percentile(waited, 0.99) / 1000.0,
                percentile(waited, 1.0) / 1000.0));
        }
        line.append('}');
        System.out.println(line);
    }

    private static String path(boolean relay, int client) {
        return relay ? "/bench/relay" : "/bench/cycle/" + client;
    }

    private static long percentile(List<Long> sorted, double p) {
        if (sorted.isEmpty()) {
            return 0;
        }
        int index = Math.max((int) Math.ceil(sorted.size() * p) - 1, 0);
        return sorted.get(index);
    }

    private static long processCpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean)
            ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }
}
