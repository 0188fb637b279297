//! The Lua scripts under `lua/`, embedded in the binary and invoked by SHA, and the reader of their replies.
//!
//! Every script replies `{code, name, value, name, value, ...}`: a word
//! naming what happened, then the fields that outcome has, by name (each
//! script's header lists its codes and their fields). A wrapper reads a
//! field by its name, so no field is read in a place that means something
//! else for another code.

use std::sync::OnceLock;

use redis::{
    ErrorKind, FromRedisValue, ParsingError, Script, ScriptInvocation, ServerErrorKind, Value,
};

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

/// One script file: its name (for errors) and its source, hashed on first use.
pub struct LuaScript {
    pub name: &'static str,
    source: &'static str,
    compiled: OnceLock<Script>,
}

impl LuaScript {
    const fn new(name: &'static str, source: &'static str) -> Self {
        Self {
            name,
            source,
            compiled: OnceLock::new(),
        }
    }

    fn script(&self) -> &Script {
        self.compiled.get_or_init(|| Script::new(self.source))
    }

    /// Starts an invocation; add keys and arguments, then [`LuaScript::run`].
    pub fn prepare(&self) -> ScriptInvocation<'_> {
        self.script().prepare_invoke()
    }

    /// Runs an invocation by `EVALSHA`. When Redis has lost the script (a
    /// restart, `SCRIPT FLUSH`), redis-rs loads it and retries once.
    pub async fn run(
        &self,
        invocation: &ScriptInvocation<'_>,
        conn: &mut Connection,
    ) -> Result<Reply, BackendError> {
        Ok(invocation.invoke_async(conn).await?)
    }

    /// Runs many invocations at once: one pipeline on one Redis (loading the
    /// script first if Redis has lost it), or each by itself, all at the same
    /// time, on a cluster, whose pipelines cannot span nodes. The outer error
    /// fails them all; an inner one (a cluster node down) fails its own.
    pub async fn run_all(
        &self,
        invocations: &[ScriptInvocation<'_>],
        conn: &mut Connection,
    ) -> Result<Vec<Result<Reply, BackendError>>, BackendError> {
        if invocations.is_empty() {
            return Ok(Vec::new());
        }
        let forks: Option<Vec<Connection>> = invocations.iter().map(|_| conn.fork()).collect();
        if let Some(forks) = forks {
            let runs = invocations
                .iter()
                .zip(forks)
                .map(|(invocation, mut conn)| async move { self.run(invocation, &mut conn).await });
            return Ok(futures_util::future::join_all(runs).await);
        }
        let mut pipeline = redis::pipe();
        for invocation in invocations {
            pipeline.invoke_script(invocation);
        }
        let replies: Vec<Reply> = match pipeline.query_async(conn).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.load(conn).await?;
                pipeline.query_async(conn).await?
            }
            replies => replies?,
        };
        Ok(replies.into_iter().map(Ok).collect())
    }

    pub async fn load(&self, conn: &mut Connection) -> Result<(), BackendError> {
        self.script().load_async(conn).await?;
        Ok(())
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

macro_rules! lua_script {
    ($file:literal) => {
        LuaScript::new($file, include_str!(concat!("../../lua/", $file)))
    };
    // A lock script: the libraries every lock script shares, then its own.
    (lock $file:literal) => {
        LuaScript::new(
            $file,
            concat!(
                include_str!("../../lua/lib/base.lua"),
                include_str!("../../lua/lib/events.lua"),
                include_str!("../../lua/lib/holders.lua"),
                include_str!("../../lua/lib/queue.lua"),
                include_str!(concat!("../../lua/", $file))
            ),
        )
    };
}

pub static ACQUIRE: LuaScript = lua_script!(lock "acquire.lua");
pub static RELEASE: LuaScript = lua_script!(lock "release.lua");
pub static EXTEND: LuaScript = lua_script!(lock "extend.lua");
pub static INSPECT: LuaScript = lua_script!(lock "inspect.lua");
pub static LEAVE: LuaScript = lua_script!(lock "leave.lua");
pub static TEND: LuaScript = lua_script!(lock "tend.lua");
pub static WATCH: LuaScript = lua_script!(lock "watch.lua");
pub static HISTORY: LuaScript = lua_script!(lock "history.lua");
pub static SET_VALUE: LuaScript = lua_script!(lock "set_value.lua");
pub static REVOKE: LuaScript = lua_script!(lock "revoke.lua");
pub static PURCHASE: LuaScript = lua_script!("purchase.lua");
pub static RESET_SALE: LuaScript = lua_script!("reset_sale.lua");
pub static RATE_LIMIT: LuaScript = lua_script!("rate_limit.lua");

/// The script a SHA names, for labelling metrics.
pub fn name_of(sha: &[u8]) -> Option<&'static str> {
    ALL.iter()
        .find(|script| script.script().get_hash().as_bytes() == sha)
        .map(|script| script.name)
}

/// Every script, for loading at start-up.
pub static ALL: [&LuaScript; 13] = [
    &ACQUIRE,
    &RELEASE,
    &EXTEND,
    &INSPECT,
    &LEAVE,
    &TEND,
    &WATCH,
    &HISTORY,
    &SET_VALUE,
    &REVOKE,
    &PURCHASE,
    &RESET_SALE,
    &RATE_LIMIT,
];

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
        let mut embedded: Vec<&str> = ALL.iter().map(|script| script.name).collect();
        embedded.sort();
        assert_eq!(files, embedded);
        for script in ALL {
            assert!(
                script.source.contains("-- Returns"),
                "{} has no header naming its returns",
                script.name
            );
        }
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
