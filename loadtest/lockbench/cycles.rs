//! Uncontended lock cycles: through the gateway, and through etcd's HTTP lock API.

use std::io;
use std::rc::Rc;
use std::time::Instant;

use crate::batches::open_session;
use crate::http::{Http, JSON, base64, expect, json_str, run_clients};
use crate::measure::{CpuClock, report};

#[derive(clap::Args)]
pub(crate) struct Load {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    #[arg(long, default_value_t = 50)]
    clients: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Take every lock in a session, one per client (the gateway only).
    #[arg(long)]
    session: bool,
}

pub(crate) async fn cycles(load: Load) -> io::Result<()> {
    let cpu = CpuClock::start();
    let started = Instant::now();
    let url = Rc::new(load.url);
    let in_session = load.session;
    let done = run_clients(load.clients, load.seconds, |client, deadline| {
        let url = url.clone();
        async move {
            let mut http = Http::connect(&url).await?;
            let key = format!("bench:cycle:{client}");
            let session = if in_session {
                Some(open_session(&mut http).await?)
            } else {
                None
            };
            let body = match &session {
                Some(id) => format!(r#"{{"key":"{key}","ttl_ms":30000,"session":"{id}"}}"#),
                None => format!(r#"{{"key":"{key}","ttl_ms":30000}}"#),
            };
            let mut done = 0;
            while Instant::now() < deadline {
                gateway_cycle(&mut http, &key, &body).await?;
                done += 1;
            }
            Ok(done)
        }
    })
    .await?;
    let mode = if in_session {
        "session-cycles"
    } else {
        "cycles"
    };
    report::<&str>(mode, done, started.elapsed(), done * 2, cpu, &[]);
    Ok(())
}

pub(crate) async fn etcd(load: Load) -> io::Result<()> {
    let cpu = CpuClock::start();
    let started = Instant::now();
    let url = Rc::new(load.url);
    let done = run_clients(load.clients, load.seconds, |client, deadline| {
        let url = url.clone();
        async move {
            let mut http = Http::connect(&url).await?;
            let (status, body) = http
                .send("POST", "/v3/lease/grant", JSON, r#"{"TTL":60}"#)
                .await?;
            expect(status, 200, &body)?;
            let lease = json_str(&body, "ID")
                .ok_or_else(|| io::Error::other("no lease"))?
                .to_owned();
            let name = base64(format!("bench:etcd:{client}").as_bytes());
            let lock = format!(r#"{{"name":"{name}","lease":"{lease}"}}"#);
            let mut done = 0;
            while Instant::now() < deadline {
                let (status, body) = http.send("POST", "/v3/lock/lock", JSON, &lock).await?;
                expect(status, 200, &body)?;
                let key = json_str(&body, "key").ok_or_else(|| io::Error::other("no key"))?;
                let unlock = format!(r#"{{"key":"{key}"}}"#);
                let (status, body) = http.send("POST", "/v3/lock/unlock", JSON, &unlock).await?;
                expect(status, 200, &body)?;
                done += 1;
            }
            Ok(done)
        }
    })
    .await?;
    report::<&str>("etcd", done, started.elapsed(), done * 2, cpu, &[]);
    Ok(())
}

async fn gateway_cycle(http: &mut Http, key: &str, acquire: &str) -> io::Result<()> {
    let (status, body) = http.send("POST", "/locks", JSON, acquire).await?;
    expect(status, 201, &body)?;
    let token = json_str(&body, "token").ok_or_else(|| io::Error::other("no token"))?;
    let (status, body) = http
        .send(
            "DELETE",
            &format!("/locks/{key}"),
            &format!("Lock-Token: {token}\r\n"),
            "",
        )
        .await?;
    expect(status, 204, &body)
}
