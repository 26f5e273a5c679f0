//! The commit step: total order, durability, apply, answer.
//!
//! The [`Committer`] owns the order: the log, the last zxid and the snapshot
//! trigger, behind one lock. Whoever holds it numbers a batch with
//! consecutive zxids, makes the batch durable through the [`CommitLog`] (one
//! sync per batch: group commit), applies it to the state machine under the
//! write lock, fires watches and answers. Watch events are queued to
//! connections during apply, before any reply that reflects the change.
//!
//! Two ways in:
//! * the commit thread ([`run_committer`]) takes every proposal queued while
//!   the previous batch was being synced; under load every write goes this way;
//! * a connection whose write finds nothing queued, nobody committing and
//!   no batching going on commits it itself, on its own thread
//!   ([`Committer::try_commit_now`]). A lone write then costs its sync and no
//!   thread hand-off: on a small machine the two wake-ups, to the commit
//!   thread and back, cost about as much as the sync.
//!
//! A write goes inline only while no proposal is queued or being committed,
//! so it never overtakes one proposed before it; and with a single worker
//! thread for the connections, only while there is one connection
//! ([`InlineCommits`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use arbor_protocol::Hex;
use arbor_protocol::{ErrorCode, OpResult, Zxid};
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error};

use crate::context::Shared;
use crate::pipeline::applier::apply_committed;
use crate::storage::snapshotter::Snapshotter;
use crate::txn::{Txn, TxnEntry};

/// Worker threads the connections' runtime needs before any write may be
/// committed on its connection's thread (see [`InlineCommits`]).
const INLINE_COMMIT_WORKERS_MIN: usize = 2;

/// When a write may be committed on its connection's own thread, the
/// commit thread being idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InlineCommits {
    /// Whenever nothing is queued: the connections have other worker
    /// threads, which go on reading while one is in a sync.
    WhenIdle,
    /// Only while the server has one open connection. A worker blocked in
    /// a sync reads nothing; with no other worker, no other connection's
    /// write is read meanwhile, none is ever queued, and every write gets a
    /// sync of its own (measured with one worker, 8 connections, 64 writes
    /// in flight: 5.3–5.8 k sets/s, against 98–103 k/s through the commit
    /// thread). A lone client still skips the hand-offs.
    LoneConnection,
    /// Never: an ensemble member's writes are ordered by the replicated log.
    Never,
}

impl InlineCommits {
    /// The rule for connections served by `workers` worker threads.
    pub fn for_workers(workers: usize) -> Self {
        if workers < INLINE_COMMIT_WORKERS_MIN {
            InlineCommits::LoneConnection
        } else {
            InlineCommits::WhenIdle
        }
    }
}

/// What a write comes to: its result, or why it has none.
pub type WriteResult = Result<OpResult, ErrorCode>;

/// A write waiting for its place in the order.
#[derive(Debug)]
pub struct Proposal {
    pub txn: Txn,
    /// Wall time fixed by prep.
    pub time_ms: u64,
    /// Where the result goes; `None` for server-made txns nobody waits on.
    pub reply: Option<oneshot::Sender<WriteResult>>,
}

/// Why the log could not take a batch. The server stops: a write it cannot
/// make durable must never be acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("write-ahead log: {0}")]
    Log(#[from] crate::storage::error::StorageError),
}

/// Where txns become durable before they are applied. Standalone: the local
/// write-ahead log.
pub trait CommitLog: Send + 'static {
    /// Makes `entries` durable, in order, before it returns (it blocks).
    fn append(&mut self, entries: &[TxnEntry]) -> Result<(), CommitError>;
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
    fn append(&mut self, entries: &[TxnEntry]) -> Result<(), CommitError> {
        self.appended += entries.len() as u64;
        Ok(())
    }
}

/// The order's single writer, shared by the commit thread and the
/// connections.
pub struct Committer {
    /// Writes on their way to the commit thread (bounded: back-pressure).
    queue: mpsc::Sender<Proposal>,
    /// `None` once stopped, or after the log failed.
    order: Mutex<Option<Order>>,
    /// Proposals handed to the queue and not yet committed. Raised before a
    /// proposal is queued and lowered after its batch is applied, so zero
    /// under the lock means nothing proposed earlier is still waiting.
    queued: AtomicUsize,
    /// The commit thread's last batch held more than one write: writes are
    /// arriving together, group commit is doing its job, and a connection
    /// committing inline would hold up the other connections on its thread
    /// for a sync. Inline commits wait until batches are single again.
    batching: AtomicBool,
    /// When a connection may commit its write itself.
    inline: InlineCommits,
}

