//! The model checker's command line: `check` prints what each scenario's check found, with the shortest counterexample to each property broken; `test` also exits 1 when a protocol breaks a property it should keep, or keeps one it is known to break.

use std::process::ExitCode;

use lockgate_model::check::{self, Bound, Report};
use lockgate_model::properties;
use lockgate_model::scenario::{Fixes, Protocol, Retend, Scenario, TICK_MS};
use lockgate_model::scenarios;

const USAGE: &str = "usage: lockgate-model <check|test|list> [options]
  --protocol as-it-was|proposed|fixed|all   (default all)
  --scenario NAME|all                       (default all; `list` names them)
  --deep                                    the larger scenarios too
  --extra-ticks N                           run each scenario N ticks longer
  --depth STEPS                             stop each path after STEPS steps
  --threads N                               (default 2)
  --max-states N                            stop after generating N states (default 500000000)
  --quiet                                   no traces
  switches over the protocol's fixes (check only):
  --retend off|local|dropped  --shutdown-leave-releases on|off  --keep-ticket-counter on|off";

struct Options {
    test: bool,
    protocols: Vec<Protocol>,
    scenario: Option<String>,
    deep: bool,
    bound: Bound,
    quiet: bool,
    retend: Option<Retend>,
    shutdown_leave_releases: Option<bool>,
    keep_ticket_counter: Option<bool>,
}

impl Options {
    fn overrides(&self) -> bool {
        self.retend.is_some()
            || self.shutdown_leave_releases.is_some()
            || self.keep_ticket_counter.is_some()
    }

    fn fixes(&self, protocol: Protocol) -> Fixes {
        let mut fixes = protocol.fixes();
        fixes.retend = self.retend.unwrap_or(fixes.retend);
        fixes.shutdown_leave_releases = self
            .shutdown_leave_releases
            .unwrap_or(fixes.shutdown_leave_releases);
        fixes.keep_ticket_counter = self
            .keep_ticket_counter
            .unwrap_or(fixes.keep_ticket_counter);
        fixes
    }
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
        retend: None,
        shutdown_leave_releases: None,
        keep_ticket_counter: None,
    };
    let mut rest = args[1..].iter();
    while let Some(flag) = rest.next() {
        match flag.as_str() {
            "--quiet" => options.quiet = true,
            "--deep" => options.deep = true,
            _ => {
                let value = rest
                    .next()
                    .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
                option(&mut options, flag, value)?;
            }
        }
    }
    if options.test && options.overrides() {
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
            options.retend = Some(match value {
                "off" => Retend::Off,
                "local" => Retend::LocalWaiters,
                "dropped" => Retend::DroppedWaiters,
                _ => return Err(format!("--retend: off, local or dropped, not {value}")),
            })
        }
        "--shutdown-leave-releases" => options.shutdown_leave_releases = Some(switch(flag, value)?),
        "--keep-ticket-counter" => options.keep_ticket_counter = Some(switch(flag, value)?),
        _ => return Err(format!("unknown option {flag}\n{USAGE}")),
    }
    Ok(())
}

fn list() {
    println!("scenarios (1 tick = {TICK_MS} ms; * only with --deep):");
    for (deep, scenario) in scenarios::catalogue() {
        let mark = if deep { "*" } else { " " };
        println!("  {mark}{:<22} {}", scenario.name, scenario.about);
    }
    println!("protocols: as-it-was, proposed, fixed");
    println!("properties:");
    for (name, about) in properties::ABOUT {
        println!("  {name:<22} {about}");
    }
}

/// Prints a report (with shortest traces unless quiet); returns whether
/// it is what the scenario expects of `protocol` (always true for a
/// protocol whose fixes were switched: nothing is expected of it).
fn show(report: &Report, protocol: Protocol, options: &Options) -> bool {
    let scenario = &report.model.scenario;
    let expected: &[&str] = if options.overrides() {
        &[]
    } else {
        scenario.expected_breaks(protocol)
    };
    let broken = report.broken();
    let unreached = report.unreached();
    let as_expected = broken.len() == expected.len()
        && expected.iter().all(|name| broken.contains(name))
        && unreached.is_empty()
        && !report.capped;
    let verdict = match (options.overrides(), as_expected) {
        (true, _) => "switched fixes",
        (false, true) => "as expected",
        (false, false) => "NOT AS EXPECTED",
    };
    println!(
        "== {} / {}: {} states ({} generated), depth {}, {:.1} s: {verdict}",
        scenario.name,
        protocol.name(),
        report.unique_states,
        report.states,
        report.max_depth.saturating_sub(1),
        report.elapsed.as_secs_f64(),
    );
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
    as_expected || options.overrides()
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
        for &protocol in &options.protocols {
            let report = check::run(scenario.clone(), options.fixes(protocol), options.bound);
            total_states += report.unique_states;
            deepest = deepest.max(report.max_depth.saturating_sub(1));
            all_as_expected &= show(&report, protocol, &options);
        }
    }
    println!(
        "{total_states} states explored in all, paths up to {deepest} steps, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if options.test && !all_as_expected {
        println!(
            "FAILED: a protocol broke a property it should keep, or kept one it is known to break"
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
