//! Command line and settings: every setting of `serve` is a flag and a `LOCKGATE_*` variable (`run` has its own, in `run`).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};

use axum::http::HeaderValue;

use crate::fleet::FleetSettings;
use crate::handoff::HandoffSettings;
use crate::http::{
    AdminToken, ApiKeys, BuyerKey, BuyerTokens, Permissions, RouteSettings, StreamKeepAlive,
    TrustedProxies,
};
use crate::locks::{DEFAULT_MAX_TTL_MS, DEFAULT_MAX_WAIT_MS, LockLimits, MIN_TTL_MS};
use crate::redis::tls::{RedisTls, is_tls_url};
use crate::redis::{PoolKind, RedisSettings, Replication, Topology};
use crate::run::RunArgs;
use crate::seckill::{RatePolicy, SaleSettings};
use crate::server::{ConnectionLimits, RequestLimits, RequestSettings};
pub use crate::telemetry::LogFormat;
use crate::tls::ServerFiles;

/// lockgate: distributed locks on Redis over plain HTTP.
#[derive(Debug, Parser)]
#[command(name = "lockgate", version, long_version = LONG_VERSION)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway.
    Serve(Box<Config>),
    /// Run a command while holding a lock through a gateway.
    Run(Box<RunArgs>),
    /// Print the OpenAPI document (what openapi/openapi.json holds).
    Openapi,
    /// Settings files: check one, or show every setting's effective value
    /// and where it comes from.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Ask a gateway whether it is ready (`GET /readyz`): exit 0 when it
    /// is, 1 otherwise, with one line saying why (for a container's
    /// HEALTHCHECK, where there is no curl).
    Health(HealthArgs),
    /// Permissions files: hash an API key, check a file.
    #[command(subcommand)]
    Acl(AclCommand),
    /// The data format in use on a Redis and the fleet's instances; raise
    /// or lower the format (same Redis settings as `serve`).
    #[command(subcommand)]
    Format(Box<FormatCommand>),
    /// Store the sales' orders in a database (a hand-off worker), or
    /// reconcile the database with Redis (`orders reconcile`).
    Orders(Box<OrdersArgs>),
    /// Stop a `lockgate run` command's process group if `lockgate run`
    /// dies (started by `lockgate run` itself; not for people).
    #[command(hide = true)]
    ReapGroup(ReapArgs),
}

/// `lockgate acl`.
#[derive(Debug, Clone, Subcommand)]
pub enum AclCommand {
    /// Read an API key on stdin and print its SHA-256 in hex, as a
    /// permissions file's api_key_sha256 names it.
    Hash,
    /// Check a permissions file: exit 0, or 1 with the line of the first
    /// error.
    Check { file: PathBuf },
}

/// `lockgate --version`: the version, and the data formats this build
/// reads and writes (`crate::fleet::READS` and `WRITES`, which a test ties
/// to this line).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\ndata formats: reads 1 and 2, writes 1..2"
);

/// `lockgate format`.
#[derive(Debug, Clone, Subcommand)]
pub enum FormatCommand {
    /// Print the format in use, its migrations, each live instance and the
    /// formats it writes, and what `raise` and `lower` would do.
    Status {
        /// One JSON object instead of lines.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        redis: RedisArgs,
    },
    /// Raise the format in use: to --to, or to the highest every live
    /// instance writes. Refused (exit 1) while a live instance could not
    /// follow, or a function library no live instance names is loaded
    /// (an instance of a release before 0.2.0 may run; --force passes this).
    Raise {
        #[arg(long)]
        to: Option<u32>,
        /// Raise although libraries no live instance names are loaded.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        redis: RedisArgs,
    },
    /// Lower the format in use: to --to, or to the one below. Refused
    /// (exit 1) while a live instance could not follow. No automatic raise
    /// follows until `format raise`.
    Lower {
        #[arg(long)]
        to: Option<u32>,
        #[command(flatten)]
        redis: RedisArgs,
    },
}

/// `lockgate config`.
#[derive(Debug, Clone, Subcommand)]
pub enum ConfigCommand {
    /// Check a settings file: exit 0, or 78 with the file, line and key of
    /// the first error.
    Check { file: PathBuf },
    /// Print each setting of `lockgate serve` as the given flags, the
    /// environment and the file (--config, or LOCKGATE_CONFIG) make it,
    /// with its source (flag, env, file, default); secrets as (set).
    Show {
        /// `lockgate serve`'s flags, --config among them.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        serve: Vec<std::ffi::OsString>,
    },
}

