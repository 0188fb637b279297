//! Per-request observation and limits: the request id, the log span, the metrics, the instance's header, the bounds on header size and request time, and the 500 for a panic.
//!
//! One hand-written layer does all of it. axum boxes the future of every
//! layer added to the router (and `from_fn` boxes it once more), and each
//! such future lives as long as its request: 10 000 requests waiting for a
//! lock would keep 10 000 of each. Here the one future holds only what a
//! request needs, inside the route's own.

use std::convert::Infallible;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderName, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use pin_project_lite::pin_project;
use tokio::time::Timeout;
use tower::{Layer, Service};

use crate::http::{ApiError, FailureCause};
use crate::metrics::Metrics;
use crate::telemetry::{self, trace_context};

/// The header naming the instance that answered.
pub static X_INSTANCE_ID: HeaderName = HeaderName::from_static("x-instance-id");

/// The header carrying the request id, accepted from the client (or nginx)
/// and echoed back.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest request id accepted from a client.
const MAX_REQUEST_ID_LEN: usize = 128;

/// The bounds every request is held to.
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    /// The most bytes of header names and values together.
    pub header_bytes: usize,
    /// The longest a request may take, its lock wait included.
    pub timeout: Duration,
}

/// The layer: where to count, what to enforce, who answers.
#[derive(Clone)]
pub struct Observer {
    pub metrics: Arc<Metrics>,
    pub limits: RequestLimits,
    pub instance_id: HeaderValue,
}

impl<S> Layer<S> for Observer {
    type Service = Observed<S>;

    fn layer(&self, inner: S) -> Observed<S> {
        Observed {
            inner,
            observer: self.clone(),
        }
    }
}

/// A route, observed.
#[derive(Clone)]
pub struct Observed<S> {
    inner: S,
    observer: Observer,
}

impl<S> Service<Request> for Observed<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = ObservedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    /// Gives the request an id (the client's, if it sent a usable one), runs
    /// it in a span carrying that id, method and path (never the query:
    /// `?token=` is a secret), refuses oversized headers (431), ends a
    /// request that outlives the timeout (503; it is dropped like one whose
    /// client left, so a lock granted meanwhile is released), answers a
    /// panic with a 500, counts it by route template, and names the id and
    /// the instance in the response. Added with `Router::layer`, so the
    /// route is known here.
    fn call(&mut self, mut request: Request) -> Self::Future {
        let started = Instant::now();
        // Copied, not cloned: a clone would share (and keep alive, for as
        // long as the request waits) the connection's whole read buffer.
        let id = request
            .headers()
            .get(&X_REQUEST_ID)
            .filter(|value| usable(value.as_bytes()))
            .and_then(|value| HeaderValue::from_bytes(value.as_bytes()).ok())
            .unwrap_or_else(|| {
                HeaderValue::try_from(uuid::Uuid::new_v4().to_string())
                    .expect("a UUID is a valid header value")
            });
        request
            .headers_mut()
            .insert(X_REQUEST_ID.clone(), id.clone());
        let span = request_span(&request, &id);
        // Counted even if the client leaves before the answer (see `Counted`).
        let counted = Counted {
            metrics: self.observer.metrics.clone(),
            route: request.extensions().get::<MatchedPath>().cloned(),
            method: method_label(request.method()),
            started,
            span,
            status: None,
        };
        let limits = self.observer.limits;
        let answer = if header_bytes(&request) > limits.header_bytes {
            Answer::Ready {
                response: Some(ApiError::HeadersTooLarge(limits.header_bytes).into_response()),
            }
        } else {
            let _entered = counted.span.enter();
            match catch_unwind(AssertUnwindSafe(|| self.inner.call(request))) {
                Ok(running) => Answer::Running {
                    running: tokio::time::timeout(limits.timeout, running),
                },
                Err(_) => Answer::Ready {
                    response: Some(ApiError::Internal.into_response()),
                },
            }
        };
        ObservedFuture {
            answer,
            counted,
            id: Some(id),
            instance_id: self.observer.instance_id.clone(),
        }
    }
}

