//! lockbench: the lock benchmark's load generator, light enough not to be the bottleneck.
//!
//! One thread, raw HTTP/1.1 keep-alive connections, no JSON parser on the hot
//! path. Each mode prints one JSON line of results, including this process's
//! own CPU time, so its cost can be told apart from the system under test.
//!
//! ```text
//! lockbench cycles    --url http://127.0.0.1:8080 --clients 50 --seconds 10
//! lockbench contended --url http://127.0.0.1:8080 --clients 8 --hold-ms 1 --work-ms 5
//! lockbench contended --url http://127.0.0.1:8080 --clients 8 --readers 7   (read-write)
//! lockbench contended --url http://127.0.0.1:8080 --clients 8 --limit 3     (counting)
//! lockbench poll      --redis redis://127.0.0.1:6379 --clients 8 --hold-ms 1 --work-ms 5
//! lockbench etcd      --url http://127.0.0.1:2379 --clients 50 --seconds 10
//! lockbench waiters   --url http://127.0.0.1:8080 --clients 10000 --pid <gateway pid>
//! lockbench streams   --url http://127.0.0.1:8080 --clients 5000 --ttl-ms 3000 --pid <gateway pid>
//! lockbench handoff   --urls http://127.0.0.1:8080,http://127.0.0.1:8081 --waiters 100
//! lockbench relay     --url http://127.0.0.1:8080 --clients 50 --seconds 10
//! lockbench etcd-relay --url http://127.0.0.1:2379 --clients 50 --seconds 10
//! lockbench etcd-waiters --url http://127.0.0.1:2379 --clients 10000
//! lockbench cycles    --url http://127.0.0.1:8080 --clients 50 --seconds 10 --session
//! lockbench batch     --url http://127.0.0.1:8080 --clients 50 --size 10 [--one-by-one]
//! lockbench script-cycles --redis redis://127.0.0.1:6379 [--library lockgate_<hash>]
//! ```

mod batches;
mod contended;
mod cycles;
mod handoff;
mod http;
mod measure;
mod purchases;
mod relay;
mod scripts;
mod streamed;
mod waiters;

use std::io;

use clap::{Parser, Subcommand};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Uncontended acquire + release cycles through the gateway, one key per client.
    Cycles(cycles::Load),
    /// Clients contending for one key through the gateway with wait_ms.
    Contended(contended::Contention),
    /// The same contention with a sleep-and-poll SETNX lock straight on Redis.
    Poll(contended::Contention),
    /// Uncontended lock + unlock cycles through etcd's HTTP lock API.
    Etcd(cycles::Load),
    /// Flash-sale purchase attempts (a new user and Idempotency-Key each) on
    /// a sale with ample stock.
    Purchases(purchases::Purchases),
    /// Park this many waiting requests on one held key and report the
    /// gateway's resident memory (VmRSS of --pid) while they wait.
    Waiters(waiters::Waiters),
    /// Hold this many streamed locks (one key each) and count their
    /// renewals, and the gateway's CPU and memory while it renews them.
    Streams(streamed::StreamedLocks),
    /// Queue waiters on one held key, spread over several gateways, then
    /// release: each one granted releases at once. How long from each
    /// release to the next holder's grant, and how many were granted out
    /// of the order they arrived in.
    Handoff(handoff::Handoff),
    /// Clients passing one key through the gateway, each releasing as soon
    /// as granted and asking again: hand-offs per second, and the time from
    /// each release to the next grant.
    Relay(relay::Relay),
    /// The same through etcd's HTTP lock API.
    EtcdRelay(relay::Relay),
    /// Park this many lock calls on one held key in etcd, each with a lease
    /// of its own, for the caller to read etcd's memory while they wait.
    EtcdWaiters(relay::EtcdWaiters),
    /// Batches of N keys per client through `POST /locks/batch` (or the
    /// same keys one `POST /locks` at a time), released key by key.
    Batch(batches::Batches),
    /// Lock cycles straight on Redis by FCALL: the gateway's own functions
    /// (`--library`), or a floor of the least a fenced re-entrant lock needs.
    ScriptCycles(scripts::ScriptCycles),
}

fn main() -> io::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        match cli.mode {
            Mode::Cycles(load) => cycles::cycles(load).await,
            Mode::Contended(contention) => contended::contended(contention).await,
            Mode::Poll(contention) => contended::poll(contention).await,
            Mode::Etcd(load) => cycles::etcd(load).await,
            Mode::Purchases(purchases) => purchases::buy(purchases).await,
            Mode::Waiters(waiters) => waiters::park_waiters(waiters).await,
            Mode::Streams(streams) => streamed::hold_streams(streams).await,
            Mode::Handoff(handoff) => handoff::hand_off(handoff).await,
            Mode::Relay(relay) => relay::relay(relay).await,
            Mode::EtcdRelay(relay) => relay::etcd_relay(relay).await,
            Mode::EtcdWaiters(waiters) => relay::etcd_waiters(waiters).await,
            Mode::Batch(batches) => batches::batches(batches).await,
            Mode::ScriptCycles(load) => scripts::script_cycles(load).await,
        }
    })
}
