//! One accepted connection: served by hyper over the watched socket, and watched for a slow head, an idle spell, or its client leaving.

use std::net::SocketAddr;
use std::sync::Arc;

use super::socket::TooLarge;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::ConnectionLimits;
use super::activity::{Activity, Closing};
use super::service::ConnectionService;
use super::socket::WatchedIo;

/// One accepted connection.
pub(super) struct Accepted {
    pub(super) router: Router,
    pub(super) peer: SocketAddr,
    pub(super) limits: ConnectionLimits,
    pub(super) too_large: TooLarge,
}

/// hyper's side of one connection: the router served over the watched socket.
type Http1Connection = http1::Connection<TokioIo<WatchedIo>, ConnectionService>;

impl Accepted {
    pub(super) async fn serve(self, stream: TcpStream, shutdown: CancellationToken) {
        let (peer, limits) = (self.peer, self.limits);
        let stream = Arc::new(stream);
        let activity = Arc::new(Activity::new());
        // Built outside this future: it lives as long as the connection (a
        // waiting request's, too), and only what it holds across its awaits
        // should count.
        let connection = self.http1(stream.clone(), activity.clone());
        tokio::pin!(connection);
        let mut closing = false;
        loop {
            tokio::select! {
                served = connection.as_mut() => {
                    if let Err(err) = served {
                        tracing::debug!(error = %err, %peer, "connection ended");
                    }
                    return;
                }
                ended = activity.watch(&stream, limits), if !closing => match ended {
                    // Half a request head, or a client gone: nothing is
                    // owed, close now (a request in flight is dropped).
                    Closing::Head | Closing::Gone => return,
                    Closing::Idle => {
                        connection.as_mut().graceful_shutdown();
                        closing = true;
                    }
                },
                () = shutdown.cancelled(), if !closing => {
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
        }
    }

    fn http1(self, stream: Arc<TcpStream>, activity: Arc<Activity>) -> Http1Connection {
        let io = WatchedIo {
            stream,
            activity: activity.clone(),
            max_head_bytes: self.limits.max_head_bytes,
            too_large: self.too_large,
            refused: false,
        };
        let service = ConnectionService {
            router: self.router,
            peer: self.peer,
            activity,
        };
        let mut builder = http1::Builder::new();
        // hyper's own limit stays above ours, so ours answers (with a
        // problem document) first.
        builder
            .max_buf_size(self.limits.max_head_bytes.max(8192) + 8192)
            .header_read_timeout(None)
            .half_close(true);
        builder.serve_connection(TokioIo::new(io), service)
    }
}
