//! Lock cycles straight on Redis by FCALL, no gateway: the gateway's own acquire and release functions, or a floor library of the least a fenced re-entrant lock needs, so that their Redis cost per cycle can be set side by side.

use std::cell::Cell;
use std::io;
use std::rc::Rc;
use std::time::Instant;

use redis::Value;

use crate::http::run_clients;
use crate::measure::{CpuClock, report};

#[derive(clap::Args)]
pub(crate) struct ScriptCycles {
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// The gateway's function library loaded in this Redis
    /// (`lockgate_<hash>`, as `FUNCTION LIST` names it); without it, the
    /// floor library below is loaded and driven instead.
    #[arg(long)]
    library: Option<String>,
    /// The gateway's key prefix (the lock's channels are named after it).
    #[arg(long, default_value = "lockgate:")]
    prefix: String,
    #[arg(long, default_value_t = 50)]
    clients: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Which floor (see FLOOR): plain, wide, busy or same.
    #[arg(long, default_value = "plain")]
    floor_variant: String,
}

/// The floor: a fenced, re-entrant, exclusive lock and nothing else. A
/// holder hash (token, fencing token, holds) with the lease as its expiry,
/// a fence counter that outlives the lease, compare-and-delete on release,
/// and the release published for waiters. It has no queue, no events, no
/// values, no idempotency, no sessions, no modes or permits.
///
/// Its variants add, one step at a time, what the gateway's functions do
/// besides, so that each step's cost shows (`--floor-variant`):
///   plain  two keys and the arguments it uses
///   wide   the gateway's eight keys and arguments (lib/base.lua), unused
///   busy   wide, and one `EXISTS queue watch` per script (lib/base.lua's
///          `busy`: whether anybody waits or watches)
///   same   busy, with the gateway's very commands: `TIME`, the fence by
///          `GET` + `SET PX` (never below the clock), `PEXPIREAT`, and the
///          wider `HMGET`s of lib/holders.lua's `held` and `holder`
/// What `same` costs less than the gateway's functions is their Lua.
const FLOOR: &str = r#"#!lua name=lockbench_floor
local function acquire(KEYS, ARGV, wide, busy, same)
  local lock, fence_key, token, ttl, keep
  if wide then
    lock, fence_key, token, ttl, keep = KEYS[1], KEYS[2], ARGV[4], tonumber(ARGV[7]), tonumber(ARGV[9])
  else
    lock, fence_key, token, ttl, keep = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
  end
  local holder
  if same then
    holder = redis.call('HMGET', lock, 'owner', 'mode', 'limit', 'delayed')[1]
  else
    holder = redis.call('HGET', lock, 'owner')
  end
  if holder == token then
    redis.call('PEXPIRE', lock, ttl)
    return {'reentered', redis.call('HINCRBY', lock, 'holds', 1)}
  elseif holder then
    return {'held', redis.call('PTTL', lock)}
  end
  if busy then
    redis.call('EXISTS', KEYS[4], KEYS[6])
  end
  if same then
    local time = redis.call('TIME')
    local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
    local fence = math.max(tonumber(redis.call('GET', fence_key) or '0') + 1, now_us)
    local text = string.format('%d', fence)
    redis.call('SET', fence_key, text, 'PX', ttl + keep)
    redis.call('HSET', lock, 'owner', token, 'holds', 1, 'fence', text, 'at', math.floor(now_us / 1000))
    redis.call('PEXPIREAT', lock, math.floor(now_us / 1000) + ttl)
    return {'granted', fence}
  end
  local fence = redis.call('INCR', fence_key)
  redis.call('PEXPIRE', fence_key, ttl + keep)
  redis.call('HSET', lock, 'owner', token, 'fence', fence, 'holds', 1)
  redis.call('PEXPIRE', lock, ttl)
  return {'granted', fence}
end

