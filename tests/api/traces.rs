//! Traces sent by OTLP to a receiver that decodes them with the protocol's own definitions (tests/api/traces/otlp_receiver.py): the client's trace continued, Redis calls and the lock wait as child spans, the waiter's span linked to the release that granted it across two gateways, and JSON log lines with the trace's ids.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{GatewayProcess, RedisServer, eventually};

/// The receiver, on a free port, appending the spans it gets to a file.
struct Receiver {
    child: Child,
    port: u16,
    spans: PathBuf,
    _dir: tempfile::TempDir,
}

impl Receiver {
    fn start() -> Self {
        let dir = tempfile::TempDir::new().unwrap();
        let spans = dir.path().join("spans.jsonl");
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/api/traces/otlp_receiver.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(&spans)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the OTLP receiver");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let port = first.trim().parse().unwrap_or_else(|_| {
            panic!("the receiver did not start (is opentelemetry-proto installed?): {first:?}")
        });
        Self {
            child,
            port,
            spans,
            _dir: dir,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.spans)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client's trace: its trace id and the id of its span a request is sent from.
struct ClientSpan {
    trace: String,
    span: String,
}

impl ClientSpan {
    fn new() -> Self {
        let hex = uuid::Uuid::new_v4().simple().to_string();
        Self {
            trace: hex.clone(),
            span: hex[..16].to_owned(),
        }
    }

    fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace, self.span)
    }
}

/// The gateway's first audit line, a JSON object.
fn audit_line(gateway: &GatewayProcess) -> Value {
    gateway
        .logs()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line["target"] == "lockgate::audit")
        .unwrap_or_else(|| panic!("no audit line: {}", gateway.logs()))
}

fn in_trace<'a>(spans: &'a [Value], trace: &str, name: &str) -> Vec<&'a Value> {
    spans
        .iter()
        .filter(|span| span["trace_id"] == trace && span["name"] == name)
        .collect()
}

#[tokio::test]
async fn a_granted_waiters_span_links_to_the_release_that_granted_it_across_two_gateways() {
    let receiver = Receiver::start();
    let redis = RedisServer::start_single().await;
    let endpoint = receiver.endpoint();
    let gateway = |id: &'static str| {
        let redis = &redis;
        let endpoint = endpoint.clone();
        async move {
            GatewayProcess::spawn(
                redis,
                &[
                    "--otlp-endpoint",
                    &endpoint,
                    "--instance-id",
                    id,
                    "--log-format",
                    "json",
                ],
                &[
                    ("OTEL_BSP_SCHEDULE_DELAY", "100"),
                    ("LOCKGATE_ADMIN_TOKEN", "traces-test-admin-token"),
                ],
            )
            .await
        }
    };
    let (waiters, releasers) = (gateway("waiters").await, gateway("releasers").await);

    let holding = ClientSpan::new();
    let grant = GatewayProcess::granted(
        releasers
            .acquire(&json!({"key": "traced", "ttl_ms": 30_000}))
            .header("traceparent", holding.traceparent()),
    )
    .await;
    let waiting = ClientSpan::new();
    let waiter = waiters
        .acquire(&json!({"key": "traced", "ttl_ms": 30_000, "wait_ms": 10_000}))
        .header("traceparent", waiting.traceparent())
        .send();
    let waiter = tokio::spawn(waiter);
    // Queued: the lock's queue has it.
    assert!(
        eventually(Duration::from_secs(5), || async {
            redis::cmd("ZCARD")
                .arg("lockgate:queue:{traced}")
                .query_async::<u64>(&mut redis.connection().await)
                .await
                .unwrap()
                == 1
        })
        .await
    );
    let releasing = ClientSpan::new();
    let released = releasers
        .http
        .delete(releasers.url("/locks/traced"))
        .header("Lock-Token", grant["token"].as_str().unwrap())
        .header("traceparent", releasing.traceparent())
        .send()
        .await
        .unwrap();
    assert_eq!(released.status(), StatusCode::NO_CONTENT);
    let waited = waiter.await.unwrap().unwrap();
    assert_eq!(waited.status(), StatusCode::CREATED);

    // A refused admin request writes an audit line inside its span.
    let auditing = ClientSpan::new();
    let refused = waiters
        .http
        .get(waiters.url("/admin/instances"))
        .header("traceparent", auditing.traceparent())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);

    // A caller that does not sample: nothing of its trace is recorded.
    let unsampled = ClientSpan::new();
    let answered = waiters
        .http
        .get(waiters.url("/locks/traced"))
        .header(
            "traceparent",
            format!("00-{}-{}-00", unsampled.trace, unsampled.span),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), StatusCode::OK);

    let complete = |spans: &[Value]| {
        !in_trace(spans, &waiting.trace, "lock wait").is_empty()
            && !in_trace(spans, &releasing.trace, "DELETE /locks/{key}").is_empty()
            && !in_trace(spans, &auditing.trace, "GET /admin/instances").is_empty()
    };
    assert!(
        eventually(Duration::from_secs(10), || async {
            complete(&receiver.spans())
        })
        .await,
        "spans received: {:#?}",
        receiver.spans()
    );
    let spans = receiver.spans();
    assert!(
        !spans
            .iter()
            .any(|span| span["trace_id"] == unsampled.trace.as_str()),
        "an unsampled trace was recorded: {spans:#?}"
    );

    // The client's traces continued: each request's span is a child of
    // the client's span, on the instance that served it.
    let request = |client: &ClientSpan, name: &str, instance: &str| {
        let found = in_trace(&spans, &client.trace, name);
        assert_eq!(found.len(), 1, "{name} in {}: {spans:#?}", client.trace);
        let span = found[0];
        assert_eq!(span["parent_span_id"], client.span.as_str(), "{span}");
        assert_eq!(span["instance"], instance, "{span}");
        assert_eq!(span["service"], "lockgate", "{span}");
        assert_eq!(span["kind"], 2, "a server span: {span}");
        span.clone()
    };
    let waiter_request = request(&waiting, "POST /locks", "waiters");
    let release_request = request(&releasing, "DELETE /locks/{key}", "releasers");
    request(&holding, "POST /locks", "releasers");
    assert_eq!(
        waiter_request["attributes"]["http.response.status_code"],
        201
    );

    // The wait: a child of the waiter's request, told its place and its end,
    // linked to the release's span on the other gateway.
    let wait = in_trace(&spans, &waiting.trace, "lock wait")[0];
    assert_eq!(wait["parent_span_id"], waiter_request["span_id"], "{wait}");
    assert_eq!(wait["attributes"]["lock.key"], "traced", "{wait}");
    assert_eq!(wait["attributes"]["lock.queued_position"], 1, "{wait}");
    assert_eq!(wait["attributes"]["lock.outcome"], "granted", "{wait}");
    assert_eq!(
        wait["links"],
        json!([{"trace_id": releasing.trace, "span_id": release_request["span_id"]}]),
        "{wait}"
    );

    // Redis calls: client spans under the request or the wait, named by
    // their script.
    let redis_calls: Vec<&Value> = spans
        .iter()
        .filter(|span| {
            span["trace_id"] == waiting.trace.as_str()
                && span["name"].as_str().unwrap().starts_with("redis ")
        })
        .collect();
    assert!(
        redis_calls
            .iter()
            .any(|call| call["parent_span_id"] == wait["span_id"]),
        "no Redis call under the wait: {redis_calls:#?}"
    );
    for call in &redis_calls {
        assert_eq!(call["kind"], 3, "a client span: {call}");
        assert_eq!(call["attributes"]["db.system.name"], "redis", "{call}");
        assert!(
            call["parent_span_id"] == wait["span_id"]
                || call["parent_span_id"] == waiter_request["span_id"],
            "{call}"
        );
    }

    // The background's Redis calls (fleet beats, session sweeps) are no
    // traces of their own: every Redis span has a parent.
    let roots: Vec<&Value> = spans
        .iter()
        .filter(|span| {
            span["name"].as_str().unwrap().starts_with("redis ") && span["parent_span_id"] == ""
        })
        .collect();
    assert!(
        roots.is_empty(),
        "Redis calls as traces of their own: {roots:#?}"
    );

    // JSON logs: the audit line carries the ids of the request's span.
    let audit = in_trace(&spans, &auditing.trace, "GET /admin/instances")[0];
    let line = audit_line(&waiters);
    assert_eq!(line["trace_id"], auditing.trace.as_str(), "{line}");
    assert_eq!(line["span_id"], audit["span_id"], "{line}");
}

