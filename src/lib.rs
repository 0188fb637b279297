//! lockgate: an HTTP gateway for distributed locks on Redis.
//!
//! The crate is layered. A layer calls only layers below it, never one
//! above, so no two modules import each other (`tests/api/layers.rs` checks
//! it on every test run):
//!
//! * [`app`]: start-up, serving and shutdown; it builds every layer from the
//!   [`config`] (flags and `LOCKGATE_*` variables).
//! * [`http`]: routes, extractors, the router's state, problem responses and
//!   the OpenAPI document.
//! * [`seckill`]: the flash-sale demo, built on the locks and its own Lua;
//!   beside it [`handoff`], the hand-off of the sale's orders into a database.
//! * [`locks`]: the lock domain, with typed inputs that can only be made by
//!   parsing ([`locks::LockKey`], [`locks::Token`], [`locks::Ttl`]), and
//!   event-driven waiting.
//! * [`redis`]: the connection pool, pub/sub, and one typed wrapper per Lua
//!   script in `lua/`; every read-check-write on Redis is one script. The
//!   wrappers take primitives (`&str`, numbers), never the domain's types.
//! * [`metrics`]: Prometheus counters, which every layer feeds.
//!
//! [`telemetry`] (logging) sits beside [`app`]. [`run`] (`lockgate run`) is
//! a client of the HTTP API that imports nothing of the server.

pub mod acl;
pub mod app;
pub mod config;
pub mod duration;
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
