package lockgate;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Follows a lock without holding it ({@code GET /locks/{key}/events}): a
 * snapshot first, then every change, in the order the changes were made.
 * When the connection drops, or stays silent longer than the idle timeout
 * (the gateway sends a keep-alive at least every 15 s), it connects again
 * with backoff and {@code Last-Event-ID}, and goes on after the last event it
 * received: none missed, none twice, through any instance ({@link
 * WatchEvent.Type#GAP} and a fresh snapshot when the gateway no longer keeps
 * them). Events wait in an unbounded queue for {@link #take()}. Safe for use
 * by many threads; close it when done.
 */
public final class Watcher implements AutoCloseable {
    /** Three of the gateway's 15 s keep-alives. */
    static final Duration DEFAULT_IDLE_TIMEOUT = Duration.ofSeconds(45);

    private static final Object CLOSED = new Object();

    private final Gateway gateway;
    private final String key;
    private final Duration idleTimeout;
    private final BlockingQueue<Object> queue = new LinkedBlockingQueue<>();
    private volatile boolean closed;
    private volatile String receivedId;
    private volatile String takenId;
    private volatile long retryMs = 100;
    private int failures;
    private Connection connection;

    private Watcher(Gateway gateway, String key, String lastEventId, Duration idleTimeout) {
        this.gateway = gateway;
        this.key = key;
        this.idleTimeout = idleTimeout;
        this.receivedId = lastEventId == null ? "" : lastEventId;
        this.takenId = receivedId;
    }

    /** Connects (a refusal, or an unreachable gateway, is thrown here), then follows the lock. */
    static Watcher open(Gateway gateway, String key, String lastEventId, Duration idleTimeout)
            throws InterruptedException {
        Watcher watcher = new Watcher(gateway, key, lastEventId, idleTimeout);
        Connection first = watcher.connect();
        try {
            Waits.await(first.stream.head(), gateway.transport().timeout().toNanos(), true);
        } catch (InterruptedException e) {
            watcher.close();
            throw e;
        } catch (TimeoutException e) {
            watcher.close();
            throw new GatewayUnavailableException("no answer from " + gateway.transport().base() + " within "
                    + gateway.transport().timeout(), e);
        } catch (ExecutionException e) {
            watcher.close();
            throw Waits.unwrap(e);
        }
        return watcher;
    }

    /** The next event, waiting as long as it takes. */
    public WatchEvent take() throws InterruptedException {
        return handed(queue.take());
    }

    /** The next event, or null when none came within {@code wait}. */
    public WatchEvent poll(Duration wait) throws InterruptedException {
        Object next = queue.poll(wait.toNanos(), TimeUnit.NANOSECONDS);
        return next == null ? null : handed(next);
    }

    private WatchEvent handed(Object next) {
        if (next == CLOSED) {
            queue.offer(CLOSED);
            throw new IllegalStateException("the watch of " + key + " is closed");
        }
        if (next instanceof LockgateException) {
            queue.offer(next);
            throw (LockgateException) next;
        }
        WatchEvent event = (WatchEvent) next;
        takenId = event.id();
        return event;
    }

    /** The id of the last event taken: resume after it with {@code gw.watch(key, id)}, in this process or another. */
    public String lastEventId() {
        return takenId;
    }

    /** Stops the watch; a thread waiting in {@link #take()} is told ({@link IllegalStateException}). */
    @Override
    public void close() {
        closed = true;
        Connection current;
        synchronized (this) {
            current = connection;
        }
        if (current != null) {
            current.shut();
        }
        queue.offer(CLOSED);
    }

    private synchronized Connection connect() {
        Connection next = new Connection();
        connection = next;
        Map<String, String> headers = receivedId.isEmpty() ? Map.of() : Map.of("Last-Event-ID", receivedId);
        next.stream = gateway.transport().stream("GET", Transport.lockPath(key, "/events"), null, headers,
                Duration.ZERO, next, receivedId);
        next.stream.start();
        next.stream.head().whenComplete((ok, error) -> {
            if (error == null) {
                next.touch();
            } else if (error instanceof GatewayUnavailableException) {
                next.onEnd(error);
            } else if (connection == next && !closed) {
                // A refusal: the watch cannot go on.
                queue.offer(error);
            }
        });
        return next;
    }

    /** The pause before reconnection number {@code failures}. */
    private void reconnectLater() {
        if (closed) {
            return;
        }
        long pause;
        synchronized (this) {
            pause = Gateway.backoffNanos(failures++, retryMs, null);
        }
        Timers.after(pause, () -> {
            if (!closed) {
                connect();
            }
        });
    }

    /** One connection: its events go to the queue; its end, or its silence, makes the next. */
    private final class Connection implements EventStream.Listener {
        EventStream stream;
        private volatile long lastBytes = System.nanoTime();
        private ScheduledFuture<?> idle;
        private boolean ended;

        void touch() {
            lastBytes = System.nanoTime();
            synchronized (this) {
                if (idle == null && !ended) {
                    idle = Timers.after(idleTimeout.toNanos(), this::checkIdle);
                }
            }
        }

        private void checkIdle() {
            synchronized (this) {
                idle = null;
                if (ended) {
                    return;
                }
                long quiet = System.nanoTime() - lastBytes;
                if (quiet < idleTimeout.toNanos()) {
                    idle = Timers.after(idleTimeout.toNanos() - quiet, this::checkIdle);
                    return;
                }
            }
            stream.close();
            onEnd(new GatewayUnavailableException("the watch was silent for " + idleTimeout, null));
        }

        void shut() {
            synchronized (this) {
                ended = true;
                if (idle != null) {
                    idle.cancel(false);
                }
            }
            stream.close();
        }

        @Override
        public void onBytes() {
            touch();
        }

        @Override
        public void onEvent(EventStreamParser.Event event) {
            receivedId = stream.lastEventId();
            synchronized (Watcher.this) {
                failures = 0;
            }
            queue.offer(WatchEvent.of(event));
        }

        @Override
        public void onEnd(Throwable error) {
            synchronized (this) {
                if (ended) {
                    return;
                }
                ended = true;
                if (idle != null) {
                    idle.cancel(false);
                }
            }
            if (stream.retryMs() > 0) {
                retryMs = stream.retryMs();
            }
            reconnectLater();
        }
    }
}
