//! The Lua scripts under `lua/`, embedded in the binary and invoked by SHA.

use std::sync::OnceLock;

use redis::{ErrorKind, FromRedisValue, Script, ScriptInvocation, ServerErrorKind};

use super::{BackendError, Connection};

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
    ) -> Result<Vec<i64>, BackendError> {
        self.run_as(invocation, conn).await
    }

    /// [`LuaScript::run`] for a script whose reply is not a list of integers.
    pub async fn run_as<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        conn: &mut Connection,
    ) -> Result<T, BackendError> {
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
    ) -> Result<Vec<Result<Vec<i64>, BackendError>>, BackendError> {
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
        let replies: Vec<Vec<i64>> = match pipeline.query_async(conn).await {
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
    pub fn unexpected(&self, reply: Vec<i64>) -> BackendError {
        BackendError::UnexpectedReply {
            script: self.name,
            reply,
        }
    }
}

macro_rules! lua_script {
    ($file:literal) => {
        LuaScript::new($file, include_str!(concat!("../../lua/", $file)))
    };
    // A lock script: the functions every lock script shares, then its own.
    (lock $file:literal) => {
        LuaScript::new(
            $file,
            concat!(
                include_str!("../../lua/lib/holders.lua"),
                include_str!(concat!("../../lua/", $file))
            ),
        )
    };
}

pub static ACQUIRE: LuaScript = lua_script!(lock "acquire.lua");
pub static ACQUIRE_MANY: LuaScript = lua_script!(lock "acquire_many.lua");
pub static RELEASE: LuaScript = lua_script!(lock "release.lua");
pub static EXTEND: LuaScript = lua_script!(lock "extend.lua");
pub static INSPECT: LuaScript = lua_script!(lock "inspect.lua");
pub static WITHDRAW: LuaScript = lua_script!("withdraw.lua");
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
pub static ALL: [&LuaScript; 9] = [
    &ACQUIRE,
    &ACQUIRE_MANY,
    &RELEASE,
    &EXTEND,
    &INSPECT,
    &WITHDRAW,
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
}
