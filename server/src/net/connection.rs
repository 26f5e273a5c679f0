//! One client connection: the handshake, then three tasks joined by bounded
//! queues.
//!
//! ```text
//! socket ─► reader ─► pending (≤ in-flight limit) ─► responder ─► outbound ─► writer ─► socket
//!            │ writes: prep, then propose to the committer      ▲
//!            │ reads:  queued, run by the responder in turn     │ watch events, queued
//!                                                                 by the committer during apply
//! ```
//!
//! The responder answers pending items strictly in arrival order: it waits
//! for a write's result before it runs a later read, so a session reads its
//! own writes and its replies come back in request order. A request that
//! finds nothing owed ahead of it is answered by the reader itself, straight
//! into the outbound queue: a read at once, a write committed on the spot
//! when the committer is idle (see [`crate::pipeline::commit`]). Same order,
//! fewer hand-offs on the path a lone client waits on. Watch events go into
//! the same outbound queue during apply, before any reply that could reflect
//! the change is made, so a client always sees the event first.
//!
//! A frame that breaks the protocol (too large, undecodable, a second
//! handshake) is answered with `Closing` after the replies already owed, and
//! the connection ends; the session and every other connection carry on.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::codec;
use arbor_protocol::frame::{encode_frame, FrameDecoder, FrameError};
use arbor_protocol::{
    ClientMessage, ConnectRequest, ConnectResponse, ErrorCode, Op, OpResult, ServerLimits,
    ServerMessage, SessionId, Zxid, PROTOCOL_VERSION, SESSION_PASSWORD_BYTES,
};
use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadHalf};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::context::Shared;
use crate::net::ConnectionHandle;
use crate::pipeline::commit::{Proposal, WriteResult};
use crate::pipeline::prep::{prep_write, Requester};
use crate::pipeline::read;
use crate::session::negotiate_timeout_ms;
use crate::txn::{CloseReason, Txn};

/// Bytes the writer gathers from the outbound queue into one socket write.
const WRITE_BATCH_BYTES_MAX: usize = 256 * 1024;

/// How long a closing connection may take to flush what it owes.
const WRITER_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);

type Frames<S> = FramedRead<ReadHalf<S>, FrameDecoder>;

/// A request that is owed an answer, in arrival order.
enum Pending {
    /// Answered already (a refused write, a ping).
    Ready { xid: u64, result: WriteResult },
    /// Proposed to the committer; the result comes once it is applied.
    Write {
        xid: u64,
        result: oneshot::Receiver<WriteResult>,
    },
    /// Run against the applied state when its turn comes.
    Read { xid: u64, op: Op },
    /// The last thing this connection says.
    Close(ServerMessage),
}

fn closing(code: ErrorCode, message: impl Into<String>) -> ServerMessage {
    ServerMessage::Closing {
        code,
        message: message.into(),
    }
}

/// Serves one connection until the client leaves, breaks the protocol, its
/// session ends, or the server shuts down.
pub async fn serve<S>(stream: S, peer: SocketAddr, shared: Arc<Shared>)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let connection_id = NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed);
    let config = &shared.config;
    let (read_half, write_half) = tokio::io::split(stream);
    let mut frames = FramedRead::new(read_half, FrameDecoder::new(config.frame_bytes_max));
    let outbound_capacity =
        config.requests_in_flight_per_connection_max + config.events_queued_per_connection_max;
    let (outbound, outbound_rx) = mpsc::channel(outbound_capacity);
    let closer = CancellationToken::new();
    let writer = tokio::spawn(write_loop(
        write_half,
        outbound_rx,
        config.frame_bytes_max,
        closer.clone(),
    ));

    let handle = ConnectionHandle {
        connection_id,
        outbound: outbound.clone(),
        closer: closer.clone(),
    };
    match handshake(&mut frames, &shared, handle, peer).await {
        Ok(session_id) => {
            let (pending_tx, pending_rx) =
                mpsc::channel(config.requests_in_flight_per_connection_max);
            let owed = Arc::new(AtomicUsize::new(0));
            let responder = tokio::spawn(respond_loop(
                pending_rx,
                outbound.clone(),
                owed.clone(),
                shared.clone(),
                session_id,
            ));
            let queues = Queues {
                pending: &pending_tx,
                owed: &owed,
                outbound: &outbound,
            };
            read_loop(&mut frames, queues, &shared, session_id, &closer).await;
            drop(pending_tx);
            let _ = responder.await;
            let still_ours = shared.connections.lock().detach(session_id, connection_id);
            if still_ours {
                shared.watches.lock().remove_session(session_id);
            }
            debug!(session_id, connection_id, %peer, "connection ended");
        }
        Err(Some(message)) => {
            let _ = outbound.send(message).await;
        }
        Err(None) => {}
    }
    drop(outbound);
    if tokio::time::timeout(WRITER_DRAIN_TIMEOUT, writer)
        .await
        .is_err()
    {
        debug!(connection_id, %peer, "writer did not drain in time");
    }
}

