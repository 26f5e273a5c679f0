//! The records a fault run keeps, and what each one proves.
//!
//! Times are microseconds since the run began (`*_us`), all from one
//! monotonic clock in the recording process, so any two are comparable.
//! Where a record stands for something that happened inside the ensemble,
//! its time is a bound on the side that keeps the checks sound: a request's
//! send time is no later than the moment a member heard it, and the moment
//! an observer saw a deletion is no earlier than the deletion. A check that
//! holds for the bounds therefore holds for the real moments, and no check
//! calls a correct run wrong because of when the recorder looked.
//!
//! Registers start at [`Register::default`] (the workload creates them
//! empty before the run). A session's marker is deleted only by the
//! ensemble, when the session ends: nothing in the workload deletes it.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::linearizable::{Operation, Register};

/// Everything a run recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    pub sessions: Vec<SessionLife>,
    /// Writes, compare-and-sets and synced reads of the registers.
    pub registers: Vec<Operation>,
    /// Every version of a register a session saw (reads with or without
    /// sync, and its own writes), in the order the session saw them.
    pub observations: Vec<Observation>,
    /// A session's own `sync` + `exists` of its marker (its ephemeral), answered.
    pub marker_checks: Vec<MarkerCheck>,
    /// When an observer first saw a session's marker deleted.
    pub marker_deletions: Vec<MarkerDeletion>,
    /// Sequential creates under one parent.
    pub children: Vec<ChildCreate>,
    /// Lock grants.
    pub grants: Vec<Grant>,
    /// Writes offered to the fenced store.
    pub store_writes: Vec<StoreWrite>,
    /// What each member holds once the faults are healed and it has caught up.
    pub finals: Vec<MemberFinal>,
}

/// One session, from its connect request to its end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionLife {
    pub session: u64,
    pub process: u32,
    /// The negotiated session timeout.
    pub timeout_us: u64,
    /// The path of its ephemeral marker.
    pub marker: String,
    /// When its connect request was sent: no member heard from it earlier.
    pub opened_us: u64,
    /// Send times of this session's requests that were answered successfully
    /// and prove a member heard from the live session at or after that time:
    /// writes, `sync`-then-read pairs (the sync's send time), marker checks.
    /// Ascending.
    pub heard_us: Vec<u64>,
    pub end: SessionEnd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionEnd {
    /// Still open when the run ended.
    Open,
    /// The client closed it; the close request was sent at `at_us`.
    Closed { at_us: u64 },
    /// The client was told its session expired, at `seen_us`.
    Expired { seen_us: u64 },
    /// The client gave up on it (for example it could not reconnect) at
    /// `at_us`, without knowing its fate.
    Abandoned { at_us: u64 },
}

/// A version of a register one session saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    pub process: u32,
    pub session: u64,
    pub key: u32,
    pub version: i32,
    pub at_us: u64,
}

/// A session's own `sync` then `exists` of its marker, both answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkerCheck {
    pub session: u64,
    /// When the sync was sent, and when the exists answered.
    pub call_us: u64,
    pub ret_us: u64,
    pub present: bool,
}

/// An observer (another session, watching) saw a session's marker deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkerDeletion {
    pub session: u64,
    /// When the observer learned of it: no earlier than the deletion.
    pub seen_us: u64,
}

/// A sequential create under the parent shared by every process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildCreate {
    pub process: u32,
    pub call_us: u64,
    pub ret_us: u64,
    /// `Some(name)` if acknowledged; `None` if its outcome is unknown (it may exist).
    pub name: Option<String>,
    /// The sequence number in the name, if acknowledged.
    pub sequence: Option<u64>,
}

/// One holder's tenure of a lock, as the holder saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub lock: String,
    pub process: u32,
    pub session: u64,
    /// The fencing token: the lock node's czxid.
    pub token: u64,
    /// When the lock call returned to the holder.
    pub granted_us: u64,
    /// When the holder stopped taking itself for the holder: when it started
    /// its release, or when it learned it might have lost the lock
    /// (disconnected, suspended, expired), whichever came first. `None`:
    /// still held at the end of the run.
    pub ended_us: Option<u64>,
    pub end: GrantEnd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum GrantEnd {
    Released,
    Lost,
    RunEnded,
}

/// A write offered to the store a lock protects, with the writer's token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreWrite {
    pub lock: String,
    pub process: u32,
    pub token: u64,
    /// When the store admitted or refused it (the store's own moment of
    /// decision, so store writes are ordered as the store ordered them).
    pub at_us: u64,
    pub accepted: bool,
}

/// What one member holds at the end, after healing and catching up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberFinal {
    pub member: String,
    pub registers: BTreeMap<u32, Register>,
    /// The names under the sequential parent.
    pub children: Vec<String>,
    /// The marker paths present.
    pub markers: Vec<String>,
    /// The nodes still in each lock's queue, by lock path, read after
    /// every contender stopped and before their sessions close.
    #[serde(default)]
    pub lock_queues: BTreeMap<String, Vec<QueueNode>>,
}

/// A node found in a lock's queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueNode {
    pub name: String,
    /// The session that owns it (0 if it is not an ephemeral).
    pub owner: u64,
    pub czxid: u64,
}

impl SessionLife {
    /// When the close request was sent, if the client closed it.
    pub fn close_sent_us(&self) -> Option<u64> {
        match self.end {
            SessionEnd::Closed { at_us } => Some(at_us),
            _ => None,
        }
    }

    /// When the session is known to have expired by, if it ended by expiry
    /// (its marker's deletion was first seen at `deleted_us`, or its client
    /// was told). A close sent at the very moment counts as a close: no
    /// check may call a closed session expired.
    pub fn expired_us(&self, deleted_us: Option<u64>) -> Option<u64> {
        let told_us = match self.end {
            SessionEnd::Expired { seen_us } => Some(seen_us),
            _ => None,
        };
        let expired_us = deleted_us.into_iter().chain(told_us).min()?;
        match self.close_sent_us() {
            Some(close_us) if close_us <= expired_us => None,
            _ => Some(expired_us),
        }
    }
}

impl History {
    /// For each session, when an observer first saw its marker deleted.
    pub fn first_deletions(&self) -> HashMap<u64, u64> {
        let mut first: HashMap<u64, u64> = HashMap::new();
        for deletion in &self.marker_deletions {
            let seen_us = first.entry(deletion.session).or_insert(deletion.seen_us);
            *seen_us = (*seen_us).min(deletion.seen_us);
        }
        first
    }
}
