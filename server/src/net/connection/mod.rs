//! One client connection: the [`handshake`], then up to three tasks joined
//! by bounded queues: the [`reader`], the [`responder`] (made on first
//! need: an idle or read-only connection has none) and the [`writer`]. A
//! connection frames bytes and keeps its session's order; what a request
//! means is prep's business ([`crate::pipeline::prep`]).
//!
//! ```text
//! socket ─► reader ─► pending (≤ in-flight limit) ─► responder ─► outbound ─► writer ─► socket
//!            │ writes: prepped, then proposed to the committer   ▲
//!            │ reads:  queued, run by the responder in turn     │ watch events, queued
//!                                                                 by the committer during apply
//! ```
//!
//! The responder answers pending items strictly in arrival order: it waits
//! for a write's result before it runs a later read, so a session reads its
//! own writes and its replies come back in request order. Pings alone are
//! answered by the reader at once, ahead of what is owed (clients match
//! them by their xid): a write held up by an election must not make a live
//! connection look dead. A request that
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

mod handshake;
mod prefixed;
mod reader;
mod responder;
mod sniff;
mod wire;
mod writer;

pub use wire::Wire;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::frame::{FrameDecoder, FrameError};
use arbor_protocol::Hex;
use arbor_protocol::{ErrorCode, Op, ServerMessage, SessionId, Zxid};
use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf};
use tokio::sync::oneshot;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::acl::identity::Origin;
use crate::context::Shared;
use crate::net::{outbound, ConnectionHandle};
use crate::pipeline::commit::WriteResult;
use crate::stats::Started;
use crate::zk;

/// The read buffer a connection starts with (tokio-util's default is 8 KiB):
/// room for a pipelined batch of small requests in one read; it grows for a
/// larger frame.
const READ_BUF_BYTES: usize = 4 * 1024;

/// A frame larger than this (a multi of a thousand creates, a big set) grew
/// the read buffer to its size; once it is read, the buffer starts small
/// again, so a connection that sent one large frame does not hold that much
/// memory for as long as it lives.
const READ_BUF_RETAINED_BYTES_MAX: usize = 64 * 1024;

/// How long a closing connection may take to flush what it owes.
const WRITER_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);

/// After a frame of `frame_len` bytes was split off `buffer`: if it was a
/// large one, moves what is left (the start of the next frame, if any) into
/// a small buffer of its own, so the large allocation goes with the frame.
/// (The buffer's capacity alone would not tell: the frame holds its bytes
/// until it is dropped, and the buffer takes the allocation back after.)
fn release_large_read_buffer(buffer: &mut BytesMut, frame_len: usize) {
    if frame_len <= READ_BUF_RETAINED_BYTES_MAX {
        return;
    }
    let rest = buffer.split();
    let mut fresh = BytesMut::with_capacity(READ_BUF_BYTES.max(rest.len()));
    fresh.extend_from_slice(&rest);
    *buffer = fresh;
}

type Frames<S> = FramedRead<ReadHalf<prefixed::Prefixed<S>>, FrameDecoder>;

/// A request that is owed an answer, in arrival order, with when it was
/// read (for its latency and count).
enum Pending {
    /// Answered already (a refused write, a ping).
    Ready {
        xid: u64,
        started: Started,
        result: WriteResult,
    },
    /// Proposed to the committer (or waiting on the ensemble); the result
    /// comes once it is applied.
    Write {
        xid: u64,
        started: Started,
        result: oneshot::Receiver<WriteResult>,
    },
    /// Run against the applied state when its turn comes.
    Read { xid: u64, started: Started, op: Op },
    /// The last thing this connection says.
    Close(ServerMessage),
}

impl Pending {
    /// The request this answers, if it answers one.
    fn started(&self) -> Option<Started> {
        match self {
            Pending::Ready { started, .. }
            | Pending::Write { started, .. }
            | Pending::Read { started, .. } => Some(*started),
            Pending::Close(_) => None,
        }
    }
}

fn closing(code: ErrorCode, message: impl Into<String>) -> ServerMessage {
    ServerMessage::Closing {
        code,
        message: message.into(),
    }
}

fn reply(xid: u64, zxid: Zxid, result: WriteResult) -> ServerMessage {
    ServerMessage::Reply { xid, zxid, result }
}

