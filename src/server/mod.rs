//! The transport: the accept loop, each connection watched for the gateway's limits, and the one layer every request passes through.
//!
//! `src/http` is the API (routes, extractors, problems); this module serves
//! it. [`serve`] accepts connections and hands each to hyper over a
//! [`socket::WatchedIo`]; [`activity`] watches each for the connection
//! limits; [`observe`] is the layer that gives every request its id, span,
//! metrics, limits and `X-Instance-Id`.
//!
//! `axum::serve` sets no timer: a client could hold a connection (and its
//! buffers) forever by sending half a request, or nothing. Here hyper's
//! connection builder serves each connection, and a watch on its reads and
//! its requests closes it when:
//!
//! * a request's head has not fully arrived within the header timeout,
//!   counted from the connection's start or from the head's first byte;
//! * it has been kept alive with no request for the idle timeout.
//!
//! A request being answered is never cut by either: a lock wait and a
//! streamed lock last as long as they need (the request timeout and the
//! stream's own end bound them). A request head larger than the limit, or
//! with more header lines than the limit, is answered `431` with a problem
//! document (hyper's own refusal would be a bare 431), and the connection
//! closed.
//!
//! While a request is answered, the watch also notices the client leaving
//! (a peek at the socket that finds its end; a client that shut only its
//! sending side has left too), and drops the request, which releases
//! whatever it was granted. hyper could notice too, but only by reading
//! into a fresh 8 KiB buffer per connection, which 10 000 waiting requests
//! would turn into 80 MiB; it is told not to (`half_close`).

mod activity;
mod connection;
mod observe;
mod service;
mod socket;
mod tls;

use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::HeaderValue;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceBuilder;

use crate::http::AppState;
use connection::Accepted;
pub use observe::{RequestLimits, X_INSTANCE_ID};
pub use tls::TlsSettings;

/// The bounds every connection is held to.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// A request head must arrive within this.
    pub header_timeout: Duration,
    /// A kept-alive connection with no request in flight closes after this.
    pub idle_timeout: Duration,
    /// The most bytes of a request head (request line and headers).
    pub max_head_bytes: usize,
}

/// What every request is held to and answered with, besides its route.
#[derive(Clone)]
pub struct RequestSettings {
    pub limits: RequestLimits,
    /// The instance's id, for `X-Instance-Id`.
    pub instance_id: HeaderValue,
    /// The largest request body, in bytes.
    pub body_limit: usize,
}

/// The application: the API's routes with the layer every request passes
/// through, the observer (id, span, metrics, request limits,
/// `X-Instance-Id`) and the body limit. One layer, added once: axum boxes
/// each layer's future per request, and a waiting request keeps it for as
/// long as it waits. The observer is outside the body limit, so a 413 is
/// counted too.
pub fn application(api: Router<AppState>, state: AppState, settings: RequestSettings) -> Router {
    api.layer(
        ServiceBuilder::new()
            .layer(observe::Observer {
                metrics: state.domains.metrics.clone(),
                limits: settings.limits,
                instance_id: settings.instance_id,
            })
            .layer(DefaultBodyLimit::max(settings.body_limit)),
    )
    // Turns every handler into its final service now, once, rather than
    // per connection or request.
    .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` is cancelled, then stops
/// accepting, lets every connection finish its request in flight (and
/// closes idle ones at once), and returns when all have closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    instance_id: &str,
    tls: Option<TlsSettings>,
    shutdown: CancellationToken,
) {
    let too_large = socket::TooLarge::new(limits.max_head_bytes, instance_id);
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                // Small responses on kept-alive connections: Nagle's delay
                // would add tens of milliseconds to each.
                let _ = stream.set_nodelay(true);
                if let Some(tls) = &tls {
                    connections.spawn(tls::serve(
                        stream,
                        peer,
                        router.clone(),
                        tls.clone(),
                        limits,
                        shutdown.clone(),
                    ));
                    continue;
                }
                let connection = Accepted {
                    router: router.clone(),
                    peer,
                    limits,
                    too_large: too_large.clone(),
                };
                connections.spawn(connection.serve(stream, shutdown.clone()));
            }
            // Out of file descriptors, say: let some connections close.
            Err(err) => {
                tracing::warn!(error = %err, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}
