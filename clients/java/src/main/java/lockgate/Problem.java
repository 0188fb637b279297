package lockgate;

import java.time.Duration;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * An RFC 9457 problem document, as the gateway answers every refusal: a
 * {@code type} of {@code /problems/<slug>} with a stable slug, a fixed {@code
 * title}, the {@code status}, a {@code detail}, and members such as {@code
 * key}, {@code retry_after_ms}, {@code field} or {@code cycle}. Errors the
 * client makes itself (no answer, a broken stream) carry one of the same shape
 * whose type is {@code about:blank}.
 */
public final class Problem {
    private final String type;
    private final String title;
    private final int status;
    private final String detail;
    private final Map<String, Object> members;
    private final Api.ProblemDocument document;

    private Problem(String type, String title, int status, String detail, Map<String, Object> members,
            Api.ProblemDocument document) {
        this.type = type;
        this.title = title;
        this.status = status;
        this.detail = detail;
        this.members = Collections.unmodifiableMap(members);
        this.document = document;
    }

    /** A problem the client makes itself: type {@code about:blank}, status 0 when no answer came. */
    static Problem ofClient(String title, int status, String detail) {
        Map<String, Object> members = new LinkedHashMap<>();
        members.put("type", "about:blank");
        members.put("title", title);
        members.put("status", (long) status);
        members.put("detail", detail);
        return new Problem("about:blank", title, status, detail, members,
                new Api.ProblemDocument("about:blank", title, status, detail, null, null, null, null, null, null,
                        null));
    }

    /** The problem an answer of {@code status} carries, or one made from the status when its body is not one. */
    static Problem parse(int status, String body, String retryAfterHeader) {
        try {
            Map<String, Object> members = Json.parseObject(body);
            Api.ProblemDocument document = Wire.decode(members, Api.ProblemDocument.class);
            String type = document.type() == null ? "about:blank" : document.type();
            String title = document.title() == null ? "HTTP " + status : document.title();
            int answered = document.status() == null ? status : document.status();
            String detail = document.detail() == null ? title : document.detail();
            Problem problem = new Problem(type, title, answered, detail, members, document);
            Optional<Long> header = document.retryAfterMs() == null ? headerRetry(retryAfterHeader) : Optional.empty();
            return header.map(problem::withRetryAfter).orElse(problem);
        } catch (IllegalArgumentException notAProblem) {
            String text = body.strip();
            String detail = text.length() > 200 ? text.substring(0, 200) : text;
            Problem problem = ofClient("HTTP " + status, status, detail.isEmpty() ? "HTTP " + status : detail);
            return headerRetry(retryAfterHeader).map(problem::withRetryAfter).orElse(problem);
        }
    }

    private Problem withRetryAfter(long ms) {
        Map<String, Object> more = new LinkedHashMap<>(members);
        more.put("retry_after_ms", ms);
        Api.ProblemDocument d = document;
        return new Problem(type, title, status, detail, more, new Api.ProblemDocument(d.type(), d.title(),
                d.status(), d.detail(), d.key(), ms, d.field(), d.cycle(), d.limit(), d.maximum(), d.minimum()));
    }

    private static Optional<Long> headerRetry(String header) {
        if (header == null) {
            return Optional.empty();
        }
        try {
            long seconds = Long.parseLong(header.strip());
            return seconds < 0 ? Optional.empty() : Optional.of(seconds * 1000);
        } catch (NumberFormatException e) {
            return Optional.empty();
        }
    }

    /** {@code /problems/<slug>}, or {@code about:blank}. */
    public String type() {
        return type;
    }

    /** The problem's slug ({@code lock-held}, {@code not-owner}, ...); empty when the problem is not the gateway's. */
    public String slug() {
        return type.startsWith("/problems/") ? type.substring("/problems/".length()) : "";
    }

    /** Fixed per slug. */
    public String title() {
        return title;
    }

    /** The HTTP status; 0 when no answer came. */
    public int status() {
        return status;
    }

    /** What went wrong with this request. */
    public String detail() {
        return detail;
    }

    /** The lock key the problem is about, when it names one. */
    public Optional<String> key() {
        return Optional.ofNullable(document.key());
    }

    /** When trying again may succeed ({@code retry_after_ms}, or the {@code Retry-After} header). */
    public Optional<Duration> retryAfter() {
        return Optional.ofNullable(document.retryAfterMs()).map(Duration::ofMillis);
    }

    /** The request field that was refused ({@code invalid-field}). */
    public Optional<String> field() {
        return Optional.ofNullable(document.field());
    }

    /** The largest value the refused field takes, when the gateway says. */
    public Optional<Long> maximum() {
        return Optional.ofNullable(document.maximum());
    }

    /** The limit the lock is held with ({@code limit-mismatch}). */
    public Optional<Long> limit() {
        return Optional.ofNullable(document.limit());
    }

    /** The keys of a cycle of session waits, in order ({@code deadlock}); empty otherwise. */
    public List<String> cycle() {
        return document.cycle() == null ? List.of() : document.cycle();
    }

    /** Every member of the document, as parsed JSON ({@code Long}, {@code String}, lists, maps). */
    public Map<String, Object> members() {
        return members;
    }

    @Override
    public String toString() {
        return title + ": " + detail + " (" + (slug().isEmpty() ? "" : slug() + ", ") + status + ")";
    }
}
