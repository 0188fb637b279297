//! lockgate: an HTTP gateway for distributed locks on Redis.
//!
//! The crate is layered; each layer only calls the one below it:
//!
//! * [`http`]: routes, extractors, problem responses and the OpenAPI document.
//! * [`locks`]: the lock domain, with typed inputs that can only be made by
//!   parsing ([`locks::LockKey`], [`locks::Token`], [`locks::Ttl`]), and
//!   event-driven waiting.
//! * [`seckill`]: the flash-sale demo, built on the locks and its own Lua.
//! * [`redis`]: the connection pool and one typed wrapper per Lua script in
//!   `lua/`; every read-check-write on Redis is one script.
//!
//! Around them: [`config`] (flags and `LOCKGATE_*` variables), [`app`]
//! (start-up, serving, shutdown), [`error`] (the problem catalogue),
//! [`metrics`] (Prometheus counters) and [`telemetry`] (logging).

pub mod app;
pub mod config;
pub mod error;
pub mod http;
pub mod locks;
pub mod metrics;
pub mod redis;
pub mod seckill;
pub mod telemetry;