/// `lockgate health`.
#[derive(Debug, Clone, clap::Args)]
pub struct HealthArgs {
    /// The readiness URL to ask.
    #[arg(long, default_value = "http://127.0.0.1:8080/readyz")]
    pub url: String,
    /// How long the answer may take, in milliseconds.
    #[arg(long, default_value_t = 3_000, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub timeout_ms: u64,
    /// PEM CA that signed an https URL's certificate.
    #[arg(long)]
    pub ca: Option<PathBuf>,
}

/// `lockgate reap-group`: the process group to stop, and the grace between
/// SIGTERM and SIGKILL.
#[derive(Debug, Clone, clap::Args)]
pub struct ReapArgs {
    #[arg(long)]
    pub pgid: i32,
    #[arg(long)]
    pub grace_ms: u64,
}

/// `lockgate orders`: a hand-off worker, or with `reconcile` the check.
#[derive(Debug, Clone, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct OrdersArgs {
    #[command(subcommand)]
    pub command: Option<OrdersCommand>,

    #[command(flatten)]
    pub worker: WorkerArgs,
}

#[derive(Debug, Clone, Subcommand)]
pub enum OrdersCommand {
    /// A line per sale and epoch: sold, orders, rows, units in rows,
    /// pending, dead letters; exits 0 when every sale with nothing pending
    /// matches (rows == orders, units == sold) and none has dead letters,
    /// 1 otherwise (2 when it cannot read Redis or the database).
    Reconcile(ReconcileArgs),
}

/// A hand-off worker's settings.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// The orders database: postgres://USER@HOST/DB or sqlite://PATH
    /// (created if missing).
    #[arg(long, env = "LOCKGATE_ORDERS_DATABASE", required = true)]
    pub database: Option<String>,

    #[command(flatten)]
    pub redis: RedisArgs,

    #[command(flatten)]
    pub handoff: HandoffArgs,

    /// Log output: human-readable text or one JSON object per line.
    #[arg(long, env = "LOCKGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// `lockgate orders reconcile`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReconcileArgs {
    /// The orders database: postgres://USER@HOST/DB or sqlite://PATH (which
    /// must exist).
    #[arg(long, env = "LOCKGATE_ORDERS_DATABASE")]
    pub database: String,

    /// Only this sale.
    #[arg(long)]
    pub sku: Option<String>,

    #[command(flatten)]
    pub redis: RedisArgs,
}

/// How a hand-off worker (of `lockgate orders`, or inside `lockgate serve`)
/// works.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Order hand-off")]
pub struct HandoffArgs {
    /// This worker's name in the hand-off's consumer group; keep it across
    /// restarts, and give each worker its own [default: the hostname, or in
    /// `serve` the instance id].
    #[arg(long, env = "LOCKGATE_ORDERS_CONSUMER")]
    pub consumer: Option<String>,

    /// Orders read, and stored in one transaction, at a time.
    #[arg(long, env = "LOCKGATE_ORDERS_BATCH", default_value_t = 200,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1000))]
    pub batch: usize,

    /// How long (ms) an order another worker read stays unstored before
    /// this one takes it over.
    #[arg(long, env = "LOCKGATE_ORDERS_CLAIM_IDLE_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(100..=DAY_MS))]
    pub claim_idle_ms: u64,

    /// Deliveries after which an order that cannot be stored goes to the
    /// sale's dead-letter stream.
    #[arg(long, env = "LOCKGATE_ORDERS_MAX_DELIVERIES", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub max_deliveries: u64,
}

impl HandoffArgs {
    /// The worker's settings, named `default_consumer` unless told otherwise.
    pub fn settings(&self, default_consumer: &str) -> HandoffSettings {
        HandoffSettings {
            consumer: self
                .consumer
                .clone()
                .unwrap_or_else(|| default_consumer.to_owned()),
            batch: self.batch,
            claim_idle: Duration::from_millis(self.claim_idle_ms),
            max_deliveries: self.max_deliveries,
            idle_wait: Duration::from_millis(50),
        }
    }
}

/// How a gateway instance runs.
#[derive(Debug, Clone, Parser)]
#[command(name = "lockgate serve")]
pub struct Config {
    /// A TOML file of settings, keyed as the variables without LOCKGATE_ in
    /// lower case (`redis_url`); a flag or a variable wins over it.
    #[arg(long, env = "LOCKGATE_CONFIG")]
    pub config: Option<PathBuf>,