/// Opens or resumes a session. On failure, returns what to tell the client.
async fn handshake<S: AsyncRead>(
    frames: &mut Frames<S>,
    shared: &Arc<Shared>,
    handle: ConnectionHandle,
    peer: SocketAddr,
) -> Result<SessionId, Option<ServerMessage>> {
    let config = &shared.config;
    let wait = Duration::from_millis(config.handshake_timeout_ms);
    let first = tokio::select! {
        first = tokio::time::timeout(wait, frames.next()) => first,
        () = shared.shutdown.cancelled() => return Err(Some(closing(ErrorCode::Unavailable, "server is shutting down"))),
    };
    let bytes = match first {
        Err(_) => {
            let message = format!("no handshake within {} ms", config.handshake_timeout_ms);
            return Err(Some(closing(ErrorCode::BadRequest, message)));
        }
        Ok(None) => return Err(None),
        Ok(Some(Err(err))) => return Err(frame_error_message(&err)),
        Ok(Some(Ok(bytes))) => bytes,
    };
    let request: ConnectRequest = match codec::decode::<ClientMessage>(&bytes) {
        Ok(ClientMessage::Connect(request)) => request,
        Ok(ClientMessage::Request { .. }) => {
            let message = "the first message must be a Connect handshake";
            return Err(Some(closing(ErrorCode::BadRequest, message)));
        }
        Err(err) => {
            let message = format!("cannot decode handshake: {err}");
            return Err(Some(closing(ErrorCode::BadRequest, message)));
        }
    };
    if request.protocol_version != PROTOCOL_VERSION {
        let message = format!(
            "protocol version {} is not supported; this server speaks {PROTOCOL_VERSION}",
            request.protocol_version
        );
        return Err(Some(closing(ErrorCode::BadRequest, message)));
    }
    let server_zxid = shared.last_zxid();
    if request.last_zxid_seen > server_zxid {
        let message = format!(
            "client has seen zxid {:#x}, newer than this server's {server_zxid:#x}; try another server",
            request.last_zxid_seen
        );
        return Err(Some(closing(ErrorCode::Unavailable, message)));
    }
    let (session_id, password, timeout_ms) = match request.session {
        None => open_session(shared, request.session_timeout_ms).await?,
        Some(credentials) => {
            let grant = resume_session(shared, credentials.id, credentials.password)?;
            if shared.ensemble().is_some() {
                claim_session(shared, credentials.id).await?;
            }
            grant
        }
    };

    let connection_id = handle.connection_id;
    let outbound = handle.outbound.clone();
    let previous = {
        let mut watches = shared.watches.lock();
        let mut connections = shared.connections.lock();
        let previous = connections.attach(session_id, handle);
        if previous.is_some() {
            // The old connection's watches die with it; the client registers
            // them again on this one.
            watches.remove_session(session_id);
        }
        previous
    };
    if let Some(previous) = previous {
        let _ = previous.outbound.try_send(closing(
            ErrorCode::SessionMoved,
            "session resumed on another connection",
        ));
        previous.closer.cancel();
    }
    let response = ConnectResponse {
        protocol_version: PROTOCOL_VERSION,
        session_id,
        password,
        session_timeout_ms: timeout_ms,
        zxid: shared.last_zxid(),
        limits: ServerLimits {
            frame_bytes_max: config.frame_bytes_max as u32,
            data_bytes_max: config.data_bytes_max as u32,
        },
    };
    if outbound
        .send(ServerMessage::Connected(response))
        .await
        .is_err()
    {
        return Err(None);
    }
    info!(session_id, connection_id, %peer, timeout_ms, resumed = request.session.is_some(), "session connected");
    Ok(session_id)
}

type SessionGrant = (SessionId, [u8; SESSION_PASSWORD_BYTES], u32);

