//! Flash-sale purchase attempts, each a new user and Idempotency-Key, with an optional buyer token signed here.

use std::io;
use std::rc::Rc;
use std::time::Instant;

use crate::http::{Http, JSON, Waits, expect, run_clients};
use crate::measure::{CpuClock, report_percentiles};

#[derive(clap::Args)]
pub(crate) struct Purchases {
    #[arg(long, default_value = "http://127.0.0.1:8090")]
    url: String,
    #[arg(long, default_value = "bench-sale")]
    sku: String,
    #[arg(long, default_value_t = 64)]
    clients: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The gateways' HS256 secret of buyer tokens: each purchase then
    /// carries a JWT for its user, signed here (its cost is counted in this
    /// process's CPU, not the gateway's).
    #[arg(long, env = "LOCKGATE_BUYER_JWT_SECRET", hide_env_values = true)]
    jwt_secret: Option<String>,
}

pub(crate) async fn buy(purchases: Purchases) -> io::Result<()> {
    let cpu = CpuClock::start();
    let started = Instant::now();
    let latencies: Waits = Rc::default();
    let (url, path) = (
        Rc::new(purchases.url),
        Rc::new(format!("/seckill/{}/orders", purchases.sku)),
    );
    let signing = Rc::new(
        purchases
            .jwt_secret
            .map(|secret| jsonwebtoken::EncodingKey::from_secret(secret.as_bytes())),
    );
    let done = run_clients(purchases.clients, purchases.seconds, |client, deadline| {
        let (url, path, latencies) = (url.clone(), path.clone(), latencies.clone());
        let signing = signing.clone();
        async move {
            let mut http = Http::connect(&url).await?;
            let mut done = 0;
            while Instant::now() < deadline {
                let user = format!("c{client}-{done}");
                let mut headers = format!("{JSON}Idempotency-Key: {user}\r\n");
                if let Some(key) = signing.as_ref() {
                    let token = buyer_token(key, &user)?;
                    headers.push_str(&format!("Authorization: Bearer {token}\r\n"));
                }
                let body = format!(r#"{{"user_id":"{user}","quantity":1}}"#);
                let asked = Instant::now();
                let (status, answer) = http.send("POST", &path, &headers, &body).await?;
                expect(status, 201, &answer)?;
                latencies
                    .borrow_mut()
                    .push(asked.elapsed().as_micros() as u64);
                done += 1;
            }
            Ok(done)
        }
    })
    .await?;
    report_percentiles(
        "purchases",
        "latency",
        done,
        started.elapsed(),
        done,
        cpu,
        &latencies.borrow(),
    );
    Ok(())
}

/// An HS256 buyer token for `user`, valid for an hour.
pub(crate) fn buyer_token(key: &jsonwebtoken::EncodingKey, user: &str) -> io::Result<String> {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(io::Error::other)?
        .as_secs()
        + 3600;
    let claims = serde_json::json!({ "sub": user, "exp": exp });
    jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, key).map_err(io::Error::other)
}
