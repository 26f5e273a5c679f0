//! The apply loop: what every replica does with entries once they are
//! durable and committed, whoever committed them (the standalone committer
//! or the replicated log), and whether or not this member took the request.
//!
//! Under the state's write lock, one batch at a time: each entry is applied
//! to the state machine in order, the watches it triggers are queued to
//! their connections at that moment (so an event always goes out before any
//! reply that reflects the change), the session tracker learns of sessions
//! that began or ended, and the published last zxid moves on.

use tracing::{debug, info};

use crate::context::Shared;
use crate::pipeline::apply::{SessionChange, StateMachine};
use crate::pipeline::commit::WriteResult;
use crate::txn::{CloseReason, TxnEntry};

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
            for (session_id, event) in watches.trigger(change, entry.zxid) {
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
                debug!(session_id, timeout_ms, zxid = entry.zxid, "session started");
            }
            Some(SessionChange::Ended { session_id, reason }) => {
                shared.tracker.lock().remove(session_id);
                watches.remove_session(session_id);
                connections.end_session(session_id, reason);
                match reason {
                    CloseReason::Closed => debug!(session_id, zxid = entry.zxid, "session closed"),
                    CloseReason::Expired => info!(session_id, zxid = entry.zxid, "session expired"),
                }
            }
            None => {}
        }
        results.push(applied.result);
    }
    finish(&mut state);
    results
}
