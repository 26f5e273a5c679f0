//! The responder: answers what the reader queued, strictly in arrival
//! order. It waits for a write's result before it runs a later read, so a
//! session reads its own writes and its replies come in request order. A
//! write whose outcome is unknown is answered so only once that outcome is
//! settled at this member ([`settle`]): the read that looks for it next
//! finds it if it ever takes effect.
//!
//! It exists only once a connection has had to queue something (a write
//! handed to a busy committer, or a request behind one): a connection that
//! only reads, pings or sits idle is answered by its reader alone and never
//! pays for the task and its queue (about 5 KB, a quarter of what an idle
//! connection cost).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::Hex;
use arbor_protocol::{ErrorCode, SessionId};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::info;

use super::{answer_read, closing, reply, Pending};
use crate::context::Shared;
use crate::net::OutboundSender;

/// A running responder, as the reader holds it.
pub(super) struct Responder {
    /// To the responder, in order; at most the in-flight limit.
    pending: mpsc::Sender<Pending>,
    /// Items given to the responder and not yet passed on to `outbound`.
    /// Only the reader adds, so zero seen by the reader stays zero until it
    /// queues again.
    owed: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Responder {
    pub(super) fn spawn(
        outbound: OutboundSender,
        shared: Arc<Shared>,
        session_id: SessionId,
    ) -> Self {
        let (pending, pending_rx) =
            mpsc::channel(shared.config.requests_in_flight_per_connection_max);
        let owed = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(respond_loop(
            pending_rx,
            outbound,
            owed.clone(),
            shared,
            session_id,
        ));
        Responder {
            pending,
            owed,
            task,
        }
    }

    /// Whether everything queued has been passed on to the writer.
    pub(super) fn owes_nothing(&self) -> bool {
        self.owed.load(Ordering::Acquire) == 0
    }

    /// Queues `item`; false if the responder has stopped.
    pub(super) async fn send(&self, item: Pending) -> bool {
        self.owed.fetch_add(1, Ordering::AcqRel);
        self.pending.send(item).await.is_ok()
    }

    /// Lets the responder answer what it holds, and waits until it has.
    pub(super) async fn finish(self) {
        drop(self.pending);
        let _ = self.task.await;
    }
}

async fn respond_loop(
    mut pending: mpsc::Receiver<Pending>,
    outbound: OutboundSender,
    owed: Arc<AtomicUsize>,
    shared: Arc<Shared>,
    session_id: SessionId,
) {
    while let Some(item) = pending.recv().await {
        let stats = &shared.stats;
        let message = match item {
            Pending::Ready {
                xid,
                started,
                result,
            } => {
                stats.request_answered(started, &result);
                reply(xid, shared.last_zxid(), result)
            }
            Pending::Write {
                xid,
                started,
                result,
            } => {
                let answer = match result.await {
                    // Answered in place once its fate is known here.
                    Ok(Err(ErrorCode::OutcomeUnknown)) if !settle(&shared).await => None,
                    Ok(result) => Some(result),
                    // Nobody will say whether the write happened (the
                    // server is stopping, or an ensemble's leader changed
                    // under it).
                    Err(_) => None,
                };
                let Some(result) = answer else {
                    // The connection closes unanswered, so the client sees
                    // a connection loss (outcome unknown), never a false
                    // answer, and reconnects.
                    info!(
                        session_id = %Hex(session_id),
                        xid, "a write's outcome is unknown here; closing the connection"
                    );
                    stats.request_unanswered(started);
                    let _ = outbound
                        .send(Box::new(closing(
                            ErrorCode::Unavailable,
                            "the outcome of a write is unknown; reconnect and check",
                        )))
                        .await;
                    give_up(pending, &shared);
                    return;
                };
                stats.request_answered(started, &result);
                reply(xid, shared.last_zxid(), result)
            }
            Pending::Read { xid, started, op } => {
                // Its answer is made only once the client has read enough,
                // and queued before the read lock is let go (see `read`).
                outbound.room().await;
                let Some(slot) = outbound.reserve().await else {
                    stats.request_unanswered(started);
                    give_up(pending, &shared);
                    return;
                };
                answer_read(&shared, session_id, xid, started, &op, slot);
                owed.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
            Pending::Close(message) => message,
        };
        if outbound.send(Box::new(message)).await.is_err() {
            give_up(pending, &shared);
            return;
        }
        owed.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long a write's unknown outcome may take to settle: an election
/// and the new leader's first commit, with room to spare.
const SETTLE_WAIT_MAX: Duration = Duration::from_secs(4);
/// The pause before asking again while no leader answers.
const SETTLE_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Waits until this member knows the fate of a write whose outcome it is
/// about to answer as unknown (its leader died or went silent with the
/// write): it has applied all the current leader holds, so the write is
/// applied here if it ever will be. Only then may the connection go on: a
/// client that looks for the write (Curator's protected mode, our queue
/// recipes) reads next, and a lookup that missed a write committed a
/// moment later would make it twice. False if no leader settled it in
/// time; the connection must then end, and the session's claim on the
/// member it resumes at settles it there. A standalone server has no such
/// writes.
async fn settle(shared: &Shared) -> bool {
    let deadline = tokio::time::Instant::now() + SETTLE_WAIT_MAX;
    loop {
        let Some(ensemble) = shared.ensemble() else {
            return true;
        };
        if ensemble.sync().await.is_ok() {
            return true;
        }
        if tokio::time::Instant::now() + SETTLE_RETRY_PAUSE > deadline {
            return false;
        }
        tokio::time::sleep(SETTLE_RETRY_PAUSE).await;
    }
}

/// Counts what is still queued as unanswered: the connection is ending.
fn give_up(mut pending: mpsc::Receiver<Pending>, shared: &Shared) {
    pending.close();
    while let Ok(item) = pending.try_recv() {
        if let Some(started) = item.started() {
            shared.stats.request_unanswered(started);
        }
    }
}
