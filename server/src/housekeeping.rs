//! Background tasks that propose writes on the server's own behalf: session
//! expiry, and the reaping of containers and TTL nodes. Both go through the
//! same commit path as client writes, so their effects are logged, ordered
//! and fire watches like any other write. In an ensemble only the leader
//! runs them ([`Shared::decides`]).

use std::sync::Arc;
use std::time::Duration;

use tracing::debug;

use crate::context::Shared;
use crate::pipeline::commit::Proposal;
use crate::txn::{CloseReason, Txn};

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
        if !shared.decides() {
            continue;
        }
        let expired = shared
            .tracker
            .lock()
            .take_expired(shared.clock.monotonic_ms());
        for session_id in expired {
            debug!(session_id, "session deadline passed; proposing expiry");
            let txn = Txn::CloseSession {
                session_id,
                reason: CloseReason::Expired,
            };
            if !propose_own(&shared, txn).await {
                return;
            }
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
        if !shared.decides() {
            continue;
        }
        let due = {
            let state = shared.state.read();
            state
                .tree
                .reap_candidates(shared.clock.wall_ms(), shared.config.reap_batch_max)
        };
        for txn in due {
            if !propose_own(&shared, txn).await {
                return;
            }
        }
    }
}

async fn propose_own(shared: &Shared, txn: Txn) -> bool {
    let proposal = Proposal {
        txn,
        time_ms: shared.clock.wall_ms(),
        reply: None,
    };
    tokio::select! {
        sent = shared.committer.propose(proposal) => sent.is_ok(),
        () = shared.shutdown.cancelled() => false,
    }
}
