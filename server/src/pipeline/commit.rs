//! The commit step: total order, durability, apply, answer.
//!
//! One committer task owns the order. It takes every proposal queued while
//! the previous batch was being made durable (group commit), numbers them with
//! consecutive zxids, hands the batch to the [`CommitLog`] and, once the log
//! says the batch is stable, applies it to the state machine under the write
//! lock, fires watches, and answers each proposer. Watch events are queued to
//! connections during apply, before any reply that reflects the change.

use std::future::Future;
use std::sync::Arc;

use arbor_protocol::{ErrorCode, OpResult, Zxid};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info};

use crate::context::Shared;
use crate::pipeline::apply::SessionChange;
use crate::storage::snapshotter::Snapshotter;
use crate::txn::{CloseReason, Txn, TxnEntry};

/// A write waiting for its place in the order.
#[derive(Debug)]
pub struct Proposal {
    pub txn: Txn,
    /// Wall time fixed by prep.
    pub time_ms: u64,
    /// Where the result goes; `None` for server-made txns nobody waits on.
    pub reply: Option<oneshot::Sender<Result<OpResult, ErrorCode>>>,
}

/// Why the log could not take a batch. The server stops: a write it cannot
/// make durable must never be acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("write-ahead log: {0}")]
    Log(#[from] crate::storage::error::StorageError),
    #[error("the write-ahead log failed earlier and takes no more writes")]
    Stopped,
}

/// Where txns become durable before they are applied. Standalone: a local
/// write-ahead log. In a cluster: Raft, whose state machine is the tree.
pub trait CommitLog: Send + 'static {
    /// Makes `entries` durable, in order; returns them once all of them are.
    /// (They are handed over and back so a log on another thread needs no copy.)
    fn append(
        &mut self,
        entries: Vec<TxnEntry>,
    ) -> impl Future<Output = Result<Vec<TxnEntry>, CommitError>> + Send;
}

/// A log that keeps nothing: writes are lost on restart. For tests of
/// everything above the log.
#[derive(Debug, Default)]
pub struct MemoryLog {
    appended: u64,
}

impl MemoryLog {
    /// Entries appended so far.
    pub fn appended(&self) -> u64 {
        self.appended
    }
}

impl CommitLog for MemoryLog {
    async fn append(&mut self, entries: Vec<TxnEntry>) -> Result<Vec<TxnEntry>, CommitError> {
        self.appended += entries.len() as u64;
        Ok(entries)
    }
}

/// Runs the committer until `stop` is cancelled and the queue is drained.
/// Zxids continue from `last_zxid`. With `snapshots`, a snapshot is started
/// every so many applied txns.
pub async fn run_committer<L: CommitLog>(
    mut log: L,
    mut proposals: mpsc::Receiver<Proposal>,
    shared: Arc<Shared>,
    mut last_zxid: Zxid,
    mut snapshots: Option<Snapshotter>,
    stop: CancellationToken,
) {
    let batch_max = shared.config.commit_batch_max;
    let mut batch = Vec::with_capacity(batch_max);
    loop {
        let received = tokio::select! {
            biased;
            n = proposals.recv_many(&mut batch, batch_max) => n,
            () = stop.cancelled() => {
                proposals.close();
                proposals.recv_many(&mut batch, batch_max).await
            }
        };
        if received == 0 {
            break;
        }
        let mut replies = Vec::with_capacity(batch.len());
        let mut entries = Vec::with_capacity(batch.len());
        for proposal in batch.drain(..) {
            last_zxid += 1;
            replies.push(proposal.reply);
            entries.push(TxnEntry {
                zxid: last_zxid,
                time_ms: proposal.time_ms,
                txn: proposal.txn,
            });
        }
        let first_zxid = entries[0].zxid;
        let entries = match log.append(entries).await {
            Ok(entries) => entries,
            Err(err) => {
                // Nothing of this batch is acknowledged or applied: a write
                // that may not be durable must never become visible.
                error!(error = %err, first_zxid, "commit log failed; stopping the server");
                for reply in replies.into_iter().flatten() {
                    let _ = reply.send(Err(ErrorCode::Unavailable));
                }
                shared.shutdown.cancel();
                break;
            }
        };
        let results = apply_batch(&shared, &entries);
        for (reply, result) in replies.into_iter().zip(results) {
            if let Some(reply) = reply {
                // The proposer may have gone (connection closed); the write stands.
                let _ = reply.send(result);
            }
        }
        if let Some(snapshots) = snapshots.as_mut() {
            let ops = entries.iter().map(|entry| entry.txn.op_count()).sum();
            snapshots.applied(ops, &shared);
        }
    }
    debug!(last_zxid, "committer stopped");
}

/// Applies a durable batch, fires watches, and updates session liveness.
fn apply_batch(shared: &Shared, entries: &[TxnEntry]) -> Vec<Result<OpResult, ErrorCode>> {
    let now_ms = shared.clock.monotonic_ms();
    let mut results = Vec::with_capacity(entries.len());
    let mut state = shared.state.write();
    let mut watches = shared.watches.lock();
    let mut connections = shared.connections.lock();
    for entry in entries {
        let applied = state.apply(entry);
        for change in &applied.changes {
            for (session_id, event) in watches.trigger(change, entry.zxid) {
                connections.deliver(session_id, event);
            }
        }
        shared.publish_zxid(entry.zxid);
        match applied.session {
            Some(SessionChange::Started {
                session_id,
                timeout_ms,
            }) => {
                shared.tracker.lock().add(session_id, timeout_ms, now_ms);
                debug!(session_id, timeout_ms, zxid = entry.zxid, "session started");
            }
            Some(SessionChange::Ended { session_id, reason }) => {
                shared.tracker.lock().remove(session_id);
                watches.remove_session(session_id);
                connections.end_session(session_id, reason);
                match reason {
                    CloseReason::Closed => debug!(session_id, zxid = entry.zxid, "session closed"),
                    CloseReason::Expired => info!(session_id, zxid = entry.zxid, "session expired"),
                }
            }
            None => {}
        }
        results.push(applied.result);
    }
    results
}
