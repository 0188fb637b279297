//! A step on the model's side: the model's own function for each script (`model/src/scripts.rs`, `batch.rs`, `sessions.rs`), applied to its state.

use lockgate_model::batch::Batched;
use lockgate_model::scenario::{Key, Protocol, Req};
use lockgate_model::scripts::{Acquired, Left, Presence};
use lockgate_model::sessions::SessionEnd;
use lockgate_model::state::State;
use lockgate_model::step::{Notes, Step, Told};

use crate::clock::at;
use crate::steps::{Action, LeftAs, Outcome};
use crate::world::World;

/// Applies `action` to `state`; `tokens`: the token each request acts
/// with. What it answered, and the messages it sent on grant channels.
pub fn apply(
    world: &World,
    state: &mut State,
    action: &Action,
    tokens: &[Req],
) -> (Outcome, Vec<Told>) {
    let mut notes = Notes::default();
    let mut step = Step::new(state, &world.scenario, Protocol::Fixed.fixes(), &mut notes);
    step.told = Some(Vec::new());
    let outcome = run(&mut step, world, action, tokens);
    (outcome, step.told.take().unwrap_or_default())
}

fn run(step: &mut Step<'_>, world: &World, action: &Action, tokens: &[Req]) -> Outcome {
    let token_of = |req: Req| tokens[usize::from(req.0)];
    match *action {
        Action::Acquire { req, join } => acquire(step, world, req, token_of(req), join),
        Action::Release { req } => Outcome::Released(
            world
                .spec(req)
                .keys()
                .map(|key| step.release(key, token_of(req)))
                .collect(),
        ),
        Action::Extend { req, ttl } => Outcome::Extended(
            world
                .spec(req)
                .keys()
                .map(|key| step.extend(key, token_of(req), ttl).map(at))
                .collect(),
        ),
        Action::Attach { req } => Outcome::Extended(
            world
                .spec(req)
                .keys()
                .map(|key| {
                    step.attach_place(key, token_of(req))
                        .then_some(crate::clock::FOREVER_AT)
                })
                .collect(),
        ),
        Action::Leave { req, give_back } => Outcome::Left(
            world
                .spec(req)
                .keys()
                .map(|key| leave(step, key, req, token_of(req), give_back))
                .collect(),
        ),
        Action::Tend {
            gw,
            key,
            waiting,
            ref asked,
        } => {
            let tended = step.tend_script(key, gw, waiting, asked);
            Outcome::Tended {
                lapsed: tended.lapsed,
                positions: tended.positions,
                queued: tended.queued,
            }
        }
        Action::Revoke { key } => {
            let places = step.lock(key).places.len() as u8;
            step.revoke(key);
            Outcome::Revoked(places)
        }
        Action::Inspect { key } => {
            step.inspect(key);
            let lock = step.lock(key);
            let here = lock
                .queue
                .iter()
                .filter(|entry| step.presence_of(key, entry) == Presence::Here)
                .count();
            Outcome::Inspected(here as u8)
        }
        Action::Sweep { session } => match step.session_end(session) {
            SessionEnd::Alive => Outcome::SessionAlive,
            SessionEnd::Ending {
                delayed_until,
                locks,
            } => {
                let locks: Vec<Req> = world.ids().filter(|id| locks & id.bit() != 0).collect();
                let released = locks
                    .iter()
                    .map(|&token| {
                        let key = world.spec(token).key;
                        step.session_release(key, token, delayed_until)
                    })
                    .collect();
                Outcome::Swept {
                    delayed_until: (delayed_until > step.s.now).then(|| at(delayed_until)),
                    locks,
                    released,
                }
            }
        },
        Action::KeepSession { session } => Outcome::SessionKept(step.session_keep(session).map(at)),
        Action::Wait { ticks } => {
            for _ in 0..ticks {
                step.pass_tick();
            }
            Outcome::Waited
        }
    }
}

fn acquire(step: &mut Step<'_>, world: &World, req: Req, token: Req, join: bool) -> Outcome {
    let spec = world.spec(req);
    if spec.is_batch() {
        return match step.batch_script(req, join, spec.wait) {
            Batched::Granted { ends } => Outcome::BatchGranted {
                fences: spec
                    .keys()
                    .map(|key| step.lock(key).place(req).map_or(0, |p| u64::from(p.fence)))
                    .collect(),
                ends: at(ends),
            },
            Batched::Queued => Outcome::BatchQueued,
            Batched::Held => Outcome::Held,
        };
    }
    if let Some(session) = spec.session
        && !step.session_join(session, token)
    {
        return Outcome::NoSession;
    }
    match step.acquire(spec.key, req, token, join, spec.wait) {
        Acquired::Granted { ends, fence } => Outcome::Granted {
            fence: u64::from(fence),
            ends: at(ends),
        },
        Acquired::Replayed { token, ends, fence } => Outcome::Replayed {
            token,
            fence: u64::from(fence),
            ends: at(ends),
        },
        Acquired::Queued { token, .. } => Outcome::Queued { token },
        Acquired::Held => Outcome::Held,
    }
}

fn leave(step: &mut Step<'_>, key: Key, req: Req, token: Req, give_back: bool) -> LeftAs {
    match step.leave(key, req, token, give_back) {
        Left::Left => LeftAs::Left,
        Left::Gone => LeftAs::Gone,
        Left::GivenBack => LeftAs::GivenBack,
        Left::Granted | Left::Kept => {
            let place = step.lock(key).place(token).expect("a place granted");
            LeftAs::Granted {
                fence: u64::from(place.fence),
                ends: at(place.ends),
            }
        }
    }
}
