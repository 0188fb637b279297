//! Start-up and shutdown: build the gateway from the config in named steps, bind, serve until the shutdown signal, drain.
//!
//! The parts: `domains` (the domains of one instance, built from the
//! settings), `handoff` (`lockgate orders`, the hand-off on its own),
//! `format` (`lockgate format`, the operator's view and changes of the
//! data format) and `commands` (the binary's commands, each run to its
//! exit status).

pub mod commands;
mod domains;
mod format;
mod handoff;
mod notify;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::HeaderValue;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use domains::Domains;
pub use handoff::orders_command;

use crate::acl::Acl;
use crate::config::Config;
use crate::fleet::{Fleet, Member};
use crate::handoff::Handoff;
use crate::handoff::store::OrderStore;
use crate::http::Permissions;
use crate::http::{self, AppState};
use crate::metrics::Metrics;
use crate::redis::pubsub::Subscriber;
use crate::redis::{BackendError, Redis, Unwritable};
use crate::server::TlsSettings;
use crate::server::{self, ConnectionLimits};
use crate::tls;

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
    #[error("cannot use the orders database: {0}")]
    OrdersDatabase(String),
    /// A file the settings name (a secret, the permissions, TLS) is
    /// missing, unreadable or invalid: a configuration error (exit 78).
    #[error("{0}")]
    Config(String),
    /// The data format in use on Redis is newer than this build writes
    /// (exit 78, as for a setting: this build cannot serve that Redis).
    #[error(
        "the data format in use on this Redis is {}, and this build ({}) writes formats {}..{}: \
         run a release that writes format {} (or lower it: lockgate format lower)",
        .0.format_in_use, crate::fleet::VERSION, crate::fleet::WRITES[0], .0.writes, .0.format_in_use
    )]
    Format(Unwritable),
}

impl StartError {
    /// Whether the settings are at fault (`EX_CONFIG`), not the world.
    pub fn is_config(&self) -> bool {
        matches!(self, Self::Config(_) | Self::Format(_))
    }
}

/// What SIGHUP reads again: the settings file (checked: a bad one refuses
/// the reload), the permissions file and the TLS files. All of them or
/// none: each is read and checked before any is put in force.
struct Reloadable {
    config: Config,
    permissions: Permissions,
    tls: Option<TlsSettings>,
    metrics: Arc<Metrics>,
}

impl Reloadable {
    /// Reads every file again and puts them in force together; if one does
    /// not read or parse, none is, the error is logged, and
    /// `lockgate_config_last_reload_success` says 0.
    fn reload(&self) {
        match self.read() {
            Ok((acl, tls_config)) => {
                let principals = acl.map(|acl| {
                    let principals = acl.principals();
                    self.permissions.replace(acl);
                    principals
                });
                if let (Some(tls), Some(config)) = (&self.tls, tls_config) {
                    tls.replace(config);
                    note_certificates(&self.config, &self.metrics, Reading::Reload);
                }
                self.metrics.reloaded(true);
                tracing::info!(
                    principals,
                    tls = self.tls.is_some(),
                    "reloaded: the settings file checked, the permissions and TLS files in force"
                );
                http::audit("operator", "reload", "-", "reloaded");
            }
            Err(err) => {
                self.metrics.reloaded(false);
                tracing::error!(error = %err, "not reloaded: the settings in force are unchanged");
                http::audit("operator", "reload", "-", "refused");
            }
        }
    }

    /// Every file of a reload, read and checked, nothing changed yet.
    fn read(&self) -> Result<(Option<Acl>, Option<Arc<rustls::ServerConfig>>), String> {
        if let Some(file) = &self.config.config {
            crate::config_file::check(file).map_err(|err| err.to_string())?;
        }
        let acl = self
            .config
            .acl_file
            .as_deref()
            .map(Acl::load)
            .transpose()
            .map_err(|err| format!("the permissions file: {err}"))?;
        let tls = match (&self.tls, self.config.tls_files()) {
            (Some(_), Some(files)) => {
                Some(tls::server_config(&files).map_err(|err| format!("the TLS files: {err}"))?)
            }
            _ => None,
        };
        Ok((acl, tls))
    }

