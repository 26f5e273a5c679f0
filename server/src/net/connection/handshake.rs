//! The handshake: the first frame must be a `Connect` this server can
//! serve. Prep opens the session, or checks the resumed one; the connection
//! then becomes the session's, and the one it replaces (if any) is told to
//! close. A resume is answered only once everything the session asked
//! before is ordered ahead of it: the old connection has stopped reading
//! (all it read is with the committer) and the resume's claim, behind it
//! in the log, is applied. A client that lost a reply and asks again on the
//! new connection sees what its lost request did.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::Hex;
use arbor_protocol::{
    ConnectRequest, ConnectResponse, ErrorCode, ServerLimits, ServerMessage, SessionId,
    PROTOCOL_VERSION,
};
use futures_util::StreamExt;
use tokio::io::AsyncRead;
use tracing::info;

use super::{closing, frame_error_message, Frames, Wire};
use crate::acl::identity::Origin;
use crate::context::Shared;
use crate::net::ConnectionHandle;
use crate::pipeline::prep::sessions::{self, Refusal};

/// How long a resume waits for the session's previous connection to stop
/// reading. It stops at its next step; only a full commit queue delays it.
const PREVIOUS_READER_STOP_WAIT: Duration = Duration::from_secs(5);

/// Opens or resumes a session. On failure, returns what to tell the client.
pub(super) async fn handshake<S: AsyncRead + Unpin>(
    frames: &mut Frames<S>,
    wire: Wire,
    shared: &Arc<Shared>,
    handle: ConnectionHandle,
    peer: SocketAddr,
    origin: Origin,
) -> Result<SessionId, Option<ServerMessage>> {
    let request = first_request(frames, wire, shared).await?;
    let refused = |Refusal { code, message }| Some(closing(code, message));
    sessions::admit(shared).await.map_err(refused)?;
    let server_zxid = shared.last_zxid();
    if request.last_zxid_seen > server_zxid {
        let message = format!(
            "client has seen zxid {:#x}, newer than this server's {server_zxid:#x}; try another server",
            request.last_zxid_seen
        );
        return Err(Some(closing(ErrorCode::Unavailable, message)));
    }
    let grant = match request.session {
        None => sessions::open(shared, request.session_timeout_ms, origin.clone()).await,
        Some(credentials) => sessions::check(shared, credentials.id, credentials.password),
    }
    .map_err(refused)?;
    let session_id = grant.session_id;

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
        let _ = previous.outbound.try_send(Box::new(closing(
            ErrorCode::SessionMoved,
            "session resumed on another connection",
        )));
        previous.closer.cancel();
        let stopped =
            tokio::time::timeout(PREVIOUS_READER_STOP_WAIT, previous.reader_done.cancelled()).await;
        if stopped.is_err() {
            shared.connections.lock().detach(session_id, connection_id);
            let message = "the session's previous connection did not stop in time; try again";
            return Err(Some(closing(ErrorCode::Unavailable, message)));
        }
    }
    if request.session.is_some() {
        if let Err(refusal) = sessions::claim(shared, session_id, origin.clone()).await {
            shared.connections.lock().detach(session_id, connection_id);
            return Err(refused(refusal));
        }
    }
    let config = &shared.config;
    let response = ConnectResponse {
        protocol_version: PROTOCOL_VERSION,
        session_id,
        password: grant.password,
        session_timeout_ms: grant.timeout_ms,
        zxid: shared.last_zxid(),
        limits: ServerLimits {
            frame_bytes_max: config.frame_bytes_max as u32,
            data_bytes_max: config.data_bytes_max as u32,
        },
    };
    if outbound
        .send(Box::new(ServerMessage::Connected(response)))
        .await
        .is_err()
    {
        return Err(None);
    }
    info!(session_id = %Hex(session_id), connection_id, %peer, timeout_ms = grant.timeout_ms, resumed = request.session.is_some(), x509 = origin.x509.as_deref(), "session connected");
    Ok(session_id)
}

/// The first frame, which must be a `Connect` in this server's protocol
/// version, in time.
async fn first_request<S: AsyncRead + Unpin>(
    frames: &mut Frames<S>,
    wire: Wire,
    shared: &Shared,
) -> Result<ConnectRequest, Option<ServerMessage>> {
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
    let request = wire
        .decode_connect(&bytes)
        .map_err(|message| Some(closing(ErrorCode::BadRequest, message)))?;
    if request.protocol_version != PROTOCOL_VERSION {
        let message = format!(
            "protocol version {} is not supported; this server speaks {PROTOCOL_VERSION}",
            request.protocol_version
        );
        return Err(Some(closing(ErrorCode::BadRequest, message)));
    }
    Ok(request)
}
