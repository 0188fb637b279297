//! Running the checker on one scenario under one protocol, and what it found: states explored, depth, time, and each property's verdict, with the shortest counterexample to each property it breaks.

use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model, Path, Property};

use crate::properties;
use crate::scenario::{Fixes, Scenario};
use crate::state::State;
use crate::step::Notes;
use crate::system::{Action, LockModel};
use crate::trace;

/// How far to look.
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    /// Steps along a path (none: until time stops at the horizon).
    pub depth: Option<usize>,
    /// Extra ticks past each scenario's horizon.
    pub extra_ticks: u8,
    pub threads: usize,
    /// Stop after generating this many states (a guard for memory: each
    /// state explored costs a fingerprint in the set of states seen).
    pub max_states: usize,
}

/// The breadth-first search for a shortest counterexample keeps every
/// state of its frontier with its path (about 1 KB each): it stops here.
const SHORTEST_MAX_STATES: usize = 6_000_000;

/// One property's verdict.
pub enum Verdict {
    /// No counterexample within the bound (an `always` property).
    Holds,
    /// A counterexample (an `always` property), or an example (`sometimes`).
    Found,
    /// No example within the bound (a `sometimes` property).
    Unreached,
}

/// What one check found.
pub struct Report {
    pub model: LockModel,
    /// The search stopped at `max_states` before exhausting the bound.
    pub capped: bool,
    pub unique_states: usize,
    pub states: usize,
    pub max_depth: usize,
    pub elapsed: Duration,
    pub verdicts: Vec<(&'static str, Verdict)>,
}

impl Report {
    /// The properties broken (counterexamples found).
    pub fn broken(&self) -> Vec<&'static str> {
        self.verdicts
            .iter()
            .filter(|(name, verdict)| {
                !properties::is_reachability(name) && matches!(verdict, Verdict::Found)
            })
            .map(|(name, _)| *name)
            .collect()
    }

    /// The reachability properties no example was found for.
    pub fn unreached(&self) -> Vec<&'static str> {
        self.verdicts
            .iter()
            .filter(|(_, verdict)| matches!(verdict, Verdict::Unreached))
            .map(|(name, _)| *name)
            .collect()
    }
}

fn with_horizon(mut scenario: Scenario, bound: Bound) -> Scenario {
    scenario.horizon = scenario.horizon.saturating_add(bound.extra_ticks);
    scenario
}

/// Checks every property of `scenario` under `fixes` up to `bound`,
/// depth first (its memory is the set of states seen, not a frontier).
pub fn run(scenario: Scenario, fixes: Fixes, bound: Bound) -> Report {
    let model = LockModel::new(with_horizon(scenario, bound), fixes);
    let names: Vec<&'static str> = model.properties().iter().map(|p| p.name).collect();
    let started = Instant::now();
    let mut builder = model
        .checker()
        .threads(bound.threads)
        .target_state_count(bound.max_states);
    if let Some(depth) = bound.depth {
        builder = builder.target_max_depth(depth);
    }
    let checker = builder.spawn_dfs().join();
    let elapsed = started.elapsed();
    let found = checker.discoveries();
    let verdicts = names
        .into_iter()
        .map(|name| {
            let verdict = match found.contains_key(name) {
                true => Verdict::Found,
                false if properties::is_reachability(name) => Verdict::Unreached,
                false => Verdict::Holds,
            };
            (name, verdict)
        })
        .collect();
    Report {
        capped: checker.state_count() >= bound.max_states,
        unique_states: checker.unique_state_count(),
        states: checker.state_count(),
        max_depth: checker.max_depth(),
        elapsed,
        verdicts,
        model: LockModel::new(checker.model().scenario.clone(), fixes),
    }
}

/// A counterexample to `property`, as readable events ending with the
/// state that breaks it.
pub struct Counterexample {
    pub events: Vec<String>,
    /// No shorter one exists (false when the breadth-first search hit its
    /// memory guard and a depth-first one was taken instead).
    pub shortest: bool,
}

/// The shortest counterexample to `property` (fewest steps).
///
/// stateright keeps the last discovery of a property made in a block of
/// states, not the first: the search stops at the first block with one,
/// then looks again below its length until none is shorter. When the
/// breadth-first search would need too much memory, a depth-first one
/// finds a counterexample, and further depth-first searches, each bounded
/// halfway to the shortest length not yet ruled out, find shorter ones.
pub fn shortest(
    scenario: Scenario,
    fixes: Fixes,
    property: &'static str,
    bound: Bound,
) -> Option<Counterexample> {
    let scenario = with_horizon(scenario, bound);
    let search = |depth: Option<usize>, breadth_first: bool| {
        let mut model = LockModel::new(scenario.clone(), fixes);
        model.only = Some(property);
        // Depth first, memory is no matter: it may look as far as the check did.
        let cap = if breadth_first {
            SHORTEST_MAX_STATES.min(bound.max_states)
        } else {
            bound.max_states
        };
        let mut builder = model
            .checker()
            .finish_when(HasDiscoveries::AnyFailures)
            .threads(1)
            .target_state_count(cap);
        // stateright counts the initial state as depth 1.
        if let Some(depth) = depth.or(bound.depth) {
            builder = builder.target_max_depth(depth);
        }
        if breadth_first {
            builder.spawn_bfs().join().discovery(property)
        } else {
            builder.spawn_dfs().join().discovery(property)
        }
    };
    let (mut best, shortest): (Path<State, Action>, bool) = match search(None, true) {
        Some(path) => (path, true),
        None => (search(None, false)?, false),
    };
    let steps = |path: &Path<State, Action>| path.clone().into_actions().len();
    // Each search below the length of the best one so far: none, and it is shortest.
    if shortest {
        while let Some(shorter) = search(Some(steps(&best) + 1), true) {
            best = shorter;
        }
    } else {
        // Depth first, halving the gap to a length with none found (a
        // bounded depth-first search may miss one, so this is no proof).
        let mut none_at = 0;
        while steps(&best) > none_at + 1 {
            let try_at = (none_at + steps(&best)) / 2;
            match search(Some(try_at + 1), false) {
                Some(shorter) if steps(&shorter) < steps(&best) => best = shorter,
                _ => none_at = try_at,
            }
        }
    }
    let model = LockModel::new(scenario, fixes);
    let mut events = trace::events(&model, &best);
    events.extend(trace::outcome(&model, best.last_state()));
    Some(Counterexample { events, shortest })
}

// The checker's view of the model: its states, actions and properties
// (kept here, beside the search, so that the system knows nothing of them).
impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State::new(&self.scenario)]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let urgent = self.possible(state, actions);
        if !urgent && state.now < self.scenario.horizon {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        Some(self.apply(state, action, &mut Notes::default()))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut all = properties::all();
        if let Some(only) = self.only {
            all.retain(|property| property.name == only);
        }
        all
    }
}
