//! The apply loop: what every replica does with entries once they are
//! durable and committed, whoever committed them (the standalone committer
//! or the replicated log), and whether or not this member took the request.
//!
//! Under the state's write lock, one batch at a time: each entry is applied
//! to the state machine in order, the watches it triggers are queued to
//! their connections at that moment (so an event always goes out before any
//! reply that reflects the change), the session tracker learns of sessions
//! that began or ended, and the published last zxid moves on.

use arbor_protocol::acl::{Acl, Perms};
use arbor_protocol::Hex;
use tracing::{debug, info};

use crate::context::Shared;
use crate::pipeline::apply::{SessionChange, StateMachine};
use crate::pipeline::commit::WriteResult;
use crate::tree::Change;
use crate::txn::{CloseReason, TxnEntry};

/// What a recursive watcher above a changed node must be allowed to read to
/// hear of the change.
enum Guard<'a> {
    Open,
    Acl(&'a [Acl]),
    /// The node is gone and its ACL unknown (created and deleted by one
    /// multi): only watchers of the node itself hear of it.
    Gone,
}

fn guarding_acl<'a>(state: &'a StateMachine, change: &'a Change) -> Guard<'a> {
    let path = match change {
        Change::Deleted(_, Some(acl)) => return Guard::Acl(acl),
        Change::Deleted(_, None) => return Guard::Open,
        // Most trees hold no ACL but the open one: nothing to look up.
        _ if state.tree.acls().is_empty() => return Guard::Open,
        Change::Created(path) | Change::DataChanged(path) | Change::ChildrenChanged(path) => path,
    };
    match state.tree.node(path) {
        Some(node) if node.acl_id() == crate::acl::table::OPEN => Guard::Open,
        Some(node) => Guard::Acl(state.tree.acl_of(node)),
        None => Guard::Gone,
    }
}

/// Applies `entries` in order and returns one result per entry.
/// `finish` runs under the same write lock after the last entry, so what it
/// records (the replicated log position) is never seen apart from the state
/// it describes.
pub fn apply_committed<'a>(
    shared: &Shared,
    entries: impl Iterator<Item = &'a TxnEntry>,
    finish: impl FnOnce(&mut StateMachine),
) -> Vec<WriteResult> {
    let now_ms = shared.clock.monotonic_ms();
    let mut results = Vec::with_capacity(entries.size_hint().0);
    let mut state = shared.state.write();
    let mut watches = shared.watches.lock();
    let mut connections = shared.connections.lock();
    for entry in entries {
        let applied = state.apply(entry);
        for change in &applied.changes {
            let guard = guarding_acl(&state, change);
            let may_see = |session_id| match guard {
                Guard::Open => true,
                Guard::Acl(acl) => state.identity(session_id).may(acl, Perms::READ),
                Guard::Gone => false,
            };
            for (session_id, event) in watches.trigger(change, entry.zxid, may_see) {
                connections.deliver(session_id, event);
            }
        }
        shared.publish_zxid(entry.zxid);
        match applied.session {
            Some(SessionChange::Started {
                session_id,
                timeout_ms,
            }) => {
                shared.tracker.lock().add(session_id, timeout_ms, now_ms);
                debug!(session_id = %Hex(session_id), timeout_ms, zxid = %Hex(entry.zxid), "session started");
            }
            Some(SessionChange::Ended { session_id, reason }) => {
                shared.tracker.lock().remove(session_id);
                watches.remove_session(session_id);
                connections.end_session(session_id, reason);
                match reason {
                    CloseReason::Closed => {
                        debug!(session_id = %Hex(session_id), zxid = %Hex(entry.zxid), "session closed")
                    }
                    CloseReason::Expired => {
                        info!(session_id = %Hex(session_id), zxid = %Hex(entry.zxid), "session expired")
                    }
                }
            }
            None => {}
        }
        results.push(applied.result);
    }
    finish(&mut state);
    results
}
