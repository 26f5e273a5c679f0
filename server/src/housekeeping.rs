//! Background tasks that propose writes on the server's own behalf, on a
//! timer: session expiry, and the reaping of containers and TTL nodes. What
//! is due is decided by prep ([`prep::expired_sessions`],
//! [`prep::due_nodes`]); the txns go through the same commit path as client
//! writes, so their effects are logged, ordered and fire watches like any
//! other write. In an ensemble only the leader decides, in its term
//! ([`Shared::decider`]).

use std::sync::Arc;
use std::time::Duration;

use crate::context::Shared;
use crate::pipeline::commit::Proposal;
use crate::pipeline::prep;

/// Proposes a close for every session whose deadline passed, once per tick.
pub async fn expire_sessions(shared: Arc<Shared>) {
    let tick_ms = u64::from(shared.config.tick_ms);
    loop {
        // Wake at the tick boundaries the expiry buckets are aligned to.
        let now_ms = shared.clock.monotonic_ms();
        let next_tick_ms = (now_ms / tick_ms + 1) * tick_ms;
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(next_tick_ms - now_ms)) => {}
            () = shared.shutdown.cancelled() => return,
        }
        if !propose_all(&shared, prep::expired_sessions(&shared)).await {
            return;
        }
    }
}

/// Proposes deletion of containers and TTL nodes that are due.
pub async fn reap_nodes(shared: Arc<Shared>) {
    let interval = Duration::from_millis(shared.config.reap_interval_ms);
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = shared.shutdown.cancelled() => return,
        }
        if !propose_all(&shared, prep::due_nodes(&shared)).await {
            return;
        }
    }
}

/// False once the server is shutting down.
async fn propose_all(shared: &Shared, proposals: Vec<Proposal>) -> bool {
    for proposal in proposals {
        let sent = tokio::select! {
            sent = shared.committer.propose(proposal) => sent.is_ok(),
            () = shared.shutdown.cancelled() => false,
        };
        if !sent {
            return false;
        }
    }
    true
}
