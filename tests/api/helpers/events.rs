//! A streamed lock's Server-Sent Events, read from a live response.

use std::time::Duration;

use std::collections::VecDeque;

use lockgate::sse::EventStreamParser;
use reqwest::Response;
use serde_json::Value;

/// An open event stream.
pub struct EventStream {
    response: Response,
    parser: EventStreamParser,
    pending: VecDeque<lockgate::sse::Event>,
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
            parser: EventStreamParser::new(),
            pending: VecDeque::new(),
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
            if let Some(event) = self.pending.pop_front() {
                let data = serde_json::from_str(&event.data).expect("event data is JSON");
                let id = (!event.id.is_empty()).then_some(event.id);
                return Some(Event {
                    name: event.name,
                    data,
                    id,
                });
            }
            let chunk = self.response.chunk().await.ok()??;
            self.pending.extend(self.parser.feed(&chunk));
            self.comments = self.parser.comments();
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
