//! The router as hyper calls it for one connection: each request marks the connection busy until its response body is written.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use axum::routing::future::RouteFuture;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::Instant;
use tower::Service;

use super::activity::{Activity, Phase};

/// The router, as hyper calls it for one connection's requests.
pub(super) struct ConnectionService {
    pub(super) router: Router,
    pub(super) peer: SocketAddr,
    pub(super) activity: Arc<Activity>,
}

impl hyper::service::Service<Request<Incoming>> for ConnectionService {
    type Response = Response<WatchedBody>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn call(&self, mut request: Request<Incoming>) -> ResponseFuture {
        self.activity.set(Phase::Busy);
        // For the client-address rate limit.
        request.extensions_mut().insert(ConnectInfo(self.peer));
        ResponseFuture {
            response: self.router.clone().call(request),
            activity: Some(self.activity.clone()),
        }
    }
}

/// A request's response on its way; the connection is busy until its body
/// has been written (or dropped).
pub(super) struct ResponseFuture {
    response: RouteFuture<Infallible>,
    activity: Option<Arc<Activity>>,
}

impl Future for ResponseFuture {
    type Output = Result<Response<WatchedBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let response = match ready!(Pin::new(&mut this.response).poll(cx)) {
            Ok(response) => response,
            Err(never) => match never {},
        };
        Poll::Ready(Ok(response.map(|body| WatchedBody {
            body,
            activity: this.activity.take(),
        })))
    }
}

impl Drop for ResponseFuture {
    fn drop(&mut self) {
        if let Some(activity) = self.activity.take() {
            activity.set(Phase::Idle {
                since: Instant::now(),
            });
        }
    }
}

/// A response body that marks its connection idle once written.
pub struct WatchedBody {
    body: Body,
    activity: Option<Arc<Activity>>,
}

impl http_body::Body for WatchedBody {
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

impl Drop for WatchedBody {
    fn drop(&mut self) {
        if let Some(activity) = self.activity.take() {
            activity.set(Phase::Idle {
                since: Instant::now(),
            });
        }
    }
}
