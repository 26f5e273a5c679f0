//! The standalone [`CommitLog`]: the write-ahead log on a dedicated thread.
//!
//! The committer hands over each batch (every txn that queued up while the
//! previous batch was being synced: group commit) and waits; the thread
//! writes the batch with one write and one fdatasync, then hands it back. A
//! blocking fsync therefore never occupies an async worker.

use std::sync::mpsc;
use std::thread::JoinHandle;

use tokio::sync::oneshot;
use tracing::error;

use crate::pipeline::commit::{CommitError, CommitLog};
use crate::storage::txnlog::TxnLogWriter;
use crate::txn::TxnEntry;

type Done = oneshot::Sender<Result<Vec<TxnEntry>, CommitError>>;

/// The committer's handle to the log thread.
pub struct WalCommitLog {
    jobs: mpsc::SyncSender<(Vec<TxnEntry>, Done)>,
    thread: Option<JoinHandle<()>>,
}

impl WalCommitLog {
    /// Moves `writer` onto its own thread.
    pub fn start(mut writer: TxnLogWriter) -> std::io::Result<Self> {
        // The committer waits for each batch, so one job at a time suffices.
        let (jobs, queue) = mpsc::sync_channel::<(Vec<TxnEntry>, Done)>(1);
        let thread = std::thread::Builder::new()
            .name("arbor-wal".into())
            .spawn(move || {
                while let Ok((entries, done)) = queue.recv() {
                    let result = writer
                        .append(&entries)
                        .map(|()| entries)
                        .map_err(CommitError::from);
                    if let Err(err) = &result {
                        error!(error = %err, "write-ahead log append failed");
                    }
                    let failed = result.is_err();
                    let _ = done.send(result);
                    if failed {
                        // The file may hold a partial batch: accept nothing more.
                        break;
                    }
                }
            })?;
        Ok(Self {
            jobs,
            thread: Some(thread),
        })
    }
}

impl CommitLog for WalCommitLog {
    async fn append(&mut self, entries: Vec<TxnEntry>) -> Result<Vec<TxnEntry>, CommitError> {
        let (done, result) = oneshot::channel();
        self.jobs
            .send((entries, done))
            .map_err(|_| CommitError::Stopped)?;
        result.await.map_err(|_| CommitError::Stopped)?
    }
}

impl Drop for WalCommitLog {
    fn drop(&mut self) {
        // Closing the queue ends the thread after the batch in progress.
        let (closed, _) = mpsc::sync_channel(0);
        self.jobs = closed;
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                error!("write-ahead log thread panicked");
            }
        }
    }
}
