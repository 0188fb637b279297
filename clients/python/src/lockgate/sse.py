"""Server-Sent Events: a reader of `text/event-stream` by the WHATWG rules,
fed bytes as they arrive. Standard library only, so anything may import it.

    parser = EventStreamParser()
    for chunk in chunks:                      # split anywhere
        for event in parser.feed(chunk):
            print(event.event, event.data, event.id)

The rules (HTML Living Standard, "Parsing an event stream"): the stream is
UTF-8, a leading byte order mark is dropped; lines end in CRLF, LF or CR;
a line starting with `:` is a comment; `field: value` loses one space
after the colon, and a line without a colon is a field with an empty
value. `event` names the event (`message` when none does), `data` lines
are joined with a newline, `id` sets the last event id, which stays in
force for the events after it until another `id` changes it (one
containing NUL is ignored), and `retry` sets the reconnection time when it
is all ASCII digits. A blank line dispatches the event, unless it has no
data; an event the stream ends in the middle of is never dispatched.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from typing import List, Optional

__all__ = ["Event", "EventStreamParser"]

_LINE_END = re.compile(r"\r\n|\r|\n")
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class Event:
    """One dispatched event."""

    #: The event's name: its `event` field, or "message".
    event: str = "message"
    #: Its `data` lines, joined with "\n".
    data: str = ""
    #: The last event id in force when it was dispatched ("" when none):
    #: what a client sends back as `Last-Event-ID` to resume after it.
    id: str = ""
    #: The reconnection time in milliseconds in force when it was
    #: dispatched (set by the latest valid `retry` field), None if the
    #: stream has set none.
    retry: Optional[int] = None


class EventStreamParser:
    """An incremental `text/event-stream` reader: `feed` it the stream's
    bytes, in chunks split anywhere (inside a UTF-8 character, between a
    CR and its LF), and it returns the events each chunk completes.

    `last_event_id` starts as given (the id a reconnecting client resumed
    after, since the last event id outlives a connection) and follows the
    stream's `id` fields; `retry` is the latest reconnection time.
    """

    def __init__(self, last_event_id: str = "") -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._started = False  # past the place of a byte order mark
        self._after_cr = False  # the last line ended in CR: an LF next belongs to it
        self._pending = ""  # the text of a line not yet ended
        self._event = ""
        self._data: List[str] = []
        self._id_buffer = last_event_id
        self._last_event_id = last_event_id
        self._retry: Optional[int] = None

    @property
    def last_event_id(self) -> str:
        """The last event id: that of the last event dispatched (or of the
        last blank line, for an event without data), "" when none."""
        return self._last_event_id

    @property
    def retry(self) -> Optional[int]:
        """The reconnection time the stream set last, in milliseconds."""
        return self._retry

    def feed(self, data: bytes) -> List[Event]:
        """Reads the next bytes of the stream; returns the events they
        complete, in order."""
        text = self._decoder.decode(data)
        if not text:
            return []
        if not self._started:
            self._started = True
            if text.startswith("\ufeff"):
                text = text[1:]
        if self._after_cr and text.startswith("\n"):
            text = text[1:]
        self._after_cr = False
        events: List[Event] = []
        start = 0
        for end in _LINE_END.finditer(text):
            line = self._pending + text[start:end.start()] if self._pending else text[start:end.start()]
            self._pending = ""
            start = end.end()
            # A CR closing the text may be the first half of a CRLF split
            # between two chunks: its LF, if it comes, ends nothing more.
            self._after_cr = end.group() == "\r" and start == len(text)
            event = self._line(line)
            if event is not None:
                events.append(event)
        self._pending += text[start:]
        return events

    def _line(self, line: str) -> Optional[Event]:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            if "\0" not in value:
                self._id_buffer = value
        elif name == "retry":
            if _DIGITS.fullmatch(value):
                self._retry = int(value)
        return None

    def _dispatch(self) -> Optional[Event]:
        self._last_event_id = self._id_buffer
        data, name = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return Event(event=name or "message", data="\n".join(data), id=self._last_event_id, retry=self._retry)
