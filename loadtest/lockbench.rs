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
//! ```

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Uncontended acquire + release cycles through the gateway, one key per client.
    Cycles(Load),
    /// Clients contending for one key through the gateway with wait_ms.
    Contended(Contention),
    /// The same contention with a sleep-and-poll SETNX lock straight on Redis.
    Poll(Contention),
    /// Uncontended lock + unlock cycles through etcd's HTTP lock API.
    Etcd(Load),
    /// Flash-sale purchase attempts (a new user and Idempotency-Key each) on
    /// a sale with ample stock.
    Purchases(Purchases),
    /// Park this many waiting requests on one held key and report the
    /// gateway's resident memory (VmRSS of --pid) while they wait.
    Waiters(Waiters),
    /// Hold this many streamed locks (one key each) and count their
    /// renewals, and the gateway's CPU and memory while it renews them.
    Streams(StreamedLocks),
    /// Queue waiters on one held key, spread over several gateways, then
    /// release: each one granted releases at once. How long from each
    /// release to the next holder's grant, and how many were granted out
    /// of the order they arrived in.
    Handoff(Handoff),
}

#[derive(clap::Args)]
struct Handoff {
    /// The gateways, comma-separated; the waiters are spread over them in turn.
    #[arg(long, value_delimiter = ',', required = true)]
    urls: Vec<String>,
    #[arg(long, default_value_t = 100)]
    waiters: usize,
    /// Rounds of a full queue each.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

#[derive(clap::Args)]
struct Load {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    #[arg(long, default_value_t = 50)]
    clients: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
}

#[derive(clap::Args)]
struct Contention {
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

#[derive(clap::Args)]
struct Purchases {
    #[arg(long, default_value = "http://127.0.0.1:8090")]
    url: String,
    #[arg(long, default_value = "bench-sale")]
    sku: String,
    #[arg(long, default_value_t = 64)]
    clients: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The gateways' HS256 secret of buyer tokens: each purchase then
    /// carries a JWT for its user, signed here (its cost is counted in this
    /// process's CPU, not the gateway's).
    #[arg(long, env = "LOCKGATE_BUYER_JWT_SECRET", hide_env_values = true)]
    jwt_secret: Option<String>,
}

#[derive(clap::Args)]
struct Waiters {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    #[arg(long, default_value_t = 10_000)]
    clients: usize,
    /// The gateway's process id, whose memory is read.
    #[arg(long)]
    pid: u32,
}

#[derive(clap::Args)]
struct StreamedLocks {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    #[arg(long, default_value_t = 1_000)]
    clients: usize,
    #[arg(long, default_value_t = 3_000)]
    ttl_ms: u64,
    /// How long every lock is held once all are, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The gateway's process id, whose CPU time and memory are read.
    #[arg(long)]
    pid: u32,
}

fn main() -> io::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        match cli.mode {
            Mode::Cycles(load) => cycles(load).await,
            Mode::Contended(contention) => contended(contention).await,
            Mode::Poll(contention) => poll(contention).await,
            Mode::Etcd(load) => etcd(load).await,
            Mode::Purchases(purchases) => buy(purchases).await,
            Mode::Waiters(waiters) => park_waiters(waiters).await,
            Mode::Streams(streams) => hold_streams(streams).await,
            Mode::Handoff(handoff) => hand_off(handoff).await,
        }
    })
}

/// A keep-alive HTTP/1.1 connection that sends one request at a time.
struct Http {
    stream: TcpStream,
    host: String,
    buffer: Vec<u8>,
    /// The server said `Connection: close`: reconnect before the next request.
    closed: bool,
}

impl Http {
    async fn connect(url: &str) -> io::Result<Self> {
        let host = url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let stream = TcpStream::connect(&host).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            host,
            buffer: Vec::with_capacity(4096),
            closed: false,
        })
    }

    /// Sends a request and returns the status and the body.
    async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &str,
        body: &str,
    ) -> io::Result<(u16, String)> {
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n{headers}Content-Length: {}\r\n\r\n{body}",
            self.host,
            body.len()
        );
        if self.closed {
            self.stream = TcpStream::connect(&self.host).await?;
            self.stream.set_nodelay(true)?;
            self.closed = false;
        }
        self.stream.write_all(request.as_bytes()).await?;
        self.buffer.clear();
        let header_end = loop {
            if let Some(end) = find(&self.buffer, b"\r\n\r\n") {
                break end + 4;
            }
            self.read_more().await?;
        };
        let head = String::from_utf8_lossy(&self.buffer[..header_end]).to_ascii_lowercase();
        let status = head
            .get(9..12)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0);
        while self.buffer.len() < header_end + length {
            self.read_more().await?;
        }
        let body =
            String::from_utf8_lossy(&self.buffer[header_end..header_end + length]).into_owned();
        Ok((status, body))
    }

    async fn read_more(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 4096];
        let read = self.stream.read(&mut chunk).await?;
        if read == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.buffer.extend_from_slice(&chunk[..read]);
        Ok(())
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// The string value of `"field":"..."` in a flat JSON body.
fn json_str<'a>(body: &'a str, field: &str) -> Option<&'a str> {
    let start = body.find(&format!("\"{field}\":\""))? + field.len() + 4;
    let end = start + body[start..].find('"')?;
    Some(&body[start..end])
}

