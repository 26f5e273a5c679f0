//! The responder: answers what the reader queued, strictly in arrival
//! order. It waits for a write's result before it runs a later read, so a
//! session reads its own writes and its replies come in request order.
//!
//! It exists only once a connection has had to queue something (a write
//! handed to a busy committer, or a request behind one): a connection that
//! only reads, pings or sits idle is answered by its reader alone and never
//! pays for the task and its queue (about 5 KB, a quarter of what an idle
//! connection cost).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

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
            } => match result.await {
                Ok(result) => {
                    stats.request_answered(started, &result);
                    reply(xid, shared.last_zxid(), result)
                }
                // Nobody will say whether the write happened (the server is
                // stopping, or an ensemble's leader changed under it). The
                // connection closes unanswered, so the client sees a
                // connection loss (outcome unknown), never a false answer.
                Err(_) => {
                    info!(
                        session_id = %Hex(session_id),
                        xid, "a write's outcome is unknown; closing the connection"
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
                }
            },
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

/// Counts what is still queued as unanswered: the connection is ending.
fn give_up(mut pending: mpsc::Receiver<Pending>, shared: &Shared) {
    pending.close();
    while let Ok(item) = pending.try_recv() {
        if let Some(started) = item.started() {
            shared.stats.request_unanswered(started);
        }
    }
}
