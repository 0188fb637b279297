//! Clients contending for one key: through the gateway (plain, read-write or counting), and with a sleep-and-poll SETNX lock straight on Redis.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::http::{Http, JSON, Waits, expect, json_str, run_clients};
use crate::measure::{CpuClock, percentiles, report, report_percentiles};

#[derive(clap::Args)]
pub(crate) struct Contention {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    #[arg(long, default_value_t = 8)]
    clients: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// How long each holder keeps the lock.
    #[arg(long, default_value_t = 1)]
    hold_ms: u64,
    /// Other work between a release and the next acquisition.
    #[arg(long, default_value_t = 5)]
    work_ms: u64,
    /// The poll lock's retry interval.
    #[arg(long, default_value_t = 20)]
    poll_ms: u64,
    /// Of the clients, this many take the lock shared and the rest
    /// exclusive: a read-write lock (through the gateway only).
    #[arg(long, default_value_t = 0)]
    readers: usize,
    /// Places of the lock, for the exclusive clients: above 1, a counting
    /// lock (through the gateway only).
    #[arg(long, default_value_t = 1)]
    limit: u32,
}

pub(crate) async fn contended(contention: Contention) -> io::Result<()> {
    let cpu = CpuClock::start();
    let started = Instant::now();
    // Waits of the shared (reading) clients and of the exclusive ones.
    let (read_waits, write_waits): (Waits, Waits) = (Rc::default(), Rc::default());
    let url = Rc::new(contention.url.clone());
    let (hold, work) = (contention.hold(), contention.work());
    let (readers, limit) = (contention.readers, contention.limit);
    // A key of its own per kind of lock, so runs on one Redis never meet.
    let key = Rc::new(match (readers, limit) {
        (0, 1) => "bench:contended".to_owned(),
        (0, limit) => format!("bench:counted-{limit}"),
        _ => "bench:read-write".to_owned(),
    });
    let done = run_clients(
        contention.clients,
        contention.seconds,
        |client, deadline| {
            let (url, key) = (url.clone(), key.clone());
            let reader = client < readers;
            let waits = if reader {
                read_waits.clone()
            } else {
                write_waits.clone()
            };
            async move {
                let mut http = Http::connect(&url).await?;
                let kind = match (reader, limit) {
                    (true, _) => r#","mode":"shared""#.to_owned(),
                    (false, 1) => String::new(),
                    (false, limit) => format!(r#","limit":{limit}"#),
                };
                let body = format!(r#"{{"key":"{key}","ttl_ms":30000,"wait_ms":10000{kind}}}"#);
                let path = format!("/locks/{key}");
                let mut done = 0;
                while Instant::now() < deadline {
                    let asked = Instant::now();
                    let (status, grant) = http.send("POST", "/locks", JSON, &body).await?;
                    expect(status, 201, &grant)?;
                    waits.borrow_mut().push(asked.elapsed().as_micros() as u64);
                    let token =
                        json_str(&grant, "token").ok_or_else(|| io::Error::other("no token"))?;
                    precise_sleep(hold).await?;
                    let headers = format!("Lock-Token: {token}\r\n");
                    let (status, body) = http.send("DELETE", &path, &headers, "").await?;
                    expect(status, 204, &body)?;
                    done += 1;
                    precise_sleep(work).await?;
                }
                Ok(done)
            }
        },
    )
    .await?;
    let requests = done * 2;
    if readers == 0 {
        let mode = if limit == 1 { "contended" } else { "counted" };
        report_percentiles(
            mode,
            "wait",
            done,
            started.elapsed(),
            requests,
            cpu,
            &write_waits.borrow(),
        );
        return Ok(());
    }
    // A read-write lock: the readers' and the writers' share and waits apart.
    let (reads, writes) = (read_waits.borrow(), write_waits.borrow());
    let mut extra = vec![
        ("reads".to_owned(), reads.len().to_string()),
        ("writes".to_owned(), writes.len().to_string()),
    ];
    extra.extend(percentiles("read_wait", &reads));
    extra.extend(percentiles("write_wait", &writes));
    report("read-write", done, started.elapsed(), requests, cpu, &extra);
    Ok(())
}

/// The common hand-rolled lock: `SET key token NX PX`, sleep and retry on
/// failure, release by compare-and-delete.
pub(crate) async fn poll(contention: Contention) -> io::Result<()> {
    const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
    let cpu = CpuClock::start();
    let started = Instant::now();
    let waits: Waits = Rc::default();
    let client = redis::Client::open(contention.redis.as_str()).map_err(io::Error::other)?;
    let (hold, work, poll) = (contention.hold(), contention.work(), contention.poll());
    let attempts = Rc::new(RefCell::new(0u64));
    let done = run_clients(contention.clients, contention.seconds, |who, deadline| {
        let (client, waits, attempts) = (client.clone(), waits.clone(), attempts.clone());
        async move {
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(io::Error::other)?;
            let release = redis::Script::new(RELEASE);
            let mut done = 0;
            while Instant::now() < deadline {
                let token = format!("{who}:{done}");
                let asked = Instant::now();
                loop {
                    *attempts.borrow_mut() += 1;
                    let taken: Option<String> = redis::cmd("SET")
                        .arg("bench:poll")
                        .arg(&token)
                        .arg("NX")
                        .arg("PX")
                        .arg(30_000)
                        .query_async(&mut conn)
                        .await
                        .map_err(io::Error::other)?;
                    if taken.is_some() {
                        break;
                    }
                    precise_sleep(poll).await?;
                }
                waits.borrow_mut().push(asked.elapsed().as_micros() as u64);
                precise_sleep(hold).await?;
                let _: i64 = release
                    .key("bench:poll")
                    .arg(&token)
                    .invoke_async(&mut conn)
                    .await
                    .map_err(io::Error::other)?;
                done += 1;
                precise_sleep(work).await?;
            }
            Ok(done)
        }
    })
    .await?;
    let requests = *attempts.borrow() + done;
    report_percentiles(
        "poll",
        "wait",
        done,
        started.elapsed(),
        requests,
        cpu,
        &waits.borrow(),
    );
    Ok(())
}

/// Sleeps on a blocking-pool thread: the OS timer is accurate to tens of
/// microseconds, where tokio's timer wheel rounds up to whole milliseconds
/// (a "1 ms" hold would last 1 to 2 ms and understate both locks).
pub(crate) async fn precise_sleep(duration: Duration) -> io::Result<()> {
    tokio::task::spawn_blocking(move || std::thread::sleep(duration))
        .await
        .map_err(io::Error::other)
}

impl Contention {
    fn hold(&self) -> Duration {
        Duration::from_millis(self.hold_ms)
    }
    fn work(&self) -> Duration {
        Duration::from_millis(self.work_ms)
    }
    fn poll(&self) -> Duration {
        Duration::from_millis(self.poll_ms)
    }
}