struct Order {
    log: Box<dyn CommitLog>,
    last_zxid: Zxid,
    snapshots: Option<Snapshotter>,
}

impl Committer {
    /// Zxids continue from `last_zxid`. With `snapshots`, a snapshot is
    /// started every so many applied ops. Proposals go to `queue`, whose
    /// receiver the commit thread ([`run_committer`]) drains.
    pub fn new(
        log: impl CommitLog,
        last_zxid: Zxid,
        snapshots: Option<Snapshotter>,
        queue: mpsc::Sender<Proposal>,
    ) -> Self {
        Self {
            queue,
            order: Mutex::new(Some(Order {
                log: Box::new(log),
                last_zxid,
                snapshots,
            })),
            queued: AtomicUsize::new(0),
            batching: AtomicBool::new(false),
            inline: InlineCommits::WhenIdle,
        }
    }

    /// An ensemble member's committer: proposals go to `queue`, whose
    /// receiver hands them to the replicated log in order
    /// (`crate::cluster::replicator`); none is committed inline.
    pub fn replicated(queue: mpsc::Sender<Proposal>) -> Self {
        Self {
            queue,
            order: Mutex::new(None),
            queued: AtomicUsize::new(0),
            batching: AtomicBool::new(false),
            inline: InlineCommits::Never,
        }
    }

    /// Commits writes on their connections' threads only as `inline` says
    /// (a new committer: whenever the commit thread is idle).
    pub fn with_inline_commits(mut self, inline: InlineCommits) -> Self {
        self.inline = inline;
        self
    }

    /// Queues a proposal for the commit thread, waiting while the queue is
    /// full (back-pressure). Fails once the committer has stopped.
    pub async fn propose(&self, proposal: Proposal) -> Result<(), ErrorCode> {
        self.queued.fetch_add(1, Ordering::AcqRel);
        if self.queue.send(proposal).await.is_err() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(ErrorCode::Unavailable);
        }
        Ok(())
    }

    /// Queues `proposal` with a reply channel; the receiver yields its
    /// result once applied (closed if its outcome will never be known).
    pub async fn propose_answered(
        &self,
        mut proposal: Proposal,
    ) -> Result<oneshot::Receiver<WriteResult>, ErrorCode> {
        let (reply, result) = oneshot::channel();
        proposal.reply = Some(reply);
        self.propose(proposal).await?;
        Ok(result)
    }

    /// Commits `proposal` on the calling thread if nothing is queued and
    /// nobody is committing; otherwise hands it back, to be queued. The
    /// result is returned, not sent to `proposal.reply`. The caller must have
    /// no earlier write of its own still unanswered. Blocks for the log's
    /// sync.
    pub fn try_commit_now(
        &self,
        shared: &Shared,
        proposal: Proposal,
    ) -> Result<WriteResult, Proposal> {
        let allowed = match self.inline {
            InlineCommits::WhenIdle => true,
            InlineCommits::LoneConnection => shared.stats.connections().open <= 1,
            InlineCommits::Never => false,
        };
        if !allowed
            || self.queued.load(Ordering::Acquire) != 0
            || self.batching.load(Ordering::Relaxed)
        {
            return Err(proposal);
        }
        let Some(mut order) = self.order.try_lock() else {
            return Err(proposal);
        };
        if self.queued.load(Ordering::Acquire) != 0 {
            return Err(proposal);
        }
        let mut results = commit(&mut order, shared, std::iter::once(proposal));
        shared.stats.committed_inline();
        Ok(results.pop().unwrap_or(Err(ErrorCode::Internal)))
    }

    /// Commits a batch from the queue, waiting for the lock if a connection
    /// is committing, and answers each proposer.
    fn commit_queued(&self, shared: &Shared, batch: &mut Vec<Proposal>) {
        let count = batch.len();
        self.batching.store(count > 1, Ordering::Relaxed);
        let replies: Vec<_> = batch.iter_mut().map(|p| p.reply.take()).collect();
        let results = {
            let mut order = self.order.lock();
            commit(&mut order, shared, batch.drain(..))
        };
        self.queued.fetch_sub(count, Ordering::AcqRel);
        for (reply, result) in replies.into_iter().zip(results) {
            if let Some(reply) = reply {
                // The proposer may have gone (connection closed); the write stands.
                let _ = reply.send(result);
            }
        }
    }

    /// Takes no more writes; drops the log and the snapshotter (which lets
    /// the snapshot thread finish).
    fn stop(&self) -> Option<Zxid> {
        self.order.lock().take().map(|order| order.last_zxid)
    }
}

