//! The Lua scripts under `lua/`, embedded in the binary as one Redis function library; and the reader of their replies.
//!
//! Every script replies `{code, name, value, name, value, ...}`: a word
//! naming what happened, then the fields that outcome has, by name (each
//! script's header lists its codes and their fields). A wrapper reads a
//! field by its name, so no field is read in a place that means something
//! else for another code.
//!
//! The scripts share the libraries in `lua/lib/`. Run by `EVALSHA`, every
//! call would define their forty-odd functions again before doing
//! anything (about 5 µs of Redis time a call, measured); loaded once as a
//! function library (`FUNCTION LOAD`, Redis 7) and run by `FCALL`, they
//! are defined once. Every script is a function of it, the sale's too: a
//! purchase by `FCALL` costs less Redis time than by `EVALSHA` (it uses
//! the plain release, which `EVALSHA` defined anew each call), a rate
//! check the same (docs/performance.md). The library's name carries a
//! hash of its source, so gateways of different versions on one Redis
//! each call their own.

use std::sync::{LazyLock, OnceLock};

use redis::{Cmd, FromRedisValue, ParsingError, RedisError, Script, ToRedisArgs, Value};

use super::locks::LockKeys;
use super::{BackendError, Connection};

/// A script's reply: its code and its named fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    code: String,
    fields: Vec<(String, Value)>,
}

impl Reply {
    /// The word naming what the script did.
    pub fn code(&self) -> &str {
        &self.code
    }

    fn field(&self, name: &str) -> Option<&Value> {
        self.fields
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value)
    }

    /// A non-negative integer field.
    pub fn number(&self, name: &str) -> Option<u64> {
        match self.field(name)? {
            Value::Int(number) => u64::try_from(*number).ok(),
            _ => None,
        }
    }

    /// A 0-or-1 field.
    pub fn flag(&self, name: &str) -> Option<bool> {
        match self.number(name)? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    /// A text field.
    pub fn text(&self, name: &str) -> Option<&str> {
        match self.field(name)? {
            Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
            Value::SimpleString(text) => Some(text),
            _ => None,
        }
    }
}

impl FromRedisValue for Reply {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        let not_a_reply = || ParsingError::from(format!("not a script reply: {value:?}"));
        let Value::Array(items) = &value else {
            return Err(not_a_reply());
        };
        let word = |item: &Value| match item {
            Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
            Value::SimpleString(text) => Some(text.clone()),
            _ => None,
        };
        let mut items = items.iter();
        let code = items.next().and_then(word).ok_or_else(not_a_reply)?;
        let mut fields = Vec::with_capacity(items.len() / 2);
        while let Some(name) = items.next() {
            let name = word(name).ok_or_else(not_a_reply)?;
            let value = items.next().ok_or_else(not_a_reply)?;
            fields.push((name, value.clone()));
        }
        Ok(Self { code, fields })
    }
}

/// The libraries every script shares, in the order they build on each
/// other.
const LIBRARIES: &str = concat!(
    include_str!("../../lua/lib/base.lua"),
    include_str!("../../lua/lib/plain.lua"),
    include_str!("../../lua/lib/events.lua"),
    include_str!("../../lua/lib/holders.lua"),
    include_str!("../../lua/lib/modes.lua"),
    include_str!("../../lua/lib/queue.lua"),
    include_str!("../../lua/lib/fleet.lua"),
);

/// One script, as a function of the library.
pub struct Function {
    /// Its file (`acquire.lua`), for errors and metrics.
    pub name: &'static str,
    source: &'static str,
    /// Its name in Redis, made on first use.
    function: OnceLock<String>,
}

macro_rules! function {
    ($file:literal) => {
        Function {
            name: $file,
            source: include_str!(concat!("../../lua/", $file)),
            function: OnceLock::new(),
        }
    };
}

