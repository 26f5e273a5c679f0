//! The standalone [`CommitLog`]: the write-ahead log, written by whoever
//! holds the committer's lock (the commit thread, or a connection committing
//! a lone write; see [`crate::pipeline::commit`]). Each batch is one write
//! and one fdatasync, right there: no hand-off to another thread and back.

use crate::pipeline::commit::{CommitError, CommitLog};
use crate::storage::txnlog::TxnLogWriter;
use crate::txn::TxnEntry;

impl CommitLog for TxnLogWriter {
    fn append(&mut self, entries: &[TxnEntry]) -> Result<(), CommitError> {
        TxnLogWriter::append(self, entries).map_err(CommitError::from)
    }
}
