//! `lockgate run`: hold a lock through a gateway while a command runs, and stop the command if the lock is lost.
//!
//! A client of the HTTP API (never of Redis), in the same binary. It holds a
//! streamed lock: the gateway renews it while the connection stays open and
//! releases it the moment the connection closes, so a `lockgate run` that is
//! killed, even with SIGKILL, frees the lock at once. The command runs as
//! the leader of its own process group; losing the lock is treated like a
//! watchdog firing: SIGTERM to the whole group, SIGKILL after a grace, exit
//! 75. The parts: [`client`] (HTTP and the event stream) and [`child`]
//! (the process group).

mod child;
mod client;

use std::ffi::OsString;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use clap::Parser;
use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use child::Group;
pub use child::reap_group;
use client::{GatewayClient, Grant, Holding, LockEvent, LockStream, Refused};

/// The exit status when `lockgate run` is called wrongly (EX_USAGE): not 2,
/// which the command it runs may exit with too.
pub const EXIT_USAGE: u8 = 64;
/// The exit status when the gateway cannot be reached or refuses (EX_UNAVAILABLE).
pub const EXIT_UNAVAILABLE: u8 = 69;
/// The exit status when the lock was lost while the command ran (EX_TEMPFAIL).
pub const EXIT_LOST: u8 = 75;
/// The longest server-side wait asked for until the gateway says its own.
const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(60);

const ABOUT: &str = "Run a command while holding a lock through a lockgate gateway.";

const HELP: &str = "\
Waits for KEY (as long as it takes, or --wait, or not at all with
--nonblock), then runs COMMAND in its own process group with stdin, stdout
and stderr inherited and LOCKGATE_KEY, LOCKGATE_TOKEN and
LOCKGATE_FENCING_TOKEN in its environment: hand the fencing token to what
the command writes to. The gateway renews the lock while the command runs
and releases it when the command exits, or the moment `lockgate run` dies.
SIGINT, SIGTERM and SIGHUP are passed on to the command's process group.

Exit status: the command's own (128 + the signal number when a signal ended
it); the --conflict-exit-code (1) when the lock was not acquired; 75 when the
lock was lost while the command ran (its lease ran out, or an operator
revoked it: its whole process group got SIGTERM,
and SIGKILL --kill-after seconds later if anything was left); 69 when the
gateway could not be reached or refused for another reason than a held
lock (the command is not started); 126 or 127 when the command could not be
started; 64 when `lockgate run` itself was called wrongly (a missing KEY
or COMMAND, an option it does not know).

Example: a cron job that must not run twice at once across machines, giving
up if the previous run still holds the lock after a minute:

  */5 * * * *  lockgate run --url http://lockgate.internal:8080 -w 60 \\
                   reports:nightly -- /usr/local/bin/build-reports";

/// `lockgate run [OPTIONS] KEY -- COMMAND [ARGS...]`
#[derive(Debug, Clone, Parser)]
#[command(name = "lockgate run", about = ABOUT, after_help = HELP)]
pub struct RunArgs {
    /// The gateway.
    #[arg(long, env = "LOCKGATE_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,

    /// API key, when the gateway has API keys.
    #[arg(long, env = "LOCKGATE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,

    /// Give up when the lock is still held after this long (fractional
    /// seconds) [default: wait as long as it takes].
    #[arg(short = 'w', long, value_name = "SECONDS", conflicts_with = "nonblock")]
    pub wait: Option<Seconds>,

    /// Fail at once if the lock is held.
    #[arg(short = 'n', long)]
    pub nonblock: bool,

    /// The exit status when the lock was not acquired.
    #[arg(
        short = 'E',
        long,
        value_name = "CODE",
        default_value_t = 1,
        value_parser = clap::value_parser!(u8).range(0..=255)
    )]
    pub conflict_exit_code: u8,

    /// The lease; the gateway renews it every third of it while the command runs.
    #[arg(long, value_name = "SECONDS", default_value = "30")]
    pub ttl: Seconds,

    /// Hold the lock shared, beside any number of other shared holders (a
    /// read lock); a holder without --shared (a writer) waits for them all,
    /// and while it waits new shared holders wait behind it.
    #[arg(long, conflicts_with = "limit")]
    pub shared: bool,

    /// Hold one of N places of a counting lock (a semaphore): up to N run at
    /// once. Every holder of KEY must name the same N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub limit: Option<u64>,

    /// The holder's public value, which everyone who reads or watches the
    /// lock sees (this host's name or address, say); never a secret.
    #[arg(long, value_name = "TEXT")]
    pub value: Option<String>,

    /// Grace between SIGTERM and SIGKILL when the lock is lost.
    #[arg(long, value_name = "SECONDS", default_value = "5")]
    pub kill_after: Seconds,

    /// The lock: 1 to 200 of A-Z a-z 0-9 . _ : -
    pub key: String,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// A length of time given in (fractional) seconds.
#[derive(Debug, Clone, Copy)]
pub struct Seconds(pub Duration);

impl FromStr for Seconds {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let seconds: f64 = text
            .parse()
            .map_err(|_| format!("{text:?} is not a number of seconds"))?;
        Duration::try_from_secs_f64(seconds)
            .map(Self)
            .map_err(|_| format!("{text:?} is not a number of seconds from 0 up"))
    }
}

/// Runs `lockgate run`; returns its exit status.
pub async fn run(args: RunArgs) -> ExitCode {
    match supervise(&args).await {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("lockgate run: {message}");
            ExitCode::from(EXIT_UNAVAILABLE)
        }
    }
}

