//! `lockgate run`: hold a lock (or several) through a gateway while a command runs, and stop the command if a lock is lost.
//!
//! A client of the HTTP API (never of Redis), in the same binary. It holds a
//! streamed lock: the gateway renews it while the connection stays open and
//! releases it the moment the connection closes, so a `lockgate run` that is
//! killed, even with SIGKILL, frees the lock at once. The command runs as
//! the leader of its own process group; losing the lock is treated like a
//! watchdog firing: SIGTERM to the whole group, SIGKILL after a grace, exit
//! 75. Several keys are several streamed locks, taken one after another in
//! the order of their keys (two runs naming the same keys never wait for
//! each other in a circle) within one wait, and given back if one cannot
//! be had. The parts: [`client`] (HTTP and the event stream) and [`child`]
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

With several keys (-k a -k b), every lock is held, or none: they are taken
in the order of their keys within the one --wait, and the command gets
LOCKGATE_KEYS and LOCKGATE_FENCING_TOKENS (each space-separated, in that
order) and LOCKGATE_TOKENS (each lock's token, in that order); LOCKGATE_KEY
and its tokens are the first lock's. Losing any lock stops the command.

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

    /// CA certificates (PEM) that an https:// gateway's certificate must be
    /// signed by [default: the system's bundle, /etc/ssl/certs/ca-certificates.crt].
    #[arg(long, env = "LOCKGATE_CA", value_name = "PEM")]
    pub ca: Option<std::path::PathBuf>,

    /// A client certificate (PEM) for a gateway that asks for one.
    #[arg(long, env = "LOCKGATE_CERT", value_name = "PEM", requires = "cert_key")]
    pub cert: Option<std::path::PathBuf>,

    /// The private key of --cert (PEM). (`--key` names a lock.)
    #[arg(long, env = "LOCKGATE_CERT_KEY", value_name = "PEM", requires = "cert")]
    pub cert_key: Option<std::path::PathBuf>,

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

    /// Another lock to hold as well (repeat for more): every lock is held
    /// while the command runs, or none.
    #[arg(short = 'k', long = "key", value_name = "KEY")]
    pub keys: Vec<String>,

    /// The lock: 1 to 200 of A-Z a-z 0-9 . _ : - (optional with --key)
    #[arg(required_unless_present = "keys")]
    pub key: Option<String>,

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

/// Debian's bundle of the CAs the system trusts.
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

async fn supervise(args: &RunArgs) -> Result<u8, String> {
    let https = args.url.starts_with("https://");
    let tls = match &args.ca {
        Some(ca) => Some(ca.as_path()),
        None if https || args.cert.is_some() => Some(std::path::Path::new(SYSTEM_CA_BUNDLE)),
        None => None,
    }
    .map(|ca| crate::tls::client_config(ca, args.cert.as_deref().zip(args.cert_key.as_deref())))
    .transpose()?;
    let gateway = GatewayClient::new(&args.url, args.api_key.clone(), tls)?;
    let mut signals = Signals::new().map_err(|err| format!("cannot watch signals: {err}"))?;
    let keys = args.lock_keys();
    let acquired = tokio::select! {
        acquired = acquire_all(&gateway, args, &keys) => acquired,
        // Interrupted while waiting: the request is dropped, so the gateway
        // stops waiting and grants nothing (and the locks taken so far are
        // released as their streams close).
        signal = signals.recv() => return Ok(128 + signal as u8),
    };
    let mut held = match acquired {
        Ok(held) => held,
        Err(NotGranted::Held) => return Ok(args.conflict_exit_code),
        Err(NotGranted::Unavailable(message)) => return Err(message),
    };
    let env = environment(&held);
    let mut group = match Group::spawn(&args.command, &env, args.kill_after.0) {
        Ok(group) => group,
        Err(err) => {
            release_all(&gateway, &held).await;
            eprintln!(
                "lockgate run: cannot start {}: {err}",
                args.command[0].to_string_lossy()
            );
            let not_found = err.kind() == std::io::ErrorKind::NotFound;
            return Ok(if not_found { 127 } else { 126 });
        }
    };
    match watch(args, &mut group, &mut held, &mut signals).await {
        Ending::Exited(code) => {
            release_all(&gateway, &held).await;
            Ok(code)
        }
        Ending::Lost(key, reason) => {
            eprintln!("lockgate run: lost the lock {key} ({reason}); stopping the command");
            group.stop(args.kill_after.0).await;
            Ok(EXIT_LOST)
        }
    }
}

impl RunArgs {
    /// Every lock to hold, in the order they are taken: the order of their
    /// keys, each once.
    fn lock_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.keys.iter().chain(&self.key).cloned().collect();
        keys.sort();
        keys.dedup();
        keys
    }
}

/// One lock held while the command runs.
struct HeldLock {
    key: String,
    grant: Grant,
    stream: LockStream,
    /// The lease surely ends by then unless a renewal is heard: a gateway
    /// that froze or vanished without closing the stream renews nothing.
    lease_end: Instant,
    /// Its stream is followed (not once the command gave the lock back).
    watching: bool,
}

