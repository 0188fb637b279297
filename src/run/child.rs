//! The command `lockgate run` supervises: the leader of its own process group, signalled as a group, and stopped even when `lockgate run` itself is killed.
//!
//! A `lockgate run` killed with SIGKILL cannot stop its command, and the
//! gateway frees the lock at once (its stream closes). So beside the
//! command runs a reaper (`lockgate reap-group`, in a process group of its
//! own) that reads a pipe whose only writer is `lockgate run`: the kernel
//! closes it when `lockgate run` dies, however it dies, and the reaper
//! then stops the command's group (SIGTERM, SIGKILL after the grace). On
//! every ordinary end `lockgate run` writes a byte first: the reaper stands
//! down.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// How often a group being stopped is checked for processes left.
const POLL: Duration = Duration::from_millis(20);

/// The running command and its process group.
pub struct Group {
    child: Child,
    pgid: Pid,
    /// The command's status, once it has exited.
    status: Option<ExitStatus>,
    /// The reaper that stops the group if `lockgate run` dies first.
    reaper: Option<Reaper>,
}

/// The reaper process, and the pipe whose closing without a word tells it
/// that `lockgate run` died.
struct Reaper {
    process: std::process::Child,
    pipe: io::PipeWriter,
}

impl Group {
    /// Starts `command` (program and arguments) as the leader of a new
    /// process group, with stdin, stdout and stderr inherited and `env`
    /// added, and its reaper, which stops the group (`grace` between
    /// SIGTERM and SIGKILL) should `lockgate run` die.
    pub fn spawn(
        command: &[OsString],
        env: &[(&str, String)],
        grace: Duration,
    ) -> io::Result<Self> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command"))?;
        let mut spawned = Command::new(program);
        spawned
            .args(args)
            .envs(env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::inherit())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .process_group(0);
        let child = spawned.spawn()?;
        let pid = child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .ok_or_else(|| io::Error::other("the command has no process id"))?;
        let pgid = Pid::from_raw(pid);
        let reaper = match Reaper::spawn(pgid, grace) {
            Ok(reaper) => Some(reaper),
            Err(err) => {
                eprintln!(
                    "lockgate run: cannot start the reaper ({err}): if lockgate run is killed, \
                     the command goes on running"
                );
                None
            }
        };
        Ok(Self {
            child,
            pgid,
            status: None,
            reaper,
        })
    }

    /// Waits for the command itself to exit.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = self.child.wait().await?;
        self.status = Some(status);
        Ok(status)
    }

    /// Sends `signal` to every process of the group.
    pub fn signal(&self, signal: Signal) {
        // ESRCH: the group is already gone, which is what a signal wants.
        let _ = killpg(self.pgid, signal);
    }

    /// Stops the whole group: SIGTERM, then SIGKILL to whatever is left
    /// after `grace` (grandchildren included, not only the command).
    pub async fn stop(&mut self, grace: Duration) {
        self.signal(Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.status.is_none()
                && let Ok(Some(status)) = self.child.try_wait()
            {
                self.status = Some(status);
            }
            if self.status.is_some() && !self.has_live_processes() {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
        self.signal(Signal::SIGKILL);
        let _ = self.wait().await;
    }
}

impl Drop for Group {
    /// An ordinary end (the command exited, or was stopped): the reaper is
    /// told so before its pipe closes, and stands down.
    fn drop(&mut self) {
        if let Some(mut reaper) = self.reaper.take() {
            let _ = reaper.pipe.write_all(b"done");
            drop(reaper.pipe);
            let _ = reaper.process.wait();
        }
    }
}

impl Reaper {
    /// Starts `lockgate reap-group` for `pgid`, reading the pipe on its stdin.
    fn spawn(pgid: Pid, grace: Duration) -> io::Result<Self> {
        let (reader, pipe) = io::pipe()?;
        let process = std::process::Command::new(std::env::current_exe()?)
            .args(["reap-group", "--pgid"])
            .arg(pgid.as_raw().to_string())
            .arg("--grace-ms")
            .arg(grace.as_millis().to_string())
            .stdin(reader)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            // Its own group: a signal to the command's group, or the
            // terminal's, does not reach it.
            .process_group(0)
            .spawn()?;
        Ok(Self { process, pipe })
    }
}

/// `lockgate reap-group`: waits until its stdin closes; unless it was told
/// first (a byte) that `lockgate run` ended as it should, stops the process
/// group `pgid`: SIGTERM, and SIGKILL after `grace` to whatever is left.
pub fn reap_group(pgid: i32, grace: Duration) {
    let mut word = [0u8; 1];
    let told = loop {
        match io::stdin().read(&mut word) {
            Ok(0) => break false,
            Ok(_) => break true,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break false,
        }
    };
    if told {
        return;
    }
    let pgid = Pid::from_raw(pgid);
    if !group_alive(pgid) {
        return;
    }
    eprintln!("lockgate run died while its command ran: stopping the command's process group");
    let _ = killpg(pgid, Signal::SIGTERM);
    let deadline = std::time::Instant::now() + grace;
    while std::time::Instant::now() < deadline && group_alive(pgid) {
        std::thread::sleep(POLL);
    }
    let _ = killpg(pgid, Signal::SIGKILL);
}

impl Group {
    /// Whether any process of the group still runs.
    fn has_live_processes(&self) -> bool {
        group_alive(self.pgid)
    }
}

/// Whether any process of group `pgid` still runs. Zombies do not count:
/// an orphaned grandchild that died waits for init to reap it, which may
/// take a while, and has stopped all the same.
fn group_alive(pgid: Pid) -> bool {
    if cfg!(target_os = "linux")
        && let Ok(entries) = std::fs::read_dir("/proc")
    {
        return entries.flatten().any(|entry| {
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // `pid (comm) state ppid pgrp ...`: comm may hold spaces
            // and parentheses, so read after the last ')'.
            let mut fields = stat
                .rsplit_once(')')
                .map_or("", |(_, rest)| rest)
                .split_whitespace();
            let state = fields.next();
            let pgrp = fields.nth(1).and_then(|pgrp| pgrp.parse::<i32>().ok());
            pgrp == Some(pgid.as_raw()) && state != Some("Z")
        });
    }
    // Elsewhere: a group with no process left answers ESRCH.
    killpg(pgid, None) != Err(Errno::ESRCH)
}

/// The exit status `lockgate run` passes on: the command's own, or 128 +
/// the signal that ended it, as a shell reports it.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(u8::MAX),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(u8::MAX),
        (None, None) => u8::MAX,
    }
}
