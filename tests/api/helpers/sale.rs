//! The flash sale's helpers: a gateway with the admin token, a sale created or reset, purchases made, the sale read back.

use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

use super::{RedisServer, TestApp};

/// The admin token of the test gateways that run sales.
pub const ADMIN: &str = "adm";

impl TestApp {
    /// A gateway with the admin token ([`ADMIN`]) and the given extra flags.
    pub async fn spawn_sale(redis: &RedisServer, flags: &[&str]) -> Self {
        let mut all = vec!["--admin-token", ADMIN];
        all.extend_from_slice(flags);
        Self::spawn_with(redis, &all).await
    }

    /// Creates or resets sale `sku` (as the admin); the sale as answered.
    pub async fn reset_sale(&self, sku: &str, stock: u64, per_user_limit: u64) -> Value {
        let response = self
            .http
            .put(self.url(&format!("/seckill/{sku}")))
            .bearer_auth(ADMIN)
            .json(&json!({"stock": stock, "per_user_limit": per_user_limit}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "resetting {sku}");
        response.json().await.unwrap()
    }

    /// Creates or resets sale `sku` spread over `segments` slots (as the
    /// admin); the sale as answered.
    pub async fn reset_segmented_sale(
        &self,
        sku: &str,
        stock: u64,
        per_user_limit: u64,
        segments: u64,
    ) -> Value {
        let response = self
            .http
            .put(self.url(&format!("/seckill/{sku}")))
            .bearer_auth(ADMIN)
            .json(&json!({"stock": stock, "per_user_limit": per_user_limit, "segments": segments}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "resetting {sku}");
        response.json().await.unwrap()
    }

    /// `POST /seckill/{sku}/orders` for `user`, with an Idempotency-Key if given.
    pub async fn buy(&self, sku: &str, user: &str, quantity: u64, key: Option<&str>) -> Response {
        let mut request = self
            .http
            .post(self.url(&format!("/seckill/{sku}/orders")))
            .json(&json!({"user_id": user, "quantity": quantity}));
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send().await.unwrap()
    }

    /// [`buy`](Self::buy) that must create an order; the order.
    pub async fn bought(&self, sku: &str, user: &str, quantity: u64, key: Option<&str>) -> Value {
        let response = self.buy(sku, user, quantity, key).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        response.json().await.unwrap()
    }

    /// `GET /seckill/{sku}`, as JSON.
    pub async fn sale(&self, sku: &str) -> Value {
        self.get(&format!("/seckill/{sku}"))
            .await
            .json()
            .await
            .unwrap()
    }
}
