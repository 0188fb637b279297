package lockgate;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The client's own threads, all daemons (a JVM whose work is done exits):
 * one timer for lease deadlines and grant time limits, and a pool that
 * completes the futures users wait on, so that what a user chains to {@link
 * Held#lost()} never runs on a thread that reads a stream.
 */
final class Timers {
    private Timers() {}

    private static final ScheduledThreadPoolExecutor TIMER = timer();
    private static final ExecutorService NOTIFIER = Executors.newCachedThreadPool(daemons("lockgate-notify"));

    private static ScheduledThreadPoolExecutor timer() {
        ScheduledThreadPoolExecutor timer = new ScheduledThreadPoolExecutor(1, daemons("lockgate-timer"));
        timer.setRemoveOnCancelPolicy(true);
        return timer;
    }

    static ThreadFactory daemons(String name) {
        AtomicInteger count = new AtomicInteger();
        return task -> {
            Thread thread = new Thread(task, name + "-" + count.incrementAndGet());
            thread.setDaemon(true);
            return thread;
        };
    }

    /** Runs {@code task} on the timer after {@code nanos}; it must be short. */
    static ScheduledFuture<?> after(long nanos, Runnable task) {
        return TIMER.schedule(task, Math.max(0, nanos), TimeUnit.NANOSECONDS);
    }

    /** Runs {@code task} on the notifying pool. */
    static void notify(Runnable task) {
        NOTIFIER.execute(task);
    }
}
