//! The model checker's command line: `check` prints what each scenario's check found, with the shortest counterexample to each property broken; `test` also exits 1 when a protocol (or a mutant of the fixed one) breaks a property it should keep, or keeps one it is expected to break.

use std::process::ExitCode;

use lockgate_model::check::{self, Bound, Report};
use lockgate_model::properties;
use lockgate_model::scenario::{Expect, Fixes, Mutant, Protocol, Retend, Scenario, TICK_MS};
use lockgate_model::scenarios;

const USAGE: &str = "usage: lockgate-model <check|test|list> [options]
  --protocol as-it-was|proposed|before-model|fixed|all   (default all)
  --scenario NAME|all                       (default all; `list` names them)
  --deep                                    the larger scenarios (and slower checks) too
  --extra-ticks N                           run each scenario N ticks longer
  --depth STEPS                             stop each path after STEPS steps
  --threads N                               (default 2)
  --max-states N                            stop after generating N states (default 500000000)
  --quiet                                   no traces
  switches over the protocol's fixes (check only):
  --retend off|local  --away-keeps-place on|off  --check-when-lapsed on|off
  --shutdown-gives-back on|off  --keep-ticket-counter on|off
  --idempotency-twins on|off  --requeue-resets-standing on|off
  --deadlock-waits-here on|off  --deadlock-renewed-presence on|off  --deadlock-claims-grant on|off
  --fresh-instance-id on|off  --shutdown-gives-back-keyed on|off  --give-back-alone on|off
  --one-write-handoff on|off  --short-lease-heard-late on|off
  mutants of the fixed protocol (check only; test checks each where it is expected to break):
  --sweep-early  --no-lock-delay  --deadlock-unconfirmed  --no-deadlock-search  --ignore-session-end
  --batch-key-by-key  --outright-stale";

/// Switches over the fixes, each unset unless given.
#[derive(Default)]
struct Switches {
    retend: Option<Retend>,
    away_keeps_place: Option<bool>,
    check_when_lapsed: Option<bool>,
    shutdown_gives_back: Option<bool>,
    keep_ticket_counter: Option<bool>,
    idempotency_twins: Option<bool>,
    deadlock_waits_here: Option<bool>,
    deadlock_renewed_presence: Option<bool>,
    deadlock_claims_grant: Option<bool>,
    requeue_resets_standing: Option<bool>,
    fresh_instance_id: Option<bool>,
    shutdown_gives_back_keyed: Option<bool>,
    give_back_alone: Option<bool>,
    one_write_handoff: Option<bool>,
    short_lease_heard_late: Option<bool>,
    mutant: Option<Mutant>,
}

impl Switches {
    fn any(&self) -> bool {
        self.retend.is_some()
            || self.away_keeps_place.is_some()
            || self.check_when_lapsed.is_some()
            || self.shutdown_gives_back.is_some()
            || self.keep_ticket_counter.is_some()
            || self.idempotency_twins.is_some()
            || self.deadlock_waits_here.is_some()
            || self.deadlock_renewed_presence.is_some()
            || self.deadlock_claims_grant.is_some()
            || self.requeue_resets_standing.is_some()
            || self.fresh_instance_id.is_some()
            || self.shutdown_gives_back_keyed.is_some()
            || self.give_back_alone.is_some()
            || self.one_write_handoff.is_some()
            || self.short_lease_heard_late.is_some()
            || self.mutant.is_some()
    }

    fn apply(&self, mut fixes: Fixes) -> Fixes {
        let set = |switch: Option<bool>, value: &mut bool| {
            if let Some(switch) = switch {
                *value = switch;
            }
        };
        fixes.retend = self.retend.unwrap_or(fixes.retend);
        set(self.away_keeps_place, &mut fixes.away_keeps_place);
        set(self.check_when_lapsed, &mut fixes.check_when_lapsed);
        set(self.shutdown_gives_back, &mut fixes.shutdown_gives_back);
        set(self.keep_ticket_counter, &mut fixes.keep_ticket_counter);
        set(self.idempotency_twins, &mut fixes.idempotency_twins);
        set(self.deadlock_waits_here, &mut fixes.deadlock_waits_here);
        set(
            self.deadlock_renewed_presence,
            &mut fixes.deadlock_renewed_presence,
        );
        set(self.deadlock_claims_grant, &mut fixes.deadlock_claims_grant);
        set(
            self.requeue_resets_standing,
            &mut fixes.requeue_resets_standing,
        );
        set(self.fresh_instance_id, &mut fixes.fresh_instance_id);
        set(
            self.shutdown_gives_back_keyed,
            &mut fixes.shutdown_gives_back_keyed,
        );
        set(self.give_back_alone, &mut fixes.give_back_alone);
        set(self.one_write_handoff, &mut fixes.one_write_handoff);
        set(
            self.short_lease_heard_late,
            &mut fixes.short_lease_heard_late,
        );
        fixes.mutant = self.mutant.or(fixes.mutant);
        fixes
    }
}

