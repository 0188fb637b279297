//! The `lockgate` binary: its allocator, and its command line read and handed to `app::commands` (`serve` runs the gateway, `run` holds a lock while a command runs, `orders` stores the sales' orders in a database, `acl` and `openapi` help an operator).

use std::process::ExitCode;

use clap::Parser;
use lockgate::config::Cli;

/// jemalloc, not the system's malloc: it keeps no bookkeeping inside the
/// blocks it hands out, so the parts of each connection's 8 KiB buffers
/// that are never written cost no memory.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings, read when it starts (`_RJEM_MALLOC_CONF` in the
/// environment still overrides them): background threads give freed pages
/// back to the system over about a second, with no muzzy stage. Measured
/// with `lockbench` (`make bench`'s loads) against the alternatives: giving
/// pages back at once (`dirty_decay_ms:0`) keeps 10 000 waiting requests
/// smallest (127 MiB, against 156-164 MiB here) but costs a `madvise` every
/// few requests, each a TLB shootdown across the runtime's threads, about 5
/// µs of the gateway's CPU per request (33 against 28 µs); jemalloc's
/// default (ten seconds, no thread) keeps 167 MiB, and pages freed before a
/// quiet spell stay until the next burst of work.
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: &[u8; 60] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

/// A command-line error as `clap` renders it, without its closing advice:
/// its first line, the lines that list what it names, and `Usage:`.
fn short_error(rendered: &str) -> String {
    let mut lines = rendered.lines().filter(|line| !line.trim().is_empty());
    let mut short = format!("{}\n", lines.next().unwrap_or("invalid arguments"));
    for line in lines {
        if line.starts_with("  ") || line.starts_with("Usage:") {
            short.push_str(line);
            short.push('\n');
        }
    }
    short
}

#[tokio::main]
async fn main() -> ExitCode {
    // `lockgate serve --config FILE`: the file's settings become flags
    // after the given ones, for each setting no flag or variable gave.
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|command| command == "serve") {
        match lockgate::config_file::serve_args(&args[2..]) {
            Ok(serve) => args.splice(2.., serve).for_each(drop),
            Err(err) => {
                eprintln!("lockgate serve: {err}");
                return ExitCode::from(lockgate::app::commands::EX_CONFIG);
            }
        }
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => err.exit(),
        Err(err) => {
            // The line naming what is wrong (with the list it introduces,
            // such as the arguments missing) and the usage line, not the
            // whole help.
            eprint!("{}", short_error(&err.render().to_string()));
            // `lockgate run` passes its command's status on, and a command
            // may exit 2: its own usage errors say so with EX_USAGE instead.
            let run = std::env::args()
                .nth(1)
                .is_some_and(|command| command == "run");
            return ExitCode::from(if run { lockgate::run::EXIT_USAGE } else { 2 });
        }
    };
    lockgate::app::commands::run(cli).await
}
