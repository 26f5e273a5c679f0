//! The reader: decodes each request, has prep decide what it is, and queues
//! it in arrival order. A request that finds nothing owed ahead of it is
//! answered here, straight into the outbound queue: a read at once, a write
//! committed on the spot when the committer is idle (see
//! [`crate::pipeline::commit`]). Same order, fewer hand-offs on the path a
//! lone client waits on.

use std::sync::atomic::{AtomicUsize, Ordering};

use arbor_protocol::codec;
use arbor_protocol::{ClientMessage, ErrorCode, ServerMessage, SessionId};
use futures_util::StreamExt;
use tokio::io::AsyncRead;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::{closing, frame_error_message, reply, Frames, Pending};
use crate::context::Shared;
use crate::pipeline::commit::Proposal;
use crate::pipeline::prep::{self, Then};
use crate::pipeline::read;

/// Where the reader puts what it has read.
#[derive(Clone, Copy)]
pub(super) struct Queues<'a> {
    /// To the responder, in order.
    pub(super) pending: &'a mpsc::Sender<Pending>,
    /// Items given to the responder and not yet passed on to `outbound`.
    /// Only the reader adds, so zero seen by the reader stays zero until it
    /// queues again.
    pub(super) owed: &'a AtomicUsize,
    /// To the writer.
    pub(super) outbound: &'a mpsc::Sender<ServerMessage>,
}

impl Queues<'_> {
    /// Gives `item` to the responder; false if the connection is ending.
    async fn queue(&self, item: Pending, closer: &CancellationToken) -> bool {
        self.owed.fetch_add(1, Ordering::AcqRel);
        tokio::select! {
            sent = self.pending.send(item) => sent.is_ok(),
            () = closer.cancelled() => false,
        }
    }
}

/// Reads requests and queues them, in order, until the connection must end.
pub(super) async fn read_loop<S: AsyncRead>(
    frames: &mut Frames<S>,
    queues: Queues<'_>,
    shared: &Shared,
    session_id: SessionId,
    closer: &CancellationToken,
) {
    loop {
        let next = tokio::select! {
            biased;
            () = closer.cancelled() => return,
            () = shared.shutdown.cancelled() => {
                queues.queue(Pending::Close(closing(ErrorCode::Unavailable, "server is shutting down")), closer).await;
                return;
            }
            next = frames.next() => next,
        };
        let bytes = match next {
            None => return,
            Some(Ok(bytes)) => bytes,
            Some(Err(err)) => {
                warn!(session_id, error = %err, "bad frame; closing connection");
                if let Some(message) = frame_error_message(&err) {
                    queues.queue(Pending::Close(message), closer).await;
                }
                return;
            }
        };
        let (xid, op) = match codec::decode::<ClientMessage>(&bytes) {
            Ok(ClientMessage::Request { xid, op }) => (xid, op),
            Ok(ClientMessage::Connect(_)) => {
                let message = closing(
                    ErrorCode::BadRequest,
                    "Connect is only allowed as the first message",
                );
                queues.queue(Pending::Close(message), closer).await;
                return;
            }
            Err(err) => {
                warn!(session_id, error = %err, "undecodable request; closing connection");
                let message = closing(
                    ErrorCode::BadRequest,
                    format!("cannot decode request: {err}"),
                );
                queues.queue(Pending::Close(message), closer).await;
                return;
            }
        };
        // Nothing owed ahead: the answer may skip the responder.
        let owes_nothing = queues.owed.load(Ordering::Acquire) == 0;
        let prepped = prep::request(shared, session_id, xid, op);
        let item = match prepped.then {
            Then::Answer(result) => Pending::Ready { xid, result },
            // A session's close is never committed inline: its apply ends
            // the connection, which must have its reply queued first.
            Then::Propose(proposal) => {
                submit(shared, xid, proposal, owes_nothing && !prepped.last).await
            }
            Then::Read(op) => Pending::Read { xid, op },
            Then::Await(result) => Pending::Write { xid, result },
        };
        let direct = match item {
            Pending::Read { xid, op } if owes_nothing => {
                let (result, zxid) = read::execute(shared, session_id, &op);
                Ok(reply(xid, zxid, result))
            }
            Pending::Ready { xid, result } if owes_nothing => {
                Ok(reply(xid, shared.last_zxid(), result))
            }
            item => Err(item),
        };
        // A full queue means the client is not reading its answers; waiting
        // here is the back-pressure, but a closing connection must not wait.
        let queued = match direct {
            Ok(message) => tokio::select! {
                sent = queues.outbound.send(message) => sent.is_ok(),
                () = closer.cancelled() => false,
            },
            Err(item) => queues.queue(item, closer).await,
        };
        if !queued || prepped.last {
            return;
        }
    }
}

/// Hands a write to the committer: committed at once on this thread when
/// `inline` (nothing of this connection is unanswered) and the committer is
/// idle; else queued, its answer to come.
async fn submit(shared: &Shared, xid: u64, mut proposal: Proposal, inline: bool) -> Pending {
    if inline {
        match shared.committer.try_commit_now(shared, proposal) {
            Ok(result) => return Pending::Ready { xid, result },
            Err(back) => proposal = back,
        }
    }
    match shared.committer.propose_answered(proposal).await {
        Ok(result) => Pending::Write { xid, result },
        Err(code) => Pending::Ready {
            xid,
            result: Err(code),
        },
    }
}