async fn open_session(
    shared: &Shared,
    requested_ms: u32,
) -> Result<SessionGrant, Option<ServerMessage>> {
    let timeout_ms = negotiate_timeout_ms(requested_ms, shared.config.tick_ms);
    let session_id = loop {
        let id: u64 = rand::random();
        if id != 0 {
            break id;
        }
    };
    let password: [u8; SESSION_PASSWORD_BYTES] = rand::random();
    let txn = Txn::CreateSession {
        session_id,
        password,
        timeout_ms,
    };
    // Found already there on a second try: an earlier try went through.
    propose_through_leader_changes(shared, txn, |attempt, code| {
        attempt > 1 && code == ErrorCode::SessionMoved
    })
    .await
    .map_err(|code| Some(closing(code, format!("cannot open a session: {code}"))))?;
    Ok((session_id, password, timeout_ms))
}

/// An ensemble member takes over a session a client resumes here: through
/// the log, so every write the session made through another member is
/// ordered before it (and applied here by the time it is answered), and
/// any it might still make there is refused with `SessionMoved`.
async fn claim_session(
    shared: &Shared,
    session_id: SessionId,
) -> Result<(), Option<ServerMessage>> {
    propose_through_leader_changes(shared, Txn::MoveSession { session_id }, |_, _| false)
        .await
        .map_err(|code| {
            Some(closing(
                code,
                format!("cannot resume session {session_id:#x}: {code}"),
            ))
        })
}

/// Proposes a handshake's txn and waits for it. In an ensemble a leader
/// change can refuse it (`NotLeader`) or leave its outcome unknown; the same
/// txn is proposed again, and `landed(attempt, code)` recognises the answer
/// of a retry whose earlier try went through.
async fn propose_through_leader_changes(
    shared: &Shared,
    txn: Txn,
    landed: impl Fn(u32, ErrorCode) -> bool,
) -> Result<(), ErrorCode> {
    for attempt in 1..=HANDSHAKE_PROPOSAL_ATTEMPTS {
        let result = propose(shared, txn.clone()).await?;
        let code = match result.await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(code)) if landed(attempt, code) => return Ok(()),
            Ok(Err(code @ (ErrorCode::NotLeader | ErrorCode::Unavailable))) => code,
            Ok(Err(code)) => return Err(code),
            Err(_) => ErrorCode::Unavailable,
        };
        if attempt == HANDSHAKE_PROPOSAL_ATTEMPTS || shared.shutdown.is_cancelled() {
            return Err(code);
        }
        tokio::time::sleep(HANDSHAKE_PROPOSAL_RETRY_PAUSE).await;
    }
    Err(ErrorCode::Unavailable)
}

/// Tries at a handshake's txn through a leader change, and the pause
/// between them.
const HANDSHAKE_PROPOSAL_ATTEMPTS: u32 = 3;
const HANDSHAKE_PROPOSAL_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

fn resume_session(
    shared: &Shared,
    session_id: SessionId,
    password: [u8; SESSION_PASSWORD_BYTES],
) -> Result<SessionGrant, Option<ServerMessage>> {
    let state = shared.state.read();
    let expired = || {
        Some(closing(
            ErrorCode::SessionExpired,
            format!("session {session_id:#x} has expired"),
        ))
    };
    let record = state.session(session_id).ok_or_else(expired)?;
    if record.password != password {
        let message = format!("wrong password for session {session_id:#x}");
        return Err(Some(closing(ErrorCode::AuthFailed, message)));
    }
    if !shared
        .tracker
        .lock()
        .touch(session_id, shared.clock.monotonic_ms())
    {
        return Err(expired());
    }
    Ok((session_id, record.password, record.timeout_ms))
}

/// Queues a txn for the commit thread; the receiver yields its result once
/// applied.
async fn propose(shared: &Shared, txn: Txn) -> Result<oneshot::Receiver<WriteResult>, ErrorCode> {
    let (reply, result) = oneshot::channel();
    let proposal = Proposal {
        txn,
        time_ms: shared.clock.wall_ms(),
        reply: Some(reply),
    };
    shared.committer.propose(proposal).await?;
    Ok(result)
}

fn frame_error_message(err: &FrameError) -> Option<ServerMessage> {
    match err {
        FrameError::TooLarge { .. } => Some(closing(ErrorCode::TooLarge, err.to_string())),
        FrameError::Io(_) => None,
        _ => Some(closing(ErrorCode::BadRequest, err.to_string())),
    }
}

