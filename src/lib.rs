//! lockgate: an HTTP gateway for distributed locks on Redis.
//!
//! The crate is layered. A layer calls only layers below it, never one
//! above, so no two modules import each other (`tests/api/layers.rs` checks
//! it on every test run). From the top:
//!
//! * [`app`]: the binary's commands; start-up in named steps, serving and
//!   shutdown; it builds every layer from the [`config`] (flags and
//!   `LOCKGATE_*` variables, and a settings file: [`config_file`]). Below
//!   it [`telemetry`]: logging, text or JSON.
//! * [`server`]: the transport: the accept loop, connection limits, TLS
//!   connections, and the layer every request passes (request ids, logs,
//!   metrics, timeouts).
//! * [`http`]: routes, extractors, the router's state, who the caller is and
//!   what it may do, problem responses and the OpenAPI document.
//! * [`seckill`]: the flash sale, built on the locks and its own Lua; beside
//!   it [`handoff`], the hand-off of the sale's orders into a database.
//! * [`locks`]: the lock domain, with typed inputs that can only be made by
//!   parsing ([`locks::LockKey`], [`locks::Token`], [`locks::Ttl`]):
//!   event-driven waiting in the fair queue, streamed locks and batches,
//!   sessions and lock-delay, deadlock search, watching.
//! * [`fleet`] (beside [`locks`]): the instances of every version on one
//!   Redis, their records, the data format they write and the gate that
//!   keeps an instance from writing one it does not know; the operator's
//!   `lockgate format`.
//! * [`redis`]: the connections, pub/sub, and one typed wrapper per Lua
//!   script in `lua/`; every read-check-write on Redis is one script. The
//!   wrappers take primitives (`&str`, numbers), never the domain's types.
//! * [`metrics`]: the Prometheus series, which every layer feeds.
//! * [`run`] (`lockgate run`): a client of the HTTP API that imports nothing
//!   of the server.
//!
//! Small pieces every layer may use: [`acl`] (the permissions file:
//! principals, rules by key prefix), [`tls`] (rustls settings from PEM
//! files, for the gateway, `lockgate run` and the Redis connections),
//! [`sse`] (reading Server-Sent Events), [`duration`] (durations as whole
//! milliseconds) and [`sync`] (a mutex guard that outlives a panic).

pub mod acl;
pub mod app;
pub mod config;
pub mod config_file;
pub mod duration;
pub mod fleet;
pub mod handoff;
pub mod http;
pub mod locks;
pub mod metrics;
pub mod redis;
pub mod run;
pub mod seckill;
pub mod server;
pub mod sse;
pub mod sync;
pub mod telemetry;
pub mod tls;