    /// Address to serve on; port 0 picks a free port and logs it.
    #[arg(long, env = "LOCKGATE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub redis: RedisArgs,

    /// Run an order hand-off worker inside the gateway, storing the sales'
    /// orders in this database: postgres://USER@HOST/DB or sqlite://PATH.
    #[arg(long, env = "LOCKGATE_ORDERS_DATABASE")]
    pub orders_database: Option<String>,

    #[command(flatten)]
    pub handoff: HandoffArgs,

    /// Replicas that must confirm (Redis `WAIT`) each grant, extension and
    /// purchase; 0 confirms nothing. A grant too few confirm is released and
    /// answered 503 `not-replicated`.
    #[arg(long, env = "LOCKGATE_REDIS_WAIT_REPLICAS", default_value_t = 0)]
    pub redis_wait_replicas: u32,

    /// How long to wait for those replicas, in milliseconds.
    #[arg(long, env = "LOCKGATE_REDIS_WAIT_TIMEOUT_MS", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=DAY_MS))]
    pub redis_wait_timeout_ms: u64,

    /// Echoed in the X-Instance-Id header of every response [default: <hostname>:<port>].
    #[arg(long, env = "LOCKGATE_INSTANCE_ID")]
    pub instance_id: Option<String>,

    /// Largest lease a client may ask for, in milliseconds.
    #[arg(long, env = "LOCKGATE_MAX_TTL_MS", default_value_t = DEFAULT_MAX_TTL_MS,
          value_parser = clap::value_parser!(u64).range(MIN_TTL_MS..=30 * DAY_MS))]
    pub max_ttl_ms: u64,

    /// Longest server-side wait a client may ask for, in milliseconds.
    #[arg(long, env = "LOCKGATE_MAX_WAIT_MS", default_value_t = DEFAULT_MAX_WAIT_MS,
          value_parser = clap::value_parser!(u64).range(0..=DAY_MS))]
    pub max_wait_ms: u64,

    /// Bearer token for the admin routes (`PUT /seckill/{sku}`, and every
    /// order with buyer tokens); unset refuses sale administration, with a
    /// warning at start.
    #[arg(long, env = "LOCKGATE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// A file whose content (trimmed) is the admin token, so that it need
    /// be neither on the command line nor in the environment.
    #[arg(
        long,
        env = "LOCKGATE_ADMIN_TOKEN_FILE",
        conflicts_with = "admin_token"
    )]
    pub admin_token_file: Option<PathBuf>,

    /// A file of API keys, one a line (blank lines and `#` comments
    /// skipped), added to --api-keys.
    #[arg(long, env = "LOCKGATE_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,

    /// Permissions by lock-key prefix (TOML): principals named by an API
    /// key's SHA-256 or a client certificate's name, each with rules
    /// `{prefix, allow = [read, lock, revoke]}`. Given, anything not allowed
    /// is refused; SIGHUP reads it again.
    #[arg(long, env = "LOCKGATE_ACL_FILE")]
    pub acl_file: Option<PathBuf>,

    /// The gateway's certificate chain (PEM): with --tls-key, serve HTTPS
    /// only (HTTP/1.1 and HTTP/2, TLS 1.2 and 1.3); SIGHUP reads it again.
    #[arg(long, env = "LOCKGATE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "LOCKGATE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// CA certificates (PEM) that client certificates must be signed by:
    /// with it, a connection without one is refused in the handshake, and
    /// a certificate's subject CN or DNS name names its principal.
    #[arg(long, env = "LOCKGATE_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,

    /// How often an idle streamed lock's event stream gets an SSE comment,
    /// so that proxies keep it open, in milliseconds.
    #[arg(long, env = "LOCKGATE_STREAM_KEEP_ALIVE_MS", default_value_t = 15_000,
          value_parser = clap::value_parser!(u64).range(100..=DAY_MS))]
    pub stream_keep_alive_ms: u64,

    /// Secret of buyer tokens (HS256 JWTs): with it, a purchase needs
    /// `Authorization: Bearer <JWT>` and the buyer is the token's `sub`.
    /// Unset (and no public key): the body's `user_id` is the buyer, with a
    /// warning at start.
    #[arg(
        long,
        env = "LOCKGATE_BUYER_JWT_SECRET",
        hide_env_values = true,
        conflicts_with = "buyer_jwt_public_key"
    )]
    pub buyer_jwt_secret: Option<String>,

    /// Public key of buyer tokens (RS256 or ES256 JWTs), in PEM or the path
    /// of a PEM file: as --buyer-jwt-secret, for tokens signed elsewhere.
    #[arg(
        long,
        env = "LOCKGATE_BUYER_JWT_PUBLIC_KEY",
        allow_hyphen_values = true
    )]
    pub buyer_jwt_public_key: Option<String>,

    /// API keys (comma-separated) of which the lock routes need one as
    /// `Authorization: Bearer <key>`; none leaves them open.
    #[arg(
        long,
        env = "LOCKGATE_API_KEYS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub api_keys: Vec<String>,

    /// Purchase requests per second allowed per user (0 = no limit).
    #[arg(long, env = "LOCKGATE_SECKILL_RATE", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(0..=MAX_RATE))]
    pub seckill_rate: u32,

    /// Purchase requests a user may send at once before the rate applies.
    #[arg(long, env = "LOCKGATE_SECKILL_BURST", default_value_t = 40)]
    pub seckill_burst: u32,

    /// Purchase requests per second allowed per client address [default: no limit].
    #[arg(long, env = "LOCKGATE_SECKILL_CLIENT_RATE",
          value_parser = clap::value_parser!(u32).range(0..=MAX_RATE))]
    pub seckill_client_rate: Option<u32>,

    /// Burst allowance per client address [default: twice the client rate].
    #[arg(long, env = "LOCKGATE_SECKILL_CLIENT_BURST")]
    pub seckill_client_burst: Option<u32>,

    /// Run each purchase under its per-(sku, user) lock. The purchase script
    /// alone prevents overselling; the lock serialises one user's requests.
    /// `false` only to measure what the lock costs (a `bench` build only).
    #[cfg(feature = "bench")]
    #[arg(long, env = "LOCKGATE_SECKILL_USER_LOCK", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub seckill_user_lock: bool,

    /// How long a purchase waits for its user's lock, in milliseconds.
    #[arg(long, env = "LOCKGATE_SECKILL_LOCK_WAIT_MS", default_value_t = 2_000,
          value_parser = clap::value_parser!(u64).range(0..=DAY_MS))]
    pub seckill_lock_wait_ms: u64,

    /// Proxies (comma-separated addresses, e.g. nginx's) whose X-Forwarded-For
    /// names the client; from anyone else the header is ignored.
    #[arg(long, env = "LOCKGATE_TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Vec<IpAddr>,

    /// Most requests that may wait for a lock at once on this instance;
    /// beyond it, waiting requests answer 503 `too-many-waiters`.
    #[arg(long, env = "LOCKGATE_MAX_WAITERS", default_value_t = 20_000)]
    pub max_waiters: usize,

    /// How requests get a connection to one Redis: `shared` (a few
    /// multiplexed connections every request shares, taken in turn) or
    /// `checkout` (a connection per request out of a pool). `make bench`
    /// measures both.
    #[arg(long, env = "LOCKGATE_REDIS_POOL", value_enum, default_value_t = PoolKind::Shared)]
    pub redis_pool: PoolKind,

    /// Redis connections: shared by every request (`shared`, default 1:
    /// the fewer, the more requests' commands leave in one write), or at
    /// most this many checked out at once (default 16). Waiting requests use
    /// none of them.
    #[arg(long, env = "LOCKGATE_REDIS_POOL_SIZE",
          value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub redis_pool_size: Option<u64>,

    /// Largest request body accepted, in bytes; larger ones answer 413.
    #[arg(long, env = "LOCKGATE_BODY_LIMIT_BYTES", default_value_t = 16 * 1024,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(256..=16 * 1024 * 1024))]
    pub body_limit_bytes: usize,

    /// The most bytes of request headers (names and values together); more
    /// answers 431.
    #[arg(long, env = "LOCKGATE_HEADER_LIMIT_BYTES", default_value_t = 16 * 1024,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1024..=1024 * 1024))]
    pub header_limit_bytes: usize,

    /// How long a client has to send a request's head (its request line and
    /// headers), from the connection's start or the head's first byte, in
    /// milliseconds; past it the connection is closed.
    #[arg(long, env = "LOCKGATE_HEADER_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=DAY_MS))]
    pub header_timeout_ms: u64,

    /// How long a kept-alive connection with no request in flight stays
    /// open, in milliseconds. Keep it above the idle timeout of a proxy in
    /// front (nginx's upstream keepalive_timeout), so the proxy closes first.
    #[arg(long, env = "LOCKGATE_IDLE_TIMEOUT_MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(1..=DAY_MS))]
    pub idle_timeout_ms: u64,

    /// The longest a request may take, lock waits included, in milliseconds
    /// [default: the longest wait plus 10 s].
    #[arg(long, env = "LOCKGATE_REQUEST_TIMEOUT_MS",
          value_parser = clap::value_parser!(u64).range(1..=2 * DAY_MS))]
    pub request_timeout_ms: Option<u64>,

    /// On SIGTERM, how long in-flight requests may take to finish before the
    /// gateway stops anyway, in milliseconds.
    #[arg(long, env = "LOCKGATE_SHUTDOWN_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(0..=DAY_MS))]
    pub shutdown_timeout_ms: u64,

    /// How long a Redis function library of lockgate's that no live
    /// instance names (an older release's) stays loaded before it is
    /// deleted, in milliseconds; an older instance still running loads its
    /// own again on its next call.
    #[arg(long, env = "LOCKGATE_LIBRARY_GRACE_MS", default_value_t = 600_000,
          value_parser = clap::value_parser!(u64).range(1_000..=DAY_MS))]
    pub library_grace_ms: u64,

    /// Raise the data format in use by itself once every live instance
    /// writes a newer one this build writes (`false`: only `lockgate format
    /// raise` does).
    #[arg(long, env = "LOCKGATE_FORMAT_AUTO_RAISE", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub format_auto_raise: bool,

    /// Log output: human-readable text or one JSON object per line (with
    /// trace_id and span_id when traces are sent).
    #[arg(long, env = "LOCKGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Send traces to this OpenTelemetry collector, by OTLP over HTTP
    /// (protobuf) to URL/v1/traces (http://collector:4318); off when unset.
    #[arg(long, env = "LOCKGATE_OTLP_ENDPOINT", value_parser = otlp_endpoint)]
    pub otlp_endpoint: Option<String>,
}