    /// Reloads on every SIGHUP until `stopping`.
    async fn on_hangup(self, stopping: CancellationToken) {
        let Ok(mut hangups) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        else {
            tracing::warn!("cannot listen for SIGHUP: no reloads");
            return;
        };
        loop {
            tokio::select! {
                _ = hangups.recv() => self.reload(),
                () = stopping.cancelled() => return,
            }
        }
    }
}

/// When certificates are read: at the start, or by a reload, which puts a
/// new listener's certificate in force (the Redis client's is read at the
/// start only, and so named only then).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reading {
    Start,
    Reload,
}

/// When the certificates the gateway presents (its listener's, the one it
/// shows Redis) stop being valid, in the metrics, for the alert that warns
/// before they do.
fn note_certificates(config: &Config, metrics: &Metrics, reading: Reading) {
    let listener = config.tls_files().map(|files| files.cert);
    let redis_client = config
        .redis
        .redis_tls_cert
        .as_deref()
        .filter(|_| reading == Reading::Start);
    for (certificate, path) in [("listener", listener), ("redis_client", redis_client)] {
        let Some(path) = path else { continue };
        match tls::not_after(path, "TLS certificate") {
            Ok(not_after) => metrics.certificate_expiry(certificate, not_after),
            Err(err) => {
                tracing::warn!(error = %err, certificate, "cannot read when a certificate expires")
            }
        }
    }
}

/// A bound, ready-to-serve gateway instance.
pub struct Gateway {
    listener: TcpListener,
    addr: SocketAddr,
    instance_id: String,
    router: Router,
    redis: Redis,
    subscriber: Subscriber,
    domains: Domains,
    fleet: Fleet,
    connection_limits: ConnectionLimits,
    drain_timeout: Duration,
    /// The order hand-off worker run beside the gateway, when configured.
    handoff: Option<Handoff>,
    /// TLS settings, when it serves HTTPS.
    tls: Option<TlsSettings>,
    reloadable: Reloadable,
}

