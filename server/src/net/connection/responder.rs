//! The responder: answers what the reader queued, strictly in arrival
//! order. It waits for a write's result before it runs a later read, so a
//! session reads its own writes and its replies come in request order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arbor_protocol::{ErrorCode, ServerMessage, SessionId};
use tokio::sync::mpsc;
use tracing::info;

use super::{closing, reply, Pending};
use crate::context::Shared;
use crate::pipeline::read;

pub(super) async fn respond_loop(
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