/// The command's environment: the first lock's key and tokens, and with
/// several locks each one's, in the order they were taken.
fn environment(held: &[HeldLock]) -> Vec<(&'static str, String)> {
    let first = &held[0];
    let mut env = vec![
        ("LOCKGATE_KEY", first.key.clone()),
        ("LOCKGATE_TOKEN", first.grant.token.clone()),
        (
            "LOCKGATE_FENCING_TOKEN",
            first.grant.fencing_token.to_string(),
        ),
    ];
    if held.len() > 1 {
        let each =
            |field: fn(&HeldLock) -> String| held.iter().map(field).collect::<Vec<_>>().join(" ");
        env.push(("LOCKGATE_KEYS", each(|lock| lock.key.clone())));
        env.push(("LOCKGATE_TOKENS", each(|lock| lock.grant.token.clone())));
        env.push((
            "LOCKGATE_FENCING_TOKENS",
            each(|lock| lock.grant.fencing_token.to_string()),
        ));
    }
    env
}

/// Gives every lock back (closing its stream, below, releases any that
/// could not be).
async fn release_all(gateway: &GatewayClient, held: &[HeldLock]) {
    for lock in held {
        if !gateway.release(&lock.key, &lock.grant.token).await {
            eprintln!(
                "lockgate run: could not release {}; closing its stream releases it",
                lock.key
            );
        }
    }
}

/// How the command's run under the locks ended.
enum Ending {
    /// The command exited with this status while the locks were held.
    Exited(u8),
    /// A lock was lost while the command ran: its key, and why.
    Lost(String, String),
}

/// What happened next while the command runs.
enum Step {
    Exited(u8),
    Signal(Signal),
    /// Lock `index`'s stream said something (`None`: it ended).
    Event(usize, Option<LockEvent>),
    /// Lock `index`'s lease would have ended with no renewal heard.
    Silent(usize),
}

/// Runs until the command exits or a lock is lost, passing signals on.
async fn watch(
    args: &RunArgs,
    group: &mut Group,
    held: &mut [HeldLock],
    signals: &mut Signals,
) -> Ending {
    let ttl = args.ttl.0;
    for lock in held.iter_mut() {
        lock.lease_end = Instant::now() + ttl;
    }
    loop {
        let earliest = held
            .iter()
            .enumerate()
            .filter(|(_, lock)| lock.watching)
            .min_by_key(|(_, lock)| lock.lease_end)
            .map(|(index, lock)| (index, lock.lease_end));
        let step = tokio::select! {
            status = group.wait() => Step::Exited(status.map_or(u8::MAX, child::exit_code)),
            signal = signals.recv() => Step::Signal(signal),
            (index, event) = next_event(held), if earliest.is_some() => Step::Event(index, event),
            () = sleep_until(earliest.map(|(_, at)| at)) => {
                Step::Silent(earliest.map_or(0, |(index, _)| index))
            }
        };
        match step {
            Step::Exited(code) => return Ending::Exited(code),
            Step::Signal(signal) => group.signal(signal),
            Step::Event(index, event) => {
                let lock = &mut held[index];
                match event {
                    Some(LockEvent::Renewed) => lock.lease_end = Instant::now() + ttl,
                    // The command gave the lock back itself (with its
                    // token): nothing is lost, it runs on without it.
                    Some(LockEvent::Released) => lock.watching = false,
                    Some(LockEvent::Lost(reason)) => return Ending::Lost(lock.key.clone(), reason),
                    None => {
                        let reason = "the stream from the gateway ended".into();
                        return Ending::Lost(lock.key.clone(), reason);
                    }
                }
            }
            Step::Silent(index) => {
                let reason = "no renewal was heard before the lease would end".into();
                return Ending::Lost(held[index].key.clone(), reason);
            }
        }
    }
}

/// The next event of any followed lock's stream, and which lock's.
async fn next_event(held: &mut [HeldLock]) -> (usize, Option<LockEvent>) {
    let streams = held
        .iter_mut()
        .enumerate()
        .filter(|(_, lock)| lock.watching)
        .map(|(index, lock)| Box::pin(async move { (index, lock.stream.next().await) }));
    futures_util::future::select_all(streams).await.0
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Why `lockgate run` did not get the locks.
enum NotGranted {
    /// Held by another owner past the wait, or at once with `--nonblock`.
    Held,
    /// The gateway could not be reached, or refused: why.
    Unavailable(String),
}

/// Takes every lock, in the order of `keys`, within the one wait; gives
/// back those taken if one cannot be had.
async fn acquire_all(
    gateway: &GatewayClient,
    args: &RunArgs,
    keys: &[String],
) -> Result<Vec<HeldLock>, NotGranted> {
    let deadline = args.wait.map(|wait| Instant::now() + wait.0);
    let mut held: Vec<HeldLock> = Vec::with_capacity(keys.len());
    for key in keys {
        match acquire(gateway, args, key, deadline).await {
            Ok((grant, stream)) => held.push(HeldLock {
                key: key.clone(),
                grant,
                stream,
                lease_end: Instant::now() + args.ttl.0,
                watching: true,
            }),
            Err(refused) => {
                release_all(gateway, &held).await;
                return Err(refused);
            }
        }
    }
    Ok(held)
}

/// Takes `key` as `args` say: once (`--nonblock`), until the wait's
/// `deadline`, or as long as it takes, in requests no longer than the
/// gateway's longest wait.
async fn acquire(
    gateway: &GatewayClient,
    args: &RunArgs,
    key: &str,
    deadline: Option<Instant>,
) -> Result<(Grant, LockStream), NotGranted> {
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
        match gateway.acquire(key, &kind, args.ttl.0, wait).await {
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