/// Where Redis is, and the keys' namespace: the same for the gateway and
/// the order hand-off.
#[derive(Debug, Clone, clap::Args)]
pub struct RedisArgs {
    /// The Redis to use.
    #[arg(
        long,
        env = "LOCKGATE_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,

    /// Seed nodes of a Redis Cluster (comma-separated redis:// URLs); when
    /// set, the gateway runs on the cluster and --redis-url is not used.
    #[arg(long, env = "LOCKGATE_REDIS_CLUSTER_NODES", value_delimiter = ',')]
    pub redis_cluster_nodes: Vec<String>,

    /// A file whose content (trimmed) is the Redis password, put into
    /// every Redis URL that has none (for Sentinel: the primary's).
    #[arg(long, env = "LOCKGATE_REDIS_PASSWORD_FILE")]
    pub redis_password_file: Option<PathBuf>,

    /// The password read from --redis-password-file.
    #[arg(skip)]
    pub redis_password: Option<String>,

    /// The CA (PEM) that signed the certificates of Redis, the Cluster's
    /// nodes or the sentinels, for rediss:// URLs [default: the system's
    /// CAs].
    #[arg(long, env = "LOCKGATE_REDIS_TLS_CA")]
    pub redis_tls_ca: Option<PathBuf>,

    /// A client certificate (PEM) to present to Redis over rediss://, for
    /// a Redis that requires one (tls-auth-clients); with --redis-tls-key.
    #[arg(long, env = "LOCKGATE_REDIS_TLS_CERT", requires = "redis_tls_key")]
    pub redis_tls_cert: Option<PathBuf>,

