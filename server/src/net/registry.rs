//! Which connection currently serves each session, so that watch events and
//! session ends reach it.

use std::collections::HashMap;
use std::net::SocketAddr;

use arbor_protocol::Hex;
use arbor_protocol::{ErrorCode, ServerMessage, SessionId, WatchEvent};
use tokio::sync::mpsc::error::TrySendError;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::outbound::OutboundSender;
use crate::txn::CloseReason;

/// How to reach one connection.
#[derive(Debug, Clone)]
pub struct ConnectionHandle {
    pub connection_id: u64,
    /// The client's address, for listings (`cons`).
    pub peer: SocketAddr,
    pub outbound: OutboundSender,
    /// Cancelled to make the connection stop reading and close.
    pub closer: CancellationToken,
    /// Cancelled once the connection reads no more: everything it read
    /// has been handed to the committer (or answered).
    pub reader_done: CancellationToken,
}

#[derive(Debug, Default)]
pub struct ConnectionRegistry {
    by_session: HashMap<SessionId, ConnectionHandle>,
}

impl ConnectionRegistry {
    /// Makes `handle` the session's connection; returns the one it replaces.
    pub fn attach(
        &mut self,
        session_id: SessionId,
        handle: ConnectionHandle,
    ) -> Option<ConnectionHandle> {
        self.by_session.insert(session_id, handle)
    }

    /// Forgets the session's connection if it is still `connection_id`.
    pub fn detach(&mut self, session_id: SessionId, connection_id: u64) -> bool {
        match self.by_session.get(&session_id) {
            Some(handle) if handle.connection_id == connection_id => {
                self.by_session.remove(&session_id);
                true
            }
            _ => false,
        }
    }

    /// Queues an event without waiting. A connection whose queue is full, or
    /// whose backlog of bytes is too large, has fallen too far behind: it is
    /// closed (the session lives on, and the client registers its watches
    /// again when it reconnects).
    pub fn deliver(&self, session_id: SessionId, event: WatchEvent) {
        let Some(handle) = self.by_session.get(&session_id) else {
            return;
        };
        match handle
            .outbound
            .try_send_event(Box::new(ServerMessage::Event(event)))
        {
            Ok(()) | Err(TrySendError::Closed(_)) => {}
            Err(TrySendError::Full(_)) => {
                warn!(
                    session_id = %Hex(session_id),
                    connection_id = handle.connection_id,
                    "event queue full; closing connection"
                );
                handle.closer.cancel();
            }
        }
    }

    /// The session ended. An expired session's connection is told and closed;
    /// a closed session's connection closes itself after answering the close.
    pub fn end_session(&mut self, session_id: SessionId, reason: CloseReason) {
        let Some(handle) = self.by_session.remove(&session_id) else {
            return;
        };
        if reason == CloseReason::Expired {
            let _ = handle.outbound.try_send(Box::new(ServerMessage::Closing {
                code: ErrorCode::SessionExpired,
                message: "session expired".into(),
            }));
            handle.closer.cancel();
        }
    }

    /// The session was resumed on another ensemble member: its connection
    /// here is told and closed, and can no longer write.
    pub fn moved_away(&mut self, session_id: SessionId) {
        let Some(handle) = self.by_session.remove(&session_id) else {
            return;
        };
        let _ = handle.outbound.try_send(Box::new(ServerMessage::Closing {
            code: ErrorCode::SessionMoved,
            message: "the session was resumed on another server".into(),
        }));
        handle.closer.cancel();
    }

    /// Closes every connection, telling each client why (`Unavailable`: its
    /// session lives on, and it should resume it elsewhere); how many.
    pub fn close_all(&mut self, why: &str) -> usize {
        let closed = self.by_session.len();
        for (_, handle) in self.by_session.drain() {
            let _ = handle.outbound.try_send(Box::new(ServerMessage::Closing {
                code: ErrorCode::Unavailable,
                message: why.into(),
            }));
            handle.closer.cancel();
        }
        closed
    }

    /// Each session with a connection to this server, with the client's
    /// address, in no particular order.
    pub fn peers(&self) -> impl ExactSizeIterator<Item = (SessionId, SocketAddr)> + '_ {
        self.by_session
            .iter()
            .map(|(session_id, handle)| (*session_id, handle.peer))
    }

    /// The sessions with a connection to this server.
    pub fn sessions(&self) -> impl Iterator<Item = SessionId> + '_ {
        self.by_session.keys().copied()
    }

    pub fn len(&self) -> usize {
        self.by_session.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_session.is_empty()
    }
}