pin_project! {
    /// An observed request's answer on its way.
    pub struct ObservedFuture<F> {
        #[pin]
        answer: Answer<F>,
        counted: Counted,
        id: Option<HeaderValue>,
        instance_id: HeaderValue,
    }
}

pin_project! {
    #[project = AnswerProjection]
    enum Answer<F> {
        /// Answered without the route: headers too large, or a panic.
        Ready { response: Option<Response> },
        /// The route's answer, bounded by the request timeout.
        Running { #[pin] running: Timeout<F> },
    }
}

impl<F> Future for ObservedFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = match this.answer.project() {
            AnswerProjection::Ready { response } => response.take().unwrap_or_else(|| {
                // Polled again after it completed: a caller's bug, not the
                // client's; answer rather than panic.
                ApiError::Internal.into_response()
            }),
            AnswerProjection::Running { running } => {
                let _entered = this.counted.span.enter();
                match catch_unwind(AssertUnwindSafe(|| running.poll(cx))) {
                    Ok(Poll::Pending) => return Poll::Pending,
                    Ok(Poll::Ready(Ok(Ok(response)))) => response,
                    Ok(Poll::Ready(Ok(Err(never)))) => match never {},
                    Ok(Poll::Ready(Err(_elapsed))) => ApiError::RequestTimeout.into_response(),
                    Err(_panic) => ApiError::Internal.into_response(),
                }
            }
        };
        if let Some(FailureCause(cause)) = response.extensions().get::<FailureCause>() {
            let status = response.status().as_u16();
            this.counted
                .span
                .in_scope(|| tracing::error!(error = %cause, status, "request failed"));
        }
        this.counted.answered(response.status().as_u16());
        let headers = response.headers_mut();
        if let Some(id) = this.id.take() {
            headers.insert(X_REQUEST_ID.clone(), id);
        }
        headers.insert(X_INSTANCE_ID.clone(), this.instance_id.clone());
        Poll::Ready(Ok(response))
    }
}

/// A request's count, made when its answer is ready: with its status, or,
/// when it is dropped unanswered (its client left first), with 499 (nginx's
/// "client closed request").
struct Counted {
    metrics: Arc<Metrics>,
    route: Option<MatchedPath>,
    method: &'static str,
    started: Instant,
    span: tracing::Span,
    /// Set once counted.
    status: Option<u16>,
}

impl Counted {
    fn answered(&mut self, status: u16) {
        if self.status.is_none() {
            self.status = Some(status);
            self.count(status);
        }
    }

    fn count(&self, status: u16) {
        let elapsed = self.started.elapsed();
        let route = self.route.as_ref().map_or("unmatched", MatchedPath::as_str);
        self.metrics.request(route, self.method, status, elapsed);
        // Fields of a traced request's span only (a no-op on the other).
        // As i64: OpenTelemetry has no unsigned integers (a u16 would be sent as text).
        self.span
            .record("http.response.status_code", i64::from(status));
        if status >= 500 {
            self.span.record("otel.status_code", "ERROR");
        }
        self.span.in_scope(|| {
            tracing::debug!(status, elapsed_ms = elapsed.as_secs_f64() * 1e3, "answered")
        });
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if self.status.is_none() {
            self.count(CLIENT_CLOSED_REQUEST);
        }
    }
}

/// The request's span: its id, method and path; when traces are on, also
/// what OpenTelemetry names a server span by (`GET /locks/{key}`), and the
/// client's trace continued from its `traceparent`.
fn request_span(request: &Request, id: &HeaderValue) -> tracing::Span {
    let id = String::from_utf8_lossy(id.as_bytes());
    let method = request.method();
    let path = loggable_path(request.uri().path());
    if !telemetry::tracing_on() {
        return tracing::info_span!("request", %id, %method, %path);
    }
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str);
    let span = tracing::info_span!(
        "request",
        %id,
        %method,
        %path,
        otel.name = %format_args!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = %method,
        http.route = route,
        http.response.status_code = tracing::field::Empty,
    );
    trace_context::continue_from(&span, request.headers());
    span
}

/// The status a request is counted with when its client left before the answer.
const CLIENT_CLOSED_REQUEST: u16 = 499;

