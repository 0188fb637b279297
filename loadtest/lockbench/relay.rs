//! One key passed from client to client: each releases as soon as it is granted and asks again; hand-offs per second and the time from a release to the next grant, through the gateway and through etcd's HTTP lock API; and waiters parked on etcd's lock.

use std::cell::Cell;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::http::{Http, JSON, Waits, base64, expect, json_str, run_clients};
use crate::measure::{CpuClock, percentiles, report};

#[derive(clap::Args)]
pub(crate) struct Relay {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Clients on the key: one holds it, the others wait.
    #[arg(long, default_value_t = 50)]
    clients: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
}

/// The key's grants, seen by its clients. The lock is exclusive, so grants
/// and releases alternate: the release recorded before a grant is seen is
/// the one it followed. A grant to the client that released last is a
/// re-grant (it asked again and got there first), not a hand-off: the
/// others went on waiting.
#[derive(Clone, Default)]
struct Handoffs {
    /// When the lock was last released (the release sent), and by whom.
    released: Rc<Cell<Option<(Instant, usize)>>>,
    /// Each hand-off's delay after the release before it, µs.
    delays: Waits,
    /// Each grant's wait from asking, µs: a lock that lets the releaser
    /// take it again keeps the others waiting longer.
    waits: Waits,
    regrants: Rc<Cell<u64>>,
}

impl Handoffs {
    fn granted(&self, client: usize, asked: Instant) {
        self.waits
            .borrow_mut()
            .push(asked.elapsed().as_micros() as u64);
        match self.released.get() {
            Some((_, by)) if by == client => self.regrants.set(self.regrants.get() + 1),
            Some((released, _)) => self
                .delays
                .borrow_mut()
                .push(released.elapsed().as_micros() as u64),
            None => {}
        }
    }
    fn releasing(&self, client: usize) {
        self.released.set(Some((Instant::now(), client)));
    }
    fn report(&self, mode: &str, done: u64, started: Instant, cpu: CpuClock) {
        let elapsed = started.elapsed();
        let delays = self.delays.borrow();
        let handoffs = delays.len();
        let mut extra = vec![
            ("handoffs".to_owned(), handoffs.to_string()),
            (
                "handoffs_per_second".to_owned(),
                format!("{:.0}", handoffs as f64 / elapsed.as_secs_f64()),
            ),
            ("regrants".to_owned(), self.regrants.get().to_string()),
        ];
        extra.extend(percentiles("handoff", &delays));
        let waits = self.waits.borrow();
        extra.extend(percentiles("wait", &waits));
        let longest = waits.iter().max().copied().unwrap_or(0);
        extra.push((
            "wait_max_ms".to_owned(),
            format!("{:.2}", longest as f64 / 1000.0),
        ));
        report(mode, done, elapsed, done * 2, cpu, &extra);
    }
}

/// Through the gateway: `POST /locks` with `wait_ms`, `DELETE` at once.
pub(crate) async fn relay(relay: Relay) -> io::Result<()> {
    let cpu = CpuClock::start();
    let started = Instant::now();
    let handoffs = Handoffs::default();
    let url = Rc::new(relay.url);
    let done = run_clients(relay.clients, relay.seconds, |client, deadline| {
        let (url, handoffs) = (url.clone(), handoffs.clone());
        async move {
            let mut http = Http::connect(&url).await?;
            let body = r#"{"key":"bench:relay","ttl_ms":30000,"wait_ms":30000}"#;
            let mut done = 0;
            while Instant::now() < deadline {
                let asked = Instant::now();
                let (status, grant) = http.send("POST", "/locks", JSON, body).await?;
                expect(status, 201, &grant)?;
                handoffs.granted(client, asked);
                let token =
                    json_str(&grant, "token").ok_or_else(|| io::Error::other("no token"))?;
                let headers = format!("Lock-Token: {token}\r\n");
                handoffs.releasing(client);
                let (status, answer) = http
                    .send("DELETE", "/locks/bench:relay", &headers, "")
                    .await?;
                expect(status, 204, &answer)?;
                done += 1;
            }
            Ok(done)
        }
    })
    .await?;
    handoffs.report("relay", done, started, cpu);
    Ok(())
}

