//! The standalone [`CommitLog`]: the write-ahead log, written by the
//! committer itself.
//!
//! The committer runs on its own thread (see [`crate::server`]), so the
//! blocking write + fdatasync of each batch happens right there: no hand-off
//! to another thread and back per batch, which on a loaded two-core machine
//! costs more than the work itself. Every txn queued while a batch is being
//! synced forms the next batch (group commit).

use crate::pipeline::commit::{CommitError, CommitLog};
use crate::storage::txnlog::TxnLogWriter;
use crate::txn::TxnEntry;

/// The committer's write-ahead log.
pub struct WalCommitLog {
    writer: TxnLogWriter,
    /// Set after a failed append: the file may hold a partial batch, so
    /// nothing more is accepted.
    failed: bool,
}

impl WalCommitLog {
    /// Wraps `writer`; appends block the calling thread until durable.
    pub fn new(writer: TxnLogWriter) -> Self {
        Self {
            writer,
            failed: false,
        }
    }
}

impl CommitLog for WalCommitLog {
    async fn append(&mut self, entries: Vec<TxnEntry>) -> Result<Vec<TxnEntry>, CommitError> {
        if self.failed {
            return Err(CommitError::Stopped);
        }
        match self.writer.append(&entries) {
            Ok(()) => Ok(entries),
            Err(err) => {
                self.failed = true;
                Err(CommitError::from(err))
            }
        }
    }
}
