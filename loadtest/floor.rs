//! The floor of the lock benchmark: the same stack as the gateway with nothing of the gateway in it.
//!
//! axum on hyper, tokio, redis-rs with the gateway's connection strategy (a
//! few multiplexed connections shared by every request, taken in turn), and
//! jemalloc; `POST /locks` and `DELETE /locks/{key}` run the gateway's own
//! acquire and release scripts (as functions of a library, loaded once, as
//! the gateway runs them), and that is all: no validation, metrics,
//! logs, problem documents or request ids. `make bench` drives it with the
//! same load as the gateway and reports the gateway's cycles as a share of
//! the floor's.
//!
//! With `--pool deadpool-redis`, each request checks a connection out of
//! deadpool-redis's pool as that crate ships (it sends `UNWATCH` and `PING`
//! on every checkout), so `make bench` measures what that dependency would
//! cost with nothing else changed.
//!
//!   floor --listen 127.0.0.1:8081 --redis redis://127.0.0.1:6379 [--connections 1]
//!         [--pool shared|deadpool-redis]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post};
use redis::aio::MultiplexedConnection;
use serde::Deserialize;

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The lock libraries every lock script starts with, as the gateway loads them.
const PRELUDE: &str = concat!(
    include_str!("../lua/lib/base.lua"),
    include_str!("../lua/lib/events.lua"),
    include_str!("../lua/lib/holders.lua"),
    include_str!("../lua/lib/modes.lua"),
    include_str!("../lua/lib/queue.lua"),
);
const ACQUIRE: &str = include_str!("../lua/acquire.lua");
const RELEASE: &str = include_str!("../lua/release.lua");

/// The floor's function library: the lock libraries and the two scripts.
fn library() -> String {
    let mut source = format!("#!lua name=floor\n{PRELUDE}");
    for (name, body) in [("acquire", ACQUIRE), ("release", RELEASE)] {
        source.push_str(&format!(
            "\nredis.register_function('floor_{name}', function(KEYS, ARGV)\n{body}\nend)\n"
        ));
    }
    source
}

struct Floor {
    pool: Pool,
}

/// How a request gets its connection.
enum Pool {
    /// A few multiplexed connections, taken in turn (the gateway's way).
    Shared {
        connections: Vec<MultiplexedConnection>,
        next: AtomicUsize,
    },
    /// deadpool-redis as it ships: a checkout per request.
    Deadpool(deadpool_redis::Pool),
}

impl Floor {
    /// Runs `call` on a connection of the pool.
    async fn run(&self, call: &redis::Cmd) -> redis::RedisResult<redis::Value> {
        match &self.pool {
            Pool::Shared { connections, next } => {
                let turn = next.fetch_add(1, Ordering::Relaxed) % connections.len();
                call.query_async(&mut connections[turn].clone()).await
            }
            Pool::Deadpool(pool) => {
                let mut conn = pool.get().await.map_err(|err| {
                    redis::RedisError::from((redis::ErrorKind::Io, "pool", err.to_string()))
                })?;
                call.query_async(&mut conn).await
            }
        }
    }
}

/// The code of a script's reply (`{code, name, value, ...}`) and its
/// `fence` field, if it has one.
fn code_and_fence(reply: &redis::Value) -> Option<(String, Option<i64>)> {
    let redis::Value::Array(items) = reply else {
        return None;
    };
    let text = |value: &redis::Value| match value {
        redis::Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        _ => None,
    };
    let code = text(items.first()?)?;
    let fence = items
        .windows(2)
        .find_map(|pair| match (text(&pair[0]), &pair[1]) {
            (Some(name), redis::Value::Int(fence)) if name == "fence" => Some(*fence),
            _ => None,
        });
    Some((code, fence))
}

#[derive(Deserialize)]
struct Acquire {
    key: String,
    ttl_ms: u64,
    /// Given, the request only waits this long and answers `409`: the
    /// floor of a waiting request's memory (`lockbench waiters`), axum's
    /// own `serve` with a handler that does nothing else.
    wait_ms: Option<u64>,
}

