//! What one connection is doing (reading a head, answering, kept alive), and the watch that closes it when a limit runs out or its client leaves.

use std::sync::Mutex;
use std::sync::MutexGuard;
use std::time::Duration;

use tokio::io::ReadBuf;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::ConnectionLimits;
use crate::sync::lock;

/// What a connection is doing, as its watch sees it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Phase {
    /// Reading a request head: since when, and what of it so far.
    Head { since: Instant, head: Head },
    /// A request is being answered.
    Busy,
    /// Kept alive between requests, since when.
    Idle { since: Instant },
}

/// A request head as far as it has been read: its bytes, and its lines.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Head {
    pub(super) bytes: usize,
    /// Lines ended so far: the request line, then one per header.
    lines: usize,
    /// The current line has had nothing but `\r` yet.
    line_empty: bool,
    /// The blank line that ends the head has been read: what follows is
    /// the body (or the next request), whose lines are not the head's.
    complete: bool,
    /// A header line began past the most headers allowed.
    pub(super) too_many_headers: bool,
}

impl Head {
    /// Counts `chunk`, read after what was counted before.
    fn read(&mut self, chunk: &[u8], max_headers: usize) {
        self.bytes += chunk.len();
        for &byte in chunk {
            if self.complete {
                return;
            }
            match byte {
                b'\n' if self.line_empty && self.lines > 0 => self.complete = true,
                b'\n' => {
                    self.lines += 1;
                    self.line_empty = true;
                }
                b'\r' => {}
                _ => {
                    // The request line and `max_headers` headers have ended,
                    // and yet another line begins.
                    if self.line_empty && self.lines > max_headers {
                        self.too_many_headers = true;
                    }
                    self.line_empty = false;
                }
            }
        }
    }
}

/// Why a connection's watch ended.
pub(super) enum Closing {
    /// A request head took longer than the header timeout.
    Head,
    /// Kept alive with no request for the idle timeout.
    Idle,
    /// The client closed the connection while its request was answered.
    Gone,
}

/// A connection's phase, and a signal when it changes.
pub(super) struct Activity {
    phase: Mutex<Phase>,
    changed: Notify,
}

impl Activity {
    pub(super) fn new() -> Self {
        Self {
            phase: Mutex::new(Phase::Head {
                since: Instant::now(),
                head: Head::default(),
            }),
            changed: Notify::new(),
        }
    }

    fn phase(&self) -> MutexGuard<'_, Phase> {
        lock(&self.phase)
    }

    pub(super) fn set(&self, phase: Phase) {
        *self.phase() = phase;
        self.changed.notify_one();
    }

    /// `chunk` was read; returns the request head as far as it has been
    /// read, if a head is being read (a request being answered reads its
    /// body, which is not counted).
    pub(super) fn read(&self, chunk: &[u8], max_headers: usize) -> Option<Head> {
        let mut phase = self.phase();
        match &mut *phase {
            Phase::Busy => None,
            Phase::Head { head, .. } => {
                head.read(chunk, max_headers);
                Some(*head)
            }
            // A new request's first bytes: its head's time starts now.
            Phase::Idle { .. } => {
                let mut head = Head::default();
                head.read(chunk, max_headers);
                *phase = Phase::Head {
                    since: Instant::now(),
                    head,
                };
                drop(phase);
                self.changed.notify_one();
                Some(head)
            }
        }
    }

    /// Completes when the connection has been reading one head, or idle,
    /// for longer than its limit allows, or when the client leaves while a
    /// request is answered.
    pub(super) async fn watch(&self, stream: &TcpStream, limits: ConnectionLimits) -> Closing {
        loop {
            // A change notified between reading the phase and waiting leaves
            // a permit, so it is not missed.
            let phase = *self.phase();
            match phase {
                Phase::Busy => tokio::select! {
                    gone = peer_closed(stream) => {
                        // The client's end, even of its side only, is its
                        // leaving (as hyper has it by default). Bytes may
                        // be the request's own body, or the next request:
                        // looked at again after `LOOK_AGAIN`, by when a
                        // body has been read.
                        if gone {
                            return Closing::Gone;
                        }
                        tokio::select! {
                            () = tokio::time::sleep(LOOK_AGAIN) => {}
                            () = self.changed.notified() => {}
                        }
                    }
                    () = self.changed.notified() => {}
                },
                Phase::Head { since, .. } => tokio::select! {
                    () = tokio::time::sleep_until(since + limits.header_timeout) => return Closing::Head,
                    () = self.changed.notified() => {}
                },
                Phase::Idle { since } => tokio::select! {
                    () = tokio::time::sleep_until(since + limits.idle_timeout) => return Closing::Idle,
                    () = self.changed.notified() => {}
                },
            }
        }
    }
}

/// How long after more bytes showed up a request being answered is looked
/// at again.
const LOOK_AGAIN: Duration = Duration::from_millis(20);

/// Completes when the socket has something to read: true if that is its
/// end (the client closed it, or reset it), false if it is data. A request
/// read whole left the socket's readiness cleared (see
/// `socket::read_draining`), so this waits for the client's next bytes, or
/// its leaving, without a system call of its own.
async fn peer_closed(stream: &TcpStream) -> bool {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    let peeked =
        std::future::poll_fn(|cx| stream.poll_peek(cx, &mut ReadBuf::uninit(&mut byte))).await;
    !matches!(peeked, Ok(read) if read > 0)
}