/// The signals passed on to the command.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
        }
    }
}

async fn supervise(args: &RunArgs) -> Result<u8, String> {
    let gateway = GatewayClient::new(&args.url, args.api_key.clone())?;
    let mut signals = Signals::new().map_err(|err| format!("cannot watch signals: {err}"))?;
    let acquired = tokio::select! {
        acquired = acquire(&gateway, args) => acquired,
        // Interrupted while waiting: the request is dropped, so the gateway
        // stops waiting and grants nothing.
        signal = signals.recv() => return Ok(128 + signal as u8),
    };
    let (grant, mut stream) = match acquired {
        Ok(granted) => granted,
        Err(NotGranted::Held) => return Ok(args.conflict_exit_code),
        Err(NotGranted::Unavailable(message)) => return Err(message),
    };
    let env = [
        ("LOCKGATE_KEY", args.key.clone()),
        ("LOCKGATE_TOKEN", grant.token.clone()),
        ("LOCKGATE_FENCING_TOKEN", grant.fencing_token.to_string()),
    ];
    let mut group = match Group::spawn(&args.command, &env, args.kill_after.0) {
        Ok(group) => group,
        Err(err) => {
            gateway.release(&args.key, &grant.token).await;
            eprintln!(
                "lockgate run: cannot start {}: {err}",
                args.command[0].to_string_lossy()
            );
            let not_found = err.kind() == std::io::ErrorKind::NotFound;
            return Ok(if not_found { 127 } else { 126 });
        }
    };
    match watch(args, &mut group, &mut stream, &mut signals).await {
        Ending::Exited(code) => {
            if !gateway.release(&args.key, &grant.token).await {
                // Closing the stream (below) makes the gateway release it.
                eprintln!(
                    "lockgate run: could not release {}; closing its stream releases it",
                    args.key
                );
            }
            Ok(code)
        }
        Ending::Lost(reason) => {
            eprintln!(
                "lockgate run: lost the lock {} ({reason}); stopping the command",
                args.key
            );
            group.stop(args.kill_after.0).await;
            Ok(EXIT_LOST)
        }
    }
}

/// How the command's run under the lock ended.
enum Ending {
    /// The command exited with this status while the lock was held.
    Exited(u8),
    /// The lock was lost while the command ran.
    Lost(String),
}

/// Runs until the command exits or the lock is lost, passing signals on.
async fn watch(
    args: &RunArgs,
    group: &mut Group,
    stream: &mut LockStream,
    signals: &mut Signals,
) -> Ending {
    let ttl = args.ttl.0;
    // The lease surely ends by then unless a renewal is heard: a gateway
    // that froze or vanished without closing the stream renews nothing.
    let mut lease_end = Instant::now() + ttl;
    let mut watching = true;
    loop {
        tokio::select! {
            status = group.wait() => {
                return Ending::Exited(status.map_or(u8::MAX, child::exit_code));
            }
            signal = signals.recv() => group.signal(signal),
            event = stream.next(), if watching => match event {
                Some(LockEvent::Renewed) => lease_end = Instant::now() + ttl,
                // The command gave the lock back itself (with its token):
                // nothing is lost, it runs on without it.
                Some(LockEvent::Released) => watching = false,
                Some(LockEvent::Lost(reason)) => return Ending::Lost(reason),
                None => return Ending::Lost("the stream from the gateway ended".into()),
            },
            () = tokio::time::sleep_until(lease_end), if watching => {
                return Ending::Lost("no renewal was heard before the lease would end".into());
            }
        }
    }
}

/// Why `lockgate run` did not get the lock.
enum NotGranted {
    /// Held by another owner past the wait, or at once with `--nonblock`.
    Held,
    /// The gateway could not be reached, or refused: why.
    Unavailable(String),
}

/// Takes the lock as `args` say: once (`--nonblock`), until `--wait` runs
/// out, or as long as it takes, in requests no longer than the gateway's
/// longest wait.
async fn acquire(
    gateway: &GatewayClient,
    args: &RunArgs,
) -> Result<(Grant, LockStream), NotGranted> {
    let deadline = args.wait.map(|wait| Instant::now() + wait.0);
    let mut longest = DEFAULT_MAX_WAIT;
    let kind = Holding {
        shared: args.shared,
        limit: args.limit,
        value: args.value.clone(),
    };
    loop {
        let wait = match (args.nonblock, deadline) {
            (true, _) => Duration::ZERO,
            (false, Some(deadline)) => deadline.saturating_duration_since(Instant::now()),
            (false, None) => longest,
        }
        .min(longest);
        match gateway.acquire(&args.key, &kind, args.ttl.0, wait).await {
            Ok(granted) => return Ok(granted),
            Err(Refused::Held)
                if !args.nonblock && deadline.is_none_or(|at| Instant::now() < at) => {}
            Err(Refused::Held) => return Err(NotGranted::Held),
            Err(Refused::WaitTooLong { maximum_ms })
                if Duration::from_millis(maximum_ms) < longest =>
            {
                longest = Duration::from_millis(maximum_ms);
            }
            Err(Refused::WaitTooLong { .. }) => {
                return Err(NotGranted::Unavailable(
                    "the gateway refuses every wait asked for".into(),
                ));
            }
            Err(Refused::Unavailable(message)) => return Err(NotGranted::Unavailable(message)),
        }
    }
}
