package lockgate;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeoutException;

/**
 * A streamed request read up to what it opens (a lock's grant, a lock set, a
 * session), made on the stream's thread before any later event, and then
 * for as long as it is held; the subclasses read their own events. The
 * caller waits for it with {@link #open}; one that gives up (an interrupt, no
 * answer in time) leaves nothing held: a grant that came meanwhile ends with
 * the closed stream.
 */
abstract class Opening<T extends AbstractHeld> implements EventStream.Listener {
    final Gateway gateway;
    /** When the request was sent: the earliest moment its grant could have been made. */
    final long sentNanos = System.nanoTime();
    private final String what;
    private final CompletableFuture<T> opened = new CompletableFuture<>();
    EventStream stream;
    private volatile T made;

    /** {@code what} names what it opens in messages ("grant", "session"). */
    Opening(Gateway gateway, String what) {
        this.gateway = gateway;
        this.what = what;
    }

    /** Sends the request on {@code stream} and waits, at most {@code limit}, for what it opens. */
    final T open(EventStream stream, Duration limit, boolean interruptible) throws InterruptedException {
        this.stream = stream;
        stream.start();
        stream.head().whenComplete((ok, error) -> {
            if (error != null) {
                opened.completeExceptionally(error);
            }
        });
        try {
            return Waits.await(opened, limit.toNanos(), interruptible);
        } catch (InterruptedException e) {
            abandon();
            throw e;
        } catch (TimeoutException e) {
            abandon();
            throw new GatewayUnavailableException("no " + what + " from " + gateway.transport().base() + " within "
                    + limit, e);
        } catch (ExecutionException e) {
            stream.close();
            throw failed(e);
        }
    }

    /** The exception a failure before the opening is. */
    RuntimeException failed(ExecutionException e) {
        return Waits.unwrap(e);
    }

    private void abandon() {
        opened.cancel(false);
        T thing = opened.isCancelled() ? made : opened.getNow(null);
        if (thing != null && thing.holding.beginRelease()) {
            thing.holding.released();
        }
        stream.close();
    }

    /** It was granted: its holding starts (closing this stream when it ends), then the caller has it. */
    final void opened(T thing) {
        made = thing;
        thing.holding.start(stream::close);
        joined(thing);
        if (!opened.complete(thing) && thing.holding.beginRelease()) {
            // Given up meanwhile: let go of it.
            thing.holding.released();
        }
    }

    /** After its holding started, before the caller has it. */
    void joined(T thing) {}

    /** The request was refused after its stream began (a wait that ran out). */
    final void refused(LockgateException refusal) {
        opened.completeExceptionally(refusal);
    }

    /** What was opened; null before. */
    final T made() {
        return made;
    }

    @Override
    public final void onEnd(Throwable error) {
        T thing = made;
        if (thing == null) {
            opened.completeExceptionally(error instanceof LockgateException ? error
                    : new GatewayUnavailableException("the stream from " + gateway.transport().base()
                            + " ended before a " + what, error));
            return;
        }
        thing.holding.lose(LossReason.CONNECTION_LOST, error);
    }
}
