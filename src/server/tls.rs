//! One connection over TLS: the handshake (bounded by the header timeout), then HTTP/1.1 or HTTP/2 as ALPN chose, with the client certificate's names on every request and the idle timeout between requests.
//!
//! The plain-HTTP path counts a request head's bytes on the socket itself
//! (see `socket`); over TLS those bytes are ciphertext, so here hyper's own
//! bounds apply: its header read timeout and head size limit for HTTP/1.1,
//! its keep-alive pings for HTTP/2. A client that speaks anything but TLS
//! (plain HTTP to the TLS port, say) fails the handshake and is closed with
//! no answer, logged at debug level only, so it cannot flood the log.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rustls::ServerConfig;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tower::Service;

use super::ConnectionLimits;
use crate::http::ClientCertificate;
use crate::tls::certificate_names;

/// The TLS settings new handshakes use; replaced whole on reload, while
/// connections already open keep theirs.
#[derive(Clone)]
pub struct TlsSettings(Arc<RwLock<Arc<ServerConfig>>>);

impl TlsSettings {
    pub fn new(config: Arc<ServerConfig>) -> Self {
        Self(Arc::new(RwLock::new(config)))
    }

    /// New handshakes use `config` from now on.
    pub fn replace(&self, config: Arc<ServerConfig>) {
        *self
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = config;
    }

    fn current(&self) -> Arc<ServerConfig> {
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// Requests in flight on one connection, and a signal when none is left.
#[derive(Default)]
struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

/// Serves one accepted TLS connection until it closes, is idle too long,
/// or the gateway shuts down (then it finishes its requests in flight).
pub(super) async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    tls: TlsSettings,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
    let stream = match tokio::time::timeout(limits.header_timeout, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(err)) => {
            tracing::debug!(error = %err, %peer, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    let client = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|certificate| ClientCertificate(certificate_names(certificate).into()));
    let in_flight = Arc::new(InFlight::default());
    let service = {
        let in_flight = in_flight.clone();
        hyper::service::service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            if let Some(client) = &client {
                request.extensions_mut().insert(client.clone());
            }
            in_flight.count.fetch_add(1, Ordering::SeqCst);
            let guard = Busy(Some(in_flight.clone()));
            let response = router.clone().call(request);
            async move {
                let Ok(response) = response.await;
                Ok::<_, Infallible>(response.map(|body| CountedBody { body, _busy: guard }))
            }
        })
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_head_bytes.max(8192) + 8192);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(
            limits.idle_timeout.min(std::time::Duration::from_secs(30)),
        ))
        .max_header_list_size(u32::try_from(limits.max_head_bytes).unwrap_or(u32::MAX));
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let mut closing = false;
    loop {
        tokio::select! {
            served = connection.as_mut() => {
                if let Err(err) = served {
                    tracing::debug!(error = %err, %peer, "TLS connection ended");
                }
                return;
            }
            () = idle_for(&in_flight, limits.idle_timeout), if !closing => {
                connection.as_mut().graceful_shutdown();
                closing = true;
            }
            () = shutdown.cancelled(), if !closing => {
                connection.as_mut().graceful_shutdown();
                closing = true;
            }
        }
    }
}

/// Completes once the connection has had no request in flight for `limit`.
async fn idle_for(in_flight: &InFlight, limit: std::time::Duration) {
    loop {
        let notified = in_flight.idle.notified();
        if in_flight.count.load(Ordering::SeqCst) == 0 {
            tokio::select! {
                () = tokio::time::sleep(limit) => {
                    if in_flight.count.load(Ordering::SeqCst) == 0 {
                        return;
                    }
                }
                () = notified => {}
            }
        } else {
            notified.await;
        }
    }
}

/// A request in flight, until its response body is written or dropped.
struct Busy(Option<Arc<InFlight>>);

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(in_flight) = self.0.take() {
            in_flight.count.fetch_sub(1, Ordering::SeqCst);
            in_flight.idle.notify_waiters();
        }
    }
}

/// A response body that keeps its request counted as in flight.
struct CountedBody {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for CountedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
