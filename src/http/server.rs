//! Serving the router over HTTP/1.1, one task per connection, each watched for the gateway's connection limits.
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
//! stream's own end bound them). A request head larger than the limit is
//! answered `431` with a problem document, however large it grows (hyper's
//! own refusal would be a bare 431), and the connection closed.
//!
//! While a request is answered, the watch also notices the client leaving
//! (a zero-byte peek at the socket), and drops the request, which releases
//! whatever it was granted. hyper could notice too, but only by reading
//! into a fresh 8 KiB buffer per connection, which 10 000 waiting requests
//! would turn into 80 MiB; it is told not to (`half_close`).

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use axum::routing::future::RouteFuture;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::Service;

use super::error::{ApiError, PROBLEM_JSON};

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

/// Serves `router` on `listener` until `shutdown` is cancelled, then stops
/// accepting, lets every connection finish its request in flight (and
/// closes idle ones at once), and returns when all have closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    instance_id: &str,
    shutdown: CancellationToken,
) {
    let too_large = Bytes::from(too_large_answer(limits.max_head_bytes, instance_id));
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
                let connection = Connection {
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

/// One accepted connection.
struct Connection {
    router: Router,
    peer: SocketAddr,
    limits: ConnectionLimits,
    too_large: Bytes,
}

/// hyper's side of one connection: the router served over the watched socket.
type Http1Connection = http1::Connection<TokioIo<WatchedIo>, ConnectionService>;

impl Connection {
    async fn serve(self, stream: TcpStream, shutdown: CancellationToken) {
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
                    Ending::Head | Ending::Gone => return,
                    Ending::Idle => {
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

/// What a connection is doing, as its watch sees it.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Reading a request head: since when, and how many bytes so far.
    Head { since: Instant, bytes: usize },
    /// A request is being answered.
    Busy,
    /// Kept alive between requests, since when.
    Idle { since: Instant },
}

/// Why a connection's watch ended.
enum Ending {
    /// A request head took longer than the header timeout.
    Head,
    /// Kept alive with no request for the idle timeout.
    Idle,
    /// The client closed the connection while its request was answered.
    Gone,
}

/// A connection's phase, and a signal when it changes.
struct Activity {
    phase: Mutex<Phase>,
    changed: Notify,
}

impl Activity {
    fn new() -> Self {
        Self {
            phase: Mutex::new(Phase::Head {
                since: Instant::now(),
                bytes: 0,
            }),
            changed: Notify::new(),
        }
    }

    fn phase(&self) -> MutexGuard<'_, Phase> {
        // Every change is one assignment: a poisoned phase is still whole.
        self.phase
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn set(&self, phase: Phase) {
        *self.phase() = phase;
        self.changed.notify_one();
    }

    /// `bytes` were read; returns the request head's size so far, if a
    /// head is being read.
    fn read(&self, bytes: usize) -> Option<usize> {
        let mut phase = self.phase();
        match *phase {
            Phase::Busy => None,
            Phase::Head {
                since,
                bytes: so_far,
            } => {
                *phase = Phase::Head {
                    since,
                    bytes: so_far + bytes,
                };
                Some(so_far + bytes)
            }
            // A new request's first bytes: its head's time starts now.
            Phase::Idle { .. } => {
                *phase = Phase::Head {
                    since: Instant::now(),
                    bytes,
                };
                drop(phase);
                self.changed.notify_one();
                Some(bytes)
            }
        }
    }

    /// Completes when the connection has been reading one head, or idle,
    /// for longer than its limit allows, or when the client leaves while a
    /// request is answered.
    async fn watch(&self, stream: &TcpStream, limits: ConnectionLimits) -> Ending {
        loop {
            // A change notified between reading the phase and waiting leaves
            // a permit, so it is not missed.
            let phase = *self.phase();
            match phase {
                Phase::Busy => tokio::select! {
                    gone = peer_closed_after(stream, PEEK_DELAY) => {
                        if gone {
                            return Ending::Gone;
                        }
                        // The next request's bytes came already: the end
                        // cannot be seen past them, so wait for this one to
                        // be answered.
                        self.changed.notified().await;
                    }
                    () = self.changed.notified() => {}
                },
                Phase::Head { since, .. } => tokio::select! {
                    () = tokio::time::sleep_until(since + limits.header_timeout) => return Ending::Head,
                    () = self.changed.notified() => {}
                },
                Phase::Idle { since } => tokio::select! {
                    () = tokio::time::sleep_until(since + limits.idle_timeout) => return Ending::Idle,
                    () = self.changed.notified() => {}
                },
            }
        }
    }
}

/// How long a request runs before its connection is watched for the
/// client leaving. Most requests are answered sooner, and never pay for the
/// look (a system call each); a client that leaves a waiting request is
/// noticed this much later.
const PEEK_DELAY: Duration = Duration::from_millis(20);

/// Completes, once `delay` has passed, when the socket has something to
/// read: true if that is its end (the client closed it, or reset it), false
/// if it is data.
async fn peer_closed_after(stream: &TcpStream, delay: Duration) -> bool {
    tokio::time::sleep(delay).await;
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    let peeked =
        std::future::poll_fn(|cx| stream.poll_peek(cx, &mut ReadBuf::uninit(&mut byte))).await;
    !matches!(peeked, Ok(read) if read > 0)
}

/// The connection's socket, its reads counted against the head's limits.
struct WatchedIo {
    /// Shared with the connection's watch, which peeks at it.
    stream: Arc<TcpStream>,
    activity: Arc<Activity>,
    max_head_bytes: usize,
    too_large: Bytes,
    /// The head was too large and answered: what the client still sends is
    /// read and dropped (so it can finish sending and read the answer),
    /// until it closes or the header timeout closes the connection.
    refused: bool,
}

impl AsyncRead for WatchedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.refused {
            return this.poll_discard(cx);
        }
        let before = buf.filled().len();
        loop {
            ready!(this.stream.poll_read_ready(cx))?;
            match this.stream.try_read_buf(buf) {
                Ok(_) => break,
                // A stale readiness: it is cleared, wait for the next.
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                Err(err) => return Poll::Ready(Err(err)),
            }
        }
        let read = buf.filled().len() - before;
        if read > 0
            && let Some(head) = this.activity.read(read)
            && head > this.max_head_bytes
        {
            // Answered here, where the bytes are counted; the answer fits
            // the empty send buffer of a connection still reading a head.
            let _ = this.stream.try_write(&this.too_large);
            this.refused = true;
            buf.set_filled(before);
            return this.poll_discard(cx);
        }
        Poll::Ready(Ok(()))
    }
}

impl WatchedIo {
    /// Drops whatever the client sends; hyper sees nothing until the end.
    fn poll_discard(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut scratch = [0u8; 1024];
        loop {
            ready!(self.stream.poll_read_ready(cx))?;
            match self.stream.try_read(&mut scratch) {
                Ok(0) => return Poll::Ready(Ok(())),
                Ok(_) => {}
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                Err(err) => return Poll::Ready(Err(err)),
            }
        }
    }
}

impl AsyncWrite for WatchedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let stream = &self.stream;
        poll_write_with(stream, cx, || stream.try_write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let stream = &self.stream;
        poll_write_with(stream, cx, || stream.try_write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // A socket buffers nothing of its own to flush.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let socket = socket2::SockRef::from(self.stream.as_ref());
        Poll::Ready(socket.shutdown(std::net::Shutdown::Write))
    }
}

/// Writes with `write` once the socket is writable.
fn poll_write_with(
    stream: &TcpStream,
    cx: &mut Context<'_>,
    mut write: impl FnMut() -> io::Result<usize>,
) -> Poll<io::Result<usize>> {
    loop {
        ready!(stream.poll_write_ready(cx))?;
        match write() {
            // A stale readiness: it is cleared, wait for the next.
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            written => return Poll::Ready(written),
        }
    }
}

/// The router, as hyper calls it for one connection's requests.
struct ConnectionService {
    router: Router,
    peer: SocketAddr,
    activity: Arc<Activity>,
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
struct ResponseFuture {
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

/// The whole `431` answer to a request head over the limit, as bytes on the
/// wire: written by the connection's reader, not by a handler.
fn too_large_answer(max_head_bytes: usize, instance_id: &str) -> Vec<u8> {
    let refusal = ApiError::HeadersTooLarge(max_head_bytes);
    let status = refusal.problem_type().info().status;
    let body = refusal.problem_json();
    let mut answer = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: {PROBLEM_JSON}\r\ncontent-length: {}\r\n\
         x-instance-id: {instance_id}\r\nconnection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len(),
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    answer
}
