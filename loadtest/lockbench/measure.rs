//! What the benchmark reads and reports: processes' CPU time and memory from /proc, percentiles, and the one JSON line of results.

use std::io;
use std::time::Duration;

/// Another process's CPU time (user + system), from /proc.
pub(crate) fn process_cpu_of(pid: u32) -> io::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    Ok(cpu_of_stat(&stat))
}

pub(crate) fn rss_kib(pid: u32) -> io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| io::Error::other("no VmRSS"))
}

/// This process's CPU time (user + system), to report the generator's cost.
pub(crate) struct CpuClock(Duration);

impl CpuClock {
    pub(crate) fn start() -> Self {
        Self(process_cpu())
    }
    pub(crate) fn spent(&self) -> Duration {
        process_cpu().saturating_sub(self.0)
    }
}

pub(crate) fn process_cpu() -> Duration {
    cpu_of_stat(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default())
}

/// utime and stime, fields 14 and 15 of a /proc/<pid>/stat line, in clock ticks.
pub(crate) fn cpu_of_stat(stat: &str) -> Duration {
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

pub(crate) fn report<Name: AsRef<str>>(
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
pub(crate) fn report_percentiles(
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
pub(crate) fn percentiles(name: &str, latencies: &[u64]) -> [(String, String); 2] {
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