local function release(KEYS, ARGV, wide, busy, same)
  local lock, token, channel
  if wide then
    lock, token, channel = KEYS[1], ARGV[4], ARGV[2] .. 'released:{' .. ARGV[3] .. '}'
  else
    lock, token, channel = KEYS[1], ARGV[1], ARGV[2]
  end
  local place
  if same then
    place = redis.call('HMGET', lock, 'owner', 'fence', 'holds', 'streamed', 'value', 'mode', 'session')
  else
    place = redis.call('HMGET', lock, 'owner', 'fence', 'holds')
  end
  if place[1] ~= token then
    return {'not-owner'}
  end
  if tonumber(place[3]) > 1 then
    return {'holds-left', redis.call('HINCRBY', lock, 'holds', -1)}
  end
  redis.call('DEL', lock)
  if busy then
    redis.call('EXISTS', KEYS[4], KEYS[6])
  end
  redis.call('PUBLISH', channel, place[2])
  return {'released'}
end

-- (A library's loading code has no `pairs`: each is registered by name.)
local function register(name, wide, busy, same)
  redis.register_function('floor_acquire_' .. name, function(KEYS, ARGV)
    return acquire(KEYS, ARGV, wide, busy, same)
  end)
  redis.register_function('floor_release_' .. name, function(KEYS, ARGV)
    return release(KEYS, ARGV, wide, busy, same)
  end)
end
register('plain', false, false, false)
register('wide', true, false, false)
register('busy', true, true, false)
register('same', true, true, true)
"#;

/// The lock's keys as lib/base.lua lists them, in its order.
const LOCK_KEYS: [&str; 8] = [
    "lock", "fence", "holders", "queue", "waiters", "watch", "events", "gone",
];
const TTL_MS: u64 = 30_000;
/// How long a fence counter outlives a lease (the gateway's FENCE_RETENTION_MS).
const FENCE_KEEP_MS: u64 = 86_400_000;

/// Acquire and release of one lock per client, as fast as each client can,
/// each client on a connection of its own. Any reply that is not a grant or
/// a release is counted in `unexpected` (and printed once): the caller fails on it.
pub(crate) async fn script_cycles(load: ScriptCycles) -> io::Result<()> {
    let client = redis::Client::open(load.redis.as_str()).map_err(io::Error::other)?;
    let mut setup = client
        .get_multiplexed_async_connection()
        .await
        .map_err(io::Error::other)?;
    if load.library.is_none() {
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(FLOOR)
            .query_async(&mut setup)
            .await
            .map_err(io::Error::other)?;
    }
    let cpu = CpuClock::start();
    let started = Instant::now();
    let unexpected = Rc::new(Cell::new(0u64));
    let (library, prefix) = (Rc::new(load.library), Rc::new(load.prefix));
    let variant = Rc::new(load.floor_variant);
    let done = run_clients(load.clients, load.seconds, |who, deadline| {
        let (client, unexpected) = (client.clone(), unexpected.clone());
        let (library, prefix, variant) = (library.clone(), prefix.clone(), variant.clone());
        async move {
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(io::Error::other)?;
            let key = format!("bench:script:{who}");
            let mut done = 0;
            while Instant::now() < deadline {
                let token = format!("{who}-{done}");
                let (acquire, release) = match library.as_deref() {
                    Some(library) => plain_calls(library, &prefix, &key, &token),
                    None if variant.as_str() == "plain" => floor_calls(&prefix, &key, &token),
                    None => lock_calls("floor_", &format!("_{variant}"), &prefix, &key, &token),
                };
                let granted: Value = acquire
                    .query_async(&mut conn)
                    .await
                    .map_err(io::Error::other)?;
                let released: Value = release
                    .query_async(&mut conn)
                    .await
                    .map_err(io::Error::other)?;
                for (reply, wanted) in [(&granted, "granted"), (&released, "released")] {
                    if code(reply) != Some(wanted) {
                        if unexpected.get() == 0 {
                            eprintln!("script-cycles: wanted {wanted}, got {reply:?}");
                        }
                        unexpected.set(unexpected.get() + 1);
                    }
                }
                done += 1;
            }
            Ok(done)
        }
    })
    .await?;
    let extra = [("unexpected", unexpected.get().to_string())];
    let mode = match library.as_deref() {
        Some(_) => "script-cycles".to_owned(),
        None => format!("floor-{variant}-script-cycles"),
    };
    report(&mode, done, started.elapsed(), done * 2, cpu, &extra);
    Ok(())
}

/// The floor's steps towards the gateway's full functions, called as those
/// are: the keys and first arguments every lock function takes
/// (lib/base.lua) and a plain try's own (acquire.lua, release.lua).
fn lock_calls(
    before: &str,
    after: &str,
    prefix: &str,
    key: &str,
    token: &str,
) -> (redis::Cmd, redis::Cmd) {
    let call = |function: &str| {
        let mut call = redis::cmd("FCALL");
        call.arg(format!("{before}{function}{after}"))
            .arg(LOCK_KEYS.len());
        for name in LOCK_KEYS {
            call.arg(format!("{prefix}{name}:{{{key}}}"));
        }
        call.arg("PUBLISH").arg(prefix).arg(key).arg(token);
        call
    };
    let mut acquire = call("acquire");
    acquire
        .arg("exclusive")
        .arg(1)
        .arg(TTL_MS)
        .arg(0)
        .arg(FENCE_KEEP_MS)
        .arg(0);
    let mut release = call("release");
    release.arg("one").arg(FENCE_KEEP_MS);
    (acquire, release)
}

/// The gateway's plain try and plain release (acquire_plain.lua,
/// release_plain.lua), with the keys and arguments the gateway gives them:
/// what it runs for a lock nobody waits for or watches.
fn plain_calls(library: &str, prefix: &str, key: &str, token: &str) -> (redis::Cmd, redis::Cmd) {
    let name = |what: &str| format!("{prefix}{what}:{{{key}}}");
    let mut acquire = redis::cmd("FCALL");
    acquire
        .arg(format!("{library}_acquire_plain"))
        .arg(4)
        .arg(name("lock"))
        .arg(name("fence"))
        .arg(name("queue"))
        .arg(name("watch"))
        .arg(token)
        .arg(TTL_MS)
        .arg(FENCE_KEEP_MS);
    let mut release = redis::cmd("FCALL");
    release
        .arg(format!("{library}_release_plain"))
        .arg(3)
        .arg(name("lock"))
        .arg(name("queue"))
        .arg(name("watch"))
        .arg("PUBLISH")
        .arg(name("released"))
        .arg(token)
        .arg("one");
    (acquire, release)
}

fn floor_calls(prefix: &str, key: &str, token: &str) -> (redis::Cmd, redis::Cmd) {
    let mut acquire = redis::cmd("FCALL");
    acquire
        .arg("floor_acquire_plain")
        .arg(2)
        .arg(format!("{prefix}lock:{{{key}}}"))
        .arg(format!("{prefix}fence:{{{key}}}"))
        .arg(token)
        .arg(TTL_MS)
        .arg(FENCE_KEEP_MS);
    let mut release = redis::cmd("FCALL");
    release
        .arg("floor_release_plain")
        .arg(1)
        .arg(format!("{prefix}lock:{{{key}}}"))
        .arg(token)
        .arg(format!("{prefix}released:{{{key}}}"));
    (acquire, release)
}

/// The code a lock function answers first (`granted`, `released`, ...).
fn code(reply: &Value) -> Option<&str> {
    match reply {
        Value::Array(items) => match items.first() {
            Some(Value::BulkString(bytes)) => std::str::from_utf8(bytes).ok(),
            Some(Value::SimpleString(text)) => Some(text),
            _ => None,
        },
        _ => None,
    }
}
