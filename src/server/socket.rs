//! The connection's socket as hyper reads it: each request head's bytes and lines counted against the limits, and the `431` answered here.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use super::activity::Activity;
use crate::http::{ApiError, PROBLEM_JSON};

/// The connection's socket, its reads counted against the head's limits.
pub(super) struct WatchedIo {
    /// Shared with the connection's watch, which peeks at it.
    pub(super) stream: Arc<TcpStream>,
    pub(super) activity: Arc<Activity>,
    pub(super) max_head_bytes: usize,
    /// The `431` answers: to a head of too many bytes, and of too many lines.
    pub(super) too_large: TooLarge,
    /// The head was too large and answered: what the client still sends is
    /// read and dropped (so it can finish sending and read the answer),
    /// until it closes or the header timeout closes the connection.
    pub(super) refused: bool,
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
            match read_draining(&this.stream, buf) {
                Ok(()) => break,
                // A stale readiness: it is cleared, wait for the next.
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                Err(err) => return Poll::Ready(Err(err)),
            }
        }
        let chunk = &buf.filled()[before..];
        let refusal = match this.activity.read(chunk, MAX_HEADERS) {
            Some(head) if head.bytes > this.max_head_bytes => Some(&this.too_large.bytes),
            Some(head) if head.too_many_headers => Some(&this.too_large.lines),
            _ => None,
        };
        if let Some(answer) = refusal {
            // Answered here, where the bytes are counted; the answer fits
            // the empty send buffer of a connection still reading a head.
            let _ = this.stream.try_write(answer);
            this.refused = true;
            buf.set_filled(before);
            return this.poll_discard(cx);
        }
        Poll::Ready(Ok(()))
    }
}

/// Reads what the socket has into `buf`, as tokio's own `TcpStream` reads:
/// a read that fills less than `buf` had room for has drained the socket,
/// so its readiness is cleared then. Without that, the next read (hyper's,
/// for the next request's head once this one is answered, or the
/// connection's watch's peek) is a system call that finds nothing
/// (`EAGAIN`): most of a call per request under load. The clearing is `try_io`'s, which only clears the readiness
/// the read began with, so data that arrived meanwhile still wakes the
/// reader.
fn read_draining(stream: &TcpStream, buf: &mut ReadBuf<'_>) -> io::Result<()> {
    let room = buf.remaining();
    let mut read = None;
    let outcome = stream.try_io(Interest::READABLE, || {
        let count = stream.try_read_buf(buf)?;
        read = Some(count);
        if count > 0 && count < room {
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(())
        }
    });
    match (read, outcome) {
        (Some(_), _) => Ok(()),
        (None, outcome) => outcome,
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

/// The most header lines a request may have: hyper's own limit, which it
/// enforces with a bare `431`; counted here first, so the answer is the
/// gateway's problem document as for too many bytes.
const MAX_HEADERS: usize = 100;

/// The whole `431` answers to a request head over a limit, as bytes on the
/// wire: written by the connection's reader, not by a handler.
#[derive(Clone)]
pub(super) struct TooLarge {
    bytes: Bytes,
    lines: Bytes,
}

impl TooLarge {
    pub(super) fn new(max_head_bytes: usize, instance_id: &str) -> Self {
        Self {
            bytes: answer(ApiError::HeadersTooLarge(max_head_bytes), instance_id),
            lines: answer(ApiError::TooManyHeaders(MAX_HEADERS), instance_id),
        }
    }
}

fn answer(refusal: ApiError, instance_id: &str) -> Bytes {
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
    Bytes::from(answer)
}