// The lock's scripts.
pub static ACQUIRE: Function = function!("acquire.lua");
pub static RELEASE: Function = function!("release.lua");
pub static ACQUIRE_PLAIN: Function = function!("acquire_plain.lua");
pub static RELEASE_PLAIN: Function = function!("release_plain.lua");
pub static EXTEND: Function = function!("extend.lua");
pub static INSPECT: Function = function!("inspect.lua");
pub static LEAVE: Function = function!("leave.lua");
pub static TEND: Function = function!("tend.lua");
pub static WATCH: Function = function!("watch.lua");
pub static HISTORY: Function = function!("history.lua");
pub static SET_VALUE: Function = function!("set_value.lua");
pub static REVOKE: Function = function!("revoke.lua");
pub static SESSION_RELEASE: Function = function!("session_release.lua");
pub static MODE: Function = function!("mode.lua");
pub static BATCH: Function = function!("batch.lua");
// A session's.
pub static SESSION_OPEN: Function = function!("session_open.lua");
pub static SESSION_KEEP: Function = function!("session_keep.lua");
pub static SESSION_JOIN: Function = function!("session_join.lua");
pub static SESSION_END: Function = function!("session_end.lua");
pub static SESSION_VIEW: Function = function!("session_view.lua");
// The sale's, and its hand-off's.
pub static PURCHASE: Function = function!("purchase.lua");
pub static RESET_SALE: Function = function!("reset_sale.lua");
pub static RATE_LIMIT: Function = function!("rate_limit.lua");
pub static SEGMENT_GIVE: Function = function!("segment_give.lua");
pub static SEGMENT_TAKE: Function = function!("segment_take.lua");
pub static SEGMENT_SETTLE: Function = function!("segment_settle.lua");
pub static ORDERS_ACK: Function = function!("orders_ack.lua");
pub static ORDERS_DEAD_LETTER: Function = function!("orders_dead_letter.lua");
pub static ORDERS_TIDY: Function = function!("orders_tidy.lua");
// The fleet's record.
pub static FLEET_BEAT: Function = function!("fleet_beat.lua");
pub static FLEET_FORMAT: Function = function!("fleet_format.lua");
pub static FLEET_LIBRARIES: Function = function!("fleet_libraries.lua");

/// Every script: the functions of the library.
pub static FUNCTIONS: [&Function; 32] = [
    &ACQUIRE,
    &RELEASE,
    &ACQUIRE_PLAIN,
    &RELEASE_PLAIN,
    &EXTEND,
    &INSPECT,
    &LEAVE,
    &TEND,
    &WATCH,
    &HISTORY,
    &SET_VALUE,
    &REVOKE,
    &SESSION_RELEASE,
    &MODE,
    &BATCH,
    &SESSION_OPEN,
    &SESSION_KEEP,
    &SESSION_JOIN,
    &SESSION_END,
    &SESSION_VIEW,
    &PURCHASE,
    &RESET_SALE,
    &RATE_LIMIT,
    &SEGMENT_GIVE,
    &SEGMENT_TAKE,
    &SEGMENT_SETTLE,
    &ORDERS_ACK,
    &ORDERS_DEAD_LETTER,
    &ORDERS_TIDY,
    &FLEET_BEAT,
    &FLEET_FORMAT,
    &FLEET_LIBRARIES,
];

/// The library: its name (`lockgate_<hash of its source>`) and its source,
/// which defines the shared functions once and registers each script as
/// `<name>_<script>` (`lockgate_3f2a9c01d4_acquire`); a script's file runs
/// as the body of its function, with its keys and arguments as `KEYS` and
/// `ARGV`.
pub struct Library {
    pub name: String,
    pub source: String,
}

/// The library of this build.
pub static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
    let mut body = String::from(LIBRARIES);
    for function in FUNCTIONS {
        body.push_str(&format!(
            "\nredis.register_function('{{library}}_{}', function(KEYS, ARGV)\n{}\nend)\n",
            function.base_name(),
            function.source
        ));
    }
    let hash = Script::new(&body).get_hash().to_owned();
    let name = format!("lockgate_{}", &hash[..10]);
    let source = format!("#!lua name={name}\n{}", body.replace("{library}", &name));
    Library { name, source }
});

/// The library's name and source, as this build loads them: a
/// differential test loads a changed source (a mutant) under the same
/// name (`FUNCTION LOAD REPLACE`), which the wrappers then call.
pub fn library() -> (&'static str, &'static str) {
    (&LIBRARY.name, &LIBRARY.source)
}

