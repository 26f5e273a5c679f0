//! The writer: frames queued messages onto the socket, several per write
//! when they pile up. It ends after a `Closing` message, when every sender
//! is gone, or on error, and whatever ended it ends the connection.

use arbor_protocol::{ErrorCode, ServerMessage};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::reply;
use super::wire::{Encoder, NotFramed, Wire};
use crate::net::outbound::OutboundReceiver;

/// Bytes the writer gathers from the outbound queue into one socket write.
const WRITE_BATCH_BYTES_MAX: usize = 256 * 1024;

/// Capacity the write buffer keeps once the queue is drained. An idle
/// connection must cost little: a buffer sized for a burst (up to
/// [`WRITE_BATCH_BYTES_MAX`]) is freed when the burst is over, and the
/// buffer starts empty (a 64 KiB buffer made up before was most of the
/// ~90 KB of RSS an idle connection cost).
const WRITE_BUF_IDLE_BYTES_MAX: usize = 4 * 1024;

pub(super) async fn write_loop<W: AsyncWrite + Unpin>(
    mut sink: W,
    mut outbound: OutboundReceiver,
    wire: Wire,
    frame_bytes_max: usize,
    closer: CancellationToken,
) {
    let mut encoder = Encoder::new(wire);
    let mut buf = Vec::new();
    'write: while let Some(first) = outbound.recv().await {
        let mut last = encode_message(&mut encoder, *first, frame_bytes_max, &mut buf);
        while !last && buf.len() < WRITE_BATCH_BYTES_MAX {
            match outbound.try_recv() {
                Some(message) => {
                    last = encode_message(&mut encoder, *message, frame_bytes_max, &mut buf)
                }
                None => break,
            }
        }
        // A client that stops reading must not pin the connection forever:
        // once the connection is told to close, a blocked write is abandoned.
        let written = tokio::select! {
            biased;
            // The flush is for TLS, which may hold records back after a
            // write returns; on a plain socket it returns at once.
            written = async {
                sink.write_all(&buf).await?;
                sink.flush().await
            } => written,
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
        if buf.capacity() > WRITE_BUF_IDLE_BYTES_MAX && outbound.is_empty() {
            buf = Vec::new();
        }
    }
    let _ = sink.shutdown().await;
    closer.cancel();
}

/// Appends one frame; a reply too large for a frame becomes a `TooLarge`
/// error for the same request. Returns whether this is the final message.
fn encode_message(
    encoder: &mut Encoder,
    message: ServerMessage,
    frame_bytes_max: usize,
    buf: &mut Vec<u8>,
) -> bool {
    let last = matches!(message, ServerMessage::Closing { .. });
    match encoder.encode(&message, frame_bytes_max, buf) {
        Ok(()) => {}
        Err(NotFramed::TooLarge { len }) => match message {
            ServerMessage::Reply { xid, zxid, .. } => {
                debug!(xid, reply_bytes = len, "reply over the frame limit");
                let refused = reply(xid, zxid, Err(ErrorCode::TooLarge));
                if encoder.encode(&refused, frame_bytes_max, buf).is_err() {
                    warn!(xid, "cannot encode an error reply");
                }
            }
            _ => warn!(
                message_bytes = len,
                "dropping a message over the frame limit"
            ),
        },
        Err(NotFramed::Failed(err)) => warn!(error = %err, "cannot encode message"),
    }
    last
}