const JSON: &str = "Content-Type: application/json\r\n";

async fn gateway_cycle(http: &mut Http, key: &str) -> io::Result<()> {
    let (status, body) = http
        .send(
            "POST",
            "/locks",
            JSON,
            &format!(r#"{{"key":"{key}","ttl_ms":30000}}"#),
        )
        .await?;
    expect(status, 201, &body)?;
    let token = json_str(&body, "token").ok_or_else(|| io::Error::other("no token"))?;
    let (status, body) = http
        .send(
            "DELETE",
            &format!("/locks/{key}"),
            &format!("Lock-Token: {token}\r\n"),
            "",
        )
        .await?;
    expect(status, 204, &body)
}

fn expect(status: u16, wanted: u16, body: &str) -> io::Result<()> {
    if status == wanted {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "expected {wanted}, got {status}: {body}"
        )))
    }
}

/// Runs `clients` loops of `cycle` for `seconds`; returns cycles done.
async fn run_clients<F, Fut>(clients: usize, seconds: u64, cycle: F) -> io::Result<u64>
where
    F: Fn(usize, Instant) -> Fut,
    Fut: std::future::Future<Output = io::Result<u64>> + 'static,
{
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..clients)
        .map(|client| tokio::task::spawn_local(cycle(client, deadline)))
        .collect();
    let mut done = 0;
    for task in tasks {
        done += task.await.map_err(io::Error::other)??;
    }
    Ok(done)
}

async fn cycles(load: Load) -> io::Result<()> {
    let cpu = CpuClock::start();
    let started = Instant::now();
    let url = Rc::new(load.url);
    let done = run_clients(load.clients, load.seconds, |client, deadline| {
        let url = url.clone();
        async move {
            let mut http = Http::connect(&url).await?;
            let key = format!("bench:cycle:{client}");
            let mut done = 0;
            while Instant::now() < deadline {
                gateway_cycle(&mut http, &key).await?;
                done += 1;
            }
            Ok(done)
        }
    })
    .await?;
    report::<&str>("cycles", done, started.elapsed(), done * 2, cpu, &[]);
    Ok(())
}