#[tokio::test]
async fn without_an_endpoint_no_span_is_sent_and_json_lines_carry_no_trace_ids() {
    let receiver = Receiver::start();
    let redis = RedisServer::start_single().await;
    let gateway = GatewayProcess::spawn(
        &redis,
        &["--log-format", "json"],
        &[
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("LOCKGATE_ADMIN_TOKEN", "traces-test-admin-token"),
            // The SDK's own variable names no endpoint for the gateway.
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint()),
        ],
    )
    .await;
    let client = ClientSpan::new();
    let refused = gateway
        .http
        .get(gateway.url("/admin/instances"))
        .header("traceparent", client.traceparent())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(receiver.spans().is_empty(), "{:#?}", receiver.spans());
    let line = audit_line(&gateway);
    assert!(line.get("trace_id").is_none(), "{line}");
}

#[tokio::test]
async fn a_batch_that_waits_has_a_wait_span_with_its_locks() {
    let receiver = Receiver::start();
    let redis = RedisServer::start_single().await;
    let gateway = GatewayProcess::spawn(
        &redis,
        &["--otlp-endpoint", &receiver.endpoint()],
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
    )
    .await;
    let grant =
        GatewayProcess::granted(gateway.acquire(&json!({"key": "batch:a", "ttl_ms": 30_000})))
            .await;
    let client = ClientSpan::new();
    let batch = gateway
        .http
        .post(gateway.url("/locks/batch"))
        .header("traceparent", client.traceparent())
        .json(&json!({
            "locks": [{"key": "batch:a"}, {"key": "batch:b"}],
            "ttl_ms": 30_000,
            "wait_ms": 10_000,
        }))
        .send();
    let batch = tokio::spawn(batch);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = gateway
        .http
        .delete(gateway.url("/locks/batch:a"))
        .header("Lock-Token", grant["token"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(released.status(), StatusCode::NO_CONTENT);
    assert_eq!(batch.await.unwrap().unwrap().status(), StatusCode::CREATED);

    assert!(
        eventually(Duration::from_secs(10), || async {
            !in_trace(&receiver.spans(), &client.trace, "lock wait").is_empty()
        })
        .await,
        "spans received: {:#?}",
        receiver.spans()
    );
    let spans = receiver.spans();
    let request = in_trace(&spans, &client.trace, "POST /locks/batch")[0];
    let wait = in_trace(&spans, &client.trace, "lock wait")[0];
    assert_eq!(wait["parent_span_id"], request["span_id"], "{wait}");
    assert_eq!(wait["attributes"]["lock.keys"], "batch:a batch:b", "{wait}");
    assert_eq!(wait["attributes"]["lock.outcome"], "granted", "{wait}");
}
