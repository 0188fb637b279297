package lockgate;

import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.Flow;

/**
 * One {@code text/event-stream} answer, read as it arrives: its bytes go
 * through an {@link EventStreamParser} and each event to the listener, on the
 * HTTP client's threads, one at a time. A refusal (4xx, 5xx) fails {@link
 * #head()} with its exception. {@link #close()} ends the exchange, which
 * closes its connection: the gateway then lets go of what the stream held.
 */
final class EventStream {
    /** What a stream's owner hears; never called after {@link #close()} returned. */
    interface Listener {
        void onEvent(EventStreamParser.Event event);

        /** The stream ended: cleanly ({@code error} null) or broken. */
        void onEnd(Throwable error);

        /** Bytes came (an event, or a keep-alive comment). */
        default void onBytes() {}
    }

    /** A 2xx answer that is not an event stream (a gateway that does not stream this request). */
    static final class NotAStream extends RuntimeException {
        private static final long serialVersionUID = 1L;
        final transient Transport.Answer answer;

        NotAStream(Transport.Answer answer) {
            super("the answer is " + answer.status() + " " + answer.header("Content-Type") + ", not an event stream");
            this.answer = answer;
        }
    }

    private final Transport transport;
    private final HttpClient client;
    private final HttpRequest request;
    private final Listener listener;
    private final EventStreamParser parser;
    private final CompletableFuture<Void> head = new CompletableFuture<>();
    private final CompletableFuture<Void> ended = new CompletableFuture<>();
    private volatile boolean closed;
    private volatile Flow.Subscription subscription;
    private volatile CompletableFuture<HttpResponse<Void>> exchange;

    EventStream(Transport transport, HttpClient client, HttpRequest request, Listener listener, String lastEventId) {
        this.transport = transport;
        this.client = client;
        this.request = request;
        this.listener = listener;
        this.parser = new EventStreamParser(lastEventId == null ? "" : lastEventId);
    }

    /** Sends the request. */
    void start() {
        CompletableFuture<HttpResponse<Void>> sent = client.sendAsync(request, this::subscriber);
        exchange = sent;
        sent.whenComplete((response, error) -> {
            if (error != null) {
                Throwable cause = error instanceof java.util.concurrent.CompletionException && error.getCause() != null
                        ? error.getCause() : error;
                if (!head.isDone()) {
                    head.completeExceptionally(cause instanceof LockgateException ? cause
                            : transport.unreachable(cause, java.time.Duration.ZERO));
                }
                end(cause);
            }
        });
        if (closed) {
            sent.cancel(true);
        }
    }

    /** Completes once the answer's head arrived as an event stream; fails with the refusal otherwise. */
    CompletableFuture<Void> head() {
        return head;
    }

    /** Completes once the stream ended, whichever way. */
    CompletableFuture<Void> ended() {
        return ended;
    }

    /** The stream's last event id, for a resumed watch. */
    String lastEventId() {
        return parser.lastEventId();
    }

    long retryMs() {
        return parser.retryMs();
    }

    /** Ends the exchange (at once, from any thread); the listener hears nothing more. */
    void close() {
        closed = true;
        Flow.Subscription s = subscription;
        if (s != null) {
            s.cancel();
        }
        CompletableFuture<HttpResponse<Void>> sent = exchange;
        if (sent != null && !head.isDone()) {
            sent.cancel(true);
        }
        ended.complete(null);
    }

    private void end(Throwable error) {
        if (ended.isDone()) {
            return;
        }
        if (!closed) {
            listener.onEnd(error);
        }
        ended.complete(null);
    }

    private HttpResponse.BodySubscriber<Void> subscriber(HttpResponse.ResponseInfo info) {
        int status = info.statusCode();
        String type = info.headers().firstValue("Content-Type").orElse("");
        boolean events = type.toLowerCase(java.util.Locale.ROOT).startsWith("text/event-stream");
        if (status >= 400 || !events) {
            return HttpResponse.BodySubscribers.mapping(HttpResponse.BodySubscribers.ofString(StandardCharsets.UTF_8),
                    body -> {
                        if (status >= 400) {
                            head.completeExceptionally(Problems.refusal(status, body,
                                    info.headers().firstValue("Retry-After").orElse(null)));
                        } else {
                            head.completeExceptionally(new NotAStream(new Transport.Answer(status, info.headers(), body)));
                        }
                        ended.complete(null);
                        return null;
                    });
        }
        head.complete(null);
        return new Subscriber();
    }

    /** Feeds the body to the parser, a chunk at a time. */
    private final class Subscriber implements HttpResponse.BodySubscriber<Void> {
        private final CompletableFuture<Void> body = new CompletableFuture<>();

        @Override
        public CompletionStage<Void> getBody() {
            return body;
        }

        @Override
        public void onSubscribe(Flow.Subscription s) {
            subscription = s;
            if (closed) {
                s.cancel();
            } else {
                s.request(1);
            }
        }

        @Override
        public void onNext(List<ByteBuffer> chunks) {
            if (!closed) {
                listener.onBytes();
            }
            try {
                for (ByteBuffer chunk : chunks) {
                    for (EventStreamParser.Event event : parser.feed(chunk)) {
                        if (closed) {
                            return;
                        }
                        listener.onEvent(event);
                    }
                }
            } catch (RuntimeException e) {
                subscription.cancel();
                body.complete(null);
                end(e);
                return;
            }
            subscription.request(1);
        }

        @Override
        public void onError(Throwable error) {
            body.complete(null);
            end(error);
        }

        @Override
        public void onComplete() {
            body.complete(null);
            end(null);
        }
    }
}
