//! The command `lockgate run` supervises: the leader of its own process group, signalled as a group.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
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
}

impl Group {
    /// Starts `command` (program and arguments) as the leader of a new
    /// process group, with stdin, stdout and stderr inherited and `env` added.
    pub fn spawn(command: &[OsString], env: &[(&str, String)]) -> io::Result<Self> {
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
        Ok(Self {
            child,
            pgid: Pid::from_raw(pid),
            status: None,
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

impl Group {
    /// Whether any process of the group still runs. Zombies do not count:
    /// an orphaned grandchild that died waits for init to reap it, which
    /// may take a while, and has stopped all the same.
    fn has_live_processes(&self) -> bool {
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
                pgrp == Some(self.pgid.as_raw()) && state != Some("Z")
            });
        }
        // Elsewhere: a group with no process left answers ESRCH.
        killpg(self.pgid, None) != Err(Errno::ESRCH)
    }
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
