//! systemd's service notifications (`sd_notify`): `READY=1` once Redis answers and the function library is loaded, `STOPPING=1` at shutdown, `WATCHDOG=1` while the runtime turns; nothing at all without `NOTIFY_SOCKET`.
//!
//! The protocol is one datagram per message on the Unix socket systemd
//! names (a path, or `@name` in the abstract namespace): a few lines of
//! text, no library needed. The watchdog's keepalive comes from a task on
//! the runtime, so a runtime that stops turning (every worker blocked)
//! is what systemd notices and restarts.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::redis::Redis;

/// Where systemd listens, and how often it wants to hear from us.
#[derive(Debug, Clone)]
pub struct Notifier {
    socket: Option<String>,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// As the environment says: `NOTIFY_SOCKET`, and `WATCHDOG_USEC`
    /// (when `WATCHDOG_PID` is unset or names this process).
    pub fn from_env() -> Self {
        let socket = std::env::var("NOTIFY_SOCKET")
            .ok()
            .filter(|socket| !socket.is_empty());
        let for_us = std::env::var("WATCHDOG_PID")
            .map_or(true, |pid| pid.trim() == std::process::id().to_string());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|usec| usec.trim().parse::<u64>().ok())
            .filter(|usec| *usec > 0 && for_us)
            .map(Duration::from_micros);
        Self { socket, watchdog }
    }

    /// Sends `message`; a failure is logged, never fatal (the service runs
    /// whether or not its manager hears).
    pub fn notify(&self, message: &str) {
        let Some(socket) = &self.socket else {
            return;
        };
        if let Err(err) = send(socket, message) {
            tracing::warn!(error = %err, socket = %socket, "cannot notify the service manager");
        }
    }

    /// `READY=1` once Redis answers and the function library is loaded
    /// (tried again every half second until then), then the watchdog's
    /// keepalive every half `WATCHDOG_USEC`, until `stopping`.
    pub async fn run(self, redis: Redis, addr: String, stopping: CancellationToken) {
        if self.socket.is_none() {
            return;
        }
        loop {
            if redis.load_scripts().await.is_ok() {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
                () = stopping.cancelled() => return,
            }
        }
        self.notify(&format!("READY=1\nSTATUS=serving on {addr}"));
        let Some(every) = self.watchdog.map(|watchdog| watchdog / 2) else {
            return;
        };
        loop {
            self.notify("WATCHDOG=1");
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = stopping.cancelled() => return,
            }
        }
    }
}

/// One datagram to `socket`: a path, or `@name` in the abstract namespace.
fn send(socket: &str, message: &str) -> io::Result<()> {
    let datagram = UnixDatagram::unbound()?;
    if let Some(name) = socket.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        datagram.send_to_addr(message.as_bytes(), &addr)?;
    } else {
        datagram.send_to(message.as_bytes(), socket)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reaches_a_socket_by_path_and_by_abstract_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listening = UnixDatagram::bind(&path).unwrap();
        send(path.to_str().unwrap(), "READY=1").unwrap();
        let mut buffer = [0; 64];
        let read = listening.recv(&mut buffer).unwrap();
        assert_eq!(&buffer[..read], b"READY=1");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("lockgate-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abstract_socket = UnixDatagram::bind_addr(&addr).unwrap();
        send(&format!("@{name}"), "STOPPING=1").unwrap();
        let read = abstract_socket.recv(&mut buffer).unwrap();
        assert_eq!(&buffer[..read], b"STOPPING=1");
    }
}
