//! Start-up and shutdown: build the state from the config, bind, serve until the shutdown signal.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::HeaderValue;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::http::{
    self, AdminToken, ApiKeys, AppState, BuyerKey, BuyerTokens, ConnectionLimits, StreamKeepAlive,
    TrustedProxies,
};
use crate::locks::{Locks, Streams, Waiting};
use crate::metrics::Metrics;
use crate::redis::pubsub::Subscriber;
use crate::redis::{BackendError, Redis};
use crate::seckill::Sales;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
    #[error("cannot use the Redis URL: {0}")]
    RedisUrl(redis::RedisError),
    #[error("Redis refused a Lua script: {0}")]
    Script(BackendError),
    #[error("the instance id {0:?} cannot be sent in an HTTP header")]
    InstanceId(String),
    #[error("{0}")]
    BuyerKey(String),
}

/// A bound, ready-to-serve gateway instance.
pub struct Gateway {
    listener: TcpListener,
    router: Router,
    redis: Redis,
    subscriber: Subscriber,
    waiting: Waiting,
    streams: Streams,
    connection_limits: ConnectionLimits,
    drain_timeout: Duration,
    addr: SocketAddr,
    instance_id: String,
}

impl Gateway {
    /// Connects the pool, loads the scripts, binds the listener and builds the
    /// routes. Redis being down is not fatal (requests answer 503 until it is
    /// back); a script Redis refuses to compile is.
    pub async fn bind(config: &Config) -> Result<Self, StartError> {
        let metrics = Arc::new(Metrics::default());
        let redis =
            Redis::new(&config.redis_settings(), metrics.clone()).map_err(StartError::RedisUrl)?;
        match redis.load_scripts().await {
            Ok(()) => {}
            Err(err) if err.is_script_rejection() => return Err(StartError::Script(err)),
            Err(err) => {
                tracing::warn!(error = %err, "Redis is not ready yet; serving 503 until it is")
            }
        }

        let bind_error = |source| StartError::Bind {
            addr: config.listen,
            source,
        };
        let listener = TcpListener::bind(config.listen).await.map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;
        let instance_id = config.instance_id.clone().unwrap_or_else(|| {
            format!(
                "{}:{}",
                gethostname::gethostname().to_string_lossy(),
                addr.port()
            )
        });
        let instance_header = HeaderValue::try_from(instance_id.as_str())
            .map_err(|_| StartError::InstanceId(instance_id.clone()))?;

        let subscriber = redis.subscriber().map_err(StartError::RedisUrl)?;
        let waiting = Waiting::new(subscriber.clone(), config.max_waiters);
        let locks = Locks::new(
            redis.clone(),
            &config.key_prefix,
            waiting.clone(),
            metrics.clone(),
        );
        let streams = Streams::new(locks.clone(), subscriber.clone(), metrics.clone());
        // The sale's own locks live in a namespace of their own, which no
        // client can name through /locks (and so cannot hold).
        let sale_locks = Locks::new(
            redis.clone(),
            &format!("{}internal:", config.key_prefix),
            waiting.clone(),
            metrics.clone(),
        );
        let sales = Sales::new(
            redis.clone(),
            sale_locks,
            &config.key_prefix,
            &subscriber,
            config.sale_settings(),
            metrics.clone(),
        );
        if config.admin_token.is_none() {
            tracing::warn!(
                "no admin token is set: sale administration (PUT /seckill/{{sku}}) is refused; \
                 set LOCKGATE_ADMIN_TOKEN to enable it"
            );
        }
        let buyer_key = match (&config.buyer_jwt_secret, &config.buyer_jwt_public_key) {
            (Some(secret), _) => Some(BuyerKey::secret(secret)),
            (None, Some(pem)) => Some(BuyerKey::public_key(pem).map_err(StartError::BuyerKey)?),
            (None, None) => {
                tracing::warn!(
                    "no buyer token key is set (LOCKGATE_BUYER_JWT_SECRET or \
                     LOCKGATE_BUYER_JWT_PUBLIC_KEY): a purchase's buyer is whatever its body says"
                );
                None
            }
        };
        let state = AppState {
            locks,
            streams: streams.clone(),
            sales,
            redis: redis.clone(),
            limits: config.lock_limits(),
            stream_keep_alive: StreamKeepAlive(Duration::from_millis(config.stream_keep_alive_ms)),
            metrics,
            admin_token: AdminToken(config.admin_token.as_deref().map(Into::into)),
            api_keys: ApiKeys(
                config
                    .api_keys
                    .iter()
                    .filter(|key| !key.is_empty())
                    .map(|key| key.as_str().into())
                    .collect(),
            ),
            trusted_proxies: TrustedProxies(config.trusted_proxies.clone().into()),
            buyer_tokens: BuyerTokens(buyer_key.map(Arc::new)),
        };
        let router = http::router(
            state,
            instance_header,
            config.body_limit_bytes,
            config.request_limits(),
        );
        Ok(Self {
            listener,
            router,
            redis,
            subscriber,
            waiting,
            streams,
            connection_limits: config.connection_limits(),
            drain_timeout: Duration::from_millis(config.shutdown_timeout_ms),
            addr,
            instance_id,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `shutdown` completes, then drains: no new connections,
    /// idle ones closed, waiting lock requests answer 503 `shutting-down` at
    /// once, streamed locks are released and their streams end with `lost`,
    /// other in-flight requests may finish within the drain timeout. Then
    /// the Redis connections close.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> io::Result<()> {
        tracing::info!(addr = %self.addr, instance = %self.instance_id, "lockgate serving");
        let stopping = CancellationToken::new();
        let server = http::serve(
            self.listener,
            self.router,
            self.connection_limits,
            &self.instance_id,
            stopping.clone(),
        );
        tokio::pin!(server);
        tokio::select! {
            () = &mut server => {}
            () = shutdown => {}
        }
        tracing::info!("shutting down: refusing new connections, ending waits and streamed locks");
        stopping.cancel();
        self.waiting.close();
        self.streams.close().await;
        let drain_limit = self.drain_timeout;
        if tokio::time::timeout(drain_limit, server).await.is_err() {
            tracing::warn!(
                ?drain_limit,
                "requests still in flight after the drain timeout; stopping anyway"
            );
        }
        self.subscriber.stop();
        self.redis.close();
        tracing::info!(instance = %self.instance_id, "lockgate stopped");
        Ok(())
    }
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