async fn acquire(State(floor): State<Arc<Floor>>, body: axum::Json<Acquire>) -> Response {
    if let Some(wait) = body.wait_ms {
        tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
        return StatusCode::CONFLICT.into_response();
    }
    let token = uuid::Uuid::new_v4().simple().to_string();
    let key = &body.key;
    let mut invocation = lock_call("floor_acquire", key);
    invocation
        .arg(&token)
        .arg("exclusive")
        .arg(1)
        .arg(body.ttl_ms)
        .arg("0")
        .arg(86_400_000)
        .arg(0);
    let reply = floor.run(&invocation).await;
    match reply.as_ref().map(code_and_fence) {
        Ok(Some((code, Some(fence)))) if code == "granted" => (
            StatusCode::CREATED,
            [("content-type", "application/json")],
            format!(r#"{{"token":"{token}","fencing_token":{fence}}}"#),
        )
            .into_response(),
        Ok(_) => StatusCode::CONFLICT.into_response(),
        Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

async fn release(
    State(floor): State<Arc<Floor>>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> StatusCode {
    let Some(token) = headers.get("lock-token").and_then(|t| t.to_str().ok()) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut invocation = lock_call("floor_release", &key);
    invocation.arg(token).arg("one").arg(86_400_000);
    let reply = floor.run(&invocation).await;
    match reply.as_ref().map(code_and_fence) {
        Ok(Some((code, _))) if code == "released" || code == "holds-left" => StatusCode::NO_CONTENT,
        Ok(_) => StatusCode::CONFLICT,
        Err(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// An `FCALL` of `function` with lock `key`'s keys and the arguments every
/// lock script takes first (`lua/lib/base.lua`).
fn lock_call(function: &str, key: &str) -> redis::Cmd {
    let mut call = redis::cmd("FCALL");
    call.arg(function).arg(8);
    for name in [
        "lock", "fence", "holders", "queue", "waiters", "watch", "events", "gone",
    ] {
        call.arg(format!("lockgate:{name}:{{{key}}}"));
    }
    call.arg("PUBLISH").arg("lockgate:").arg(key);
    call
}

fn flag(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|arg| arg == name)
        .and_then(|at| args.get(at + 1))
        .map_or_else(|| default.to_owned(), Clone::clone)
}

#[tokio::main]
async fn main() -> redis::RedisResult<()> {
    let args: Vec<String> = std::env::args().collect();
    let listen = flag(&args, "--listen", "127.0.0.1:8081");
    // TCP_NODELAY, as the gateway sets it: many requests' commands share
    // each connection, and none may wait for Nagle's timer.
    let info = redis::IntoConnectionInfo::into_connection_info(flag(
        &args,
        "--redis",
        "redis://127.0.0.1:6379",
    ))?;
    let tcp = info.tcp_settings().clone().set_nodelay(true);
    let client = redis::Client::open(info.set_tcp_settings(tcp))?;
    let count: usize = flag(&args, "--connections", "1").parse().unwrap_or(1);
    let pool = if flag(&args, "--pool", "shared") == "deadpool-redis" {
        let url = flag(&args, "--redis", "redis://127.0.0.1:6379");
        let config = deadpool_redis::Config::from_url(url);
        let pool = config
            .builder()
            .map_err(|err| {
                redis::RedisError::from((redis::ErrorKind::Io, "pool", err.to_string()))
            })?
            .max_size(16)
            .runtime(deadpool_redis::Runtime::Tokio1)
            .build()
            .map_err(|err| {
                redis::RedisError::from((redis::ErrorKind::Io, "pool", err.to_string()))
            })?;
        Pool::Deadpool(pool)
    } else {
        let mut connections = Vec::with_capacity(count);
        for _ in 0..count.max(1) {
            connections.push(client.get_multiplexed_async_connection().await?);
        }
        Pool::Shared {
            connections,
            next: AtomicUsize::new(0),
        }
    };
    let () = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library())
        .query_async(&mut client.get_multiplexed_async_connection().await?)
        .await?;
    let floor = Arc::new(Floor { pool });
    let app = Router::new()
        .route("/locks", post(acquire))
        .route("/locks/{key}", delete(release))
        .with_state(floor);
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    axum::serve(listener, app).await?;
    Ok(())
}
