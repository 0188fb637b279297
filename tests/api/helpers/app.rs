//! The gateway served in-process on port 0, with typed request helpers.

use std::net::SocketAddr;

use clap::Parser;
use lockgate::app::Gateway;
use lockgate::config::Config;
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{RedisServer, free_port};

/// One gateway instance served in-process on port 0.
pub struct TestApp {
    pub addr: SocketAddr,
    pub instance_id: String,
    pub http: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestApp {
    /// A gateway on `redis` with the default settings.
    pub async fn spawn(redis: &RedisServer) -> Self {
        Self::spawn_with(redis, &[]).await
    }

    /// A gateway on `redis` with extra `serve` flags.
    pub async fn spawn_with(redis: &RedisServer, flags: &[&str]) -> Self {
        Self::spawn_reaching(redis.gateway_flags(), flags).await
    }

    /// A gateway reaching Redis as `redis_flags` say (a Sentinel URL, say),
    /// with extra `serve` flags.
    pub async fn spawn_reaching(redis_flags: Vec<String>, flags: &[&str]) -> Self {
        init_test_logs();
        // Tests with many waiters hold both ends of each connection here.
        let _ = rlimit::increase_nofile_limit(u64::MAX);
        let instance_id = format!("test-{}", free_port());
        let mut args = vec![
            "lockgate".to_owned(),
            "--listen".to_owned(),
            "127.0.0.1:0".to_owned(),
            "--instance-id".to_owned(),
            instance_id.clone(),
        ];
        args.extend(redis_flags);
        args.extend(flags.iter().map(|flag| (*flag).to_owned()));
        let config = Config::try_parse_from(args).expect("valid test flags");
        let gateway = Gateway::bind(&config).await.expect("the gateway starts");
        let addr = gateway.local_addr();
        let (shutdown, stop) = oneshot::channel::<()>();
        let server = tokio::spawn(gateway.serve(async move {
            let _ = stop.await;
        }));
        Self {
            addr,
            instance_id,
            http: reqwest::Client::new(),
            shutdown: Some(shutdown),
            server: Some(server),
        }
    }

    /// Stops the gateway and waits until it has.
    pub async fn stop(mut self) {
        self.shutdown_now().await;
    }

    async fn shutdown_now(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(server) = self.server.take() {
            server
                .await
                .expect("the server task ends")
                .expect("the server ends cleanly");
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Response {
        self.http
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .expect("request sent")
    }

    /// `POST /locks` with the given fields.
    pub async fn acquire(&self, body: Value) -> Response {
        self.post_json("/locks", &body).await
    }

    /// Takes `key` for a new owner and returns the grant; panics otherwise.
    pub async fn take(&self, key: &str, ttl_ms: u64) -> Grant {
        let response = self.acquire(json!({"key": key, "ttl_ms": ttl_ms})).await;
        assert_eq!(response.status(), StatusCode::CREATED, "taking {key}");
        Grant::from(response.json::<Value>().await.expect("grant JSON"))
    }

    /// `POST /locks` asking for a streamed lock (`Accept: text/event-stream`).
    pub async fn stream(&self, body: Value) -> Response {
        self.stream_from("/locks", body).await
    }

    /// `POST /locks/batch` asking for a streamed batch.
    pub async fn stream_batch(&self, body: Value) -> Response {
        self.stream_from("/locks/batch", body).await
    }

    async fn stream_from(&self, path: &str, body: Value) -> Response {
        self.http
            .post(self.url(path))
            .header("Accept", "text/event-stream")
            .json(&body)
            .send()
            .await
            .expect("request sent")
    }

    pub async fn release(&self, key: &str, token: &str) -> Response {
        self.http
            .delete(self.url(&format!("/locks/{key}")))
            .header("Lock-Token", token)
            .send()
            .await
            .expect("request sent")
    }

    pub async fn extend(&self, key: &str, token: &str, ttl_ms: u64) -> Response {
        self.http
            .put(self.url(&format!("/locks/{key}/ttl")))
            .json(&json!({"token": token, "ttl_ms": ttl_ms}))
            .send()
            .await
            .expect("request sent")
    }

    /// Every order of sale `sku`, oldest first, read a page at a time (as
    /// the admin, `adm`, when buyer tokens are checked).
    pub async fn orders(&self, sku: &str) -> Vec<Value> {
        let mut orders = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut request = self
                .http
                .get(self.url(&format!("/seckill/{sku}/orders")))
                .query(&[("limit", "1000")])
                .bearer_auth("adm");
            if let Some(cursor) = &cursor {
                request = request.query(&[("cursor", cursor)]);
            }
            let page: Value = request.send().await.unwrap().json().await.unwrap();
            orders.extend(page["orders"].as_array().expect("a page of orders").clone());
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => return orders,
            }
        }
    }

    pub async fn get(&self, path: &str) -> Response {
        self.http
            .get(self.url(path))
            .send()
            .await
            .expect("request sent")
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

/// The useful fields of a `201` from `POST /locks`.
#[derive(Debug, Clone)]
pub struct Grant {
    pub token: String,
    pub fencing_token: u64,
    pub holds: u64,
}

impl From<Value> for Grant {
    fn from(body: Value) -> Self {
        Self {
            token: body["token"].as_str().expect("token").to_owned(),
            fencing_token: body["fencing_token"].as_u64().expect("fencing_token"),
            holds: body["holds"].as_u64().expect("holds"),
        }
    }
}

/// Gateway logs in tests only when `TEST_LOG` is set.
fn init_test_logs() {
    if std::env::var_os("TEST_LOG").is_some() {
        lockgate::telemetry::init(lockgate::config::LogFormat::Text, None).shutdown();
    }
}