/// Where the reader puts what it has read.
#[derive(Clone, Copy)]
struct Queues<'a> {
    /// To the responder, in order.
    pending: &'a mpsc::Sender<Pending>,
    /// Items given to the responder and not yet passed on to `outbound`.
    /// Only the reader adds, so zero seen by the reader stays zero until it
    /// queues again.
    owed: &'a AtomicUsize,
    /// To the writer.
    outbound: &'a mpsc::Sender<ServerMessage>,
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
async fn read_loop<S: AsyncRead>(
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
        let (item, last) = classify(shared, session_id, xid, op, owes_nothing).await;
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
        if !queued || last {
            return;
        }
    }
}

/// Turns one request into a pending answer. `true` if it is the last one
/// this connection takes (the session is closing or gone). `inline`: nothing
/// of this connection is unanswered, so a write may be committed right here.
async fn classify(
    shared: &Shared,
    session_id: SessionId,
    xid: u64,
    op: Op,
    inline: bool,
) -> (Pending, bool) {
    let now_ms = shared.clock.monotonic_ms();
    if !shared.tracker.lock().touch(session_id, now_ms) {
        let result = Err(ErrorCode::SessionExpired);
        return (Pending::Ready { xid, result }, true);
    }
    debug!(session_id, xid, op = op.name(), "request");
    match op {
        Op::Ping => (
            Pending::Ready {
                xid,
                result: Ok(OpResult::Pong),
            },
            false,
        ),
        Op::CloseSession => {
            if !shared.tracker.lock().start_closing(session_id) {
                return (
                    Pending::Ready {
                        xid,
                        result: Err(ErrorCode::SessionExpired),
                    },
                    true,
                );
            }
            let txn = Txn::CloseSession {
                session_id,
                reason: CloseReason::Closed,
            };
            (proposed(shared, xid, txn, false).await, true)
        }
        op if op.is_write() => {
            let who = Requester {
                session_id,
                active: true,
            };
            match prep_write(op, who, &shared.config) {
                Ok(txn) => (proposed(shared, xid, txn, inline).await, false),
                Err(code) => (
                    Pending::Ready {
                        xid,
                        result: Err(code),
                    },
                    false,
                ),
            }
        }
        Op::Sync { .. } if shared.ensemble().is_some() => {
            (synced(shared, session_id, xid, op), false)
        }
        Op::AddMember { .. } | Op::RemoveMember { .. } => (change_member(shared, xid, op), false),
        op => (Pending::Read { xid, op }, false),
    }
}

/// Adds or removes an ensemble member; a standalone server has none.
fn change_member(shared: &Shared, xid: u64, op: Op) -> Pending {
    let Some(ensemble) = shared.ensemble() else {
        return Pending::Ready {
            xid,
            result: Err(ErrorCode::Unimplemented),
        };
    };
    let change = match op {
        Op::AddMember {
            id,
            client_addr,
            peer_addr,
        } => ensemble.change_member(id, Some((client_addr, peer_addr))),
        Op::RemoveMember { id } => ensemble.change_member(id, None),
        _ => {
            return Pending::Ready {
                xid,
                result: Err(ErrorCode::BadRequest),
            }
        }
    };
    let ensemble = ensemble.clone();
    let (answer, result) = oneshot::channel();
    tokio::spawn(async move {
        let result = change
            .await
            .map(|()| OpResult::ClusterStatus(ensemble.status()));
        let _ = answer.send(result);
    });
    Pending::Write { xid, result }
}

/// An ensemble member's `sync`: answered once this member has applied what
/// the leader had committed, so the session's next read is linearizable.
fn synced(shared: &Shared, session_id: SessionId, xid: u64, op: Op) -> Pending {
    let (answer, result) = oneshot::channel();
    let (checked, _) = read::execute(shared, session_id, &op);
    let barrier = shared.ensemble().map(|ensemble| ensemble.sync());
    tokio::spawn(async move {
        let result = match barrier {
            Some(barrier) => barrier.await.and(checked),
            None => checked,
        };
        let _ = answer.send(result);
    });
    Pending::Write { xid, result }
}

