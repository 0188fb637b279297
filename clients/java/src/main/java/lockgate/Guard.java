package lockgate;

import java.io.InterruptedIOException;
import java.nio.channels.ClosedByInterruptException;
import java.util.function.Consumer;

/**
 * Runs work under something held, on the caller's thread: once it is lost the
 * thread is interrupted (the JDK's cancellation: a sleep, a wait, an
 * interruptible channel or a blocking queue stops at once), and at the end it
 * is released. As {@code asyncio.timeout} turns its own cancellation into
 * {@code TimeoutError}, the interruption the loss caused becomes a {@link
 * LockLostException} at the block's edge, and the interrupt status it set is
 * cleared; the work's own exceptions are never replaced.
 */
final class Guard {
    private Guard() {}

    /**
     * Runs {@code work} while {@code holding} is held, then closes {@code held}.
     *
     * @throws LockLostException when it was lost while the work ran (its
     *     interruption, or the work's end, came after the loss); the work's own
     *     exception otherwise, with the loss added as a suppressed one
     */
    static <T, E extends Exception> T run(Holding holding, Held held, LockedCall<T, E> work) throws E {
        Thread thread = Thread.currentThread();
        Stopper stopper = new Stopper(thread);
        holding.onLoss(stopper);
        T result = null;
        Throwable failure = null;
        try {
            result = work.call();
        } catch (Throwable t) {
            failure = t;
        } finally {
            stopper.finish();
            holding.removeListener(stopper);
        }
        if (stopper.interrupted) {
            Thread.interrupted();
        }
        LockLostException closing = null;
        try {
            held.close();
        } catch (LockLostException e) {
            closing = e;
        } catch (RuntimeException e) {
            if (failure == null) {
                throw e;
            }
            failure.addSuppressed(e);
        }
        LockLostException loss = holding.loss() != null ? Holding.copyOf(holding.loss()) : closing;
        if (failure == null) {
            if (loss != null) {
                throw loss;
            }
            return result;
        }
        if (loss != null && stopper.interrupted && byInterrupt(failure)) {
            loss.addSuppressed(failure);
            throw loss;
        }
        if (loss != null) {
            failure.addSuppressed(loss);
        }
        return Guard.<T, E>rethrow(failure);
    }

    @SuppressWarnings("unchecked")
    private static <T, E extends Exception> T rethrow(Throwable failure) throws E {
        if (failure instanceof RuntimeException) {
            throw (RuntimeException) failure;
        }
        if (failure instanceof Error) {
            throw (Error) failure;
        }
        throw (E) failure;
    }

    /** Whether {@code failure} is what an interrupt makes of blocking work. */
    static boolean byInterrupt(Throwable failure) {
        for (Throwable t = failure; t != null; t = t.getCause()) {
            if (t instanceof InterruptedException || t instanceof InterruptedIOException
                    || t instanceof ClosedByInterruptException) {
                return true;
            }
            if (t.getCause() == t) {
                break;
            }
        }
        return false;
    }

    /** Interrupts the work's thread at a loss, only while the work runs. */
    private static final class Stopper implements Consumer<LockLostException> {
        private final Thread thread;
        private boolean running = true;
        volatile boolean interrupted;

        Stopper(Thread thread) {
            this.thread = thread;
        }

        @Override
        public synchronized void accept(LockLostException loss) {
            if (running) {
                interrupted = true;
                thread.interrupt();
            }
        }

        synchronized void finish() {
            running = false;
        }
    }
}
