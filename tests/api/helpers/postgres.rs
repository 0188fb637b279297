//! A throwaway PostgreSQL (Debian's `postgresql`: `initdb` and `pg_ctl`) on a free port in a temp dir, run as the `postgres` user when the tests run as root, removed after.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::free_port;

/// A PostgreSQL server of the test's own.
pub struct Postgres {
    pub port: u16,
    dir: tempfile::TempDir,
    bin: PathBuf,
}

/// The directory of Debian's PostgreSQL programs (the newest installed).
fn postgres_bin() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is installed (scripts/ensure-tools.sh postgresql)")
        .filter_map(|entry| Some(entry.ok()?.path().join("bin")))
        .filter(|bin| bin.join("pg_ctl").exists())
        .collect();
    versions.sort();
    versions.pop().expect("a PostgreSQL with pg_ctl")
}

/// Whether the tests run as root (PostgreSQL refuses to: it runs as `postgres`).
fn as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|process| process.uid() == 0)
}

impl Postgres {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let bin = postgres_bin();
        if as_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .expect("chown");
            assert!(status.success());
        }
        let mut server = Self { port: 0, dir, bin };
        let data = server.data();
        server.run(
            "initdb",
            &["-A", "trust", "-U", "postgres", "--no-sync", "-D", &data],
        );
        for _ in 0..5 {
            // Another process may take the port between choosing and binding it.
            server.port = free_port();
            if server.pg_ctl_start() {
                return server;
            }
        }
        panic!("PostgreSQL did not start");
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// `postgres://` URL of the server's `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server (again, after [`Postgres::stop_immediately`]).
    pub fn pg_ctl_start(&self) -> bool {
        // fsync off: a test never outlives the machine's own crash. Commits
        // stay synchronous: a commit the server answered must survive the
        // server's crash (`stop -m immediate`), as the hand-off relies on.
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("postgres.log").display().to_string();
        self.try_run(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-o",
                &options,
                "-l",
                &log,
                "-w",
                "start",
            ],
        )
    }

    /// `pg_ctl stop -m immediate`: the server goes away at once, as in a crash.
    pub fn stop_immediately(&self) {
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }

    /// Every process of the server, for SIGSTOP and SIGCONT.
    pub fn pids(&self) -> Vec<u32> {
        let pid_file = std::fs::read_to_string(self.dir.path().join("data/postmaster.pid"))
            .expect("postmaster.pid");
        let main: u32 = pid_file.lines().next().unwrap().trim().parse().unwrap();
        let children = Command::new("pgrep")
            .args(["-P", &main.to_string()])
            .output()
            .expect("pgrep");
        let mut pids = vec![main];
        pids.extend(
            String::from_utf8_lossy(&children.stdout)
                .lines()
                .filter_map(|line| line.trim().parse::<u32>().ok()),
        );
        pids
    }

    /// Freezes (`-STOP`) or thaws (`-CONT`) every process of the server.
    pub fn signal_all(&self, signal: &str) {
        for pid in self.pids() {
            let _ = Command::new("kill")
                .args([signal, &pid.to_string()])
                .status();
        }
    }

    fn run(&self, program: &str, args: &[&str]) {
        assert!(self.try_run(program, args), "{program} {args:?} failed");
    }

    fn try_run(&self, program: &str, args: &[&str]) -> bool {
        let program = self.bin.join(program);
        let mut command = if as_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&program);
            command
        } else {
            Command::new(&program)
        };
        command
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.data();
        let _ = self.try_run("pg_ctl", &["-D", &data, "-m", "immediate", "stop"]);
    }
}