/// Numbers, logs and applies `batch` in order; one result per proposal.
/// After a log failure nothing more is committed: `order` becomes `None`
/// and the server shuts down.
fn commit(
    order: &mut Option<Order>,
    shared: &Shared,
    batch: impl ExactSizeIterator<Item = Proposal>,
) -> Vec<WriteResult> {
    let Some(state) = order.as_mut() else {
        return vec![Err(ErrorCode::Unavailable); batch.len()];
    };
    let entries: Vec<TxnEntry> = batch
        .zip(state.last_zxid + 1..)
        .map(|(proposal, zxid)| TxnEntry {
            zxid,
            time_ms: proposal.time_ms,
            txn: proposal.txn,
        })
        .collect();
    let appending = std::time::Instant::now();
    if let Err(err) = state.log.append(&entries) {
        // Nothing of this batch is acknowledged or applied: a write that may
        // not be durable must never become visible.
        let first_zxid = entries.first().map_or(0, |entry| entry.zxid);
        error!(error = %err, first_zxid = %Hex(first_zxid), "commit log failed; stopping the server");
        *order = None;
        shared.stats.log_failed();
        shared.shutdown.cancel();
        return vec![Err(ErrorCode::Unavailable); entries.len()];
    }
    shared.stats.log_synced(entries.len(), appending.elapsed());
    state.last_zxid += entries.len() as Zxid;
    let results = apply_committed(shared, entries.iter(), |_| {});
    if let Some(snapshots) = state.snapshots.as_mut() {
        let ops = entries.iter().map(|entry| entry.txn.op_count()).sum();
        snapshots.applied(ops, shared);
    }
    results
}

/// Runs the commit thread's loop until `stop` is cancelled and the queue is
/// drained, then stops the committer.
pub async fn run_committer(
    mut proposals: mpsc::Receiver<Proposal>,
    shared: Arc<Shared>,
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
        shared.committer.commit_queued(&shared, &mut batch);
    }
    let last_zxid = shared.committer.stop();
    debug!(?last_zxid, "committer stopped");
}

#[cfg(test)]
mod tests {
    use arbor_protocol::{CreateMode, MultiOp};

    use super::*;
    use crate::clock::Clock;
    use crate::config::Config;
    use crate::pipeline::apply::StateMachine;

    fn create(path: &str) -> Proposal {
        Proposal {
            txn: Txn::Write {
                session_id: 1,
                op: MultiOp::Create {
                    path: path.into(),
                    data: Vec::new(),
                    mode: CreateMode::Persistent,
                },
            },
            time_ms: 0,
            reply: None,
        }
    }

    fn czxid(shared: &Shared, path: &str) -> Option<Zxid> {
        shared.state.read().tree.node(path).map(|node| node.czxid)
    }

    #[tokio::test]
    async fn an_inline_write_never_overtakes_a_queued_one() {
        let (queue, mut proposals) = mpsc::channel(8);
        let committer = Committer::new(MemoryLog::default(), 0, None, queue);
        let shared = Shared::new(
            Config::default(),
            Clock::system(),
            StateMachine::new(),
            committer,
        );

        shared
            .committer
            .propose(create("/first"))
            .await
            .expect("queued");
        let refused = shared.committer.try_commit_now(&shared, create("/second"));
        let second = refused.expect_err("a proposal is queued, so no inline commit");

        let mut batch = Vec::new();
        proposals.recv_many(&mut batch, 8).await;
        shared.committer.commit_queued(&shared, &mut batch);
        let result = shared.committer.try_commit_now(&shared, second);
        assert!(
            matches!(result, Ok(Ok(OpResult::Created { .. }))),
            "{result:?}"
        );
        assert_eq!(czxid(&shared, "/first"), Some(1));
        assert_eq!(czxid(&shared, "/second"), Some(2));

        // A committer that has stopped answers Unavailable.
        assert_eq!(shared.committer.stop(), Some(2));
        let after = shared.committer.try_commit_now(&shared, create("/third"));
        assert!(
            matches!(after, Ok(Err(ErrorCode::Unavailable))),
            "{after:?}"
        );
    }
}