impl Gateway {
    /// Connects Redis, binds the listener and builds the domains and the
    /// routes. Redis being down is not fatal (requests answer 503 until it
    /// is back); a script Redis refuses to compile is.
    pub async fn bind(config: &Config) -> Result<Self, StartError> {
        let mut config = config.clone();
        config.read_secret_files().map_err(StartError::Config)?;
        let config = &config;
        let acl = config
            .acl_file
            .as_deref()
            .map(Acl::load)
            .transpose()
            .map_err(StartError::Config)?;
        let permissions = Permissions::new(acl);
        let tls = config
            .tls_files()
            .map(|files| tls::server_config(&files).map(TlsSettings::new))
            .transpose()
            .map_err(StartError::Config)?;
        let metrics = Arc::new(Metrics::default());
        note_certificates(config, &metrics, Reading::Start);
        let redis = connect_redis(config, &metrics).await?;
        let (listener, addr) = listen(config).await?;
        let instance_id = config.instance_id(addr);
        let instance_header = HeaderValue::try_from(instance_id.as_str())
            .map_err(|_| StartError::InstanceId(instance_id.clone()))?;
        let subscriber = redis.subscriber().map_err(StartError::RedisUrl)?;
        let store = match &config.orders_database {
            Some(url) => Some(OrderStore::new(url).map_err(StartError::OrdersDatabase)?),
            None => None,
        };
        let fleet = Fleet::join(
            (&redis, &subscriber),
            &config.redis.key_prefix,
            Member {
                id: instance_id.clone(),
                address: addr.to_string(),
            },
            config.fleet_settings(),
            metrics.clone(),
        )
        .await
        .map_err(StartError::Format)?;
        let domains = Domains::build(
            config,
            &instance_id,
            (&redis, &subscriber),
            &metrics,
            store.clone(),
        );
        warn_of_open_doors(config);
        let routes = config
            .route_settings(permissions.clone())
            .map_err(StartError::BuyerKey)?;
        let state = AppState::new(
            domains.handed_to_routes((&redis, &fleet), metrics.clone()),
            routes,
        );
        let router =
            server::application(http::api(), state, config.request_settings(instance_header));
        let handoff = store.map(|store| {
            Handoff::new(
                redis.clone(),
                store,
                &config.redis.key_prefix,
                config.handoff.settings(&instance_id),
                metrics.clone(),
            )
        });
        Ok(Self {
            listener,
            addr,
            instance_id,
            router,
            redis,
            subscriber,
            domains,
            fleet,
            connection_limits: config.connection_limits(),
            drain_timeout: Duration::from_millis(config.shutdown_timeout_ms),
            handoff,
            tls: tls.clone(),
            reloadable: Reloadable {
                config: config.clone(),
                permissions,
                tls,
                metrics: metrics.clone(),
            },
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
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        tracing::info!(addr = %self.addr, instance = %self.instance_id, scheme, "lockgate serving");
        let stopping = CancellationToken::new();
        tokio::spawn(self.reloadable.on_hangup(stopping.clone()));
        let notifier = notify::Notifier::from_env();
        tokio::spawn(notifier.clone().run(
            self.redis.clone(),
            self.addr.to_string(),
            stopping.clone(),
        ));
        let handoff = self
            .handoff
            .map(|handoff| tokio::spawn(handoff.run(stopping.clone())));
        let serving = server::serve(
            self.listener,
            self.router,
            self.connection_limits,
            &self.instance_id,
            self.tls,
            stopping.clone(),
        );
        tokio::pin!(serving);
        tokio::select! {
            () = &mut serving => {}
            () = shutdown => {}
        }
        tracing::info!("shutting down: refusing new connections, ending waits and streamed locks");
        notifier.notify("STOPPING=1");
        stopping.cancel();
        self.domains.waiting.close();
        self.domains.sessions.close();
        self.domains.watches.close();
        self.domains.streamed.close().await;
        let drain_limit = self.drain_timeout;
        if tokio::time::timeout(drain_limit, serving).await.is_err() {
            tracing::warn!(
                ?drain_limit,
                "requests still in flight after the drain timeout; stopping anyway"
            );
        }
        if let Some(handoff) = handoff {
            // It stops between batches; an order being stored stays pending.
            let _ = tokio::time::timeout(drain_limit, handoff).await;
        }
        self.fleet.leave().await;
        self.subscriber.stop();
        self.redis.close();
        tracing::info!(instance = %self.instance_id, "lockgate stopped");
        Ok(())
    }
}

/// Builds the Redis handle and loads every script.
async fn connect_redis(config: &Config, metrics: &Arc<Metrics>) -> Result<Redis, StartError> {
    let redis =
        Redis::new(&config.redis_settings(), metrics.clone()).map_err(StartError::RedisUrl)?;
    match redis.load_scripts().await {
        Ok(()) => {}
        Err(err) if err.is_script_rejection() => return Err(StartError::Script(err)),
        // A wrong CA or client certificate never comes right by waiting.
        Err(err) if err.is_certificate_refusal() => {
            return Err(StartError::Config(format!(
                "the TLS handshake with Redis was refused for a certificate \
                 (see --redis-tls-ca, --redis-tls-cert, --redis-tls-key): {err}"
            )));
        }
        Err(err) => {
            tracing::warn!(error = %err, "Redis is not ready yet; serving 503 until it is")
        }
    }
    Ok(redis)
}

/// Binds the listening socket; returns it with the address it got.
async fn listen(config: &Config) -> Result<(TcpListener, SocketAddr), StartError> {
    let bind_error = |source| StartError::Bind {
        addr: config.listen,
        source,
    };
    let listener = TcpListener::bind(config.listen).await.map_err(bind_error)?;
    let addr = listener.local_addr().map_err(bind_error)?;
    Ok((listener, addr))
}

/// Says at start-up which doors the settings leave open.
fn warn_of_open_doors(config: &Config) {
    if config.admin_token.is_none() {
        tracing::warn!(
            "no admin token is set: sale administration (PUT /seckill/{{sku}}) is refused; \
             set LOCKGATE_ADMIN_TOKEN to enable it"
        );
    }
    if config.buyer_jwt_secret.is_none() && config.buyer_jwt_public_key.is_none() {
        tracing::warn!(
            "no buyer token key is set (LOCKGATE_BUYER_JWT_SECRET or \
             LOCKGATE_BUYER_JWT_PUBLIC_KEY): a purchase's buyer is whatever its body says"
        );
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
