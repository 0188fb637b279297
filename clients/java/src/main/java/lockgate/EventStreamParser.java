package lockgate;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * A reader of {@code text/event-stream} by the WHATWG HTML standard's
 * "interpreting an event stream", fed bytes as they arrive, split anywhere:
 * lines end in CRLF, LF or CR (a CR at the end of one chunk and a LF at the
 * start of the next are one line end), a leading byte order mark is dropped,
 * {@code :} comments are skipped, an {@code id} field stays in force for the
 * events after it (one holding NUL is ignored), {@code retry} with ASCII
 * digits sets the reconnection time, a blank line dispatches the event unless
 * it has no data, and an event the stream ends in the middle of is never
 * dispatched. The one reader of the client: locks, lock sets, sessions and
 * watches all read their streams through it.
 */
final class EventStreamParser {
    /** One line longer than this ends the stream: a peer that never ends a line cannot fill the memory. */
    static final int MAX_LINE = 1 << 20;

    /** A dispatched event: its type ({@code message} when the stream named none), data, and the last event id then. */
    record Event(String type, String data, String id) {}

    private final ByteArrayOutputStream line = new ByteArrayOutputStream();
    private boolean afterCr;
    private boolean started;
    private String eventType = "";
    private final StringBuilder data = new StringBuilder();
    private boolean hasData;
    private String idBuffer;
    private String lastEventId;
    private long retryMs = -1;

    /** A parser whose last event id starts as {@code lastEventId} (a resumed stream's; empty for none). */
    EventStreamParser(String lastEventId) {
        this.idBuffer = lastEventId;
        this.lastEventId = lastEventId;
    }

    EventStreamParser() {
        this("");
    }

    /** The events the bytes complete; {@link IllegalStateException} for a line over {@link #MAX_LINE}. */
    List<Event> feed(ByteBuffer bytes) {
        List<Event> events = new ArrayList<>();
        while (bytes.hasRemaining()) {
            byte c = bytes.get();
            if (afterCr) {
                afterCr = false;
                if (c == '\n') {
                    continue;
                }
            }
            if (c == '\r' || c == '\n') {
                afterCr = c == '\r';
                Event event = processLine(finishLine());
                if (event != null) {
                    events.add(event);
                }
                continue;
            }
            if (line.size() >= MAX_LINE) {
                throw new IllegalStateException("an event stream line longer than " + MAX_LINE + " bytes");
            }
            line.write(c);
        }
        return events;
    }

    List<Event> feed(byte[] bytes) {
        return feed(ByteBuffer.wrap(bytes));
    }

    /** The stream's last event id: what a reconnection sends as {@code Last-Event-ID}. */
    String lastEventId() {
        return lastEventId;
    }

    /** The reconnection time the stream set with {@code retry}, in ms; -1 when it set none. */
    long retryMs() {
        return retryMs;
    }

    private String finishLine() {
        byte[] bytes = line.toByteArray();
        line.reset();
        int start = 0;
        if (!started) {
            started = true;
            if (bytes.length >= 3 && (bytes[0] & 0xff) == 0xEF && (bytes[1] & 0xff) == 0xBB
                    && (bytes[2] & 0xff) == 0xBF) {
                start = 3;
            }
        }
        // A decoder that meets a malformed sequence puts U+FFFD in its place.
        return new String(bytes, start, bytes.length - start, StandardCharsets.UTF_8);
    }

    private Event processLine(String text) {
        if (text.isEmpty()) {
            return dispatch();
        }
        if (text.charAt(0) == ':') {
            return null;
        }
        String field = text;
        String value = "";
        int colon = text.indexOf(':');
        if (colon >= 0) {
            field = text.substring(0, colon);
            value = text.substring(colon + 1);
            if (value.startsWith(" ")) {
                value = value.substring(1);
            }
        }
        switch (field) {
            case "event":
                eventType = value;
                break;
            case "data":
                if (hasData) {
                    data.append('\n');
                }
                data.append(value);
                hasData = true;
                break;
            case "id":
                if (value.indexOf('\0') < 0) {
                    idBuffer = value;
                }
                break;
            case "retry":
                if (!value.isEmpty() && value.chars().allMatch(ch -> ch >= '0' && ch <= '9')) {
                    try {
                        retryMs = Long.parseLong(value);
                    } catch (NumberFormatException tooLong) {
                        // Ignored, as any field the reader cannot use.
                    }
                }
                break;
            default:
                break;
        }
        return null;
    }

    private Event dispatch() {
        lastEventId = idBuffer;
        Event event = null;
        if (hasData) {
            event = new Event(eventType.isEmpty() ? "message" : eventType, data.toString(), lastEventId);
        }
        eventType = "";
        data.setLength(0);
        hasData = false;
        return event;
    }
}
