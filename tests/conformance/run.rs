//! Running sequences: each seed draws a world and its steps, applied to the model and to Redis side by side, compared after every step; several at once (their waits overlap), each late one run again.

use std::fmt::{self, Debug, Write as _};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockgate::redis::Redis;
use lockgate_model::scenario::{Key, Req};
use lockgate_model::state::State;

use crate::clock::Ticks;
use crate::observe::{self, FenceBook, Shape};
use crate::real_side::Real;
use crate::steps::{self, Action, Outcome};
use crate::world::{Names, Rng, World};
use crate::{model_side, world};

/// How sequences are run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Steps in each sequence.
    pub steps: usize,
    pub tick_ms: u64,
    /// Sequences run at once.
    pub parallel: usize,
    /// Runs of a sequence that came out late before it counts as
    /// inconclusive.
    pub tries: usize,
    /// Stop at the first divergence (a mutant's test).
    pub stop_at_divergence: bool,
    /// Start no sequence after this long.
    pub budget: Option<Duration>,
    /// Print every sequence that agreed too, step by step.
    pub trace: bool,
}

/// How one sequence came out.
pub enum Verdict {
    Agreed,
    Diverged(String),
    /// A step ran too late in its tick for the comparison to hold.
    Late(String),
}

/// How a run of many sequences came out.
#[derive(Debug, Default)]
pub struct Summary {
    pub agreed: usize,
    /// Seed and report of each that disagreed.
    pub diverged: Vec<(u64, String)>,
    /// Seeds late on every try.
    pub inconclusive: Vec<(u64, String)>,
    /// Runs again after a late step.
    pub retried: usize,
    /// Seeds never started (the budget ran out, or a divergence stopped it).
    pub not_run: usize,
    pub elapsed: Duration,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} agreed, {} diverged, {} inconclusive ({} runs again after a late step), {} not run, in {:.1} s",
            self.agreed,
            self.diverged.len(),
            self.inconclusive.len(),
            self.retried,
            self.not_run,
            self.elapsed.as_secs_f64()
        )
    }
}

/// Runs the sequences of `seeds` against `redis`.
pub async fn run(redis: &Redis, config: &Config, seeds: Vec<u64>) -> Summary {
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let summary = Arc::new(Mutex::new(Summary::default()));
    let seeds = Arc::new(seeds);
    let mut workers = Vec::new();
    for _ in 0..config.parallel.max(1) {
        let (redis, config) = (redis.clone(), config.clone());
        let (next, stop, summary, seeds) =
            (next.clone(), stop.clone(), summary.clone(), seeds.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let over_budget = config
                    .budget
                    .is_some_and(|budget| started.elapsed() > budget);
                if stop.load(Ordering::SeqCst) || over_budget {
                    return;
                }
                let index = next.fetch_add(1, Ordering::SeqCst);
                let Some(&seed) = seeds.get(index) else {
                    return;
                };
                let verdict = tries(&redis, &config, seed, &summary).await;
                let mut summary = summary.lock().unwrap();
                match verdict {
                    Verdict::Agreed => summary.agreed += 1,
                    Verdict::Diverged(report) => {
                        summary.diverged.push((seed, report));
                        if config.stop_at_divergence {
                            stop.store(true, Ordering::SeqCst);
                        }
                    }
                    Verdict::Late(why) => summary.inconclusive.push((seed, why)),
                }
            }
        }));
    }
    for worker in workers {
        worker.await.expect("a sequence's worker");
    }
    let mut summary = Arc::try_unwrap(summary)
        .expect("the workers are done")
        .into_inner()
        .unwrap();
    let started_seeds = next.load(Ordering::SeqCst).min(seeds.len());
    let ran = summary.agreed + summary.diverged.len() + summary.inconclusive.len();
    summary.not_run = seeds.len() - started_seeds + (started_seeds - ran);
    summary.elapsed = started.elapsed();
    summary
}

/// Runs seed `seed` until it is not late, at most `config.tries` times.
async fn tries(redis: &Redis, config: &Config, seed: u64, summary: &Mutex<Summary>) -> Verdict {
    let mut verdict = Verdict::Late(String::new());
    for attempt in 0..config.tries.max(1) {
        if attempt > 0 {
            summary.lock().unwrap().retried += 1;
        }
        verdict = sequence(redis, config, seed, attempt).await;
        if !matches!(verdict, Verdict::Late(_)) {
            break;
        }
    }
    verdict
}