/// The bytes of header names and values together.
fn header_bytes(request: &Request) -> usize {
    request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum()
}

/// The method as the request metrics label it: one of those the routes
/// serve, or `other`, so made-up methods cannot add series without end.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        _ => "other",
    }
}

fn usable(id: &[u8]) -> bool {
    !id.is_empty() && id.len() <= MAX_REQUEST_ID_LEN && id.iter().all(u8::is_ascii_graphic)
}

/// The request's path as the log shows it: a session's id is a secret
/// like an owner token (whoever has it may attach locks to the session or
/// end it), so it is never written; the rest of the path is.
fn loggable_path(path: &str) -> std::borrow::Cow<'_, str> {
    const SESSIONS: &str = "/sessions/";
    match path.strip_prefix(SESSIONS) {
        Some(rest) if !rest.is_empty() => {
            let tail = rest.find('/').map_or("", |at| &rest[at..]);
            format!("{SESSIONS}<id>{tail}").into()
        }
        _ => path.into(),
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use tower::ServiceExt;

    use super::*;

    #[test]
    fn a_sessions_id_never_reaches_the_log() {
        let id = "5615d984-34fa-4abc-84cc-5033367b7340";
        assert_eq!(loggable_path(&format!("/sessions/{id}")), "/sessions/<id>");
        assert_eq!(
            loggable_path(&format!("/sessions/{id}/x")),
            "/sessions/<id>/x"
        );
        assert_eq!(loggable_path("/sessions"), "/sessions");
        assert_eq!(loggable_path("/locks/orders:42"), "/locks/orders:42");
    }
    use crate::metrics::Gauges;

    fn observer(metrics: &Arc<Metrics>) -> Observer {
        Observer {
            metrics: metrics.clone(),
            limits: RequestLimits {
                header_bytes: 1024,
                timeout: Duration::from_millis(200),
            },
            instance_id: HeaderValue::from_static("test"),
        }
    }

    fn request() -> Request {
        Request::builder()
            .uri("/somewhere")
            .header(&X_REQUEST_ID, "r-1")
            .body(Body::empty())
            .unwrap()
    }

    fn counted(metrics: &Metrics, status: u16) -> bool {
        let text = metrics.render(Gauges {
            waiters: 0,
            streamed_locks: 0,
            watchers: 0,
            queued: 0,
        });
        let wanted = format!("status=\"{status}\"");
        text.lines().any(|line| {
            line.starts_with("lockgate_http_request_duration_seconds_count")
                && line.contains(&wanted)
        })
    }

    #[tokio::test]
    async fn a_panic_is_answered_500_with_the_ids_and_counted() {
        let metrics = Arc::new(Metrics::default());
        let panics = tower::service_fn(|_: Request| async {
            if true {
                panic!("a handler's bug");
            }
            Ok::<Response, Infallible>(Response::default())
        });

        let response = observer(&metrics)
            .layer(panics)
            .oneshot(request())
            .await
            .unwrap();

        assert_eq!(response.status(), 500);
        assert_eq!(response.headers()["x-request-id"], "r-1");
        assert_eq!(response.headers()["x-instance-id"], "test");
        assert!(counted(&metrics, 500));
    }

    #[tokio::test]
    async fn a_request_past_the_timeout_is_answered_503_and_one_dropped_is_counted_499() {
        let metrics = Arc::new(Metrics::default());
        let never = tower::service_fn(|_: Request| std::future::pending());

        let response = observer(&metrics)
            .layer(never)
            .oneshot(request())
            .await
            .unwrap();
        assert_eq!(response.status(), 503);
        assert!(counted(&metrics, 503));

        let mut service = observer(&metrics).layer(never);
        let dropped = service.call(request());
        assert!(!counted(&metrics, 499));
        drop(dropped);
        assert!(counted(&metrics, 499));
    }

    #[test]
    fn made_up_methods_share_one_label() {
        assert_eq!(method_label(&Method::DELETE), "DELETE");
        for made_up in ["M1", "PATCH", "BREW", "get"] {
            let method = Method::from_bytes(made_up.as_bytes()).unwrap();
            assert_eq!(method_label(&method), "other", "{made_up}");
        }
    }
}