struct Options {
    test: bool,
    protocols: Vec<Protocol>,
    scenario: Option<String>,
    deep: bool,
    bound: Bound,
    quiet: bool,
    switches: Switches,
}

fn switch(flag: &str, value: &str) -> Result<bool, String> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{flag}: on or off, not {value}")),
    }
}

fn parse(args: &[String]) -> Result<Option<Options>, String> {
    let test = match args.first().map(String::as_str) {
        Some("check") => false,
        Some("test") => true,
        Some("list") => return Ok(None),
        _ => return Err(USAGE.into()),
    };
    let mut options = Options {
        test,
        protocols: Protocol::ALL.to_vec(),
        scenario: None,
        deep: false,
        bound: Bound {
            depth: None,
            extra_ticks: 0,
            threads: 2,
            max_states: 500_000_000,
        },
        quiet: false,
        switches: Switches::default(),
    };
    let mut rest = args[1..].iter();
    while let Some(flag) = rest.next() {
        let mutant = Mutant::ALL
            .into_iter()
            .find(|mutant| flag.strip_prefix("--") == Some(mutant.name()));
        match flag.as_str() {
            "--quiet" => options.quiet = true,
            "--deep" => options.deep = true,
            _ if mutant.is_some() => options.switches.mutant = mutant,
            _ => {
                let value = rest
                    .next()
                    .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
                option(&mut options, flag, value)?;
            }
        }
    }
    if options.test && options.switches.any() {
        return Err("test checks the protocols as they are: no switches".into());
    }
    Ok(Some(options))
}

fn option(options: &mut Options, flag: &str, value: &str) -> Result<(), String> {
    let number = || {
        value
            .parse::<usize>()
            .map_err(|_| format!("{flag}: not a number: {value}"))
    };
    let switches = &mut options.switches;
    match flag {
        "--protocol" if value == "all" => options.protocols = Protocol::ALL.to_vec(),
        "--protocol" => {
            let protocol = Protocol::parse(value).ok_or_else(|| format!("no protocol {value}"))?;
            options.protocols = vec![protocol];
        }
        "--scenario" if value == "all" => options.scenario = None,
        "--scenario" => options.scenario = Some(value.to_owned()),
        "--depth" => options.bound.depth = Some(number()? + 2),
        "--extra-ticks" => options.bound.extra_ticks = number()?.min(100) as u8,
        "--threads" => options.bound.threads = number()?.max(1),
        "--max-states" => options.bound.max_states = number()?.max(1),
        "--retend" => {
            switches.retend = Some(match value {
                "off" => Retend::Off,
                "local" => Retend::LocalWaiters,
                _ => return Err(format!("--retend: off or local, not {value}")),
            })
        }
        "--away-keeps-place" => switches.away_keeps_place = Some(switch(flag, value)?),
        "--check-when-lapsed" => switches.check_when_lapsed = Some(switch(flag, value)?),
        "--shutdown-gives-back" => switches.shutdown_gives_back = Some(switch(flag, value)?),
        "--keep-ticket-counter" => switches.keep_ticket_counter = Some(switch(flag, value)?),
        "--idempotency-twins" => switches.idempotency_twins = Some(switch(flag, value)?),
        "--deadlock-waits-here" => switches.deadlock_waits_here = Some(switch(flag, value)?),
        "--deadlock-renewed-presence" => {
            switches.deadlock_renewed_presence = Some(switch(flag, value)?)
        }
        "--deadlock-claims-grant" => switches.deadlock_claims_grant = Some(switch(flag, value)?),
        "--requeue-resets-standing" => {
            switches.requeue_resets_standing = Some(switch(flag, value)?)
        }
        "--fresh-instance-id" => switches.fresh_instance_id = Some(switch(flag, value)?),
        "--shutdown-gives-back-keyed" => {
            switches.shutdown_gives_back_keyed = Some(switch(flag, value)?)
        }
        "--give-back-alone" => switches.give_back_alone = Some(switch(flag, value)?),
        "--one-write-handoff" => switches.one_write_handoff = Some(switch(flag, value)?),
        "--short-lease-heard-late" => switches.short_lease_heard_late = Some(switch(flag, value)?),
        _ => return Err(format!("unknown option {flag}\n{USAGE}")),
    }
    Ok(())
}

fn list() {
    println!("scenarios (1 tick = {TICK_MS} ms; * only with --deep), each with what is checked:");
    for (deep, scenario) in scenarios::catalogue() {
        let mark = if deep { "*" } else { " " };
        println!("  {mark}{:<24} {}", scenario.name, scenario.about);
        for expect in &scenario.expect {
            let deep = if expect.deep { " (--deep)" } else { "" };
            let breaks = if expect.breaks.is_empty() {
                "keeps every property".to_string()
            } else {
                format!("breaks {}", expect.breaks.join(", "))
            };
            println!("      {:<30} {breaks}{deep}", expect.label());
        }
    }
    println!("protocols: as-it-was, proposed, before-model, fixed");
    println!("properties:");
    for (name, about) in properties::ABOUT {
        println!("  {name:<22} {about}");
    }
}

