//! A raw HTTP/1.1 keep-alive client, one request at a time, with no JSON parser on the hot path; and the loop that runs many clients on one thread.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A keep-alive HTTP/1.1 connection that sends one request at a time.
pub(crate) struct Http {
    pub(crate) stream: TcpStream,
    pub(crate) host: String,
    buffer: Vec<u8>,
    /// The server said `Connection: close`: reconnect before the next request.
    closed: bool,
}

impl Http {
    pub(crate) async fn connect(url: &str) -> io::Result<Self> {
        let host = url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let stream = TcpStream::connect(&host).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            host,
            buffer: Vec::with_capacity(4096),
            closed: false,
        })
    }

    /// Sends a request and returns the status and the body.
    pub(crate) async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &str,
        body: &str,
    ) -> io::Result<(u16, String)> {
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n{headers}Content-Length: {}\r\n\r\n{body}",
            self.host,
            body.len()
        );
        if self.closed {
            self.stream = TcpStream::connect(&self.host).await?;
            self.stream.set_nodelay(true)?;
            self.closed = false;
        }
        self.stream.write_all(request.as_bytes()).await?;
        self.buffer.clear();
        let header_end = loop {
            if let Some(end) = find(&self.buffer, b"\r\n\r\n") {
                break end + 4;
            }
            self.read_more().await?;
        };
        let head = String::from_utf8_lossy(&self.buffer[..header_end]).to_ascii_lowercase();
        let status = head
            .get(9..12)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0);
        while self.buffer.len() < header_end + length {
            self.read_more().await?;
        }
        let body =
            String::from_utf8_lossy(&self.buffer[header_end..header_end + length]).into_owned();
        Ok((status, body))
    }

    pub(crate) async fn read_more(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 4096];
        let read = self.stream.read(&mut chunk).await?;
        if read == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.buffer.extend_from_slice(&chunk[..read]);
        Ok(())
    }
}

pub(crate) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// The string value of `"field":"..."` in a flat JSON body.
pub(crate) fn json_str<'a>(body: &'a str, field: &str) -> Option<&'a str> {
    let start = body.find(&format!("\"{field}\":\""))? + field.len() + 4;
    let end = start + body[start..].find('"')?;
    Some(&body[start..end])
}

pub(crate) const JSON: &str = "Content-Type: application/json\r\n";

pub(crate) fn expect(status: u16, wanted: u16, body: &str) -> io::Result<()> {
    if status == wanted {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "expected {wanted}, got {status}: {body}"
        )))
    }
}

/// Runs `clients` loops of `cycle` for `seconds`; returns cycles done.
pub(crate) async fn run_clients<F, Fut>(clients: usize, seconds: u64, cycle: F) -> io::Result<u64>
where
    F: Fn(usize, Instant) -> Fut,
    Fut: std::future::Future<Output = io::Result<u64>> + 'static,
{
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..clients)
        .map(|client| tokio::task::spawn_local(cycle(client, deadline)))
        .collect();
    let mut done = 0;
    for task in tasks {
        done += task.await.map_err(io::Error::other)??;
    }
    Ok(done)
}

/// Latencies (of waits or of requests), in microseconds.
pub(crate) type Waits = Rc<RefCell<Vec<u64>>>;

/// Standard base64 (etcd's JSON gateway takes keys so).
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
