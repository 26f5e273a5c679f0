//! SIGINT and SIGTERM during a one-shot command: the command stops, its
//! session is closed (so the server drops it, its watches and ephemerals at
//! once rather than after the session timeout), and `arbor` exits as a
//! shell reports a death by that signal (130, 143).
//!
//! Listening replaces the signals' default action (ending the process at
//! once) for the rest of the process, so it is only done for commands that
//! end on them; the shell and the browser handle Ctrl-C themselves.

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::error::exit_code;

/// The two signals that end a one-shot command.
pub struct Terminating {
    interrupt: Signal,
    terminate: Signal,
}

impl Terminating {
    /// Starts listening; `None` if the signals cannot be handled here (then
    /// their default action stays).
    pub fn listen() -> Option<Terminating> {
        Some(Terminating {
            interrupt: signal(SignalKind::interrupt()).ok()?,
            terminate: signal(SignalKind::terminate()).ok()?,
        })
    }

    /// Waits for the first of them; the exit code it stands for.
    pub async fn received(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => exit_code::INTERRUPTED,
            _ = self.terminate.recv() => exit_code::TERMINATED,
        }
    }
}

/// [`Terminating::received`], or never without signal handling.
pub async fn received(signals: &mut Option<Terminating>) -> i32 {
    match signals {
        Some(signals) => signals.received().await,
        None => std::future::pending().await,
    }
}
