//! Waiters queued on one held key over several gateways, each releasing as soon as it is granted: the time from a release to the next grant, and the grants out of arrival order.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::http::{Http, JSON, Waits, expect, json_str};
use crate::measure::{CpuClock, percentiles, report};

#[derive(clap::Args)]
pub(crate) struct Handoff {
    /// The gateways, comma-separated; the waiters are spread over them in turn.
    #[arg(long, value_delimiter = ',', required = true)]
    urls: Vec<String>,
    #[arg(long, default_value_t = 100)]
    waiters: usize,
    /// Rounds of a full queue each.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

pub(crate) async fn hand_off(handoff: Handoff) -> io::Result<()> {
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
