//! Waiting requests parked on one held key, and the gateway's resident memory while they wait.

use std::io;
use std::rc::Rc;
use std::time::Duration;

use crate::http::{Http, JSON, expect, json_str};
use crate::measure::rss_kib;

#[derive(clap::Args)]
pub(crate) struct Waiters {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    #[arg(long, default_value_t = 10_000)]
    clients: usize,
    /// The gateway's process id, whose memory is read.
    #[arg(long)]
    pid: u32,
}

pub(crate) async fn park_waiters(waiters: Waiters) -> io::Result<()> {
    let mut holder = Http::connect(&waiters.url).await?;
    let idle_kib = rss_kib(waiters.pid)?;
    let (status, grant) = holder
        .send(
            "POST",
            "/locks",
            JSON,
            r#"{"key":"bench:waiters","ttl_ms":120000}"#,
        )
        .await?;
    expect(status, 201, &grant)?;
    let token = json_str(&grant, "token")
        .ok_or_else(|| io::Error::other("no token"))?
        .to_owned();
    let url = Rc::new(waiters.url.clone());
    let mut parked = Vec::with_capacity(waiters.clients);
    for _ in 0..waiters.clients {
        let url = url.clone();
        parked.push(tokio::task::spawn_local(async move {
            let mut http = Http::connect(&url).await?;
            let body = r#"{"key":"bench:waiters","ttl_ms":1000,"wait_ms":60000}"#;
            http.send("POST", "/locks", JSON, body)
                .await
                .map(|(status, _)| status)
        }));
        // Connecting 10 000 clients at once overflows the listen backlog.
        tokio::task::yield_now().await;
    }
    // Let every request reach the gateway and start waiting.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waiting_kib = rss_kib(waiters.pid)?;
    // A request that already ended was refused (or failed): it was not waiting.
    let ended_early = parked.iter().filter(|task| task.is_finished()).count();
    for task in &parked {
        task.abort();
    }
    let (status, body) = holder
        .send(
            "DELETE",
            "/locks/bench:waiters",
            &format!("Lock-Token: {token}\r\n"),
            "",
        )
        .await?;
    expect(status, 204, &body)?;
    println!(
        "{{\"mode\":\"waiters\",\"waiters\":{},\"ended_early\":{ended_early},\"rss_idle_kib\":{idle_kib},\"rss_waiting_kib\":{waiting_kib}}}",
        waiters.clients
    );
    Ok(())
}
