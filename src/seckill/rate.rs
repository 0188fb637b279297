//! Admission by the rate limits: policies (GCRA, counted in Redis so they hold across instances) and the IETF `RateLimit` header fields they produce.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use super::inputs::UserId;
use crate::metrics::Metrics;
use crate::redis::BackendError;
use crate::redis::Redis;
use crate::redis::seckill as scripts;

/// A policy: `rate` requests per second on average, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RatePolicy {
    rate: u32,
    burst: u32,
}

impl RatePolicy {
    /// `None` when either number is zero: no limit.
    pub fn new(rate: u32, burst: u32) -> Option<Self> {
        (rate > 0 && burst > 0).then_some(Self { rate, burst })
    }

    /// The GCRA emission interval: one request's share of a second.
    pub fn interval_us(self) -> u64 {
        1_000_000 / u64::from(self.rate)
    }

    pub fn burst(self) -> u64 {
        u64::from(self.burst)
    }

    /// `RateLimit-Policy`: quota `q` (the burst) per window `w` (the seconds
    /// it takes to earn the whole burst back), per draft-ietf-httpapi-ratelimit-headers.
    pub fn header(self) -> String {
        let window = u64::from(self.burst).div_ceil(u64::from(self.rate)).max(1);
        format!("\"seckill\";q={};w={window}", self.burst)
    }
}

/// A rate-limit answer for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateDecision {
    pub policy: RatePolicy,
    pub allowed: bool,
    pub remaining: u64,
    pub retry_after: Duration,
    pub reset: Duration,
}

impl RateDecision {
    /// `RateLimit`: what remains (`r`) and the seconds until the quota is
    /// whole again (`t`), rounded up.
    pub fn header(&self) -> String {
        let reset = self.reset.as_millis().div_ceil(1000);
        format!("\"seckill\";r={};t={reset}", self.remaining)
    }
}

/// The purchase quotas of one instance: per user, and per client address
/// when configured, each a GCRA bucket in Redis.
#[derive(Clone)]
pub(super) struct RateLimits {
    redis: Redis,
    prefix: Arc<str>,
    per_user: Option<RatePolicy>,
    per_client: Option<RatePolicy>,
    metrics: Arc<Metrics>,
}

impl RateLimits {
    /// The limits of `policies`: per user, and per client address.
    pub(super) fn new(
        redis: Redis,
        prefix: &str,
        (per_user, per_client): (Option<RatePolicy>, Option<RatePolicy>),
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            redis,
            prefix: prefix.into(),
            per_user,
            per_client,
            metrics,
        }
    }

    /// Counts a request against the per-client and per-user quotas; the
    /// answer to send is the refusing one, else the per-user one.
    pub(super) async fn admit(
        &self,
        user: &UserId,
        client: Option<IpAddr>,
    ) -> Result<Option<RateDecision>, BackendError> {
        if let (Some(policy), Some(client)) = (self.per_client, client) {
            let decision = self.count(policy, &format!("client:{client}")).await?;
            if !decision.allowed {
                self.metrics.rate_limited("client");
                return Ok(Some(decision));
            }
        }
        let Some(policy) = self.per_user else {
            return Ok(None);
        };
        let decision = self.count(policy, &format!("user:{user}")).await?;
        if !decision.allowed {
            self.metrics.rate_limited("user");
        }
        Ok(Some(decision))
    }

    async fn count(&self, policy: RatePolicy, bucket: &str) -> Result<RateDecision, BackendError> {
        let mut conn = self.redis.connection().await?;
        // Hash-tagged by the whole bucket, so buckets spread over a cluster.
        let key = format!("{}rate:{{{bucket}}}", self.prefix);
        let reply =
            scripts::rate_limit(&mut conn, &key, policy.interval_us(), policy.burst()).await?;
        Ok(RateDecision {
            policy,
            allowed: reply.allowed,
            remaining: reply.remaining,
            retry_after: Duration::from_millis(reply.retry_after_ms),
            reset: Duration::from_millis(reply.reset_ms),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_header_names_the_quota_and_its_window() {
        let policy = RatePolicy::new(20, 40).unwrap();
        assert_eq!(policy.interval_us(), 50_000);
        assert_eq!(policy.header(), "\"seckill\";q=40;w=2");
        assert_eq!(RatePolicy::new(0, 40), None);
    }

    #[test]
    fn the_limit_header_rounds_the_reset_up() {
        let decision = RateDecision {
            policy: RatePolicy::new(20, 40).unwrap(),
            allowed: true,
            remaining: 39,
            retry_after: Duration::ZERO,
            reset: Duration::from_millis(50),
        };
        assert_eq!(decision.header(), "\"seckill\";r=39;t=1");
    }
}
