//! `lockgate run`'s side of the HTTP API: take a streamed lock, read its events, give it back.

use std::time::Duration;

use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::duration::millis;
use crate::sse::{Event, EventStreamParser};

/// A gateway, as `--url` and `--api-key` name it.
pub struct GatewayClient {
    http: reqwest::Client,
    url: String,
    api_key: Option<String>,
}

/// Why no lock was granted.
pub enum Refused {
    /// Another owner held it until the wait ran out.
    Held,
    /// The wait asked for is longer than the gateway allows; at most this.
    WaitTooLong { maximum_ms: u64 },
    /// The gateway could not be reached, or refused for another reason.
    Unavailable(String),
}

/// How to hold the lock: shared, or as one of `limit` places (neither: a
/// plain exclusive lock), and the holder's public value.
#[derive(Debug, Clone)]
pub struct Holding {
    pub shared: bool,
    pub limit: Option<u64>,
    pub value: Option<String>,
}

/// The grant, as the `acquired` event reports it.
#[derive(Debug, Clone, Deserialize)]
pub struct Grant {
    pub token: String,
    pub fencing_token: u64,
}

/// What the lock's event stream says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockEvent {
    Renewed,
    /// The lock was released with its token (the command gave it back).
    Released,
    /// The lock is no longer held for us, with the gateway's reason.
    Lost(String),
}

impl GatewayClient {
    /// A client of the gateway at `url`; over `tls` when given (an
    /// https:// gateway with a private CA, or one that asks for a client
    /// certificate).
    pub fn new(
        url: &str,
        api_key: Option<String>,
        tls: Option<rustls::ClientConfig>,
    ) -> Result<Self, String> {
        let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(5));
        if let Some(tls) = tls {
            builder = builder.use_preconfigured_tls(tls);
        }
        let http = builder
            .build()
            .map_err(|err| format!("cannot make an HTTP client: {err}"))?;
        Ok(Self {
            http,
            url: url.trim_end_matches('/').to_owned(),
            api_key,
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.url));
        match &self.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// Asks for `key` as a streamed lock, waiting up to `wait` on the server.
    pub async fn acquire(
        &self,
        key: &str,
        kind: &Holding,
        ttl: Duration,
        wait: Duration,
    ) -> Result<(Grant, LockStream), Refused> {
        let mut body = json!({"key": key, "ttl_ms": millis(ttl), "wait_ms": millis(wait)});
        if kind.shared {
            body["mode"] = json!("shared");
        }
        if let Some(limit) = kind.limit {
            body["limit"] = json!(limit);
        }
        if let Some(value) = &kind.value {
            body["value"] = json!(value);
        }
        let response = self
            .request(reqwest::Method::POST, "/locks")
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(&body)
            .send()
            .await
            .map_err(|err| Refused::Unavailable(self.unreachable(&err)))?;
        if response.status() != StatusCode::OK {
            return Err(refusal(response).await);
        }
        let mut stream = LockStream {
            response,
            parser: EventStreamParser::new(),
            pending: Default::default(),
        };
        loop {
            return match stream.next_event().await {
                // Our place in the lock's queue, while we wait.
                Some((name, _)) if name == "queued" => continue,
                Some((name, data)) if name == "acquired" => serde_json::from_str(&data)
                    .map(|grant| (grant, stream))
                    .map_err(|err| {
                        Refused::Unavailable(format!("the gateway's grant is unreadable: {err}"))
                    }),
                // The wait ended without a grant, after the stream began.
                Some((name, data)) if name == "refused" => {
                    let problem = serde_json::from_str(&data).unwrap_or(Value::Null);
                    let status = problem["status"]
                        .as_u64()
                        .and_then(|status| u16::try_from(status).ok())
                        .and_then(|status| StatusCode::from_u16(status).ok())
                        .unwrap_or(StatusCode::OK);
                    Err(refused(status, &problem))
                }
                _ => Err(Refused::Unavailable(
                    "the gateway's answer is not a streamed lock".into(),
                )),
            };
        }
    }

    /// Gives every hold of the lock back: a `DELETE` per hold, until the
    /// lock is free (or was not ours any more). False if that could not be
    /// done; closing the stream then releases it.
    pub async fn release(&self, key: &str, token: &str) -> bool {
        for _ in 0..1000 {
            let answer = self
                .request(reqwest::Method::DELETE, &format!("/locks/{key}"))
                .header("Lock-Token", token)
                .send()
                .await;
            match answer.map(|response| response.status()) {
                // One re-entrant hold given back: more are left.
                Ok(StatusCode::OK) => continue,
                Ok(StatusCode::NO_CONTENT | StatusCode::NOT_FOUND | StatusCode::CONFLICT) => {
                    return true;
                }
                _ => return false,
            }
        }
        false
    }

    fn unreachable(&self, err: &reqwest::Error) -> String {
        let mut cause: &dyn std::error::Error = err;
        while let Some(source) = cause.source() {
            cause = source;
        }
        format!("cannot reach the gateway at {}: {cause}", self.url)
    }
}

/// The refusal a non-200 answer carries (a problem document, usually).
async fn refusal(response: reqwest::Response) -> Refused {
    let status = response.status();
    let problem: Value = response.json().await.unwrap_or(Value::Null);
    refused(status, &problem)
}

/// The refusal a problem document says.
fn refused(status: StatusCode, problem: &Value) -> Refused {
    let slug = problem["type"]
        .as_str()
        .unwrap_or("")
        .trim_start_matches("/problems/");
    if status == StatusCode::CONFLICT && slug == "lock-held" {
        return Refused::Held;
    }
    if problem["field"] == "wait_ms"
        && let Some(maximum_ms) = problem["maximum"].as_u64()
    {
        return Refused::WaitTooLong { maximum_ms };
    }
    let detail = problem["detail"].as_str().unwrap_or("");
    Refused::Unavailable(format!("the gateway refused: {status} {slug}: {detail}"))
}

/// The open event stream of a granted lock; closing it (dropping this)
/// makes the gateway release the lock.
pub struct LockStream {
    response: reqwest::Response,
    parser: EventStreamParser,
    /// Events read and not yet handed out.
    pending: std::collections::VecDeque<Event>,
}

impl LockStream {
    /// The next lock event; `None` when the stream ended without saying
    /// why (the gateway stopped, or the connection broke).
    pub async fn next(&mut self) -> Option<LockEvent> {
        loop {
            let (name, data) = self.next_event().await?;
            let reason = || {
                serde_json::from_str::<Value>(&data)
                    .ok()
                    .and_then(|data| data["reason"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| "no reason given".into())
            };
            match name.as_str() {
                "renewed" => return Some(LockEvent::Renewed),
                "released" => return Some(LockEvent::Released),
                "lost" => return Some(LockEvent::Lost(reason())),
                _ => continue,
            }
        }
    }

    /// The next Server-Sent Event's name and data.
    async fn next_event(&mut self) -> Option<(String, String)> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some((event.name, event.data));
            }
            let chunk = self.response.chunk().await.ok()??;
            self.pending.extend(self.parser.feed(&chunk));
        }
    }
}