    /// The private key of --redis-tls-cert (PEM).
    #[arg(long, env = "LOCKGATE_REDIS_TLS_KEY", requires = "redis_tls_cert")]
    pub redis_tls_key: Option<PathBuf>,

    /// The files of --redis-tls-*, read.
    #[arg(skip)]
    pub redis_tls: Option<RedisTls>,

    /// Namespace of every Redis key the gateway writes.
    #[arg(long, env = "LOCKGATE_KEY_PREFIX", default_value = "lockgate:",
          value_parser = key_prefix)]
    pub key_prefix: String,

    /// Bound on connecting to Redis, waiting for a pooled connection, and each
    /// command, in milliseconds; past it the request answers 503.
    #[arg(long, env = "LOCKGATE_REDIS_TIMEOUT_MS", default_value_t = 2_000,
          value_parser = clap::value_parser!(u64).range(1..=DAY_MS))]
    pub redis_timeout_ms: u64,
}

impl RedisArgs {
    pub fn topology(&self) -> Topology {
        let password = self.redis_password.as_deref();
        if self.redis_cluster_nodes.is_empty() {
            Topology::Single {
                url: with_password(&self.redis_url, password),
            }
        } else {
            Topology::Cluster {
                nodes: self
                    .redis_cluster_nodes
                    .iter()
                    .map(|url| with_password(url, password))
                    .collect(),
            }
        }
    }

