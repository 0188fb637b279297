//! The model checked against the scripts: a differential test between the protocol's model (`model/`, a hand-written mirror of the Lua) and the real Lua on a real redis-server, through the gateway's own wrappers (see docs/model.md, "What ties the model to the scripts").
//!
//! * [`world`]: a sequence's setting (locks, instances, sessions, 2-4
//!   requests), drawn from its seed, as the model's scenario
//! * [`steps`]: the steps (each one script, or whole ticks passing), what
//!   each answered, and how the next is drawn
//! * [`model_side`], [`real_side`]: one step on each side
//! * [`observe`]: what Redis holds, read into the model's shape
//! * [`clock`]: the model's ticks as real time, and the library's
//!   constants scaled to them
//! * [`run`]: sequences run side by side and compared after every step
//! * [`mutants`]: patches of the Lua the comparison must catch
//! * [`plain`]: the plain scripts against the full ones, from the same states
//! * [`server`]: the test's own redis-server
//!
//! `make conformance` runs this alone; `SEED=`, `SEQUENCES=`, `STEPS=`,
//! `TICK_MS=`, `PARALLEL=` (as `CONFORMANCE_SEED`, ... here) make longer
//! or other runs.

mod clock;
mod model_side;
mod mutants;
mod observe;
mod plain;
mod real_side;
mod run;
mod server;
mod steps;
mod world;

use std::time::Duration;

use lockgate::redis::library;

use clock::Ticks;
use mutants::Mutant;
use run::{Config, Summary};
use server::RedisServer;

fn setting<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(format!("CONFORMANCE_{name}"))
        .ok()
        .filter(|value| !value.is_empty())
        .map(|value| {
            value
                .parse()
                .unwrap_or_else(|_| panic!("CONFORMANCE_{name}={value}"))
        })
        .unwrap_or(default)
}

/// The seeded run as `make test` has it (about 60 s at most on a loaded
/// two-core machine), or as the environment asks.
fn config() -> (Config, Vec<u64>) {
    let first = setting("SEED", 1u64);
    let count = setting("SEQUENCES", 120u64);
    let asked = std::env::var("CONFORMANCE_SEQUENCES").is_ok_and(|v| !v.is_empty());
    let config = Config {
        steps: setting("STEPS", 18),
        tick_ms: setting("TICK_MS", 100),
        parallel: setting("PARALLEL", 6),
        tries: 4,
        stop_at_divergence: false,
        // A longer run asked for runs whole.
        budget: (!asked).then(|| Duration::from_secs(50)),
        trace: setting("TRACE", 0u8) == 1,
    };
    (config, (first..first + count).collect())
}

/// A redis-server with the lock library scaled to the tick, changed by
/// `mutant` if any.
async fn server(tick_ms: u64, mutant: Option<&Mutant>) -> RedisServer {
    let server = RedisServer::start().await;
    let (_, source) = library();
    let mut source = Ticks::start(tick_ms).scaled_library(source);
    if let Some(mutant) = mutant {
        source = mutant.apply(&source);
    }
    server.load_library(&source).await;
    server
}