impl Function {
    /// `acquire` for `acquire.lua`.
    fn base_name(&self) -> &'static str {
        self.name.trim_end_matches(".lua")
    }

    /// Its name in Redis.
    pub fn function(&self) -> &str {
        self.function
            .get_or_init(|| format!("{}_{}", LIBRARY.name, self.base_name()))
    }

    /// Starts a call of lock `keys`; add the script's own arguments, then
    /// [`Function::run`].
    pub fn call(&self, keys: &LockKeys, publish: &str) -> FunctionCall {
        let mut command = redis::cmd("FCALL");
        command.arg(self.function());
        keys.bind(&mut command, publish);
        FunctionCall { command }
    }

    /// Starts a call of a script that names its own keys (`keys`, in the
    /// order the script takes them) and none of the first arguments the
    /// lock scripts share: the plain try and release, which pay for nothing
    /// they do not use, and every script that is not a lock's. Add its
    /// arguments, then [`Function::run`].
    pub fn call_with_keys<K: ToRedisArgs>(&self, keys: &[K]) -> FunctionCall {
        let mut command = redis::cmd("FCALL");
        command.arg(self.function()).arg(keys.len());
        for key in keys {
            command.arg(key);
        }
        FunctionCall { command }
    }

    /// Starts a call over several locks (`batch.lua`): each lock's keys in
    /// turn, then `publish` and the prefix; add the script's own
    /// arguments, then [`Function::run`].
    pub fn call_many(&self, locks: &[LockKeys], publish: &str) -> FunctionCall {
        let mut command = redis::cmd("FCALL");
        command
            .arg(self.function())
            .arg(locks.len() * LockKeys::COUNT);
        for keys in locks {
            keys.bind_keys(&mut command);
        }
        let prefix = locks.first().map_or("", LockKeys::prefix);
        command.arg(publish).arg(prefix);
        FunctionCall { command }
    }

    /// Runs a call by `FCALL`, once the instance's gate admits it (the data
    /// format in use is one this build writes). When Redis has lost the
    /// library (a restart without persistence, `FUNCTION FLUSH`, or an old
    /// library's deletion by another instance that took it for unused), it
    /// is loaded and the call made again, once.
    pub async fn run(
        &self,
        call: &FunctionCall,
        conn: &mut Connection,
    ) -> Result<Reply, BackendError> {
        conn.admit().await?;
        self.run_ungated(call, conn).await
    }

    /// Runs a call with no question to the gate: the fleet's own scripts,
    /// which are how the gate learns the format.
    pub(super) async fn run_ungated(
        &self,
        call: &FunctionCall,
        conn: &mut Connection,
    ) -> Result<Reply, BackendError> {
        let command = &call.command;
        match command.query_async(conn).await {
            Err(err) if library_missing(&err) => {
                load_library(conn).await?;
                Ok(command.query_async(conn).await?)
            }
            reply => Ok(reply?),
        }
    }

    /// Runs many calls at once: one pipeline on one Redis, or each by
    /// itself, all at the same time, on a cluster, whose pipelines cannot
    /// span nodes. The outer error fails them all; an inner one (a cluster
    /// node down) fails its own.
    pub async fn run_all(
        &self,
        calls: &[FunctionCall],
        conn: &mut Connection,
    ) -> Result<Vec<Result<Reply, BackendError>>, BackendError> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        conn.admit().await?;
        let forks: Option<Vec<Connection>> = calls.iter().map(|_| conn.fork()).collect();
        if let Some(forks) = forks {
            let runs = calls
                .iter()
                .zip(forks)
                .map(|(call, mut conn)| async move { self.run(call, &mut conn).await });
            return Ok(futures_util::future::join_all(runs).await);
        }
        let mut pipeline = redis::pipe();
        for call in calls {
            pipeline.add_command(call.command.clone());
        }
        let replies: Vec<Reply> = match pipeline.query_async(conn).await {
            Err(err) if library_missing(&err) => {
                load_library(conn).await?;
                pipeline.query_async(conn).await?
            }
            replies => replies?,
        };
        Ok(replies.into_iter().map(Ok).collect())
    }

    /// The error for a reply the script's header does not allow.
    pub fn unexpected(&self, reply: &Reply) -> BackendError {
        BackendError::UnexpectedReply {
            script: self.name,
            reply: format!("{reply:?}"),
        }
    }

    /// Reads `reply` with `read`, which knows the script's codes and
    /// fields; a reply it cannot read is the script's bug.
    pub fn read<T>(
        &self,
        reply: &Reply,
        read: impl FnOnce(&Reply) -> Option<T>,
    ) -> Result<T, BackendError> {
        read(reply).ok_or_else(|| self.unexpected(reply))
    }
}

