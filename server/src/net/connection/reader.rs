//! The reader: decodes each request, has prep decide what it is, and queues
//! it in arrival order. A request that finds nothing owed ahead of it is
//! answered here, straight into the outbound queue: a read at once, a write
//! committed on the spot when the committer is idle and no later write of
//! the connection is waiting in the buffer (see [`submit`] and
//! [`crate::pipeline::commit`]). Same order, fewer hand-offs on the path a
//! lone client waits on.

use std::net::SocketAddr;
use std::sync::Arc;

use arbor_protocol::frame::FrameError;
use arbor_protocol::{ErrorCode, Hex, Op, ServerMessage, SessionId};
use futures_util::StreamExt;
use tokio::io::AsyncRead;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::responder::Responder;
use super::wire::{Incoming, Wire};
use super::{
    answer_read, closing, frame_error_message, release_large_read_buffer, reply, Frames, Pending,
};
use crate::acl::auth::AUTH_ATTEMPTS_PER_CONNECTION_MAX;
use crate::context::Shared;
use crate::net::OutboundSender;
use crate::pipeline::commit::Proposal;
use crate::pipeline::prep::{self, Then};
use crate::stats::{self, Started};

/// Where the reader puts what it has read.
pub(super) struct Queues {
    /// To the writer.
    outbound: OutboundSender,
    /// To the responder, made on first need (see [`Responder`]).
    responder: Option<Responder>,
    shared: Arc<Shared>,
    session_id: SessionId,
}

impl Queues {
    pub(super) fn new(
        outbound: OutboundSender,
        shared: Arc<Shared>,
        session_id: SessionId,
    ) -> Self {
        Queues {
            outbound,
            responder: None,
            shared,
            session_id,
        }
    }

    /// Whether nothing queued is still unanswered: an answer made now may
    /// skip the responder and keep its place in the reply order.
    fn owes_nothing(&self) -> bool {
        self.responder.as_ref().is_none_or(Responder::owes_nothing)
    }

    /// Gives `item` to the responder; false if the connection is ending.
    async fn queue(&mut self, item: Pending, closer: &CancellationToken) -> bool {
        let started = item.started();
        let queued = self.queue_item(item, closer).await;
        if let (false, Some(started)) = (queued, started) {
            self.shared.stats.request_unanswered(started);
        }
        queued
    }

    async fn queue_item(&mut self, item: Pending, closer: &CancellationToken) -> bool {
        let item = match item {
            Pending::Close(message) if self.owes_nothing() => {
                return self.send_direct(message, closer).await
            }
            item => item,
        };
        let responder = self.responder.get_or_insert_with(|| {
            Responder::spawn(self.outbound.clone(), self.shared.clone(), self.session_id)
        });
        tokio::select! {
            sent = responder.send(item) => sent,
            () = closer.cancelled() => false,
        }
    }

    /// Sends `message` to the writer, skipping the responder; false if the
    /// connection is ending. A full queue means the client is not reading
    /// its answers; waiting here is the back-pressure, but a closing
    /// connection must not wait.
    async fn send_direct(&self, message: ServerMessage, closer: &CancellationToken) -> bool {
        tokio::select! {
            sent = self.outbound.send(Box::new(message)) => sent.is_ok(),
            () = closer.cancelled() => false,
        }
    }

    /// Answers a read straight to the writer, its answer queued while the
    /// read lock is held; false if the connection is ending.
    async fn answer_read(
        &self,
        xid: u64,
        started: Started,
        op: &Op,
        closer: &CancellationToken,
    ) -> bool {
        let slot = tokio::select! {
            slot = self.outbound.reserve() => slot,
            () = closer.cancelled() => None,
        };
        let Some(slot) = slot else {
            self.shared.stats.request_unanswered(started);
            return false;
        };
        answer_read(&self.shared, self.session_id, xid, started, op, slot);
        true
    }

    /// Waits until everything queued has been passed on to the writer.
    pub(super) async fn finish(self) {
        if let Some(responder) = self.responder {
            responder.finish().await;
        }
    }
}