/// Through etcd's lock API: a lease per client, `lock` (which waits in
/// etcd), `unlock` at once.
pub(crate) async fn etcd_relay(relay: Relay) -> io::Result<()> {
    let cpu = CpuClock::start();
    let started = Instant::now();
    let handoffs = Handoffs::default();
    let url = Rc::new(relay.url);
    let done = run_clients(relay.clients, relay.seconds, |client, deadline| {
        let (url, handoffs) = (url.clone(), handoffs.clone());
        async move {
            let mut http = Http::connect(&url).await?;
            let lock = etcd_lock_body(&mut http, "bench:relay").await?;
            let mut done = 0;
            while Instant::now() < deadline {
                let asked = Instant::now();
                let (status, body) = http.send("POST", "/v3/lock/lock", JSON, &lock).await?;
                expect(status, 200, &body)?;
                handoffs.granted(client, asked);
                let key = json_str(&body, "key").ok_or_else(|| io::Error::other("no key"))?;
                let unlock = format!(r#"{{"key":"{key}"}}"#);
                handoffs.releasing(client);
                let (status, body) = http.send("POST", "/v3/lock/unlock", JSON, &unlock).await?;
                expect(status, 200, &body)?;
                done += 1;
            }
            Ok(done)
        }
    })
    .await?;
    handoffs.report("etcd-relay", done, started, cpu);
    Ok(())
}

#[derive(clap::Args)]
pub(crate) struct EtcdWaiters {
    #[arg(long, default_value = "http://127.0.0.1:2379")]
    url: String,
    #[arg(long, default_value_t = 10_000)]
    clients: usize,
    /// How long to keep them waiting once all are queued, in seconds (the
    /// caller reads etcd's memory meanwhile).
    #[arg(long, default_value_t = 3)]
    seconds: u64,
    /// How long queueing them may take, in seconds: past it, no more are
    /// asked for, and the result says how many wait.
    #[arg(long, default_value_t = 30)]
    queue_seconds: u64,
}

/// Waiters asked for at a time: thousands of lease grants and lock calls at
/// once make etcd answer "request timed out" instead of queueing them, so
/// each batch is queued in etcd before the next is sent.
const WAITERS_BATCH: usize = 250;

/// Parks this many `lock` calls on a key held by another lease, each on a
/// lease and a connection of its own (a lock's key in etcd is its name and
/// its lease: waiters sharing a lease would share the holder's place).
pub(crate) async fn etcd_waiters(waiters: EtcdWaiters) -> io::Result<()> {
    let started = Instant::now();
    let mut holder = Http::connect(&waiters.url).await?;
    let lock = etcd_lock_body(&mut holder, "bench:waiters").await?;
    let (status, body) = holder.send("POST", "/v3/lock/lock", JSON, &lock).await?;
    expect(status, 200, &body)?;
    let key = json_str(&body, "key")
        .ok_or_else(|| io::Error::other("no key"))?
        .to_owned();
    let url = Rc::new(waiters.url.clone());
    let failed = Rc::new(Cell::new(0usize));
    let mut parked = Vec::with_capacity(waiters.clients);
    let queueing = Instant::now() + Duration::from_secs(waiters.queue_seconds);
    for batch in (0..waiters.clients).step_by(WAITERS_BATCH) {
        if Instant::now() > queueing {
            break;
        }
        let batch_end = (batch + WAITERS_BATCH).min(waiters.clients);
        for _ in batch..batch_end {
            let (url, failed) = (url.clone(), failed.clone());
            parked.push(tokio::task::spawn_local(async move {
                let outcome = async {
                    let mut http = Http::connect(&url).await?;
                    let lock = etcd_lock_body(&mut http, "bench:waiters").await?;
                    let (status, body) = http.send("POST", "/v3/lock/lock", JSON, &lock).await?;
                    expect(status, 200, &body)
                }
                .await;
                if let Err(failure) = &outcome {
                    // The first failure says why the others may have failed too.
                    if failed.get() == 0 {
                        eprintln!("etcd-waiters: a waiter failed: {failure}");
                    }
                    failed.set(failed.get() + 1);
                }
                outcome
            }));
            // Connecting thousands of clients at once overflows the listen backlog.
            tokio::task::yield_now().await;
        }
        let mut queued = queued_waiters(&mut holder).await?;
        while queued + failed.get() < batch_end && Instant::now() < queueing {
            tokio::time::sleep(Duration::from_millis(20)).await;
            queued = queued_waiters(&mut holder).await?;
        }
        eprintln!(
            "etcd-waiters: {queued} queued, {} failed after {:.1} s",
            failed.get(),
            started.elapsed().as_secs_f64()
        );
    }
    tokio::time::sleep(Duration::from_secs(waiters.seconds)).await;
    let waiting = queued_waiters(&mut holder).await?;
    for task in &parked {
        task.abort();
    }
    let unlock = format!(r#"{{"key":"{key}"}}"#);
    let (status, body) = holder
        .send("POST", "/v3/lock/unlock", JSON, &unlock)
        .await?;
    expect(status, 200, &body)?;
    println!(
        "{{\"mode\":\"etcd-waiters\",\"waiters\":{},\"asked\":{},\"waiting\":{waiting},\"failed\":{},\"seconds\":{:.2}}}",
        waiters.clients,
        parked.len(),
        failed.get(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The lock calls queued in etcd behind the holder of `bench:waiters`: each
/// is a key under the lock's name, the holder's the first.
async fn queued_waiters(http: &mut Http) -> io::Result<usize> {
    let range = format!(
        r#"{{"key":"{}","range_end":"{}","count_only":true}}"#,
        base64(b"bench:waiters/"),
        base64(b"bench:waiters0")
    );
    let (status, body) = http.send("POST", "/v3/kv/range", JSON, &range).await?;
    expect(status, 200, &body)?;
    // etcd leaves a count of 0 out of its answer.
    let keys: usize = json_str(&body, "count")
        .unwrap_or("0")
        .parse()
        .map_err(io::Error::other)?;
    Ok(keys.saturating_sub(1))
}

/// Grants a lease of its own to this connection's client and returns the
/// body of a `lock` call for `name` under it.
async fn etcd_lock_body(http: &mut Http, name: &str) -> io::Result<String> {
    let (status, body) = http
        .send("POST", "/v3/lease/grant", JSON, r#"{"TTL":120}"#)
        .await?;
    expect(status, 200, &body)?;
    let lease = json_str(&body, "ID").ok_or_else(|| io::Error::other("no lease"))?;
    let name = base64(name.as_bytes());
    Ok(format!(r#"{{"name":"{name}","lease":"{lease}"}}"#))
}