/// One call of a lock function, being built: `FCALL`, the function, the
/// lock's keys and the arguments so far, written as they are added.
#[derive(Debug, Clone)]
pub struct FunctionCall {
    command: Cmd,
}

impl FunctionCall {
    pub fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.command.arg(arg);
        self
    }
}

/// Whether Redis answered that it has no such function: the library is
/// not loaded (yet, or any more).
fn library_missing(err: &RedisError) -> bool {
    err.detail()
        .is_some_and(|detail| detail.contains("Function not found"))
        || err.to_string().contains("Function not found")
}

/// Loads the library (in a cluster, on every primary). `REPLACE`, so
/// loading it again is harmless: its name says its source.
pub async fn load_library(conn: &mut Connection) -> Result<(), BackendError> {
    let () = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(&LIBRARY.source)
        .query_async(conn)
        .await?;
    Ok(())
}

/// The script an `FCALL`'s function names, for labelling metrics.
pub fn name_of(function: &[u8]) -> Option<&'static str> {
    if !function.starts_with(LIBRARY.name.as_bytes()) {
        return None;
    }
    // Against each function's name as kept: two calls per request are
    // named here, so nothing is trimmed or built for it.
    FUNCTIONS
        .iter()
        .find(|script| script.function().as_bytes() == function)
        .map(|script| script.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_under_lua_is_embedded_and_documents_its_interface() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
        // lua/lib/ holds what scripts share, not scripts.
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".lua"))
            .collect();
        files.sort();
        let mut embedded: Vec<&str> = FUNCTIONS.iter().map(|script| script.name).collect();
        embedded.sort();
        assert_eq!(files, embedded);
        for (name, source) in FUNCTIONS.iter().map(|script| (script.name, script.source)) {
            assert!(
                source.contains("-- Returns"),
                "{name} has no header naming its returns"
            );
        }
    }

    #[test]
    fn the_library_names_itself_and_each_function_by_its_source() {
        let library = &*LIBRARY;
        assert!(library.name.starts_with("lockgate_"));
        assert!(
            library
                .source
                .starts_with(&format!("#!lua name={}\n", library.name))
        );
        for function in FUNCTIONS {
            let registered = format!("redis.register_function('{}',", function.function());
            assert!(library.source.contains(&registered), "{registered}");
            assert_eq!(name_of(function.function().as_bytes()), Some(function.name));
        }
        assert_eq!(name_of(b"lockgate_nope_acquire"), None);
    }

    fn array(items: &[Value]) -> Value {
        Value::Array(items.to_vec())
    }

    fn text(word: &str) -> Value {
        Value::BulkString(word.as_bytes().to_vec())
    }

    #[test]
    fn a_reply_is_read_by_its_code_and_field_names() {
        let reply = Reply::from_redis_value(array(&[
            text("granted"),
            text("fence"),
            Value::Int(42),
            text("room"),
            Value::Int(1),
            text("id"),
            text("o-1"),
        ]))
        .unwrap();
        assert_eq!(reply.code(), "granted");
        assert_eq!(reply.number("fence"), Some(42));
        assert_eq!(reply.flag("room"), Some(true));
        assert_eq!(reply.text("id"), Some("o-1"));
        assert_eq!(reply.number("holds"), None, "a field it does not have");
        assert_eq!(reply.number("id"), None, "a field of another type");
    }

    #[test]
    fn a_reply_without_a_code_or_with_an_odd_field_is_refused() {
        assert!(Reply::from_redis_value(array(&[])).is_err());
        assert!(Reply::from_redis_value(array(&[Value::Int(1)])).is_err());
        assert!(Reply::from_redis_value(array(&[text("held"), text("remaining_ms")])).is_err());
        assert!(Reply::from_redis_value(Value::Int(1)).is_err());
    }
}
