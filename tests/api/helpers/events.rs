//! A streamed lock's Server-Sent Events, read from a live response.

use std::time::Duration;

use reqwest::Response;
use serde_json::Value;

/// An open event stream.
pub struct EventStream {
    response: Response,
    buffer: String,
    /// SSE comments seen so far (keep-alives).
    pub comments: usize,
}

/// One event: its name and its JSON data.
#[derive(Debug, Clone)]
pub struct Event {
    pub name: String,
    pub data: Value,
    /// Its `id`, if it has one.
    pub id: Option<String>,
}

impl EventStream {
    /// The stream of a `200` answer; panics on any other.
    pub fn of(response: Response) -> Self {
        assert_eq!(response.status(), reqwest::StatusCode::OK);
        let content_type = response.headers()["content-type"].to_str().unwrap();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        Self {
            response,
            buffer: String::new(),
            comments: 0,
        }
    }

    /// The next event, `None` if the stream ended; panics if none comes
    /// within `within`.
    pub async fn next(&mut self, within: Duration) -> Option<Event> {
        tokio::time::timeout(within, self.next_event())
            .await
            .unwrap_or_else(|_| panic!("no event within {within:?}"))
    }

    async fn next_event(&mut self) -> Option<Event> {
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut name, mut data, mut id) = (None, String::new(), None);
                for line in block.lines() {
                    if line.starts_with(':') {
                        self.comments += 1;
                    } else if let Some(value) = line.strip_prefix("event: ") {
                        name = Some(value.to_owned());
                    } else if let Some(value) = line.strip_prefix("data: ") {
                        data.push_str(value);
                    } else if let Some(value) = line.strip_prefix("id: ") {
                        id = Some(value.to_owned());
                    }
                }
                if let Some(name) = name {
                    let data = serde_json::from_str(&data).expect("event data is JSON");
                    return Some(Event { name, data, id });
                }
            }
            let chunk = self.response.chunk().await.ok()??;
            self.buffer
                .push_str(std::str::from_utf8(&chunk).expect("UTF-8 events"));
        }
    }

    /// Reads whatever comes for `duration`: the events (comments are
    /// counted in [`EventStream::comments`]).
    pub async fn read_for(&mut self, duration: Duration) -> Vec<Event> {
        let mut events = Vec::new();
        let deadline = tokio::time::Instant::now() + duration;
        while let Ok(Some(event)) = tokio::time::timeout_at(deadline, self.next_event()).await {
            events.push(event);
        }
        events
    }

    /// Reads events until `name` comes; returns it (panics if the stream
    /// ends or it does not come within `within`).
    pub async fn until(&mut self, name: &str, within: Duration) -> Event {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Some(event) if event.name == name => return event,
                Some(_) => continue,
                None => panic!("the stream ended before {name}"),
            }
        }
    }
}