/// Prints a report (with shortest traces unless quiet); returns whether
/// it is what was expected (always true for switched fixes: nothing is
/// expected of them).
fn show(
    report: &Report,
    label: &str,
    expected: Option<&[&'static str]>,
    options: &Options,
) -> bool {
    let scenario = &report.model.scenario;
    let broken = report.broken();
    let unreached = report.unreached();
    let as_expected = expected.is_none_or(|expected| {
        broken.len() == expected.len()
            && expected.iter().all(|name| broken.contains(name))
            && unreached.is_empty()
            && !report.capped
    });
    let verdict = match (expected, as_expected) {
        (None, _) => "switched fixes",
        (Some(_), true) => "as expected",
        (Some(_), false) => "NOT AS EXPECTED",
    };
    println!(
        "== {} / {label}: {} states ({} generated), depth {}, {:.1} s: {verdict}",
        scenario.name,
        report.unique_states,
        report.states,
        report.max_depth.saturating_sub(1),
        report.elapsed.as_secs_f64(),
    );
    let expected = expected.unwrap_or(&[]);
    for name in &broken {
        let known = if expected.contains(name) {
            "expected"
        } else {
            "UNEXPECTED"
        };
        println!("   broken: {name} ({known})");
        if !options.quiet || !expected.contains(name) {
            let found = check::shortest(scenario.clone(), report.model.fixes, name, options.bound);
            let Some(found) = found else { continue };
            let which = if found.shortest {
                "shortest counterexample"
            } else {
                "a counterexample (too many states to prove it shortest)"
            };
            println!("      {which}, {} events:", found.events.len());
            for line in found.events {
                println!("      {line}");
            }
        }
    }
    for name in expected.iter().filter(|name| !broken.contains(name)) {
        println!("   HOLDS, though expected broken: {name}");
    }
    if report.capped {
        println!(
            "   STOPPED at {} states generated: the bound was not exhausted",
            options.bound.max_states
        );
    }
    for name in &unreached {
        println!("   UNREACHED: {name} (the model may be vacuous here)");
    }
    as_expected
}

fn chosen(options: &Options) -> Result<Vec<Scenario>, String> {
    let catalogue = scenarios::catalogue();
    match &options.scenario {
        Some(name) => catalogue
            .into_iter()
            .find(|(_, scenario)| scenario.name == name.as_str())
            .map(|(_, scenario)| vec![scenario])
            .ok_or_else(|| format!("no scenario {name}; `list` names them")),
        None => Ok(catalogue
            .into_iter()
            .filter(|(deep, _)| options.deep || !deep)
            .map(|(_, scenario)| scenario)
            .collect()),
    }
}

/// What to check on `scenario`: each expectation of a chosen protocol
/// (the deep-only ones with `--deep` or when the scenario is named), or,
/// with switches, each chosen protocol the scenario is checked under,
/// switched (with nothing expected).
fn runs(scenario: &Scenario, options: &Options) -> Vec<(String, Fixes, Option<Vec<&'static str>>)> {
    let chosen = |expect: &&Expect| options.protocols.contains(&expect.protocol);
    if options.switches.any() {
        let mut protocols: Vec<Protocol> = Vec::new();
        for expect in scenario.expect.iter().filter(chosen) {
            if !protocols.contains(&expect.protocol) {
                protocols.push(expect.protocol);
            }
        }
        return protocols
            .into_iter()
            .map(|protocol| {
                let fixes = options.switches.apply(protocol.fixes());
                (format!("{} (switched)", protocol.name()), fixes, None)
            })
            .collect();
    }
    scenario
        .expect
        .iter()
        .filter(chosen)
        .filter(|expect| !expect.deep || options.deep || options.scenario.is_some())
        .map(|expect| (expect.label(), expect.fixes(), Some(expect.breaks.clone())))
        .collect()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse(&args) {
        Ok(Some(options)) => options,
        Ok(None) => {
            list();
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let scenarios = match chosen(&options) {
        Ok(scenarios) => scenarios,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let started = std::time::Instant::now();
    let (mut total_states, mut deepest, mut all_as_expected) = (0, 0, true);
    for scenario in scenarios {
        for (label, fixes, expected) in runs(&scenario, &options) {
            let report = check::run(scenario.clone(), fixes, options.bound);
            total_states += report.unique_states;
            deepest = deepest.max(report.max_depth.saturating_sub(1));
            all_as_expected &= show(&report, &label, expected.as_deref(), &options);
        }
    }
    println!(
        "{total_states} states explored in all, paths up to {deepest} steps, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if options.test && !all_as_expected {
        println!(
            "FAILED: a protocol broke a property it should keep, or kept one it is expected to break"
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
