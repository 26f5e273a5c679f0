//! A server process the suite started, and the signals the nemesis sends it.
//!
//! A [`Proc`] owns one child: its stdout and stderr are appended to a log
//! file, and its stdin is a pipe the `Proc` holds open, so a server started
//! with `--exit-on-stdin-close` lives exactly as long as its `Proc`, even if
//! the suite itself is killed. (Apache ZooKeeper has no such flag; the
//! [`crate::lab::Lab`] kills whatever is left in its namespaces instead.)
//!
//! Invariants:
//! * A signal is only ever sent to a child that has not been reaped. Until
//!   it is waited for, an exited child stays a zombie that holds its pid, so
//!   the pid cannot name another process; once reaped, the exit status is
//!   kept and no signal is sent again.
//! * Dropping a `Proc` leaves no process behind: a paused child is
//!   continued, then killed and reaped.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long [`Proc::terminate`] lets a process shut down before SIGKILL.
pub const TERMINATE_GRACE: Duration = Duration::from_secs(5);

/// How often [`Proc::terminate`] looks whether the process has exited.
const EXIT_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Why a process could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("cannot open the log {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start {command}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
}

/// A server process the suite started (in a lab host's namespace or not),
/// its stdout and stderr appended to a log file.
#[derive(Debug)]
pub struct Proc {
    child: Child,
    /// Held open so the child sees EOF on stdin only when the `Proc` goes.
    _stdin: Option<ChildStdin>,
    /// Set once the child is reaped; no signal is sent after that.
    exit: Option<ExitStatus>,
    paused: bool,
    log: PathBuf,
}

impl Proc {
    /// Starts `command` with stdout+stderr appended to `log` (created if
    /// missing) and stdin piped and held open (servers started with
    /// `--exit-on-stdin-close` then live exactly as long as the Proc, even if
    /// the suite is killed).
    pub fn spawn(mut command: Command, log: &Path) -> Result<Proc, ProcError> {
        let stdout = open_log(log)?;
        let stderr = stdout.try_clone().map_err(|source| ProcError::Log {
            path: log.to_path_buf(),
            source,
        })?;
        command.stdin(Stdio::piped()).stdout(stdout).stderr(stderr);
        let mut child = command.spawn().map_err(|source| ProcError::Spawn {
            command: format!("{command:?}"),
            source,
        })?;
        Ok(Proc {
            _stdin: child.stdin.take(),
            child,
            exit: None,
            paused: false,
            log: log.to_path_buf(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, then reap. Idempotent: a reaped process is left alone.
    pub fn kill9(&mut self) {
        if self.exit.is_some() {
            return;
        }
        // SIGKILL ends a stopped process too; no SIGCONT needed.
        self.signal(libc::SIGKILL);
        self.reap();
        self.paused = false;
    }

    /// SIGSTOP: the process stops running, its sockets stay open (the kernel
    /// still accepts connections and buffers data for it).
    pub fn pause(&mut self) {
        if self.exit.is_none() && self.signal(libc::SIGSTOP) {
            self.paused = true;
        }
    }

    /// SIGCONT.
    pub fn resume(&mut self) {
        if self.exit.is_none() && self.signal(libc::SIGCONT) {
            self.paused = false;
        }
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Whether the process has not exited (reaps it if it has).
    pub fn is_running(&mut self) -> bool {
        if self.exit.is_some() {
            return false;
        }
        match self.child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                self.exit = Some(status);
                false
            }
            Err(error) => {
                tracing::warn!(pid = self.pid(), %error, "cannot poll a child process");
                true
            }
        }
    }

    /// SIGTERM (after SIGCONT if paused), wait up to [`TERMINATE_GRACE`],
    /// then SIGKILL.
    pub fn terminate(&mut self) {
        if self.exit.is_some() {
            return;
        }
        self.resume();
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + TERMINATE_GRACE;
        while self.is_running() {
            if Instant::now() >= deadline {
                tracing::warn!(pid = self.pid(), "no exit after SIGTERM; sending SIGKILL");
                self.kill9();
                return;
            }
            std::thread::sleep(EXIT_POLL_INTERVAL);
        }
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Sends `signal` to the unreaped child; false if the kernel refused.
    fn signal(&self, signal: libc::c_int) -> bool {
        let Ok(pid) = libc::pid_t::try_from(self.child.id()) else {
            return false;
        };
        // SAFETY: kill(2) takes plain integers and touches no memory of ours.
        // The pid is our unreaped child's (see the module's invariants).
        let refused = unsafe { libc::kill(pid, signal) } != 0;
        if refused {
            let error = std::io::Error::last_os_error();
            tracing::warn!(pid, signal, %error, "kill(2) failed");
        }
        !refused
    }

    /// Waits for the child and keeps its status.
    fn reap(&mut self) {
        match self.child.wait() {
            Ok(status) => self.exit = Some(status),
            Err(error) => tracing::warn!(pid = self.pid(), %error, "cannot reap a child process"),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exit.is_some() {
            return;
        }
        if self.paused {
            self.signal(libc::SIGCONT);
        }
        self.kill9();
    }
}

fn open_log(path: &Path) -> Result<File, ProcError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| ProcError::Log {
            path: path.to_path_buf(),
            source,
        })
}
