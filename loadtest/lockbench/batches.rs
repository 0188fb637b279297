//! Several locks at once: `POST /locks/batch` of N keys and their releases, beside taking the same N keys one request at a time; and the session a lock cycle may be taken in.

use std::io;
use std::rc::Rc;
use std::time::Instant;

use crate::http::{Http, JSON, expect, json_str, run_clients};
use crate::measure::{CpuClock, report};

#[derive(clap::Args)]
pub(crate) struct Batches {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    #[arg(long, default_value_t = 50)]
    clients: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Keys per batch, each client its own.
    #[arg(long, default_value_t = 10)]
    size: usize,
    /// Take the keys one `POST /locks` at a time instead of one batch.
    #[arg(long)]
    one_by_one: bool,
}

/// Batches of `size` distinct keys per client, each released key by key
/// once granted (a batch's locks are ordinary holds of its one token). A
/// cycle here is the whole set taken and given back.
pub(crate) async fn batches(load: Batches) -> io::Result<()> {
    let cpu = CpuClock::start();
    let started = Instant::now();
    let url = Rc::new(load.url);
    let (size, one_by_one) = (load.size, load.one_by_one);
    let done = run_clients(load.clients, load.seconds, |client, deadline| {
        let url = url.clone();
        async move {
            let mut http = Http::connect(&url).await?;
            let keys: Vec<String> = (0..size)
                .map(|i| format!("bench:batch:{client}:{i}"))
                .collect();
            let entries: Vec<String> = keys
                .iter()
                .map(|key| format!(r#"{{"key":"{key}"}}"#))
                .collect();
            let batch = format!(r#"{{"locks":[{}],"ttl_ms":30000}}"#, entries.join(","));
            let mut done = 0;
            while Instant::now() < deadline {
                let mut tokens = Vec::with_capacity(size);
                if one_by_one {
                    for key in &keys {
                        let body = format!(r#"{{"key":"{key}","ttl_ms":30000}}"#);
                        let (status, grant) = http.send("POST", "/locks", JSON, &body).await?;
                        expect(status, 201, &grant)?;
                        tokens.push(token_of(&grant)?);
                    }
                } else {
                    let (status, grant) = http.send("POST", "/locks/batch", JSON, &batch).await?;
                    expect(status, 201, &grant)?;
                    tokens.resize(size, token_of(&grant)?);
                }
                for (key, token) in keys.iter().zip(&tokens) {
                    let headers = format!("Lock-Token: {token}\r\n");
                    let (status, body) = http
                        .send("DELETE", &format!("/locks/{key}"), &headers, "")
                        .await?;
                    expect(status, 204, &body)?;
                }
                done += 1;
            }
            Ok(done)
        }
    })
    .await?;
    let requests_per_cycle = if one_by_one { 2 * size } else { 1 + size } as u64;
    let mode = if one_by_one { "one-by-one" } else { "batch" };
    let extra = [("size", size.to_string())];
    report(
        mode,
        done,
        started.elapsed(),
        done * requests_per_cycle,
        cpu,
        &extra,
    );
    Ok(())
}

fn token_of(grant: &str) -> io::Result<String> {
    json_str(grant, "token")
        .map(str::to_owned)
        .ok_or_else(|| io::Error::other("no token"))
}

/// Opens a session on this connection's gateway (long enough for any run:
/// no keepalive is sent) and returns its id.
pub(crate) async fn open_session(http: &mut Http) -> io::Result<String> {
    let (status, body) = http
        .send("POST", "/sessions", JSON, r#"{"ttl_ms":600000}"#)
        .await?;
    expect(status, 201, &body)?;
    json_str(&body, "id")
        .map(str::to_owned)
        .ok_or_else(|| io::Error::other("no session id"))
}