/// Answers a read into `slot` while the read lock is held, so no event of a
/// watch the read sets can be queued ahead of its answer (see `read`).
fn answer_read(
    shared: &Shared,
    session_id: SessionId,
    xid: u64,
    started: Started,
    op: &Op,
    slot: outbound::Reserved<'_>,
) {
    crate::pipeline::read::execute(shared, session_id, op, |result, zxid| {
        shared.stats.request_answered(started, &result);
        slot.send(Box::new(reply(xid, zxid, result)));
    });
}

fn frame_error_message(err: &FrameError) -> Option<ServerMessage> {
    match err {
        FrameError::TooLarge { .. } => Some(closing(ErrorCode::TooLarge, err.to_string())),
        FrameError::Io(_) => None,
        _ => Some(closing(ErrorCode::BadRequest, err.to_string())),
    }
}

/// Serves one connection until the client leaves, breaks the protocol, its
/// session ends, or the server shuts down. `subject` is the client
/// certificate's, on a mutual-TLS connection; `wire` the protocol it
/// speaks.
pub async fn serve<S>(
    mut stream: S,
    peer: SocketAddr,
    subject: Option<String>,
    wire: Wire,
    shared: Arc<Shared>,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let connection_id = NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed);
    let config = &shared.config;
    // A ZooKeeper connection may open with a four-letter word instead, and
    // a native one may come from a peer that speaks something else; if
    // not, the bytes looked at are read again as the frame's start.
    let looked_at;
    let sniffed;
    let first: &[u8] = match wire {
        Wire::ZooKeeper => match four_letter_word(&mut stream, peer, &shared).await {
            Some(bytes) => {
                looked_at = bytes;
                &looked_at
            }
            None => return,
        },
        Wire::Native => match native_start(&mut stream, peer, &shared).await {
            Some(bytes) => {
                sniffed = bytes;
                &sniffed.bytes[..sniffed.len]
            }
            None => return,
        },
    };
    let (read_half, write_half) = tokio::io::split(prefixed::Prefixed::new(first, stream));
    let mut frames = FramedRead::with_capacity(
        read_half,
        FrameDecoder::new(config.frame_bytes_max),
        READ_BUF_BYTES,
    );
    let outbound_capacity =
        config.requests_in_flight_per_connection_max + config.events_queued_per_connection_max;
    let (outbound, outbound_rx) =
        outbound::channel(outbound_capacity, shared.outbound_total.clone());
    let closer = CancellationToken::new();
    let writer = tokio::spawn(writer::write_loop(
        write_half,
        outbound_rx,
        wire,
        config.frame_bytes_max,
        closer.clone(),
    ));

    let reader_done = CancellationToken::new();
    // However the connection ends, it reads no more.
    let _reader_done = reader_done.clone().drop_guard();
    let handle = ConnectionHandle {
        connection_id,
        peer,
        outbound: outbound.clone(),
        closer: closer.clone(),
        reader_done: reader_done.clone(),
    };
    let origin = Origin {
        ip: Some(peer.ip()),
        x509: subject,
    };
    match handshake::handshake(&mut frames, wire, &shared, handle, peer, origin).await {
        Ok(session_id) => {
            let mut queues = reader::Queues::new(outbound.clone(), shared.clone(), session_id);
            reader::read_loop(
                &mut frames,
                wire,
                &mut queues,
                &shared,
                session_id,
                peer,
                &closer,
            )
            .await;
            reader_done.cancel();
            queues.finish().await;
            let still_ours = shared.connections.lock().detach(session_id, connection_id);
            if still_ours {
                shared.watches.lock().remove_session(session_id);
            }
            debug!(session_id = %Hex(session_id), connection_id, %peer, "connection ended");
        }
        Err(Some(message)) => {
            if let ServerMessage::Closing { code, message } = &message {
                // A peer that breaks the handshake is worth one line; a
                // refused resume or a shutdown is routine.
                if matches!(code, ErrorCode::BadRequest | ErrorCode::TooLarge) {
                    info!(%peer, ?code, reason = %message, "bad handshake; closing the connection");
                    shared.stats.protocol_error();
                } else {
                    debug!(%peer, ?code, reason = %message, "handshake refused");
                }
            }
            let _ = outbound.send(Box::new(message)).await;
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

/// Reads a ZooKeeper connection's first bytes, within the handshake
/// timeout: a four-letter word is answered here and the connection closed
/// (`None`); anything else is the start of the handshake frame, returned
/// to be read as one.
async fn four_letter_word<S>(
    stream: &mut S,
    peer: SocketAddr,
    shared: &Shared,
) -> Option<[u8; zk::four_letter::WORD_BYTES]>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let wait = Duration::from_millis(shared.config.handshake_timeout_ms);
    let mut first = [0u8; zk::four_letter::WORD_BYTES];
    match tokio::time::timeout(wait, stream.read_exact(&mut first)).await {
        Ok(Ok(_)) => {}
        Ok(Err(_)) | Err(_) => return None,
    }
    if !zk::four_letter::is_word(&first) {
        return Some(first);
    }
    let word = String::from_utf8_lossy(&first).into_owned();
    debug!(%peer, word, "four-letter word");
    let answer = zk::four_letter::answer(&first, shared);
    let _ = tokio::time::timeout(WRITER_DRAIN_TIMEOUT, async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
    None
}

/// Reads a native connection's first bytes, within the handshake timeout:
/// a peer that speaks another protocol is told which port it wants (if it
/// can read text), logged and closed (`None`); anything else is given back
/// to be read as the handshake.
async fn native_start<S>(stream: &mut S, peer: SocketAddr, shared: &Shared) -> Option<Sniffed>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let wait = Duration::from_millis(shared.config.handshake_timeout_ms);
    let mut sniffed = Sniffed {
        bytes: [0; sniff::SNIFF_BYTES],
        len: 4,
    };
    let read = tokio::time::timeout(wait, async {
        // A word or a method is known from four bytes, and a tool that
        // sends only `ruok` waits for its answer: the next four are read
        // only when they decide (a short frame, as a handshake is).
        stream.read_exact(&mut sniffed.bytes[..4]).await?;
        if sniff::needs_more(&sniffed.bytes[..4]) {
            stream.read_exact(&mut sniffed.bytes[4..]).await?;
            sniffed.len = sniff::SNIFF_BYTES;
        }
        Ok::<_, std::io::Error>(())
    });
    match read.await {
        Ok(Ok(())) => {}
        Ok(Err(_)) | Err(_) => return None,
    }
    let kind = sniff::classify(&sniffed.bytes[..sniffed.len]);
    if kind == sniff::Peer::Native {
        return Some(sniffed);
    }
    info!(%peer, speaks = ?kind, "not an Arbor client on the native port; closing");
    shared.stats.protocol_error();
    if let Some(answer) = sniff::answer(kind) {
        let _ = tokio::time::timeout(WRITER_DRAIN_TIMEOUT, async {
            stream.write_all(answer.as_bytes()).await?;
            stream.shutdown().await
        })
        .await;
    }
    None
}

/// The bytes [`native_start`] read, to be read again.
struct Sniffed {
    bytes: [u8; sniff::SNIFF_BYTES],
    len: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves a large frame's buffer goes with the frame: what follows it is
    // kept, in a small buffer; a small frame leaves the buffer as it was.
    #[test]
    fn a_large_frame_does_not_leave_its_buffer_behind() {
        let large = READ_BUF_RETAINED_BYTES_MAX * 3;
        let mut buffer = BytesMut::with_capacity(READ_BUF_BYTES);
        buffer.extend_from_slice(&vec![7u8; large]);
        buffer.extend_from_slice(b"next frame's start");
        let frame = buffer.split_to(large);
        release_large_read_buffer(&mut buffer, frame.len());
        assert_eq!(&buffer[..], b"next frame's start");
        assert!(buffer.capacity() <= READ_BUF_RETAINED_BYTES_MAX);
        assert!(frame.iter().all(|&byte| byte == 7) && frame.len() == large);

        let mut small = BytesMut::with_capacity(READ_BUF_BYTES);
        small.extend_from_slice(&[1u8; 100]);
        small.extend_from_slice(b"rest");
        let frame = small.split_to(100);
        let before = small.as_ptr();
        release_large_read_buffer(&mut small, frame.len());
        assert_eq!((&small[..], small.as_ptr()), (&b"rest"[..], before));
    }
}