/// A write, committed at once on this thread when `inline` (nothing of this
/// connection is unanswered) and the committer is idle; else queued.
async fn proposed(shared: &Shared, xid: u64, txn: Txn, inline: bool) -> Pending {
    let mut proposal = Proposal {
        txn,
        time_ms: shared.clock.wall_ms(),
        reply: None,
    };
    if inline {
        match shared.committer.try_commit_now(shared, proposal) {
            Ok(result) => return Pending::Ready { xid, result },
            Err(back) => proposal = back,
        }
    }
    let (reply, result) = oneshot::channel();
    proposal.reply = Some(reply);
    match shared.committer.propose(proposal).await {
        Ok(()) => Pending::Write { xid, result },
        Err(code) => Pending::Ready {
            xid,
            result: Err(code),
        },
    }
}

fn reply(xid: u64, zxid: Zxid, result: WriteResult) -> ServerMessage {
    ServerMessage::Reply { xid, zxid, result }
}

/// Answers pending items in order.
async fn respond_loop(
    mut pending: mpsc::Receiver<Pending>,
    outbound: mpsc::Sender<ServerMessage>,
    owed: Arc<AtomicUsize>,
    shared: Arc<Shared>,
    session_id: SessionId,
) {
    while let Some(item) = pending.recv().await {
        let message = match item {
            Pending::Ready { xid, result } => reply(xid, shared.last_zxid(), result),
            Pending::Write { xid, result } => match result.await {
                Ok(result) => reply(xid, shared.last_zxid(), result),
                // Nobody will say whether the write happened (the server is
                // stopping, or an ensemble's leader changed under it). The
                // connection closes unanswered, so the client sees a
                // connection loss (outcome unknown), never a false answer.
                Err(_) => {
                    info!(
                        session_id,
                        xid, "a write's outcome is unknown; closing the connection"
                    );
                    let _ = outbound
                        .send(closing(
                            ErrorCode::Unavailable,
                            "the outcome of a write is unknown; reconnect and check",
                        ))
                        .await;
                    return;
                }
            },
            Pending::Read { xid, op } => {
                let (result, zxid) = read::execute(&shared, session_id, &op);
                reply(xid, zxid, result)
            }
            Pending::Close(message) => message,
        };
        if outbound.send(message).await.is_err() {
            return;
        }
        owed.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Writes queued messages, several frames per socket write when they pile up.
/// Ends after a `Closing` message, when every sender is gone, or on error.
async fn write_loop<W: AsyncWrite + Unpin>(
    mut sink: W,
    mut outbound: mpsc::Receiver<ServerMessage>,
    frame_bytes_max: usize,
    closer: CancellationToken,
) {
    let mut buf = Vec::with_capacity(64 * 1024);
    'write: while let Some(first) = outbound.recv().await {
        let mut last = encode_message(first, frame_bytes_max, &mut buf);
        while !last && buf.len() < WRITE_BATCH_BYTES_MAX {
            match outbound.try_recv() {
                Ok(message) => last = encode_message(message, frame_bytes_max, &mut buf),
                Err(_) => break,
            }
        }
        // A client that stops reading must not pin the connection forever:
        // once the connection is told to close, a blocked write is abandoned.
        let written = tokio::select! {
            biased;
            written = sink.write_all(&buf) => written,
            () = closer.cancelled() => break 'write,
        };
        if let Err(err) = written {
            debug!(error = %err, "write failed");
            break 'write;
        }
        buf.clear();
        if last {
            break;
        }
    }
    let _ = sink.shutdown().await;
    // Whatever ended the writer ends the connection.
    closer.cancel();
}

/// Appends one frame; a reply too large for a frame becomes a `TooLarge`
/// error for the same request. Returns whether this is the final message.
fn encode_message(message: ServerMessage, frame_bytes_max: usize, buf: &mut Vec<u8>) -> bool {
    let last = matches!(message, ServerMessage::Closing { .. });
    match encode_frame(&message, frame_bytes_max, buf) {
        Ok(()) => {}
        Err(FrameError::TooLarge { len, .. }) => match message {
            ServerMessage::Reply { xid, zxid, .. } => {
                debug!(xid, reply_bytes = len, "reply over the frame limit");
                let refused = reply(xid, zxid, Err(ErrorCode::TooLarge));
                if let Err(err) = encode_frame(&refused, frame_bytes_max, buf) {
                    warn!(xid, error = %err, "cannot encode an error reply");
                }
            }
            _ => warn!(
                message_bytes = len,
                "dropping a message over the frame limit"
            ),
        },
        Err(err) => warn!(error = %err, "cannot encode message"),
    }
    last
}
