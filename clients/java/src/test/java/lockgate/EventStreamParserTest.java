package lockgate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The Server-Sent Events reader against the WHATWG rules, fed bytes split anywhere. */
class EventStreamParserTest {
    private static List<EventStreamParser.Event> read(EventStreamParser parser, String... chunks) {
        List<EventStreamParser.Event> events = new ArrayList<>();
        for (String chunk : chunks) {
            events.addAll(parser.feed(chunk.getBytes(StandardCharsets.UTF_8)));
        }
        return events;
    }

    private static EventStreamParser.Event event(String type, String data, String id) {
        return new EventStreamParser.Event(type, data, id);
    }

    @Test
    void events_are_dispatched_at_a_blank_line_with_their_type_and_data() {
        assertEquals(List.of(event("acquired", "{\"key\":\"k\"}", ""), event("message", "a\nb", "")),
                read(new EventStreamParser(), "event: acquired\ndata: {\"key\":\"k\"}\n\ndata: a\ndata:b\n\n"));
    }

    @Test
    void every_line_end_counts_and_a_crlf_split_across_chunks_is_one() {
        EventStreamParser parser = new EventStreamParser();
        assertEquals(List.of(event("a", "1", ""), event("b", "2", ""), event("c", "3", "")),
                read(parser, "event: a\r\ndata: 1\r", "\n\r\nevent: b\rdata: 2\r\revent: c\ndata: 3\n", "\n"));
    }

    @Test
    void an_event_is_dispatched_as_soon_as_its_blank_line_ends_in_a_lone_cr() {
        EventStreamParser parser = new EventStreamParser();
        assertEquals(List.of(event("message", "x", "")), read(parser, "data: x\r\r"));
        assertEquals(List.of(), read(parser, "\n"), "the LF after the CR is part of that line end");
    }

    @Test
    void a_leading_byte_order_mark_and_comments_are_skipped() {
        assertEquals(List.of(event("message", "x", "")),
                read(new EventStreamParser(), "\uFEFF: keep-alive\n:\ndata: x\n\n: more\n\n"));
    }

    @Test
    void an_id_stays_in_force_for_later_events_and_one_with_nul_is_ignored() {
        EventStreamParser parser = new EventStreamParser();
        assertEquals(List.of(event("message", "1", "7-0"), event("message", "2", "7-0"), event("message", "3", "8-0")),
                read(parser, "id: 7-0\ndata: 1\n\ndata: 2\nid: bad\0id\n\nid: 8-0\ndata: 3\n\n"));
        assertEquals("8-0", parser.lastEventId());
    }

    @Test
    void an_id_without_data_still_sets_the_last_event_id() {
        EventStreamParser parser = new EventStreamParser("1-0");
        assertEquals(List.of(), read(parser, "id: 2-0\n\n"));
        assertEquals("2-0", parser.lastEventId());
    }

    @Test
    void an_event_the_stream_ends_in_the_middle_of_is_never_dispatched() {
        EventStreamParser parser = new EventStreamParser();
        assertEquals(List.of(), read(parser, "id: 9-0\nevent: lost\ndata: {\"reason\":\"revoked\"}\n"));
        assertEquals("", parser.lastEventId(), "its id is not in force either");
    }

    @Test
    void retry_takes_only_ascii_digits() {
        EventStreamParser parser = new EventStreamParser();
        read(parser, "retry: 250\n\nretry: 1e3\n\nretry: -5\n\n");
        assertEquals(250, parser.retryMs());
    }

    @Test
    void a_field_without_a_colon_is_a_field_with_an_empty_value_and_unknown_fields_are_ignored() {
        assertEquals(List.of(event("message", "", "")), read(new EventStreamParser(), "data\nfoo: bar\n\n"));
        assertEquals(List.of(event("message", " two spaces", "")),
                read(new EventStreamParser(), "data:  two spaces\n\n"));
    }

    @Test
    void utf8_split_across_chunks_is_read_whole_and_a_bad_byte_becomes_a_replacement() {
        byte[] text = "data: é€\n\n".getBytes(StandardCharsets.UTF_8);
        EventStreamParser parser = new EventStreamParser();
        List<EventStreamParser.Event> events = new ArrayList<>();
        for (byte b : text) {
            events.addAll(parser.feed(new byte[] {b}));
        }
        assertEquals(List.of(event("message", "é€", "")), events);
        assertEquals("\uFFFD", new EventStreamParser().feed(new byte[] {'d', 'a', 't', 'a', ':', (byte) 0xff, '\n',
                '\n'}).get(0).data());
    }

    @Test
    void a_line_longer_than_the_bound_ends_the_stream() {
        EventStreamParser parser = new EventStreamParser();
        byte[] long_ = new byte[EventStreamParser.MAX_LINE + 1];
        java.util.Arrays.fill(long_, (byte) 'a');
        assertThrows(IllegalStateException.class, () -> parser.feed(long_));
    }
}