    /// Reads the Redis password file and the Redis TLS files, if named.
    pub fn read_secret_files(&mut self) -> Result<(), String> {
        if let Some(path) = &self.redis_password_file {
            self.redis_password = Some(read_secret(path, "Redis password")?);
        }
        let identity = self
            .redis_tls_cert
            .as_deref()
            .zip(self.redis_tls_key.as_deref());
        if self.redis_tls_ca.is_some() || identity.is_some() {
            let urls = if self.redis_cluster_nodes.is_empty() {
                std::slice::from_ref(&self.redis_url)
            } else {
                &self.redis_cluster_nodes[..]
            };
            // Certificates for a plain connection would be silently unused.
            if let Some(plain) = urls.iter().find(|url| !is_tls_url(url)) {
                return Err(format!(
                    "--redis-tls-ca/--redis-tls-cert need rediss:// (or rediss+sentinel://) URLs, and {} is not one",
                    redact(plain)
                ));
            }
            self.redis_tls = Some(RedisTls::from_files(
                self.redis_tls_ca.as_deref(),
                identity,
            )?);
        }
        Ok(())
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.redis_timeout_ms)
    }
}

/// `url` without its credentials, for a message.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://***@{host}{}", &rest[authority_end..]),
        None => url.to_owned(),
    }
}

/// `url` with `password` put in, when it names none: `redis://host` becomes
/// `redis://:<password>@host` (percent-encoded).
fn with_password(url: &str, password: Option<&str>) -> String {
    let (Some(password), Some((scheme, rest))) = (password, url.split_once("://")) else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    if rest[..authority_end].contains('@') {
        return url.to_owned();
    }
    let encoded: String = password
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(byte).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect();
    format!("{scheme}://:{encoded}@{rest}")
}

/// A secret kept in a file: its content, trimmed of surrounding white
/// space. The error names the file, never its content. A relative path is
/// a credential of systemd's (`LoadCredential=`) when the service manager
/// gave the process a `CREDENTIALS_DIRECTORY`: it is looked for there.
pub fn read_secret(path: &Path, what: &str) -> Result<String, String> {
    let path = &credential_path(path, std::env::var_os("CREDENTIALS_DIRECTORY"));
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot read the {what} file {}: {err}", path.display()))?;
    let secret = text.trim();
    if secret.is_empty() {
        return Err(format!("the {what} file {} is empty", path.display()));
    }
    Ok(secret.to_owned())
}

/// Where a secret file named `path` is: under `credentials` (systemd's
/// `CREDENTIALS_DIRECTORY`) when it is relative and there is one.
fn credential_path(path: &Path, credentials: Option<std::ffi::OsString>) -> PathBuf {
    match credentials.filter(|dir| !dir.is_empty()) {
        Some(dir) if path.is_relative() => Path::new(&dir).join(path),
        _ => path.to_owned(),
    }
}

/// A day in milliseconds: the bound on every duration setting, so that no
/// deadline computed from one can overflow.
const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// The most purchase requests per second a rate limit may allow: above it,
/// one request's share of a second would round to nothing.
const MAX_RATE: i64 = 1_000_000;

/// A key prefix: anything but braces, which would break the hash tags that
/// keep each lock's Redis keys in one Redis Cluster slot.
fn key_prefix(text: &str) -> Result<String, String> {
    if text.contains(['{', '}']) {
        return Err(
            "may not hold { or }: they would break the hash tags that keep each \
                    lock's keys in one Redis Cluster slot"
                .into(),
        );
    }
    Ok(text.to_owned())
}

