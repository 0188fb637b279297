//! Streamed locks held at once: their renewals, and the gateway's CPU and memory while it renews them.

use std::io;
use std::rc::Rc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use std::time::{Duration, Instant};

use crate::http::{Http, JSON};
use crate::measure::{process_cpu_of, rss_kib};

#[derive(clap::Args)]
pub(crate) struct StreamedLocks {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    #[arg(long, default_value_t = 1_000)]
    clients: usize,
    #[arg(long, default_value_t = 3_000)]
    ttl_ms: u64,
    /// How long every lock is held once all are, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The gateway's process id, whose CPU time and memory are read.
    #[arg(long)]
    pid: u32,
}

/// What the streamed locks' clients saw, all together.
#[derive(Default)]
pub(crate) struct Seen {
    renewed: std::cell::Cell<u64>,
    lost: std::cell::Cell<u64>,
}

pub(crate) async fn hold_streams(streams: StreamedLocks) -> io::Result<()> {
    let idle_kib = rss_kib(streams.pid)?;
    let url = Rc::new(streams.url.clone());
    let holding = Rc::new(std::cell::Cell::new(true));
    let counted = Rc::new(std::cell::Cell::new(false));
    let seen = Rc::new(Seen::default());
    let mut clients = Vec::with_capacity(streams.clients);
    for client in 0..streams.clients {
        let (url, holding, counted, seen) =
            (url.clone(), holding.clone(), counted.clone(), seen.clone());
        let ttl_ms = streams.ttl_ms;
        clients.push(tokio::task::spawn_local(async move {
            let mut http = Http::connect(&url).await?;
            let body = format!(r#"{{"key":"bench:stream:{client}","ttl_ms":{ttl_ms}}}"#);
            let request = format!(
                "POST /locks HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n{JSON}Content-Length: {}\r\n\r\n{body}",
                http.host,
                body.len()
            );
            http.stream.write_all(request.as_bytes()).await?;
            // Each event is one chunk of the response: counting the event
            // lines in the raw bytes is enough (a short tail is kept so a
            // line split across reads is still seen).
            let mut tail = Vec::new();
            let mut chunk = [0u8; 4096];
            while holding.get() {
                let read = http.stream.read(&mut chunk).await?;
                if read == 0 {
                    return Err(io::Error::other("the stream ended"));
                }
                tail.extend_from_slice(&chunk[..read]);
                let renewed = count(&tail, b"event: renewed");
                let lost = count(&tail, b"event: lost");
                if counted.get() {
                    seen.renewed.set(seen.renewed.get() + renewed);
                }
                seen.lost.set(seen.lost.get() + lost);
                let keep = tail.len().min(16);
                tail.drain(..tail.len() - keep);
                if renewed + lost > 0 {
                    // What was counted must not be counted again.
                    tail.clear();
                }
            }
            Ok::<_, io::Error>(())
        }));
        // Connecting thousands of clients at once overflows the listen backlog.
        tokio::task::yield_now().await;
    }
    // Every stream granted and renewed at least once before counting.
    tokio::time::sleep(Duration::from_millis(streams.ttl_ms + 1_000)).await;
    let ended_early = clients.iter().filter(|task| task.is_finished()).count();
    let (cpu_before, started) = (process_cpu_of(streams.pid)?, Instant::now());
    counted.set(true);
    tokio::time::sleep(Duration::from_secs(streams.seconds)).await;
    counted.set(false);
    let (cpu, held_for) = (process_cpu_of(streams.pid)? - cpu_before, started.elapsed());
    let held_kib = rss_kib(streams.pid)?;
    holding.set(false);
    for client in clients {
        // Closing the streams releases the locks.
        client.abort();
    }
    let expected =
        streams.clients as f64 * held_for.as_secs_f64() / (streams.ttl_ms as f64 / 3000.0);
    println!(
        "{{\"mode\":\"streams\",\"streams\":{},\"ended_early\":{ended_early},\"ttl_ms\":{},\"held_s\":{:.1},\
\"renewals_seen\":{},\"renewals_expected\":{expected:.0},\"lost\":{},\"gateway_cpu_percent\":{:.1},\
\"rss_idle_kib\":{idle_kib},\"rss_held_kib\":{held_kib}}}",
        streams.clients,
        streams.ttl_ms,
        held_for.as_secs_f64(),
        seen.renewed.get(),
        seen.lost.get(),
        cpu.as_secs_f64() * 100.0 / held_for.as_secs_f64(),
    );
    Ok(())
}

pub(crate) fn count(haystack: &[u8], needle: &[u8]) -> u64 {
    haystack
        .windows(needle.len())
        .filter(|window| *window == needle)
        .count() as u64
}
