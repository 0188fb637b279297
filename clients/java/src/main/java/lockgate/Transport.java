package lockgate;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpHeaders;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import javax.net.ssl.SSLContext;

/**
 * The HTTP every call of one {@link Gateway} shares: one {@link HttpClient}
 * (HTTP/1.1, so that a held lock is a connection the gateway sees close the
 * moment this process lets it go), the API key, the timeout, and the mapping
 * of answers to exceptions.
 */
final class Transport {
    private final String base;
    private final String apiKey;
    private final Duration timeout;
    private final HttpClient client;

    /** An answer that is not a refusal. */
    record Answer(int status, HttpHeaders headers, String body) {
        String header(String name) {
            return headers.firstValue(name).orElse(null);
        }

        <R extends Record> R decode(Class<R> type) {
            try {
                return Wire.decode(body, type);
            } catch (IllegalArgumentException e) {
                throw new GatewayUnavailableException("reading the gateway's answer", e);
            }
        }
    }

    Transport(URI base, String apiKey, Duration timeout, HttpClient client) {
        String text = base.toString();
        this.base = text.endsWith("/") ? text.substring(0, text.length() - 1) : text;
        this.apiKey = apiKey;
        this.timeout = timeout;
        this.client = client;
    }

    /** The HTTP client of a gateway's connections: HTTP/1.1, no redirects, the TLS context if any. */
    static HttpClient client(SSLContext tls) {
        HttpClient.Builder builder = HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(Gateway.DEFAULT_TIMEOUT)
                .followRedirects(HttpClient.Redirect.NEVER);
        if (tls != null) {
            builder.sslContext(tls);
        }
        return builder.build();
    }

    String base() {
        return base;
    }

    Duration timeout() {
        return timeout;
    }

    /** {@code /locks/<key><suffix>}, the key escaped (a valid key needs none; an invalid one reaches the gateway, which refuses it). */
    static String lockPath(String key, String suffix) {
        return "/locks/" + escape(key) + suffix;
    }

    /** Percent-encodes every byte but the unreserved characters and {@code :}. */
    static String escape(String text) {
        StringBuilder out = new StringBuilder();
        for (byte b : text.getBytes(StandardCharsets.UTF_8)) {
            int c = b & 0xff;
            if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.'
                    || c == '_' || c == '~' || c == ':') {
                out.append((char) c);
            } else {
                out.append('%').append(String.format("%02X", c));
            }
        }
        return out.toString();
    }

    HttpRequest.Builder request(String method, String path, Object body, Map<String, String> headers) {
        HttpRequest.Builder builder;
        try {
            builder = HttpRequest.newBuilder(URI.create(base + path));
        } catch (IllegalArgumentException e) {
            throw new InvalidRequestException("not a URL: " + base + path);
        }
        if (body == null) {
            builder.method(method, HttpRequest.BodyPublishers.noBody());
        } else {
            Object json = body instanceof Record ? Wire.encode((Record) body) : body;
            builder.method(method, HttpRequest.BodyPublishers.ofString(Json.write(json), StandardCharsets.UTF_8));
            builder.header("Content-Type", "application/json");
        }
        builder.header("Accept", "application/json");
        if (apiKey != null) {
            builder.header("Authorization", "Bearer " + apiKey);
        }
        headers.forEach(builder::setHeader);
        return builder;
    }

    /**
     * Sends a request and waits for its whole answer, at most the timeout plus
     * {@code extra} (a server-side wait), without giving way to interruption
     * (an interrupt is kept for the caller): releases and reads must finish,
     * also on a thread a lost lock interrupted.
     */
    Answer call(String method, String path, Object body, Map<String, String> headers, Duration extra) {
        CompletableFuture<HttpResponse<String>> answer = send(method, path, body, headers, extra);
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    return answered(answer.get(), extra);
                } catch (InterruptedException e) {
                    interrupted = true;
                } catch (ExecutionException e) {
                    throw unreachable(e.getCause(), extra);
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** {@link #call}, given up at an interrupt (the request is cancelled: a wait holds nothing). */
    Answer callInterruptibly(String method, String path, Object body, Map<String, String> headers, Duration extra)
            throws InterruptedException {
        CompletableFuture<HttpResponse<String>> answer = send(method, path, body, headers, extra);
        try {
            return answered(answer.get(), extra);
        } catch (InterruptedException e) {
            answer.cancel(true);
            throw e;
        } catch (ExecutionException e) {
            throw unreachable(e.getCause(), extra);
        }
    }

    private CompletableFuture<HttpResponse<String>> send(String method, String path, Object body,
            Map<String, String> headers, Duration extra) {
        HttpRequest request = request(method, path, body, headers).timeout(timeout.plus(extra)).build();
        return client.sendAsync(request, HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
    }

    private Answer answered(HttpResponse<String> response, Duration extra) {
        if (response.statusCode() >= 400) {
            throw Problems.refusal(response.statusCode(), response.body(),
                    response.headers().firstValue("Retry-After").orElse(null));
        }
        return new Answer(response.statusCode(), response.headers(), response.body());
    }

    /** The exception for a request that got no answer. */
    GatewayUnavailableException unreachable(Throwable error, Duration extra) {
        if (error instanceof HttpTimeoutException) {
            return new GatewayUnavailableException("no answer from " + base + " within " + timeout.plus(extra), error);
        }
        if (error instanceof CancellationException) {
            return new GatewayUnavailableException("the request to " + base + " was cancelled", error);
        }
        if (error instanceof IOException) {
            return new GatewayUnavailableException("cannot reach " + base, error);
        }
        return new GatewayUnavailableException("the request to " + base + " failed", error);
    }

    /** Opens {@code text/event-stream} (not started: {@link EventStream#start}). */
    EventStream stream(String method, String path, Object body, Map<String, String> headers, Duration extra,
            EventStream.Listener listener, String lastEventId) {
        HttpRequest request = request(method, path, body, headers)
                .setHeader("Accept", "text/event-stream")
                // Compression would only hold events back in a buffer.
                .setHeader("Accept-Encoding", "identity")
                // The head must come within the timeout (and a wait the gateway may spend before
                // answering); the stream may then stay open as long as it lasts.
                .timeout(timeout.plus(extra))
                .build();
        return new EventStream(this, client, request, listener, lastEventId);
    }
}