fn print_divergences(summary: &Summary) {
    for (seed, why) in summary.inconclusive.iter().take(5) {
        eprintln!("seed {seed} inconclusive: {why}");
    }
    for (_, report) in &summary.diverged {
        eprintln!("{report}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripts_do_what_the_model_does_over_the_seeded_sequences() {
    let (config, seeds) = config();
    let server = server(config.tick_ms, None).await;
    let summary = run::run(&server.gateway_redis(), &config, seeds).await;
    eprintln!("the scripts against the model: {summary}");
    print_divergences(&summary);
    assert!(summary.diverged.is_empty(), "{summary}");
    // Late steps make a sequence inconclusive, never a failure; but a run
    // in which most were proves little.
    let ran = summary.agreed + summary.inconclusive.len();
    assert!(
        summary.agreed * 2 > ran && summary.agreed > 0,
        "too many sequences inconclusive: {summary}"
    );
}

/// How many seeded sequences a mutant may take to be told from the model.
const MUTANT_SEQUENCES: u64 = 400;

/// Runs seeded sequences against `mutant` until one disagrees with the model.
async fn caught(mutant: &Mutant) {
    let (config, _) = config();
    let config = Config {
        stop_at_divergence: true,
        budget: None,
        ..config
    };
    let server = server(config.tick_ms, Some(mutant)).await;
    let seeds: Vec<u64> = (1..=MUTANT_SEQUENCES).collect();
    let summary = run::run(&server.gateway_redis(), &config, seeds).await;
    let first = summary.diverged.iter().map(|(seed, _)| *seed).min();
    match first {
        Some(seed) => {
            let (_, report) = summary.diverged.iter().find(|(s, _)| *s == seed).unwrap();
            eprintln!(
                "mutant {} ({}) caught by seed {seed}: {summary}\n{report}",
                mutant.name, mutant.breaks
            );
        }
        None => panic!(
            "mutant {} ({}) not caught in {MUTANT_SEQUENCES} sequences: {summary}",
            mutant.name, mutant.breaks
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_presence_check_skipped_is_caught() {
    caught(&mutants::PRESENCE_SKIPPED).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fencing_token_not_raised_is_caught() {
    caught(&mutants::FENCE_NOT_RAISED).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_granted_out_of_order_is_caught() {
    caught(&mutants::OUT_OF_ORDER).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_delay_ignored_is_caught() {
    caught(&mutants::LOCK_DELAY_IGNORED).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_end_ignored_is_caught() {
    caught(&mutants::SESSION_END_IGNORED).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offer_kept_the_whole_lease_is_caught() {
    caught(&mutants::OFFER_WHOLE_LEASE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_away_waiter_dropped_is_caught() {
    caught(&mutants::AWAY_DROPPED).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_waiter_granted_outright_is_caught() {
    caught(&mutants::FRESHNESS_SKIPPED).await;
}

/// The plain scripts against the full ones, on the library as shipped
/// (changed by `mutant`, if any): how many cases the plain ones answered,
/// and each difference.
async fn plain_against_full(mutant: Option<&Mutant>) -> (usize, Vec<String>) {
    let server = RedisServer::start().await;
    let (_, source) = library();
    let source = mutant.map_or_else(|| source.to_owned(), |mutant| mutant.apply(source));
    server.load_library(&source).await;
    let redis = server.gateway_redis();
    let mut conn = redis.connection().await.expect("a connection");
    plain::compare_all(&mut conn).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plain_scripts_answer_as_the_full_ones_or_busy_from_every_state() {
    let (answered, differ) = plain_against_full(None).await;
    let cases = plain::STATES.len() * plain::CALLS.len();
    eprintln!("plain against full: {cases} cases, {answered} answered by the plain scripts");
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    // Not every case may be busy: the plain scripts must do something.
    assert!(
        answered >= 20,
        "only {answered} answered by the plain scripts"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_try_that_ignores_the_queue_is_caught() {
    let (_, differ) = plain_against_full(Some(&mutants::PLAIN_TRY_IGNORES_QUEUE)).await;
    assert!(
        !differ.is_empty(),
        "the mutant answered as the full scripts"
    );
    eprintln!("caught:\n{}", differ.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_release_that_ignores_waiters_is_caught() {
    let (_, differ) = plain_against_full(Some(&mutants::PLAIN_RELEASE_IGNORES_WAITERS)).await;
    assert!(
        !differ.is_empty(),
        "the mutant answered as the full scripts"
    );
    eprintln!("caught:\n{}", differ.join("\n"));
}

#[test]
fn the_library_is_scaled_to_the_tick_in_its_four_constants_only() {
    let (_, source) = library();
    let scaled = Ticks::start(100).scaled_library(source);
    for line in [
        "local PRESENCE_MS = 325",
        "local OFFER_MS = 250",
        "local AWAY_MS = 3300",
        "local FRESH_MS = 150",
    ] {
        assert!(scaled.contains(line), "{line}");
    }
    let changed = source
        .lines()
        .zip(scaled.lines())
        .filter(|(before, after)| before != after)
        .count();
    assert_eq!(changed, 4);
}

/// Found by this harness (see docs/model.md), and by an API test at the
/// same time: a batch that waits for a lock a session's holder holds,
/// attached to its session, was answered `queued` with that lock's
/// `free_in_ms` written as a float (the lease is `SESSION_LEASE`, 4.5e15
/// ms: `4.5018034084241e+15`), which the gateway could not read: `POST
/// /locks/batch` answered 500. Fixed in `batch.lua` (each written `%d`).
#[tokio::test]
async fn a_batch_waiting_on_a_session_holder_is_answered_readably() {
    use lockgate::redis::locks::batch::{self, BatchAttempt, BatchLock, BatchReply};
    use lockgate::redis::locks::grant::{self, AcquireReply, Attempt, ExtendReply, Waiter};
    use lockgate::redis::locks::{LockKeys, LockKind};
    use lockgate::redis::sessions::{self, Opening, SessionKeys};

    let server = RedisServer::start().await;
    server.load_library(library().1).await;
    let redis = server.gateway_redis();
    let mut conn = redis.connection().await.unwrap();
    let prefix: std::sync::Arc<str> = "b:".into();
    let (x, y) = (LockKeys::new(&prefix, "x"), LockKeys::new(&prefix, "y"));
    let session = SessionKeys::new(&prefix, "s0");
    let opening = Opening {
        ttl_ms: 30_000,
        lock_delay_ms: 0,
        value: None,
        principal: "",
    };
    sessions::open(&mut conn, &session, "s0", opening)
        .await
        .unwrap();
    let attempt = Attempt {
        session: Some("s0 0"),
        ..plain::attempt("t0", LockKind::Exclusive, 30_000)
    };
    let granted = grant::acquire(&mut conn, &x, "PUBLISH", attempt)
        .await
        .unwrap();
    assert!(matches!(granted, AcquireReply::Granted(_)), "{granted:?}");
    let attached = grant::attach(&mut conn, &x, "PUBLISH", "t0").await.unwrap();
    assert!(matches!(attached, ExtendReply::Extended(_)), "{attached:?}");

    let locks = [&x, &y].map(|keys| BatchLock {
        keys,
        kind: LockKind::Exclusive,
        permits: 1,
    });
    let waiter = Waiter {
        id: "w1",
        instance: "g0",
        outright: false,
    };
    let attempt = BatchAttempt {
        token: "t1",
        ttl_ms: 30_000,
        wait_left_ms: 10_000,
        waiter: Some(waiter),
        value: None,
        session: None,
    };
    let reply = batch::batch(&mut conn, &locks, "PUBLISH", attempt).await;
    assert!(
        matches!(reply, Ok(BatchReply::Queued { .. })),
        "the batch waits, and is told so: {reply:?}"
    );
}
