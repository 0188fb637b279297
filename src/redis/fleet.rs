//! The fleet's record in Redis (`<prefix>meta`): the data format in use and its migrations, each live instance's record, the function libraries nobody names; the wrappers of `fleet_beat.lua`, `fleet_format.lua` and `fleet_libraries.lua`, and listing and deleting libraries.

use serde::{Deserialize, Serialize};

use super::scripts::{FLEET_BEAT, FLEET_FORMAT, FLEET_LIBRARIES};
use super::{BackendError, Connection};

/// The format a Redis with no format recorded holds: what 0.1.0, which
/// kept no record, wrote.
pub const FIRST_FORMAT: u32 = 1;

/// The key of the fleet's record, which is also the channel a change of
/// the format is told on (one slot for both, on a Cluster).
pub fn meta_key(prefix: &str) -> String {
    format!("{prefix}meta")
}

/// An instance as the fleet records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceRecord {
    /// Its configured id (what `X-Instance-Id` says).
    pub id: String,
    pub version: String,
    /// The data formats it reads.
    pub reads: Vec<u32>,
    /// The data formats it writes: the lowest and the highest.
    pub writes: [u32; 2],
    pub started_at_ms: u64,
    /// Where it serves.
    pub address: String,
    /// The name of its function library (`lockgate_<hash>`).
    pub library: String,
    /// The Redis time of its last beat (set by the script).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_at_ms: Option<u64>,
}

impl InstanceRecord {
    pub fn writes(&self, format: u32) -> bool {
        (self.writes[0]..=self.writes[1]).contains(&format)
    }
}

/// A change of the format in use, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    pub from: Option<u32>,
    pub to: u32,
    pub at_ms: u64,
    pub by: String,
    pub how: String,
}

/// The fleet as `fleet_beat.lua` read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetState {
    pub format: u32,
    pub migrations: Vec<Migration>,
    pub instances: Vec<InstanceRecord>,
    pub now_ms: u64,
}

/// What a beat says of the instance beating: its key in the fleet and its
/// record. `None` reads only.
pub type Beat<'a> = Option<(&'a str, &'a InstanceRecord)>;

/// Runs `fleet_beat.lua`: records the instance's beat (if any) and reads
/// the fleet. A Redis with no format recorded is taken to hold `first`
/// (recorded by `by`).
pub async fn beat(
    conn: &mut Connection,
    prefix: &str,
    beat: Beat<'_>,
    stale_ms: u64,
    (first, by): (u32, &str),
) -> Result<FleetState, BackendError> {
    let (instance, record) = match beat {
        Some((instance, record)) => (
            instance,
            serde_json::to_string(record).map_err(|_| unreadable(&FLEET_BEAT))?,
        ),
        None => ("", String::new()),
    };
    let mut call = FLEET_BEAT.call_with_keys(&[meta_key(prefix)]);
    call.arg(instance)
        .arg(record)
        .arg(stale_ms)
        .arg(format!("{first} {by}"));
    let reply = FLEET_BEAT.run_ungated(&call, conn).await?;
    FLEET_BEAT.read(&reply, |reply| {
        (reply.code() == "fleet").then_some(())?;
        Some(FleetState {
            format: u32::try_from(reply.number("format")?).ok()?,
            migrations: each_readable(reply.text("migrations")?)?,
            instances: each_readable(reply.text("instances")?)?,
            now_ms: reply.number("now_ms")?,
        })
    })
}

/// The entries of a JSON list that read as `T`: one a hand wrote wrong
/// (the script keeps only what it can read, but not every field) is left
/// out rather than failing the beat that carries the others.
fn each_readable<T: serde::de::DeserializeOwned>(list: &str) -> Option<Vec<T>> {
    let entries: Vec<serde_json::Value> = match serde_json::from_str(list) {
        Ok(serde_json::Value::Array(entries)) => entries,
        // cjson writes an empty list as `{}`.
        Ok(serde_json::Value::Object(empty)) if empty.is_empty() => Vec::new(),
        _ => return None,
    };
    Some(
        entries
            .into_iter()
            .filter_map(|entry| serde_json::from_value(entry).ok())
            .collect(),
    )
}

/// What a change of the format came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatChange {
    Changed {
        from: u32,
        to: u32,
    },
    /// It was that format already.
    Same,
    /// It was not the format expected any more: it is this one.
    Moved(u32),
    /// A live instance cannot write it.
    Refused {
        instance: String,
        version: String,
        writes: String,
    },
}

/// How a change of the format is asked for: to what, from what (if it
/// must be that now), by whom and how (`raise`, `lower`, `automatic
/// raise`).
#[derive(Debug, Clone, Copy)]
pub struct FormatRequest<'a> {
    pub to: u32,
    pub from: Option<u32>,
    pub by: &'a str,
    pub how: &'a str,
}

