//! Reading Server-Sent Events (`text/event-stream`) by the WHATWG rules: the one reader of the crate's clients (`lockgate run`) and its tests.
//!
//! The gateway writes event streams (streamed locks, watching) with axum;
//! this reads them. Fed bytes as they arrive, split anywhere (inside a
//! UTF-8 character, between a CR and its LF), it hands back whole events.

/// One event, dispatched at the blank line that ends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Its `event` field, or `message` when it had none.
    pub name: String,
    /// Its `data` lines, joined by `\n`.
    pub data: String,
    /// The last event id in force when it was dispatched: an `id` field
    /// stays in force for the events after it until another replaces it.
    pub id: String,
    /// The reconnection time in force (ms), once a `retry` field set it.
    pub retry_ms: Option<u64>,
}

/// An incremental event-stream reader.
#[derive(Debug, Default)]
pub struct EventStreamParser {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The last byte was a CR: an LF that follows belongs to that line end.
    after_cr: bool,
    /// Whether the stream's start (and a BOM there) is behind us.
    started: bool,
    name: String,
    data: String,
    has_data: bool,
    last_event_id: String,
    retry_ms: Option<u64>,
    /// Comment lines (`:` ...) read so far: the gateway's keep-alives.
    comments: usize,
}

impl EventStreamParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of the last event with one (empty before any): what a
    /// client resuming sends as `Last-Event-ID`.
    pub fn last_event_id(&self) -> &str {
        &self.last_event_id
    }

    /// How many comment lines have been read.
    pub fn comments(&self) -> usize {
        self.comments
    }

    /// Reads `bytes`; returns the events they completed, in order.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Event> {
        let mut events = Vec::new();
        for &byte in bytes {
            if self.after_cr {
                self.after_cr = false;
                if byte == b'\n' {
                    continue;
                }
            }
            match byte {
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(&mut events);
                }
                b'\n' => self.end_line(&mut events),
                _ => self.line.push(byte),
            }
        }
        events
    }

    fn end_line(&mut self, events: &mut Vec<Event>) {
        let mut line = std::mem::take(&mut self.line);
        if !self.started {
            self.started = true;
            if line.starts_with("\u{feff}".as_bytes()) {
                line.drain(..3);
            }
        }
        let line = String::from_utf8_lossy(&line);
        if line.is_empty() {
            self.dispatch(events);
            return;
        }
        if line.starts_with(':') {
            self.comments += 1;
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (&*line, ""),
        };
        match field {
            "event" => self.name = value.to_owned(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "id" if !value.contains('\0') => self.last_event_id = value.to_owned(),
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                self.retry_ms = value.parse().ok();
            }
            _ => {}
        }
    }

    /// The blank line: the event read so far goes out, if it had data.
    fn dispatch(&mut self, events: &mut Vec<Event>) {
        let name = std::mem::take(&mut self.name);
        let data = std::mem::take(&mut self.data);
        if !std::mem::take(&mut self.has_data) {
            return;
        }
        events.push(Event {
            name: if name.is_empty() {
                "message".into()
            } else {
                name
            },
            data,
            id: self.last_event_id.clone(),
            retry_ms: self.retry_ms,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(stream: &[u8]) -> Vec<Event> {
        EventStreamParser::new().feed(stream)
    }

    #[test]
    fn an_event_is_dispatched_at_its_blank_line_with_its_name_and_data() {
        let events = read(b"event: acquired\ndata: {\"a\":1}\n\n");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].name, "acquired");
        assert_eq!(events[0].data, "{\"a\":1}");
        assert!(
            read(b"event: acquired\ndata: x\n").is_empty(),
            "not ended yet"
        );
    }

    #[test]
    fn data_lines_are_joined_and_an_event_without_data_is_not_dispatched() {
        let events = read(b"data: one\ndata:two\n\nevent: empty\n\ndata:\n\n");
        let data: Vec<_> = events.iter().map(|event| event.data.as_str()).collect();
        assert_eq!(data, ["one\ntwo", ""]);
        assert_eq!(events[0].name, "message");
    }

    #[test]
    fn the_last_event_id_stays_in_force_until_replaced() {
        let events =
            read(b"id: 5-0\ndata: a\n\ndata: b\n\nid: 6-0\ndata: c\n\nid: x\0y\ndata: d\n\n");
        let ids: Vec<_> = events.iter().map(|event| event.id.as_str()).collect();
        assert_eq!(ids, ["5-0", "5-0", "6-0", "6-0"]);
    }

    #[test]
    fn retry_comments_and_unknown_fields_are_read_as_the_rules_say() {
        let mut parser = EventStreamParser::new();
        let events = parser.feed(b": keep-alive\nretry: 2500\nretry: soon\nfoo: bar\ndata: a\n\n");
        assert_eq!(parser.comments(), 1);
        assert_eq!(events[0].retry_ms, Some(2500));
        assert_eq!(events[0].data, "a");
    }

    #[test]
    fn cr_lf_and_crlf_all_end_lines_even_split_across_chunks() {
        let stream = "\u{feff}event: a\r\ndata: é\r\rdata: b\n\n".as_bytes();
        for cut in 0..stream.len() {
            let mut parser = EventStreamParser::new();
            let mut events = parser.feed(&stream[..cut]);
            events.extend(parser.feed(&stream[cut..]));
            let seen: Vec<_> = events
                .iter()
                .map(|event| (event.name.as_str(), event.data.as_str()))
                .collect();
            assert_eq!(seen, [("a", "é"), ("message", "b")], "cut at {cut}");
        }
    }
}