async fn etcd(load: Load) -> io::Result<()> {
    let cpu = CpuClock::start();
    let started = Instant::now();
    let url = Rc::new(load.url);
    let done = run_clients(load.clients, load.seconds, |client, deadline| {
        let url = url.clone();
        async move {
            let mut http = Http::connect(&url).await?;
            let (status, body) = http
                .send("POST", "/v3/lease/grant", JSON, r#"{"TTL":60}"#)
                .await?;
            expect(status, 200, &body)?;
            let lease = json_str(&body, "ID")
                .ok_or_else(|| io::Error::other("no lease"))?
                .to_owned();
            let name = base64(format!("bench:etcd:{client}").as_bytes());
            let lock = format!(r#"{{"name":"{name}","lease":"{lease}"}}"#);
            let mut done = 0;
            while Instant::now() < deadline {
                let (status, body) = http.send("POST", "/v3/lock/lock", JSON, &lock).await?;
                expect(status, 200, &body)?;
                let key = json_str(&body, "key").ok_or_else(|| io::Error::other("no key"))?;
                let unlock = format!(r#"{{"key":"{key}"}}"#);
                let (status, body) = http.send("POST", "/v3/lock/unlock", JSON, &unlock).await?;
                expect(status, 200, &body)?;
                done += 1;
            }
            Ok(done)
        }
    })
    .await?;
    report::<&str>("etcd", done, started.elapsed(), done * 2, cpu, &[]);
    Ok(())
}

/// Latencies (of waits or of requests), in microseconds.
type Waits = Rc<RefCell<Vec<u64>>>;

async fn buy(purchases: Purchases) -> io::Result<()> {
    let cpu = CpuClock::start();
    let started = Instant::now();
    let latencies: Waits = Rc::default();
    let (url, path) = (
        Rc::new(purchases.url),
        Rc::new(format!("/seckill/{}/orders", purchases.sku)),
    );
    let signing = Rc::new(
        purchases
            .jwt_secret
            .map(|secret| jsonwebtoken::EncodingKey::from_secret(secret.as_bytes())),
    );
    let done = run_clients(purchases.clients, purchases.seconds, |client, deadline| {
        let (url, path, latencies) = (url.clone(), path.clone(), latencies.clone());
        let signing = signing.clone();
        async move {
            let mut http = Http::connect(&url).await?;
            let mut done = 0;
            while Instant::now() < deadline {
                let user = format!("c{client}-{done}");
                let mut headers = format!("{JSON}Idempotency-Key: {user}\r\n");
                if let Some(key) = signing.as_ref() {
                    let token = buyer_token(key, &user)?;
                    headers.push_str(&format!("Authorization: Bearer {token}\r\n"));
                }
                let body = format!(r#"{{"user_id":"{user}","quantity":1}}"#);
                let asked = Instant::now();
                let (status, answer) = http.send("POST", &path, &headers, &body).await?;
                expect(status, 201, &answer)?;
                latencies
                    .borrow_mut()
                    .push(asked.elapsed().as_micros() as u64);
                done += 1;
            }
            Ok(done)
        }
    })
    .await?;
    report_percentiles(
        "purchases",
        "latency",
        done,
        started.elapsed(),
        done,
        cpu,
        &latencies.borrow(),
    );
    Ok(())
}

/// An HS256 buyer token for `user`, valid for an hour.
fn buyer_token(key: &jsonwebtoken::EncodingKey, user: &str) -> io::Result<String> {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(io::Error::other)?
        .as_secs()
        + 3600;
    let claims = serde_json::json!({ "sub": user, "exp": exp });
    jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, key).map_err(io::Error::other)
}

async fn contended(contention: Contention) -> io::Result<()> {
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

async fn hand_off(handoff: Handoff) -> io::Result<()> {
    let cpu = CpuClock::start();
    let started = Instant::now();
    let latencies: Waits = Rc::default();
    let mut out_of_order = 0;
    for round in 0..handoff.rounds {
        let key = Rc::new(format!("bench:handoff:{round}"));
        let body = Rc::new(format!(
            r#"{{"key":"{key}","ttl_ms":60000,"wait_ms":60000}}"#
        ));
        let mut holder = Http::connect(&handoff.urls[0]).await?;
        let (status, grant) = holder.send("POST", "/locks", JSON, &body).await?;
        expect(status, 201, &grant)?;
        let token = json_str(&grant, "token")
            .ok_or_else(|| io::Error::other("no token"))?
            .to_owned();
        // When the lock was last released, and the waiters in grant order.
        let released = Rc::new(std::cell::Cell::new(Instant::now()));
        let granted: Rc<RefCell<Vec<usize>>> = Rc::default();
        let mut tasks = Vec::new();
        for arrival in 0..handoff.waiters {
            let url = &handoff.urls[arrival % handoff.urls.len()];
            let mut http = Http::connect(url).await?;
            let (key, body) = (key.clone(), body.clone());
            let (released, granted, latencies) =
                (released.clone(), granted.clone(), latencies.clone());
            tasks.push(tokio::task::spawn_local(async move {
                let (status, grant) = http.send("POST", "/locks", JSON, &body).await?;
                expect(status, 201, &grant)?;
                let now = Instant::now();
                latencies
                    .borrow_mut()
                    .push(now.duration_since(released.get()).as_micros() as u64);
                granted.borrow_mut().push(arrival);
                let token =
                    json_str(&grant, "token").ok_or_else(|| io::Error::other("no token"))?;
                released.set(Instant::now());
                let headers = format!("Lock-Token: {token}\r\n");
                let (status, body) = http
                    .send("DELETE", &format!("/locks/{key}"), &headers, "")
                    .await?;
                expect(status, 204, &body)
            }));
            // Apart enough that the arrival order is the order sent.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        released.set(Instant::now());
        let headers = format!("Lock-Token: {token}\r\n");
        let (status, answer) = holder
            .send("DELETE", &format!("/locks/{key}"), &headers, "")
            .await?;
        expect(status, 204, &answer)?;
        for task in tasks {
            task.await.map_err(io::Error::other)??;
        }
        out_of_order += granted
            .borrow()
            .windows(2)
            .filter(|pair| pair[0] > pair[1])
            .count();
    }
    let done = (handoff.waiters * handoff.rounds) as u64;
    let mut extra = vec![("out_of_order".to_owned(), out_of_order.to_string())];
    extra.extend(percentiles("handoff", &latencies.borrow()));
    report("handoff", done, started.elapsed(), done * 2, cpu, &extra);
    Ok(())
}

/// The common hand-rolled lock: `SET key token NX PX`, sleep and retry on
/// failure, release by compare-and-delete.
async fn poll(contention: Contention) -> io::Result<()> {
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
async fn precise_sleep(duration: Duration) -> io::Result<()> {
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

async fn park_waiters(waiters: Waiters) -> io::Result<()> {
    let mut holder = Http::connect(&waiters.url).await?;
    let idle_kib = rss_kib(waiters.pid)?;
    let (status, grant) = holder
        .send(
            "POST",
            "/locks",
            JSON,
            r#"{"key":"bench:waiters","ttl_ms":120000}"#,
        )
        .await?;
    expect(status, 201, &grant)?;
    let token = json_str(&grant, "token")
        .ok_or_else(|| io::Error::other("no token"))?
        .to_owned();
    let url = Rc::new(waiters.url.clone());
    let mut parked = Vec::with_capacity(waiters.clients);
    for _ in 0..waiters.clients {
        let url = url.clone();
        parked.push(tokio::task::spawn_local(async move {
            let mut http = Http::connect(&url).await?;
            let body = r#"{"key":"bench:waiters","ttl_ms":1000,"wait_ms":60000}"#;
            http.send("POST", "/locks", JSON, body)
                .await
                .map(|(status, _)| status)
        }));
        // Connecting 10 000 clients at once overflows the listen backlog.
        tokio::task::yield_now().await;
    }
    // Let every request reach the gateway and start waiting.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waiting_kib = rss_kib(waiters.pid)?;
    // A request that already ended was refused (or failed): it was not waiting.
    let ended_early = parked.iter().filter(|task| task.is_finished()).count();
    for task in &parked {
        task.abort();
    }
    let (status, body) = holder
        .send(
            "DELETE",
            "/locks/bench:waiters",
            &format!("Lock-Token: {token}\r\n"),
            "",
        )
        .await?;
    expect(status, 204, &body)?;
    println!(
        "{{\"mode\":\"waiters\",\"waiters\":{},\"ended_early\":{ended_early},\"rss_idle_kib\":{idle_kib},\"rss_waiting_kib\":{waiting_kib}}}",
        waiters.clients
    );
    Ok(())
}

/// What the streamed locks' clients saw, all together.
#[derive(Default)]
struct Seen {
    renewed: std::cell::Cell<u64>,
    lost: std::cell::Cell<u64>,
}

async fn hold_streams(streams: StreamedLocks) -> io::Result<()> {
    let idle_kib = rss_kib(streams.pid)?;
    let url = Rc::new(streams.url.clone());
    let holding = Rc::new(std::cell::Cell::new(true));
    let counted = Rc::new(std::cell::Cell::new(false));
    let seen = Rc::new(Seen::default());
    let mut clients = Vec::with_capacity(streams.clients);
    for client in 0..streams.clients {
        let (url, holding, counted, seen) =
            (url.clone(), holding.clone(), counted.clone(), seen.clone());
        let ttl_ms = streams.ttl_ms;
        clients.push(tokio::task::spawn_local(async move {
            let mut http = Http::connect(&url).await?;
            let body = format!(r#"{{"key":"bench:stream:{client}","ttl_ms":{ttl_ms}}}"#);
            let request = format!(
                "POST /locks HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n{JSON}Content-Length: {}\r\n\r\n{body}",
                http.host,
                body.len()
            );
            http.stream.write_all(request.as_bytes()).await?;
            // Each event is one chunk of the response: counting the event
            // lines in the raw bytes is enough (a short tail is kept so a
            // line split across reads is still seen).
            let mut tail = Vec::new();
            let mut chunk = [0u8; 4096];
            while holding.get() {
                let read = http.stream.read(&mut chunk).await?;
                if read == 0 {
                    return Err(io::Error::other("the stream ended"));
                }
                tail.extend_from_slice(&chunk[..read]);
                let renewed = count(&tail, b"event: renewed");
                let lost = count(&tail, b"event: lost");
                if counted.get() {
                    seen.renewed.set(seen.renewed.get() + renewed);
                }
                seen.lost.set(seen.lost.get() + lost);
                let keep = tail.len().min(16);
                tail.drain(..tail.len() - keep);
                if renewed + lost > 0 {
                    // What was counted must not be counted again.
                    tail.clear();
                }
            }
            Ok::<_, io::Error>(())
        }));
        // Connecting thousands of clients at once overflows the listen backlog.
        tokio::task::yield_now().await;
    }
    // Every stream granted and renewed at least once before counting.
    tokio::time::sleep(Duration::from_millis(streams.ttl_ms + 1_000)).await;
    let ended_early = clients.iter().filter(|task| task.is_finished()).count();
    let (cpu_before, started) = (process_cpu_of(streams.pid)?, Instant::now());
    counted.set(true);
    tokio::time::sleep(Duration::from_secs(streams.seconds)).await;
    counted.set(false);
    let (cpu, held_for) = (process_cpu_of(streams.pid)? - cpu_before, started.elapsed());
    let held_kib = rss_kib(streams.pid)?;
    holding.set(false);
    for client in clients {
        // Closing the streams releases the locks.
        client.abort();
    }
    let expected =
        streams.clients as f64 * held_for.as_secs_f64() / (streams.ttl_ms as f64 / 3000.0);
    println!(
        "{{\"mode\":\"streams\",\"streams\":{},\"ended_early\":{ended_early},\"ttl_ms\":{},\"held_s\":{:.1},\
\"renewals_seen\":{},\"renewals_expected\":{expected:.0},\"lost\":{},\"gateway_cpu_percent\":{:.1},\
\"rss_idle_kib\":{idle_kib},\"rss_held_kib\":{held_kib}}}",
        streams.clients,
        streams.ttl_ms,
        held_for.as_secs_f64(),
        seen.renewed.get(),
        seen.lost.get(),
        cpu.as_secs_f64() * 100.0 / held_for.as_secs_f64(),
    );
    Ok(())
}

fn count(haystack: &[u8], needle: &[u8]) -> u64 {
    haystack
        .windows(needle.len())
        .filter(|window| *window == needle)
        .count() as u64
}

/// Another process's CPU time (user + system), from /proc.
fn process_cpu_of(pid: u32) -> io::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    Ok(cpu_of_stat(&stat))
}

fn rss_kib(pid: u32) -> io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| io::Error::other("no VmRSS"))
}

/// This process's CPU time (user + system), to report the generator's cost.
struct CpuClock(Duration);

impl CpuClock {
    fn start() -> Self {
        Self(process_cpu())
    }
    fn spent(&self) -> Duration {
        process_cpu().saturating_sub(self.0)
    }
}

fn process_cpu() -> Duration {
    cpu_of_stat(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default())
}

/// utime and stime, fields 14 and 15 of a /proc/<pid>/stat line, in clock ticks.
fn cpu_of_stat(stat: &str) -> Duration {
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: u64 = fields.get(11..13).map_or(0, |times| {
        times.iter().filter_map(|t| t.parse::<u64>().ok()).sum()
    });
    Duration::from_millis(ticks * 10)
}

fn report<Name: AsRef<str>>(
    mode: &str,
    done: u64,
    elapsed: Duration,
    requests: u64,
    cpu: CpuClock,
    extra: &[(Name, String)],
) {
    let seconds = elapsed.as_secs_f64();
    let cpu_ms = cpu.spent().as_secs_f64() * 1000.0;
    let mut line = format!(
        "{{\"mode\":\"{mode}\",\"done\":{done},\"seconds\":{seconds:.2},\"per_second\":{:.0},\"requests\":{requests},\"generator_cpu_ms\":{cpu_ms:.0},\"generator_cpu_ms_per_request\":{:.4}",
        done as f64 / seconds,
        cpu_ms / requests.max(1) as f64,
    );
    for (name, value) in extra {
        line.push_str(&format!(",\"{}\":{value}", name.as_ref()));
    }
    line.push('}');
    println!("{line}");
}

/// Reports with the p50 and p99 of `latencies` (µs), as `<name>_p50_ms`
/// and `<name>_p99_ms`.
fn report_percentiles(
    mode: &str,
    name: &str,
    done: u64,
    elapsed: Duration,
    requests: u64,
    cpu: CpuClock,
    latencies: &[u64],
) {
    report(
        mode,
        done,
        elapsed,
        requests,
        cpu,
        &percentiles(name, latencies),
    );
}

/// The p50 and p99 of `latencies` (µs), in ms, named `<name>_p50_ms` and
/// `<name>_p99_ms`.
fn percentiles(name: &str, latencies: &[u64]) -> [(String, String); 2] {
    let mut sorted = latencies.to_vec();
    sorted.sort_unstable();
    let percentile = |p: f64| -> String {
        let index = ((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1);
        format!(
            "{:.2}",
            sorted.get(index).copied().unwrap_or(0) as f64 / 1000.0
        )
    };
    [
        (format!("{name}_p50_ms"), percentile(0.50)),
        (format!("{name}_p99_ms"), percentile(0.99)),
    ]
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
