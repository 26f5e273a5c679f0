//! The admin commands over the native protocol ([`Op::Admin`]), so that
//! `arbor stat`, `arbor sessions` or `arbor backup` need only the client
//! port: the same pages as the admin port's `/commands`, a session's
//! eviction, and backups. Each needs ADMIN on `/` (the root's ACL, open by
//! default; the superuser passes), checked before anything is read.
//!
//! [`Op::Admin`]: arbor_protocol::Op::Admin

use std::sync::Arc;

use arbor_protocol::acl::Perms;
use arbor_protocol::{AdminCommand, ErrorCode, Hex, OpResult, SessionId, BACKUP_CHUNK_BYTES_MAX};
use tokio::sync::oneshot;
use tracing::info;

use crate::config::FRAME_ENVELOPE_BYTES;
use crate::context::Shared;
use crate::pipeline::commit::WriteResult;
use crate::pipeline::prep::{self, Then};
use crate::txn::{CloseReason, Txn};

use super::commands;

/// What the connection does with an admin command of `session_id`.
pub fn answer(shared: &Arc<Shared>, session_id: SessionId, command: AdminCommand) -> Then {
    if let Err(code) = allowed(shared, session_id) {
        return Then::Answer(Err(code));
    }
    let page = |name: &'static str| {
        off_the_workers(shared, move |shared| {
            commands::page(name, shared)
                .map(OpResult::AdminReport)
                .ok_or(ErrorCode::Internal)
        })
    };
    match command {
        AdminCommand::Stat => page("stat"),
        AdminCommand::Conf => page("conf"),
        AdminCommand::Connections => page("cons"),
        AdminCommand::Sessions => page("sessions"),
        AdminCommand::Watches => page("watches"),
        AdminCommand::CloseSession { session_id: target } => evict(shared, session_id, target),
        AdminCommand::BackupStart => off_the_workers(shared, |shared| {
            shared.backups.start(shared).map(OpResult::BackupStarted)
        }),
        AdminCommand::BackupRead { id, offset } => {
            let max = (BACKUP_CHUNK_BYTES_MAX as usize).min(
                shared
                    .config
                    .frame_bytes_max
                    .saturating_sub(FRAME_ENVELOPE_BYTES),
            );
            off_the_workers(shared, move |shared| {
                shared
                    .backups
                    .read(id, offset, max)
                    .map(OpResult::BackupChunk)
            })
        }
    }
}

/// Whether the session holds ADMIN on `/`.
fn allowed(shared: &Shared, session_id: SessionId) -> Result<(), ErrorCode> {
    let state = shared.state.read();
    let root = state.tree.node("/").ok_or(ErrorCode::Internal)?;
    if state
        .tree
        .allows(root, state.identity(session_id), Perms::ADMIN)
    {
        Ok(())
    } else {
        Err(ErrorCode::NoAuth)
    }
}

/// Runs `work` on a blocking thread (pages read the data directory, a
/// backup writes the whole tree); the answer comes when it is done.
fn off_the_workers(
    shared: &Arc<Shared>,
    work: impl FnOnce(&Shared) -> WriteResult + Send + 'static,
) -> Then {
    let (answer, result) = oneshot::channel();
    let shared = shared.clone();
    tokio::task::spawn_blocking(move || {
        let _ = answer.send(work(&shared));
    });
    Then::Await(result)
}

/// Ends session `target` as an expiry would: through the log, so its
/// ephemerals go and every member agrees.
fn evict(shared: &Shared, by: SessionId, target: SessionId) -> Then {
    if target == by {
        // Closing one's own session is `close`, which answers first.
        return Then::Answer(Err(ErrorCode::BadArguments));
    }
    if shared.state.read().session(target).is_none() {
        return Then::Answer(Err(ErrorCode::NoNode));
    }
    // Its requests are refused from now on, as a closing session's are.
    shared.tracker.lock().start_closing(target);
    info!(session_id = %Hex(target), by = %Hex(by), "session evicted by an operator");
    let txn = Txn::CloseSession {
        session_id: target,
        reason: CloseReason::Expired,
    };
    Then::Propose(prep::proposal(shared, txn))
}