/// Reads requests and queues them, in order, until the connection must end.
pub(super) async fn read_loop<S: AsyncRead + Unpin>(
    frames: &mut Frames<S>,
    wire: Wire,
    queues: &mut Queues,
    shared: &Arc<Shared>,
    session_id: SessionId,
    peer: SocketAddr,
    closer: &CancellationToken,
) {
    let mut auth_attempts = 0u32;
    loop {
        // A client that does not read its answers gets no more of them
        // made: its requests wait in its socket (see `net::outbound`).
        tokio::select! {
            biased;
            () = closer.cancelled() => return,
            () = queues.outbound.room() => {}
        }
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
            Some(Ok(bytes)) => {
                release_large_read_buffer(frames.read_buffer_mut(), bytes.len());
                bytes
            }
            Some(Err(err)) => {
                if !matches!(err, FrameError::Io(_)) {
                    info!(session_id = %Hex(session_id), %peer, error = %err, "bad frame; closing the connection");
                    shared.stats.protocol_error();
                }
                if let Some(message) = frame_error_message(&err) {
                    queues.queue(Pending::Close(message), closer).await;
                }
                return;
            }
        };
        let (xid, op) = match wire.decode_request(&bytes) {
            Ok(Incoming::Request { xid, op }) => (xid, op),
            Ok(Incoming::Refused { xid, code }) => {
                let item = Pending::Ready {
                    xid,
                    started: shared.stats.request_started(stats::UNSUPPORTED_OP),
                    result: Err(code),
                };
                if !queues.queue(item, closer).await {
                    return;
                }
                continue;
            }
            Ok(Incoming::Connect) => {
                let message = closing(
                    ErrorCode::BadRequest,
                    "Connect is only allowed as the first message",
                );
                queues.queue(Pending::Close(message), closer).await;
                return;
            }
            Err(message) => {
                info!(session_id = %Hex(session_id), %peer, error = %message, "undecodable request; closing the connection");
                shared.stats.protocol_error();
                let message = closing(ErrorCode::BadRequest, message);
                queues.queue(Pending::Close(message), closer).await;
                return;
            }
        };
        let ping = matches!(op, Op::Ping);
        crate::net::idle_spin::served(ping);
        if matches!(op, Op::Auth { .. }) {
            auth_attempts += 1;
            if auth_attempts > AUTH_ATTEMPTS_PER_CONNECTION_MAX {
                info!(session_id = %Hex(session_id), %peer, "too many auth requests; closing the connection");
                shared.stats.protocol_error();
                let message = closing(
                    ErrorCode::LimitExceeded,
                    format!("more than {AUTH_ATTEMPTS_PER_CONNECTION_MAX} auth requests on one connection"),
                );
                queues.queue(Pending::Close(message), closer).await;
                return;
            }
        }
        // Nothing owed ahead: the answer may skip the responder.
        let owes_nothing = queues.owes_nothing();
        let started = shared.stats.request_started(stats::op_slot(&op));
        let prepped = prep::request(shared, session_id, xid, op);
        let item = match prepped.then {
            Then::Answer(result) => Pending::Ready {
                xid,
                started,
                result,
            },
            // A session's close is never committed inline: its apply ends
            // the connection, which must have its reply queued first. Nor
            // is a write with writes already read behind it: they go to the
            // committer together (see `submit`). Reads behind it do not
            // count: they wait for it anyway.
            Then::Propose(proposal) => {
                let inline =
                    owes_nothing && !prepped.last && wire.only_reads_buffered(frames.read_buffer());
                submit(shared, xid, started, proposal, inline).await
            }
            Then::Read(op) => Pending::Read { xid, started, op },
            Then::Await(result) => Pending::Write {
                xid,
                started,
                result,
            },
            Then::Leave(code, why) => {
                shared.stats.request_unanswered(started);
                queues
                    .queue(Pending::Close(closing(code, why)), closer)
                    .await;
                return;
            }
        };
        let direct = match item {
            Pending::Read { xid, started, op } if owes_nothing => {
                // Queued before the read lock is let go (see `read`).
                if !queues.answer_read(xid, started, &op, closer).await || prepped.last {
                    return;
                }
                continue;
            }
            // A ping is answered at once, even ahead of replies still owed:
            // it says the session is heard, and a write held up behind an
            // election must not make the connection look dead.
            Pending::Ready {
                xid,
                started,
                result,
            } if owes_nothing || ping => {
                shared.stats.request_answered(started, &result);
                Ok(reply(xid, shared.last_zxid(), result))
            }
            item => Err(item),
        };
        let queued = match direct {
            Ok(message) => queues.send_direct(message, closer).await,
            Err(item) => queues.queue(item, closer).await,
        };
        if !queued || prepped.last {
            return;
        }
    }
}

/// Hands a write to the committer: committed at once on this thread when
/// `inline` and the committer is idle; else queued, its answer to come.
/// `inline` means nothing of this connection is unanswered and no write
/// of it has been read past this one: a reader blocked in a sync reads no
/// more requests, so a client with many writes in flight on one
/// connection, committed inline one by one, got one sync per write
/// (measured: 64 in flight on one connection, 5.4-5.5 k sets/s inline,
/// 87-92 k/s through the commit thread). Its first write may still go
/// inline; the ones sent meanwhile are read together after it, and queued.
async fn submit(
    shared: &Shared,
    xid: u64,
    started: Started,
    mut proposal: Proposal,
    inline: bool,
) -> Pending {
    if inline {
        match shared.committer.try_commit_now(shared, proposal) {
            Ok(result) => {
                // The commit may have woken other connections' writers with
                // watch events (a lock's next waiter): let them write first,
                // so whoever waits on the change hears of it before this
                // answer, which only its own client waits on.
                tokio::task::yield_now().await;
                return Pending::Ready {
                    xid,
                    started,
                    result,
                };
            }
            Err(back) => proposal = back,
        }
    }
    match shared.committer.propose_answered(proposal).await {
        Ok(result) => Pending::Write {
            xid,
            started,
            result,
        },
        Err(code) => Pending::Ready {
            xid,
            started,
            result: Err(code),
        },
    }
}
