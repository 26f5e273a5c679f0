//! Faults planted on purpose, to show the checks catch what they are for.
//! A check is trusted only once it has failed: a run with a plant must
//! report a violation of that kind, and only the planted kinds.
//!
//! * [`Plant::EarlyExpiry`] is a real fault in the ensemble: mid-run an
//!   operator's eviction ends a live session that was heard from a moment
//!   before (Arbor only: ZooKeeper has no eviction its clients can ask).
//! * [`Plant::OrphanLockNode`] is real too: mid-run a session that is not
//!   a contender makes a node in a lock's queue and keeps it, open, until
//!   the finals are read: what a create made twice leaves behind.
//! * [`Plant::StaleRead`] and [`Plant::DroppedChild`] are planted in the
//!   recorded history, since a correct ensemble gives the suite no way to
//!   cause them: a synced read made to return the value before a write
//!   that had completed before the read began; an acknowledged sequential
//!   child left out of one member's final state.

use std::time::Duration;

use arbor_check::linearizable::{Input, Output, Register};
use arbor_check::{History, SessionEnd};
use tracing::{info, warn};

use crate::client::{Kind, Protocol, Session};
use crate::workload::locks::lock_path;
use crate::workload::Context;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plant {
    EarlyExpiry,
    OrphanLockNode,
    StaleRead,
    DroppedChild,
}

impl Plant {
    /// The violation kind (`Violation::kind`) the plant must cause.
    pub fn required(self) -> &'static str {
        match self {
            Plant::EarlyExpiry => "early-expiry",
            Plant::OrphanLockNode => "lock-node-left-behind",
            Plant::StaleRead => "register-not-linearizable",
            Plant::DroppedChild => "child-lost",
        }
    }

    /// Whether a violation of `kind` is the plant's doing: the kind it
    /// must cause, or one that follows from it.
    pub fn explains(self, kind: &str) -> bool {
        kind == self.required()
            || match self {
                // The evicted session's ephemeral went while it was live.
                Plant::EarlyExpiry => kind == "ephemeral-gone-while-live",
                Plant::OrphanLockNode | Plant::StaleRead => false,
                // One member's final state lacks the child the others have.
                Plant::DroppedChild => kind == "members-differ",
            }
    }
}

impl std::str::FromStr for Plant {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "early-expiry" => Ok(Plant::EarlyExpiry),
            "orphan-lock-node" => Ok(Plant::OrphanLockNode),
            "stale-read" => Ok(Plant::StaleRead),
            "dropped-child" => Ok(Plant::DroppedChild),
            other => Err(format!(
                "unknown plant {other:?}: early-expiry, orphan-lock-node, stale-read \
                 or dropped-child"
            )),
        }
    }
}

/// How long into the nemesis a live plant comes.
const PLANT_AFTER: Duration = Duration::from_secs(5);

/// The live part of a plant, run beside the nemesis; the session it must
/// keep open until the finals are read, if any.
pub async fn live(plant: Plant, context: Context) -> Option<Session> {
    if !matches!(plant, Plant::EarlyExpiry | Plant::OrphanLockNode) {
        return None;
    }
    tokio::select! {
        () = tokio::time::sleep(PLANT_AFTER) => {}
        () = context.stop.cancelled() => return None,
    }
    match plant {
        Plant::OrphanLockNode => orphan_lock_node(&context).await,
        _ => {
            evict(&context).await;
            None
        }
    }
}

/// An operator's eviction of the session heard from most recently.
async fn evict(context: &Context) {
    let Some(victim) = lately_heard(context) else {
        warn!("no live session to evict");
        return;
    };
    let servers = context.servers.all(Protocol::Native);
    let Ok(Session::Native(operator)) =
        Session::open(Protocol::Native, &servers, context.session_timeout).await
    else {
        warn!("the operator cannot connect");
        return;
    };
    match operator.evict_session(victim).await {
        Ok(()) => info!(session = format!("{victim:#x}"), "planted an early expiry"),
        Err(err) => warn!(error = %err, "the eviction failed"),
    }
    let _ = operator.close().await;
}

/// A node in the first protocol's lock queue, named as a contender's, made
/// by a session that never contends: the returned session keeps it.
async fn orphan_lock_node(context: &Context) -> Option<Session> {
    let protocol = *context.servers.protocols().first()?;
    let servers = context.servers.all(protocol);
    let Ok(session) = Session::open(protocol, &servers, context.session_timeout).await else {
        warn!("the orphan's session cannot connect");
        return None;
    };
    let prefix = format!("{}/_c_planted-lock-", lock_path(protocol));
    match session
        .create(&prefix, b"", Kind::EphemeralSequential)
        .await
    {
        Ok(node) => info!(%node, "planted a lock node nobody contends with"),
        Err(failure) => warn!(%failure, "the orphan lock node was not made"),
    }
    Some(session)
}

/// The open session heard from most recently.
fn lately_heard(context: &Context) -> Option<u64> {
    context.recorder.with(|history| {
        history
            .sessions
            .iter()
            .filter(|life| life.end == SessionEnd::Open)
            .max_by_key(|life| life.heard_us.last().copied().unwrap_or(0))
            .map(|life| life.session)
    })
}

/// The part of a plant written into the history.
pub fn in_history(plant: Plant, history: &mut History) {
    match plant {
        Plant::EarlyExpiry | Plant::OrphanLockNode => {}
        Plant::StaleRead => stale_read(history),
        Plant::DroppedChild => dropped_child(history),
    }
}

/// Turns a synced read that began after the write it read had completed
/// into a read of the register as it was before that write.
fn stale_read(history: &mut History) {
    let written: Vec<(u32, i32, u64, u64)> = history
        .registers
        .iter()
        .filter_map(|op| match (op.input, op.output) {
            (Input::Write { value } | Input::Cas { value, .. }, Output::Written { version }) => {
                Some((op.key, version, value, op.ret))
            }
            _ => None,
        })
        .collect();
    let value_of = |key: u32, version: i32| {
        if version == 0 {
            return Some(0);
        }
        written
            .iter()
            .find(|(k, v, _, _)| *k == key && *v == version)
            .map(|(_, _, value, _)| *value)
    };
    let planted = history.registers.iter_mut().rev().find_map(|op| {
        let Output::Read(seen) = op.output else {
            return None;
        };
        let completed_before = written
            .iter()
            .any(|(k, v, _, ret)| *k == op.key && *v == seen.version && *ret < op.call);
        let older = value_of(op.key, seen.version - 1)?;
        (seen.version >= 1 && completed_before).then(|| {
            op.output = Output::Read(Register {
                value: older,
                version: seen.version - 1,
            });
        })
    });
    if planted.is_none() {
        warn!("no synced read to make stale");
    }
}

/// Leaves the last acknowledged child out of the first member's final state.
fn dropped_child(history: &mut History) {
    let Some(name) = history
        .children
        .iter()
        .rev()
        .find_map(|create| create.name.clone())
    else {
        warn!("no acknowledged child to drop");
        return;
    };
    if let Some(first) = history.finals.first_mut() {
        first.children.retain(|child| *child != name);
    }
}
