"""The Server-Sent Events reader (`lockgate.sse`), rule by rule of the
WHATWG event-stream format, fed whole, split at every place, and reading
the gateway's own streams."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import List

import httpx

from lockgate.sse import Event, EventStreamParser


def parse(*chunks: bytes) -> List[Event]:
    parser = EventStreamParser()
    return [event for chunk in chunks for event in parser.feed(chunk)]


def test_fields_make_an_event_dispatched_on_a_blank_line() -> None:
    parser = EventStreamParser()
    assert parser.feed(b"event: acquired\ndata: {\"a\": 1}\n") == []
    assert parser.feed(b"\n") == [Event(event="acquired", data='{"a": 1}', id="", retry=None)]


def test_event_name_defaults_to_message() -> None:
    assert parse(b"data: x\n\n") == [Event("message", "x")]
    assert parse(b"event:\ndata: x\n\n") == [Event("message", "x")]


def test_data_lines_join_with_newlines() -> None:
    assert parse(b"data: a\ndata:\ndata:  b\ndata\n\n") == [Event(data="a\n\n b\n")]


def test_one_space_after_the_colon_is_dropped() -> None:
    assert parse(b"data:x\n\ndata: x\n\ndata:  x\n\n") == [Event(data="x"), Event(data="x"), Event(data=" x")]


def test_last_event_id_persists_until_changed() -> None:
    parser = EventStreamParser()
    events = parser.feed(b"id: 1\ndata: a\n\ndata: b\n\nid: 2\ndata: c\n\nid\ndata: d\n\n")
    assert [(e.data, e.id) for e in events] == [("a", "1"), ("b", "1"), ("c", "2"), ("d", "")]
    assert parser.last_event_id == ""


def test_an_id_with_nul_is_ignored() -> None:
    parser = EventStreamParser()
    events = parser.feed(b"id: 7\ndata: a\n\nid: 8\x009\ndata: b\n\n")
    assert [e.id for e in events] == ["7", "7"]
    assert parser.last_event_id == "7"


def test_an_event_without_data_is_not_dispatched_but_sets_the_id() -> None:
    parser = EventStreamParser()
    assert parser.feed(b"id: 5\nevent: gap\n\n") == []
    assert parser.last_event_id == "5"
    # Its name does not carry over to the next event.
    assert parser.feed(b"data: x\n\n") == [Event("message", "x", "5")]


def test_last_event_id_given_at_the_start_carries_on() -> None:
    parser = EventStreamParser(last_event_id="41-0")
    assert parser.last_event_id == "41-0"
    assert parser.feed(b"event: gap\ndata: {}\n\n") == [Event("gap", "{}", "41-0")]


def test_retry_sets_the_reconnection_time_when_all_digits() -> None:
    parser = EventStreamParser()
    events = parser.feed(b"data: a\n\nretry: 2500\ndata: b\n\nretry: 1.5\nretry: x\nretry: -1\ndata: c\n\n")
    assert [e.retry for e in events] == [None, 2500, 2500]
    assert parser.retry == 2500
    assert parser.feed(b"retry: 300\n\n") == []  # no data: nothing dispatched,
    assert parser.retry == 300  # but the time is set


def test_comments_and_unknown_fields_are_ignored() -> None:
    assert parse(b": keep-alive\n\n:\ndata: a\n: between\nfoo: bar\nDATA: b\n\n") == [Event(data="a")]


def test_lines_end_in_crlf_lf_or_cr() -> None:
    expected = [Event("renewed", "1", "9"), Event("lost", "2", "9")]
    for end in (b"\r\n", b"\n", b"\r"):
        stream = end.join([b"id: 9", b"event: renewed", b"data: 1", b"", b"event: lost", b"data: 2", b"", b""])
        assert parse(stream) == expected, end
    assert parse(b"data: a\rdata: b\r\ndata: c\n\r\n") == [Event(data="a\nb\nc")]


def test_cr_and_lf_split_between_chunks_are_one_line_end() -> None:
    # Were the LF a second line end, it would dispatch "a" alone.
    assert parse(b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n") == [Event(data="a\nb")]
    # A lone CR at a chunk's end, then another line: still one line end.
    assert parse(b"data: a\r", b"data: b\r", b"\r") == [Event(data="a\nb")]
    # An empty chunk between them changes nothing.
    assert parse(b"data: a\r", b"", b"\n\n") == [Event(data="a")]


def test_a_byte_order_mark_at_the_start_is_dropped() -> None:
    assert parse(b"\xef\xbb\xbfdata: a\n\n") == [Event(data="a")]
    assert parse(b"\xef", b"\xbb", b"\xbfdata: a\n\n") == [Event(data="a")]
    # Only at the start: later it is part of a line (here, of a field name).
    assert parse(b"data: a\n\n\xef\xbb\xbfdata: b\n\n") == [Event(data="a")]


def test_utf8_split_inside_a_character() -> None:
    text = "data: fl\u00e9che \u2192 \U0001f512\n\n".encode()
    for size in (1, 2, 3):
        chunks = [text[i:i + size] for i in range(0, len(text), size)]
        assert parse(*chunks) == [Event(data="fl\u00e9che \u2192 \U0001f512")]
    assert parse(b"data: \xff\n\n") == [Event(data="\ufffd")]  # invalid UTF-8 is replaced


def test_an_event_cut_off_by_the_end_is_never_dispatched() -> None:
    assert parse(b"data: a\n\ndata: b\n") == [Event(data="a")]


def test_every_split_gives_the_same_events() -> None:
    stream = (
        b"\xef\xbb\xbf: hello\r\nretry: 100\r\nid: 1-0\r\nevent: snapshot\r\n"
        b"data: {\"held\": false}\r\n\r\nevent: renewed\rdata: {\"a\":\rdata: \xe2\x86\x92}\r\r"
        b"id: 2-0\nevent: gap\n\ndata: last\n\n"
    )
    whole = parse(stream)
    assert [(e.event, e.id, e.retry) for e in whole] == [
        ("snapshot", "1-0", 100),
        ("renewed", "1-0", 100),
        ("message", "2-0", 100),
    ]
    assert whole[1].data == '{"a":\n\u2192}'
    for i in range(len(stream)):
        for j in range(i, len(stream)):
            assert parse(stream[:i], stream[i:j], stream[j:]) == whole, (i, j)


def test_reads_the_gateways_watch_stream_byte_by_byte(gateway, gw, key: str) -> None:
    lease = gw.acquire(key, ttl=5, value="host-a")
    try:
        headers = {"Accept": "text/event-stream"}
        with httpx.stream("GET", f"{gateway.url}/locks/{key}/events", headers=headers, timeout=5) as response:
            parser = EventStreamParser()
            events: List[Event] = []
            for chunk in response.iter_raw():
                for byte in range(len(chunk)):
                    events += parser.feed(chunk[byte:byte + 1])
                if events:
                    break
        snapshot = events[0]
        assert snapshot.event == "snapshot" and snapshot.id and parser.last_event_id == snapshot.id
        state = json.loads(snapshot.data)
        assert (state["key"], state["held"], state["leases"][0]["value"]) == (key, True, "host-a")
    finally:
        lease.release()


def test_the_reader_needs_nothing_but_the_standard_library() -> None:
    # The fault harness imports it where httpx is not installed.
    code = (
        "import sys; sys.modules['httpx'] = None\n"
        "from lockgate.sse import Event, EventStreamParser\n"
        "from lockgate import LockLost\n"
        "print(EventStreamParser().feed(b'data: ok\\n\\n')[0].data)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
