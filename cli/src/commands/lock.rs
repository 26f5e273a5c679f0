//! `lock PATH -- COMMAND [ARG...]`: runs COMMAND while holding the fair lock
//! at PATH (the client's `recipes::Mutex`), as `etcdctl lock` and
//! `flock(1)` do. The command learns what it holds from its environment
//! (`ARBOR_LOCK_PATH`, `ARBOR_LOCK_NODE`, `ARBOR_FENCING_TOKEN`), so it can
//! pass the token to whatever it writes. The lock is released when the
//! command exits, and arbor exits with the command's status. If the lock is
//! lost while the command runs (the session expired), the command is killed:
//! it must not go on as if it held it.

use std::time::Duration;

use arbor_client::recipes::{LockError, Mutex};
use arbor_client::Client;
use clap::Args;

use crate::duration;
use crate::error::{self, LockLost, LockNotTaken};

#[derive(Debug, Args)]
pub struct LockArgs {
    /// The lock's path (its queue's parent node, made if missing).
    pub(crate) path: String,
    /// Give up if the lock is not granted within this long (e.g. `30s`).
    #[arg(long, value_parser = duration::parse)]
    pub(crate) timeout: Option<Duration>,
    /// The command to run while holding the lock, and its arguments.
    #[arg(required = true, last = true)]
    pub(crate) command: Vec<String>,
}

/// Holds the lock for the command's run; returns its exit code.
pub async fn run(client: &Client, args: LockArgs) -> anyhow::Result<i32> {
    let mutex = Mutex::new(client, &args.path);
    let taken = match args.timeout {
        Some(timeout) => mutex.lock_timeout(timeout).await,
        None => mutex.lock().await,
    };
    let guard = match taken {
        Ok(guard) => guard,
        Err(LockError::Timeout) => {
            return Err(LockNotTaken {
                path: args.path,
                waited: args.timeout,
            }
            .into())
        }
        Err(err) => return Err(error::at_path(anyhow::Error::new(err), &args.path)),
    };
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("no command to run"))?;
    let mut child = tokio::process::Command::new(program)
        .args(rest)
        .env("ARBOR_LOCK_PATH", &args.path)
        .env("ARBOR_LOCK_NODE", guard.node())
        .env("ARBOR_FENCING_TOKEN", guard.fencing_token().to_string())
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| anyhow::anyhow!("cannot run {program}: {err}"))?;
    let status = tokio::select! {
        status = child.wait() => status?,
        state = guard.lost() => {
            let _ = child.kill().await;
            return Err(LockLost { path: args.path, state: format!("{state:?}") }.into());
        }
    };
    guard
        .release()
        .await
        .map_err(|err| anyhow::Error::new(err).context("releasing the lock"))?;
    Ok(exit_code_of(status))
}

/// The code a shell would report for the command: its own, or 128 plus the
/// signal that ended it.
fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(crate::error::exit_code::GENERIC)
}