/// A collector's base URL: http:// or https://, with a host, and no query.
fn otlp_endpoint(text: &str) -> Result<String, String> {
    let uri: axum::http::Uri = text.parse().map_err(|err| format!("not a URL ({err})"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err("an http:// or https:// URL with a host, such as http://localhost:4318".into());
    }
    if uri.query().is_some() {
        return Err("may not have a query: the traces go to URL/v1/traces".into());
    }
    Ok(text.to_owned())
}

impl Config {
    /// Reads the secrets named by the `*_file` settings into the settings
    /// they stand for. Fails, naming the file, when one cannot be read.
    pub fn read_secret_files(&mut self) -> Result<(), String> {
        if let Some(path) = &self.admin_token_file {
            self.admin_token = Some(read_secret(path, "admin token")?);
        }
        if let Some(path) = &self.api_keys_file {
            let keys = read_secret(path, "API keys")?;
            self.api_keys.extend(
                keys.lines()
                    .map(str::trim)
                    .filter(|line| !line.is_empty() && !line.starts_with('#'))
                    .map(str::to_owned),
            );
        }
        self.redis.read_secret_files()
    }

    /// The secrets the lock routes accept: the API keys and, when there
    /// are any, the admin token too (an operator, or the console, reads and
    /// revokes locks with it). No API key leaves the lock routes open.
    fn accepted_api_keys(&self) -> Arc<[Box<str>]> {
        let keys: Vec<Box<str>> = self
            .api_keys
            .iter()
            .filter(|key| !key.is_empty())
            .map(|key| key.as_str().into())
            .collect();
        if keys.is_empty() {
            return keys.into();
        }
        keys.into_iter()
            .chain(self.admin_token.as_deref().map(Into::into))
            .collect()
    }

    pub fn fleet_settings(&self) -> FleetSettings {
        FleetSettings {
            library_grace: Duration::from_millis(self.library_grace_ms),
            auto_raise: self.format_auto_raise,
        }
    }

    pub fn lock_limits(&self) -> LockLimits {
        LockLimits {
            max_ttl_ms: self.max_ttl_ms,
            max_wait_ms: self.max_wait_ms,
        }
    }

    pub fn sale_settings(&self) -> SaleSettings {
        let client_burst = self
            .seckill_client_burst
            .or(self.seckill_client_rate.map(|rate| rate.saturating_mul(2)));
        SaleSettings {
            per_user: RatePolicy::new(self.seckill_rate, self.seckill_burst),
            per_client: self
                .seckill_client_rate
                .zip(client_burst)
                .and_then(|(rate, burst)| RatePolicy::new(rate, burst)),
            user_lock: self.user_lock(),
            lock_wait: Duration::from_millis(self.seckill_lock_wait_ms),
        }
    }

    /// Whether purchases take the per-user lock: always, but in a build
    /// with the `bench` feature, where a setting can turn it off.
    fn user_lock(&self) -> bool {
        #[cfg(feature = "bench")]
        return self.seckill_user_lock;
        #[cfg(not(feature = "bench"))]
        true
    }

    /// The instance's id: the configured one, or `<hostname>:<port>`.
    pub fn instance_id(&self, addr: SocketAddr) -> String {
        self.instance_id.clone().unwrap_or_else(|| {
            format!(
                "{}:{}",
                gethostname::gethostname().to_string_lossy(),
                addr.port()
            )
        })
    }

    /// What the routes enforce: lease and wait bounds, and the access rules
    /// (admin token, API keys, buyer tokens, trusted proxies). Fails when
    /// the buyer token key cannot be read.
    pub fn route_settings(&self, permissions: Permissions) -> Result<RouteSettings, String> {
        let buyer_key = match (&self.buyer_jwt_secret, &self.buyer_jwt_public_key) {
            (Some(secret), _) => Some(BuyerKey::secret(secret)),
            (None, Some(pem)) => Some(BuyerKey::public_key(pem)?),
            (None, None) => None,
        };
        Ok(RouteSettings {
            limits: self.lock_limits(),
            stream_keep_alive: StreamKeepAlive(Duration::from_millis(self.stream_keep_alive_ms)),
            admin_token: AdminToken(self.admin_token.as_deref().map(Into::into)),
            api_keys: ApiKeys(self.accepted_api_keys()),
            permissions,
            buyer_tokens: BuyerTokens(buyer_key.map(Arc::new)),
            trusted_proxies: TrustedProxies(self.trusted_proxies.clone().into()),
        })
    }

    /// What every request is held to, and answered with (`instance_id`).
    pub fn request_settings(&self, instance_id: HeaderValue) -> RequestSettings {
        let timeout = self
            .request_timeout_ms
            .unwrap_or(self.max_wait_ms.saturating_add(10_000));
        RequestSettings {
            limits: RequestLimits {
                header_bytes: self.header_limit_bytes,
                timeout: Duration::from_millis(timeout),
            },
            instance_id,
            body_limit: self.body_limit_bytes,
        }
    }

    /// The gateway's TLS files, when it serves HTTPS.
    pub fn tls_files(&self) -> Option<ServerFiles<'_>> {
        Some(ServerFiles {
            cert: self.tls_cert.as_deref()?,
            key: self.tls_key.as_deref()?,
            client_ca: self.tls_client_ca.as_deref(),
        })
    }

    pub fn connection_limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            header_timeout: Duration::from_millis(self.header_timeout_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            // The headers' limit, and room for the request line.
            max_head_bytes: self.header_limit_bytes.saturating_add(8 * 1024),
        }
    }

    pub fn redis_settings(&self) -> RedisSettings {
        let topology = self.redis.topology();
        let pool = self.redis_pool;
        RedisSettings {
            topology,
            pool,
            // The value parser keeps this within 1..=1024.
            pool_size: self
                .redis_pool_size
                .and_then(|size| usize::try_from(size).ok())
                .unwrap_or(pool.default_size()),
            timeout: self.redis.timeout(),
            tls: self.redis.redis_tls.clone(),
            replication: (self.redis_wait_replicas > 0).then(|| Replication {
                replicas: self.redis_wait_replicas,
                timeout: Duration::from_millis(self.redis_wait_timeout_ms),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_secret_file_is_a_credential_when_systemd_gives_a_directory() {
        let credentials = Some(std::ffi::OsString::from(
            "/run/credentials/lockgate.service",
        ));
        assert_eq!(
            credential_path(Path::new("admin-token"), credentials.clone()),
            Path::new("/run/credentials/lockgate.service/admin-token")
        );
        assert_eq!(
            credential_path(Path::new("/etc/lockgate/admin-token"), credentials),
            Path::new("/etc/lockgate/admin-token")
        );
        assert_eq!(
            credential_path(Path::new("admin-token"), None),
            Path::new("admin-token")
        );
    }

    #[test]
    fn the_long_version_names_the_formats_this_build_reads_and_writes() {
        let reads: Vec<String> = crate::fleet::READS.iter().map(u32::to_string).collect();
        let [lowest, highest] = crate::fleet::WRITES;
        assert_eq!(
            LONG_VERSION,
            format!(
                "{}\ndata formats: reads {}, writes {lowest}..{highest}",
                crate::fleet::VERSION,
                reads.join(" and ")
            )
        );
    }

    #[test]
    fn defaults_match_the_documented_settings() {
        let config = Config::try_parse_from(["lockgate"]).unwrap();
        assert_eq!(config.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(config.redis.redis_url, "redis://127.0.0.1:6379");
        assert_eq!(config.redis.key_prefix, "lockgate:");
        assert_eq!(config.max_ttl_ms, 3_600_000);
        assert_eq!(config.max_wait_ms, 60_000);
        assert_eq!(config.instance_id, None);
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        for (flag, value) in [
            ("--max-ttl-ms", "5"),
            ("--seckill-rate", "1000001"),
            ("--seckill-client-rate", "1000001"),
            ("--key-prefix", "lock{gate}:"),
            ("--redis-wait-timeout-ms", "0"),
            ("--max-wait-ms", "999999999999"),
            ("--header-limit-bytes", "10"),
        ] {
            assert!(
                Config::try_parse_from(["lockgate", flag, value]).is_err(),
                "{flag} {value}"
            );
        }
        let config = Config::try_parse_from(["lockgate", "--seckill-rate", "1000000"]).unwrap();
        assert_eq!(config.sale_settings().per_user.unwrap().interval_us(), 1);
    }

    #[test]
    fn the_cli_verifies() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn redis_tls_files_need_a_rediss_url() {
        let mut config = Config::try_parse_from([
            "lockgate",
            "--redis-url",
            "redis://:secret@127.0.0.1:6379",
            "--redis-tls-ca",
            "ca.pem",
        ])
        .unwrap();
        let refused = config.read_secret_files().unwrap_err();
        assert!(refused.contains("rediss://"), "{refused}");
        assert!(!refused.contains("secret"), "{refused}");
        assert!(
            Config::try_parse_from(["lockgate", "--redis-tls-cert", "client.pem"]).is_err(),
            "a client certificate without its key"
        );
    }
}