/// One sequence: its world and steps drawn from `seed`, under a key prefix
/// of its own.
pub async fn sequence(redis: &Redis, config: &Config, seed: u64, attempt: usize) -> Verdict {
    let mut rng = Rng::new(seed);
    let world = World::draw(&mut rng);
    let names = Names::new(&format!("c{seed}.{attempt}:"), &world);
    let ticks = Ticks::start(config.tick_ms);
    let conn = match redis.connection().await {
        Ok(conn) => conn,
        Err(err) => return Verdict::Diverged(format!("seed {seed}: no connection: {err}")),
    };
    let mut real = match Real::new(conn, names, ticks, &world).await {
        Ok(real) => real,
        Err(err) => return Verdict::Diverged(format!("seed {seed}: sessions not opened: {err}")),
    };
    if ticks.late(0) {
        return Verdict::Late("the sessions opened late".into());
    }
    let mut state = State::new(&world.scenario);
    let mut tokens: Vec<Req> = world.ids().collect();
    let mut book = FenceBook::new(world.scenario.locks);
    let mut log = String::new();
    let mut in_tick = 0;
    for index in 0..config.steps {
        let action = steps::draw(&mut rng, &world, &state, &tokens, in_tick);
        let now = state.now;
        in_tick = match action {
            Action::Wait { .. } => 0,
            _ => in_tick + 1,
        };
        let (model, told) = model_side::apply(&world, &mut state, &action, &tokens);
        let mut actual = real.apply(&world, &action, &tokens, now).await;
        let tick = state.now;
        if ticks.late(tick) {
            let into = ticks.ms_into(tick);
            return Verdict::Late(format!(
                "step {index} ({action}) ended {into:.1} ms into its tick"
            ));
        }
        let read = observe::of_redis(&mut real.conn, &real.names, &ticks, &world, tick).await;
        if ticks.read_late(tick) {
            let into = ticks.ms_into(tick);
            return Verdict::Late(format!(
                "the read after step {index} ended {into:.1} ms into its tick"
            ));
        }
        let mut held = match read {
            Ok(held) => held,
            Err(err) => return Verdict::Diverged(format!("seed {seed}: reading Redis: {err}")),
        };
        let keys = keys_of(&world, &action);
        let mut fences = actual.fences_mut(&keys);
        fences.extend(held.fences_mut());
        book.number(fences);
        let modelled = observe::of_model(&world, &state, &told);
        let _ = write!(log, "  {index:>2}  t={now:<3} {action}: {model:?}");
        if actual != model {
            let _ = write!(log, "   <- Redis: {actual:?}");
        }
        for told in &told {
            let _ = write!(
                log,
                "; R{} told on {}: {:?}",
                told.waiter.0, told.inst.gw, told.message
            );
        }
        log.push('\n');
        if actual != model || held != modelled {
            return Verdict::Diverged(report(seed, &world, &log, &modelled, &held));
        }
        if let (
            Action::Acquire { req, .. },
            Outcome::Queued { token } | Outcome::Replayed { token, .. },
        ) = (&action, &model)
        {
            tokens[usize::from(req.0)] = *token;
        }
    }
    if config.trace {
        eprintln!("seed {seed} agreed\n{world}{log}");
    }
    Verdict::Agreed
}

/// The locks whose fencing tokens an outcome of `action` carries, in order.
fn keys_of(world: &World, action: &Action) -> Vec<Key> {
    match action {
        Action::Acquire { req, .. } | Action::Leave { req, .. } => {
            world.spec(*req).keys().collect()
        }
        _ => Vec::new(),
    }
}

fn report(seed: u64, world: &World, log: &str, modelled: &Shape, held: &Shape) -> String {
    let mut out = format!(
        "seed {seed}: the scripts and the model disagree\n{world}  steps (what the model answered):\n{log}"
    );
    for (index, (model, redis)) in modelled.locks.iter().zip(&held.locks).enumerate() {
        let on = format!("lock {}", Key(index as u8));
        diff(&mut out, &on, "places", &model.places, &redis.places);
        diff(
            &mut out,
            &on,
            "last fence",
            &model.last_fence,
            &redis.last_fence,
        );
        diff(&mut out, &on, "queue", &model.queue, &redis.queue);
        diff(&mut out, &on, "presences", &model.presence, &redis.presence);
        diff(&mut out, &on, "ticket counter", &model.seq, &redis.seq);
        diff(&mut out, &on, "lock-delay", &model.delayed, &redis.delayed);
        diff(
            &mut out,
            &on,
            "told ready",
            &model.told_ready,
            &redis.told_ready,
        );
        diff(&mut out, &on, "twins", &model.twins, &redis.twins);
        diff(&mut out, &on, "told", &model.told, &redis.told);
        diff(&mut out, &on, "stray", &model.stray, &redis.stray);
    }
    for (index, (model, redis)) in modelled.sessions.iter().zip(&held.sessions).enumerate() {
        let on = format!(
            "session {}",
            world::handle(lockgate_model::scenario::Sess(index as u8))
        );
        diff(&mut out, &on, "record", model, redis);
    }
    let _ = writeln!(
        out,
        "  (fencing tokens by order, 1 the lock's first; {} is a token out of order)\n  again: make conformance SEED={seed} SEQUENCES=1 TESTS=the_scripts",
        observe::OUT_OF_ORDER
    );
    out
}

fn diff<T: Debug + PartialEq>(out: &mut String, on: &str, what: &str, model: &T, redis: &T) {
    if model != redis {
        let _ = writeln!(
            out,
            "  {on} {what}:\n    model: {model:?}\n    Redis: {redis:?}"
        );
    }
}
