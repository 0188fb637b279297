package lockgate;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/** Waiting for a future or a pause, interruptibly or not (then an interrupt is kept for the caller). */
final class Waits {
    private Waits() {}

    static <T> T await(CompletableFuture<T> future, long nanos, boolean interruptible)
            throws InterruptedException, ExecutionException, TimeoutException {
        long until = System.nanoTime() + nanos;
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    return future.get(Math.max(0, until - System.nanoTime()), TimeUnit.NANOSECONDS);
                } catch (InterruptedException e) {
                    if (interruptible) {
                        throw e;
                    }
                    interrupted = true;
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** Waits {@code nanos}, interruptibly or not (an interrupt is then kept for the caller). */
    static void sleep(long nanos, boolean interruptible) throws InterruptedException {
        try {
            await(new CompletableFuture<Void>(), nanos, interruptible);
        } catch (TimeoutException slept) {
            // The whole pause has passed.
        } catch (ExecutionException never) {
            throw new AssertionError("a future nobody completes failed", never);
        }
    }

    /** The LockgateException inside a failed future (or one made of what failed it). */
    static RuntimeException unwrap(ExecutionException e) {
        Throwable cause = e.getCause();
        if (cause instanceof RuntimeException) {
            return (RuntimeException) cause;
        }
        if (cause instanceof Error) {
            throw (Error) cause;
        }
        return new GatewayUnavailableException("the request failed", cause);
    }
}
