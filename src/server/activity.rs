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
    /// Reading a request head: since when, and how many bytes so far.
    Head { since: Instant, bytes: usize },
    /// A request is being answered.
    Busy,
    /// Kept alive between requests, since when.
    Idle { since: Instant },
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
                bytes: 0,
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

    /// `bytes` were read; returns the request head's size so far, if a
    /// head is being read.
    pub(super) fn read(&self, bytes: usize) -> Option<usize> {
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
    pub(super) async fn watch(&self, stream: &TcpStream, limits: ConnectionLimits) -> Closing {
        loop {
            // A change notified between reading the phase and waiting leaves
            // a permit, so it is not missed.
            let phase = *self.phase();
            match phase {
                Phase::Busy => tokio::select! {
                    gone = peer_closed_after(stream, PEEK_DELAY) => {
                        if gone {
                            return Closing::Gone;
                        }
                        // The next request's bytes came already: the end
                        // cannot be seen past them, so wait for this one to
                        // be answered.
                        self.changed.notified().await;
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
