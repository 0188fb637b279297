//! What Redis holds, in the model's shape: each lock's places (token, fencing token by order, lease's end, and what the hash records of the holder), its queue (order, tickets, tokens, instances, deadlines, whether each takes a grant outright), the instances' presences, the ticket counter, a lock-delay in force, the batches told, the Idempotency-Key lists, the messages sent on its grant channels; each session's expiry, end and locks. Read from the real keys, or made from the model's state.

use std::collections::{BTreeMap, HashMap};

use lockgate::redis::Connection;
use lockgate_model::scenario::{Gw, Key, Req, Sess, Tick};
use lockgate_model::state::State;
use lockgate_model::step::{Message, Told};

use crate::clock::{At, Ticks, at};
use crate::world::{self, Names, World};

/// One place of a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlaceShape {
    pub token: Req,
    /// By order among the lock's fencing tokens (1 is its first grant's).
    pub fence: u64,
    pub ends: At,
    pub holds: u64,
    pub streamed: bool,
    pub session: Option<u8>,
    pub idempotency_key: Option<u8>,
}

/// One waiter in a lock's queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryShape {
    pub id: Req,
    pub token: Req,
    pub ticket: u64,
    pub gw: u8,
    pub deadline: At,
    pub since: At,
    pub batch: bool,
    /// Its instance takes a grant outright (`one`).
    pub one: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LockShape {
    /// By token.
    pub places: Vec<PlaceShape>,
    /// The last fencing token issued (by order; 0 for none).
    pub last_fence: u64,
    /// In the order they are served.
    pub queue: Vec<EntryShape>,
    /// Each instance's presence (the last tick it stands through).
    pub presence: Vec<(u8, At)>,
    /// The last ticket given.
    pub seq: u64,
    /// The end of a lock-delay in force.
    pub delayed: Option<At>,
    /// The batches' waiters told the lock is ready for them.
    pub told_ready: Vec<Req>,
    /// Per Idempotency-Key, the requests waiting under it.
    pub twins: Vec<(u8, Vec<Req>)>,
    /// The messages sent on its grant channels since the last read (each
    /// instance's, the waiter's and what it says), sorted: the channels'
    /// order among themselves is not kept.
    pub told: Vec<(u8, Req, Message)>,
    /// What the keys hold that the model has no place for, or that
    /// disagrees with itself (a count of holds, of places taken).
    pub stray: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionShape {
    pub expires: At,
    pub ended: bool,
    /// The end of its lock-delay, while in force.
    pub delayed_until: Option<At>,
    pub locks: Vec<Req>,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Shape {
    pub locks: Vec<LockShape>,
    pub sessions: Vec<SessionShape>,
}

impl Shape {
    /// Each fencing token in it, with its lock.
    pub fn fences_mut(&mut self) -> Vec<(Key, &mut u64)> {
        let mut fences = Vec::new();
        for (index, lock) in self.locks.iter_mut().enumerate() {
            let key = Key(index as u8);
            fences.push((key, &mut lock.last_fence));
            for place in &mut lock.places {
                fences.push((key, &mut place.fence));
            }
        }
        fences
    }
}

/// The model's state in the shape (what the model says Redis holds), and
/// the messages its last step sent, `told`.
pub fn of_model(world: &World, state: &State, told: &[Told]) -> Shape {
    let now = state.now;
    let locks = world
        .keys()
        .map(|key| {
            let lock = state.redis.lock(key);
            let places = lock
                .places
                .iter()
                .map(|place| {
                    let spec = world.spec(place.token);
                    PlaceShape {
                        token: place.token,
                        fence: u64::from(place.fence),
                        ends: at(place.ends),
                        holds: 1,
                        streamed: spec.streamed,
                        session: spec.session.map(|session| session.0),
                        idempotency_key: spec.idempotency_key,
                    }
                })
                .collect();
            let queue: Vec<EntryShape> = lock
                .queue
                .iter()
                .map(|entry| EntryShape {
                    id: entry.id,
                    token: entry.token,
                    ticket: u64::from(entry.ticket),
                    gw: entry.inst.gw.0,
                    deadline: at(entry.deadline),
                    since: at(entry.since),
                    batch: world.spec(entry.id).is_batch(),
                    one: entry.one,
                })
                .collect();
            let mut messages: Vec<(u8, Req, Message)> = told
                .iter()
                .filter(|told| told.key == key)
                .map(|told| (told.inst.gw.0, told.waiter, told.message))
                .collect();
            messages.sort();
            let presence = (0..world.scenario.gateways)
                .filter_map(|gw| Some((gw, at(lock.presence[usize::from(gw)][0]?))))
                .collect();
            let mut twins: BTreeMap<u8, Vec<Req>> = BTreeMap::new();
            for entry in &lock.queue {
                if let Some(key) = world.spec(entry.id).idempotency_key {
                    twins.entry(key).or_default().push(entry.id);
                }
            }
            LockShape {
                places,
                last_fence: u64::from(lock.last_fence),
                queue,
                presence,
                seq: u64::from(lock.seq),
                delayed: lock.delayed(now).then(|| at(lock.delayed_until)),
                told_ready: world
                    .ids()
                    .filter(|id| lock.told_ready & id.bit() != 0)
                    .collect(),
                twins: sorted(twins),
                told: messages,
                stray: Vec::new(),
            }
        })
        .collect();
    let sessions = state
        .redis
        .sessions
        .iter()
        .map(|session| SessionShape {
            expires: at(session.expires),
            ended: session.ended.is_some(),
            delayed_until: (session.ended.is_some() && session.delayed_until > now)
                .then(|| at(session.delayed_until)),
            locks: world
                .ids()
                .filter(|id| session.locks & id.bit() != 0)
                .collect(),
        })
        .collect();
    Shape { locks, sessions }
}

fn sorted(twins: BTreeMap<u8, Vec<Req>>) -> Vec<(u8, Vec<Req>)> {
    twins
        .into_iter()
        .map(|(key, mut ids)| {
            ids.sort();
            (key, ids)
        })
        .collect()
}

/// What Redis holds now, in one round trip (nothing else runs on these
/// keys), at tick `now`; fencing tokens as Redis has them.
pub async fn of_redis(
    conn: &mut Connection,
    names: &Names,
    ticks: &Ticks,
    world: &World,
    now: Tick,
) -> redis::RedisResult<Shape> {
    let mut pipe = redis::pipe();
    for key in world.keys() {
        let keys = names.lock(key);
        let [lock, fence, holders, queue, waiters] =
            ["lock", "fence", "holders", "queue", "waiters"]
                .map(|what| format!("{}{what}:{{{}}}", names.prefix, keys.key()));
        pipe.cmd("HGETALL").arg(&lock).cmd("PEXPIRETIME").arg(&lock);
        pipe.cmd("ZRANGE")
            .arg(&holders)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES");
        pipe.cmd("ZRANGE")
            .arg(&queue)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES");
        pipe.cmd("HGETALL").arg(&waiters).cmd("GET").arg(&fence);
        for gw in 0..world.scenario.gateways {
            let channel = format!(
                "{}granted:{{{}}}:{}",
                names.prefix,
                keys.key(),
                world::instance(Gw(gw))
            );
            pipe.cmd("LRANGE").arg(&channel).arg(0).arg(-1);
            pipe.cmd("DEL").arg(&channel).ignore();
        }
    }
    for index in 0..world.scenario.sessions.len() {
        let keys = names.session(Sess(index as u8));
        pipe.cmd("HGETALL")
            .arg(&keys.session)
            .cmd("HKEYS")
            .arg(&keys.locks);
    }
    let replies: Vec<redis::Value> = pipe.query_async(conn).await?;
    let mut replies = replies.into_iter();
    let mut next = move || replies.next().unwrap_or(redis::Value::Nil);
    let mut shape = Shape::default();
    for _ in world.keys() {
        let read = LockRead {
            hash: redis::from_redis_value(next())?,
            expires: redis::from_redis_value(next())?,
            held: redis::from_redis_value(next())?,
            ranked: redis::from_redis_value(next())?,
            entries: redis::from_redis_value(next())?,
            last: redis::from_redis_value(next())?,
        };
        let mut lock = read.shape(ticks, now);
        for gw in 0..world.scenario.gateways {
            let messages: Vec<String> = redis::from_redis_value(next())?;
            for message in messages {
                match told(&message) {
                    Some((waiter, what)) => lock.told.push((gw, waiter, what)),
                    None => lock
                        .stray
                        .push(format!("message {message:?} on {}", Gw(gw))),
                }
            }
        }
        lock.told.sort();
        shape.locks.push(lock);
    }
    for _ in 0..world.scenario.sessions.len() {
        let record: HashMap<String, String> = redis::from_redis_value(next())?;
        let held: Vec<String> = redis::from_redis_value(next())?;
        shape.sessions.push(session(ticks, now, &record, &held));
    }
    Ok(shape)
}

/// A grant channel's message: `<id> ready`, or `<id> <fence> <ends>`
/// and then `outright` for a grant of the whole lease (and a
/// `traceparent`, when the run was traced: never here).
fn told(message: &str) -> Option<(Req, Message)> {
    let words: Vec<&str> = message.split(' ').collect();
    let waiter = Req(world::number(words.first()?, 'w')?);
    let numbers =
        |fence: &str, ends: &str| fence.parse::<u64>().is_ok() && ends.parse::<u64>().is_ok();
    let what = match words[1..] {
        ["ready"] => Message::Ready,
        [fence, ends] if numbers(fence, ends) => Message::Offered,
        [fence, ends, "outright"] if numbers(fence, ends) => Message::Outright,
        _ => return None,
    };
    Some((waiter, what))
}

fn session(
    ticks: &Ticks,
    now: Tick,
    record: &HashMap<String, String>,
    held: &[String],
) -> SessionShape {
    let number = |field: &str| record.get(field).and_then(|v| v.parse::<u64>().ok());
    let mut tokens: Vec<Req> = held
        .iter()
        .filter_map(|field| world::number(field.split(' ').next()?, 't').map(Req))
        .collect();
    tokens.sort();
    SessionShape {
        expires: number("expires").map_or(-1, |ms| ticks.until_tick(ms)),
        ended: record.contains_key("ended"),
        delayed_until: number("delayed_until")
            .map(|ms| ticks.end_tick(ms))
            .filter(|&until| until > At::from(now)),
        locks: tokens,
    }
}

/// The fields of a plain lock's hash, besides a holder's, and of a lock
/// with many holders (`lua/lib/holders.lua`).
const PLAIN_FIELDS: [&str; 9] = [
    "owner", "holds", "fence", "at", "streamed", "value", "idem", "body", "session",
];
const HOLDER_FIELDS: [&str; 8] = ["h:", "f:", "a:", "s:", "v:", "i:", "e:", "p:"];

/// One lock's keys as read: its hash and the hash's expiry, the holders
/// (with their leases' ends), the queue (with tickets), the waiters hash,
/// the fence counter.
struct LockRead {
    hash: HashMap<String, String>,
    expires: i64,
    held: Vec<(String, f64)>,
    ranked: Vec<(String, f64)>,
    entries: HashMap<String, String>,
    last: Option<u64>,
}

impl LockRead {
    fn shape(&self, ticks: &Ticks, now: Tick) -> LockShape {
        let hash = &self.hash;
        let mut shape = LockShape {
            last_fence: self.last.unwrap_or(0),
            ..LockShape::default()
        };
        let mut seen: Vec<String> = vec!["delayed".into()];
        if let Some(owner) = hash.get("owner") {
            seen.extend(PLAIN_FIELDS.map(String::from));
            let ends = ticks.end_tick(u64::try_from(self.expires).unwrap_or(0));
            shape
                .places
                .push(place(hash, owner, "", ends, &mut shape.stray));
        } else if let Some(mode) = hash.get("mode") {
            seen.extend(["mode", "limit", "taken", "holds", "fence"].map(String::from));
            let mut holds = 0;
            for (token, ends) in &self.held {
                let ends = ticks.end_tick(*ends as u64);
                let place = place(hash, token, ":", ends, &mut shape.stray);
                holds += place.holds;
                // A holder whose lease ended stays until a script drops it
                // (`drop_ended`): it holds no place.
                if ends > At::from(now) {
                    shape.places.push(place);
                }
                seen.extend(HOLDER_FIELDS.map(|field| format!("{field}{token}")));
            }
            let count = |field: &str| hash.get(field).and_then(|v| v.parse::<u64>().ok());
            if count("holds") != Some(holds) {
                let held = hash.get("holds");
                shape
                    .stray
                    .push(format!("holds {held:?}, the holders' {holds}"));
            }
            let holders = self.held.len();
            if mode == "counted" && count("taken") != Some(holders as u64) {
                let taken = hash.get("taken");
                shape
                    .stray
                    .push(format!("taken {taken:?}, {holders} holders"));
            }
            seen.extend(hash.keys().filter(|field| field.starts_with("k:")).cloned());
        }
        shape.places.sort_by_key(|place| place.token);
        for field in hash.keys() {
            if !seen.contains(field) {
                shape.stray.push(format!("lock field {field}"));
            }
        }
        shape.delayed = hash
            .get("delayed")
            .and_then(|v| v.parse::<u64>().ok())
            .map(|ms| ticks.end_tick(ms))
            .filter(|&until| until > At::from(now));
        read_queue(&mut shape, ticks, &self.ranked, &self.entries);
        shape
    }
}

/// A holder's place as the lock's hash records it: a plain lock's fields
/// (`sep` ''), or a holder's of a lock with many (`sep` ':', `h:<token>`).
fn place(
    hash: &HashMap<String, String>,
    token: &str,
    sep: &str,
    ends: At,
    stray: &mut Vec<String>,
) -> PlaceShape {
    let field = |plain: &str, many: &str| {
        let name = if sep.is_empty() {
            plain.to_owned()
        } else {
            format!("{many}{sep}{token}")
        };
        hash.get(&name).cloned()
    };
    let number = |text: Option<String>| text.and_then(|v| v.parse::<u64>().ok());
    let idem = match (field("idem", "i"), field("body", "i")) {
        (Some(idem), Some(body)) if sep.is_empty() => Some(format!("{idem} {body}")),
        (Some(record), _) if !sep.is_empty() => Some(record),
        _ => None,
    };
    let idempotency_key = idem.as_deref().and_then(|record| {
        let (key, body) = record.split_once(' ')?;
        let key = world::number(key, 'k')?;
        (body == world::idempotency(key).1).then_some(key)
    });
    if idem.is_some() && idempotency_key.is_none() {
        stray.push(format!("{token}'s Idempotency-Key record {idem:?}"));
    }
    if field("value", "v").is_some() {
        stray.push(format!("{token}'s value"));
    }
    let session =
        field("session", "e").and_then(|record| world::number(record.split(' ').next()?, 's'));
    PlaceShape {
        token: Req(world::number(token, 't').unwrap_or(u8::MAX)),
        fence: number(field("fence", "f")).unwrap_or(0),
        ends,
        holds: number(field("holds", "h")).unwrap_or(0),
        streamed: field("streamed", "s").is_some(),
        session,
        idempotency_key,
    }
}

fn read_queue(
    shape: &mut LockShape,
    ticks: &Ticks,
    ranked: &[(String, f64)],
    entries: &HashMap<String, String>,
) {
    let mut twins: BTreeMap<u8, Vec<Req>> = BTreeMap::new();
    for (field, value) in entries {
        let tick_of = |ms: &str| ms.parse::<u64>().map_or(-1, |ms| ticks.until_tick(ms));
        if let Some(gw) = field.strip_prefix('@').and_then(|i| world::number(i, 'g')) {
            shape.presence.push((gw, tick_of(value)));
        } else if field == "#seq" {
            shape.seq = value.parse().unwrap_or(0);
        } else if let Some(id) = field.strip_prefix('!').and_then(|i| world::number(i, 'w')) {
            shape.told_ready.push(Req(id));
        } else if let Some(key) = field.strip_prefix('~').and_then(|k| world::number(k, 'k')) {
            let ids = value.split(' ').filter_map(|id| world::number(id, 'w'));
            twins.insert(key, ids.map(Req).collect());
        } else if !ranked.iter().any(|(id, _)| id == field) {
            shape.stray.push(format!("waiters field {field}"));
        }
    }
    shape.presence.sort();
    shape.told_ready.sort();
    shape.twins = sorted(twins);
    for (id, ticket) in ranked {
        let entry: serde_json::Value = entries
            .get(id)
            .and_then(|json| serde_json::from_str(json).ok())
            .unwrap_or_default();
        let text = |name: &str| entry[name].as_str().unwrap_or_default().to_owned();
        let ms = |name: &str, tick: fn(&Ticks, u64) -> At| {
            entry[name].as_u64().map_or(-1, |ms| tick(ticks, ms))
        };
        shape.queue.push(EntryShape {
            id: Req(world::number(id, 'w').unwrap_or(u8::MAX)),
            token: Req(world::number(&text("token"), 't').unwrap_or(u8::MAX)),
            ticket: *ticket as u64,
            gw: world::number(&text("inst"), 'g').unwrap_or(u8::MAX),
            deadline: ms("deadline", Ticks::until_tick),
            since: ms("since", Ticks::instant_tick),
            batch: entry["batch"].as_u64() == Some(1),
            one: entry["one"].as_u64() == Some(1),
        });
    }
}

/// Fencing tokens by order: per lock, the real tokens in the order they
/// were first seen, so that the n-th is the model's n-th grant's. A real
/// token first seen below one seen before (a token not larger than an
/// earlier one) is numbered `u64::MAX`, which no model token is.
pub struct FenceBook {
    issued: Vec<Vec<u64>>,
}

/// The number of a real fencing token out of order.
pub const OUT_OF_ORDER: u64 = u64::MAX;

impl FenceBook {
    pub fn new(locks: u8) -> Self {
        Self {
            issued: vec![Vec::new(); usize::from(locks)],
        }
    }

    /// Numbers every real token in `fences` (0 stays 0: none), those
    /// first seen now in increasing order.
    pub fn number(&mut self, fences: Vec<(Key, &mut u64)>) {
        for (index, issued) in self.issued.iter_mut().enumerate() {
            let mut new: Vec<u64> = fences
                .iter()
                .filter(|(key, fence)| usize::from(key.0) == index && **fence != 0)
                .map(|(_, fence)| **fence)
                .filter(|fence| !issued.contains(fence))
                .collect();
            new.sort_unstable();
            new.dedup();
            for fence in new {
                if issued.last().is_none_or(|last| fence > *last) {
                    issued.push(fence);
                }
            }
        }
        for (key, fence) in fences {
            if *fence == 0 {
                continue;
            }
            let issued = &self.issued[usize::from(key.0)];
            *fence = issued
                .iter()
                .position(|known| known == fence)
                .map_or(OUT_OF_ORDER, |at| at as u64 + 1);
        }
    }
}