/// Runs `fleet_format.lua`: the format changed, recorded and told (on the
/// channel named as the meta key), unless a live instance cannot write it.
pub async fn change_format(
    conn: &mut Connection,
    prefix: &str,
    request: FormatRequest<'_>,
    stale_ms: u64,
) -> Result<FormatChange, BackendError> {
    let meta = meta_key(prefix);
    let mut call = FLEET_FORMAT.call_with_keys(&[&meta]);
    call.arg(request.to)
        .arg(
            request
                .from
                .map_or_else(String::new, |from| from.to_string()),
        )
        .arg(stale_ms)
        .arg(request.by)
        .arg(request.how)
        .arg(&meta);
    let reply = FLEET_FORMAT.run_ungated(&call, conn).await?;
    FLEET_FORMAT.read(&reply, |reply| match reply.code() {
        "changed" => Some(FormatChange::Changed {
            from: u32::try_from(reply.number("from")?).ok()?,
            to: u32::try_from(reply.number("to")?).ok()?,
        }),
        "same" => Some(FormatChange::Same),
        "moved" => Some(FormatChange::Moved(
            u32::try_from(reply.number("format")?).ok()?,
        )),
        "refused" => Some(FormatChange::Refused {
            instance: reply.text("instance")?.to_owned(),
            version: reply.text("version")?.to_owned(),
            writes: reply.text("writes")?.to_owned(),
        }),
        _ => None,
    })
}

/// Runs `fleet_libraries.lua`: notes the libraries `unnamed` (loaded, and
/// named by no live instance); answers those unnamed for longer than
/// `grace_ms`, for the caller to delete.
pub async fn note_unnamed(
    conn: &mut Connection,
    prefix: &str,
    unnamed: &[String],
    grace_ms: u64,
) -> Result<Vec<String>, BackendError> {
    let mut call = FLEET_LIBRARIES.call_with_keys(&[meta_key(prefix)]);
    call.arg(unnamed.join(" ")).arg(grace_ms);
    let reply = FLEET_LIBRARIES.run_ungated(&call, conn).await?;
    FLEET_LIBRARIES.read(&reply, |reply| {
        (reply.code() == "noted").then_some(())?;
        Some(
            reply
                .text("due")?
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
        )
    })
}

/// The function libraries loaded whose name starts with `lockgate_`: on a
/// Cluster, those of every master (a master added later may lack some).
pub async fn libraries(conn: &mut Connection) -> Result<Vec<String>, BackendError> {
    let mut list = redis::cmd("FUNCTION");
    list.arg("LIST").arg("LIBRARYNAME").arg("lockgate_*");
    let mut names = Vec::new();
    for primary in conn.primaries().await? {
        let listed: Vec<redis::Value> = conn.query_on(&primary, &list).await?;
        names.extend(
            listed
                .iter()
                .filter_map(library_name)
                .filter(|name| name.starts_with("lockgate_")),
        );
    }
    names.sort();
    names.dedup();
    Ok(names)
}

/// The `library_name` of one entry of `FUNCTION LIST`: a flat list of
/// names and values in RESP2, a map in RESP3.
fn library_name(entry: &redis::Value) -> Option<String> {
    let is_name = |field: &redis::Value| {
        redis::from_redis_value_ref::<String>(field).is_ok_and(|field| field == "library_name")
    };
    match entry {
        redis::Value::Array(fields) => fields
            .chunks_exact(2)
            .find(|pair| is_name(&pair[0]))
            .and_then(|pair| redis::from_redis_value_ref(&pair[1]).ok()),
        redis::Value::Map(pairs) => pairs
            .iter()
            .find(|(field, _)| is_name(field))
            .and_then(|(_, value)| redis::from_redis_value_ref(value).ok()),
        _ => None,
    }
}

/// Deletes a function library, on every master of a Cluster (one that
/// has it no longer, as another instance deleted it first, is passed).
pub async fn delete_library(conn: &mut Connection, name: &str) -> Result<(), BackendError> {
    let mut delete = redis::cmd("FUNCTION");
    delete.arg("DELETE").arg(name);
    for primary in conn.primaries().await? {
        match conn.query_on::<()>(&primary, &delete).await {
            Err(err) if err.to_string().contains("Library not found") => {}
            deleted => deleted?,
        }
    }
    Ok(())
}

fn unreadable(script: &super::scripts::Function) -> BackendError {
    BackendError::UnexpectedReply {
        script: script.name,
        reply: "its record could not be written as JSON".into(),
    }
}

/// Drops an instance's record (it stops): the fleet lists it no more.
pub async fn leave(conn: &mut Connection, prefix: &str, key: &str) -> Result<(), BackendError> {
    let () = redis::cmd("HDEL")
        .arg(meta_key(prefix))
        .arg(format!("i:{key}"))
        .query_async(conn)
        .await?;
    Ok(())
}
