//! The span exporter: OTLP over HTTP (protobuf) to `<endpoint>/v1/traces`, sent with the gateway's own reqwest on its Tokio runtime.
//!
//! The SDK's batch processor runs on a thread of its own and waits for each
//! export there; reqwest needs a Tokio reactor, so each export is spawned
//! on the gateway's runtime and the thread waits for its answer. (The
//! exporter's built-in clients would bring a second reqwest, of another
//! major version.)

use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use opentelemetry::KeyValue;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::sync::lock;

/// How long one export may take before it is given up (its spans are lost).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the spans of `endpoint` (a collector's base URL) are sent.
pub fn traces_url(endpoint: &str) -> String {
    format!("{}/v1/traces", endpoint.trim_end_matches('/'))
}

/// The tracer provider sending to `endpoint`, for the instance `instance`.
pub(super) fn provider(endpoint: &str, instance: &str) -> Result<SdkTracerProvider, String> {
    let client = OnRuntime::new(endpoint.starts_with("https:"))
        .map_err(|err| format!("the OTLP HTTP client: {err}"))?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces_url(endpoint))
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|err| err.to_string())?;
    let resource = Resource::builder_empty()
        .with_service_name("lockgate")
        .with_attributes([
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("service.instance.id", instance.to_owned()),
        ])
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// reqwest, run on the Tokio runtime the exporter was made on.
#[derive(Debug)]
struct OnRuntime {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl OnRuntime {
    /// With `https`, the collector is trusted by the system's CAs.
    fn new(https: bool) -> Result<Self, reqwest::Error> {
        let mut builder = reqwest::Client::builder().timeout(EXPORT_TIMEOUT);
        if https {
            for certificate in rustls_native_certs::load_native_certs().certs {
                if let Ok(certificate) = reqwest::Certificate::from_der(&certificate) {
                    builder = builder.add_root_certificate(certificate);
                }
            }
        }
        Ok(Self {
            client: builder.build()?,
            runtime: tokio::runtime::Handle::current(),
        })
    }
}

#[async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let request = reqwest::Request::try_from(request)?;
        let answer = self.runtime.spawn(async move {
            let response = client.execute(request).await?;
            let status = response.status();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, body))
        });
        let answered = answer.await?;
        match &answered {
            Ok((status, _)) if status.is_success() => {}
            Ok((status, _)) => refused(&format!("the collector answered {status}")),
            Err(err) => refused(&err.to_string()),
        }
        let (status, body) = answered?;
        Ok(Response::builder().status(status).body(body)?)
    }
}

/// When the last failed export was logged.
static LAST_LOGGED: Mutex<Option<Instant>> = Mutex::new(None);

/// How often a failing collector is logged: its spans are lost meanwhile.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// Logs an export that failed: the first, then at most one a minute.
fn refused(why: &str) {
    let mut last = lock(&LAST_LOGGED);
    if last.is_some_and(|last| last.elapsed() < LOG_EVERY) {
        return;
    }
    *last = Some(Instant::now());
    drop(last);
    tracing::warn!(error = why, "spans not sent (logged at most once a minute)");
}
