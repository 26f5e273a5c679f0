//! What a check found: violations (a promise broken: the run fails),
//! warnings (something odd that the promises allow: worth a look, no
//! failure) and counts (how much the run exercised, so a clean report can
//! be trusted to mean something).
//!
//! Each finding carries what a reader needs to find it in the history:
//! session ids in hex (as servers log them), times in microseconds since
//! the run began, paths and tokens. `Display` prints one line each.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::history::{GrantEnd, History, QueueNode, SessionEnd, SessionLife};
use crate::linearizable::{Input, Operation, Output, Register};
use crate::versioned::Anomaly;

/// The outcome of [`crate::check`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub violations: Vec<Violation>,
    pub warnings: Vec<Warning>,
    pub counts: Counts,
}

impl Report {
    /// Whether every promise held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.counts)?;
        for violation in &self.violations {
            writeln!(f, "violation: {violation}")?;
        }
        for warning in &self.warnings {
            writeln!(f, "warning: {warning}")?;
        }
        write!(
            f,
            "{} violations, {} warnings",
            self.violations.len(),
            self.warnings.len()
        )
    }
}

/// How much of each kind the history holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub register_operations: usize,
    pub register_keys: usize,
    pub reads: usize,
    pub writes_acknowledged: usize,
    /// Writes and compare-and-sets whose outcome is unknown.
    pub writes_unknown: usize,
    pub observations: usize,
    pub sessions: usize,
    /// Sessions that ended by expiry, as [`crate::check`] tells them apart.
    pub sessions_expired: usize,
    pub sessions_closed: usize,
    pub sessions_abandoned: usize,
    pub sessions_open: usize,
    pub heard_from: usize,
    pub marker_checks: usize,
    pub marker_deletions: usize,
    pub locks: usize,
    pub grants: usize,
    /// Grants whose holder learned it might have lost the lock.
    pub grants_lost: usize,
    pub store_writes_accepted: usize,
    pub store_writes_refused: usize,
    pub children_acknowledged: usize,
    pub children_unknown: usize,
    pub members: usize,
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} register ops on {} keys ({} reads, {} writes acknowledged, {} unknown), \
             {} observations; {} sessions ({} expired, {} closed, {} abandoned, {} open), \
             {} heard-from, {} marker checks, {} marker deletions; {} grants on {} locks \
             ({} lost), store writes {} accepted {} refused; {} children acknowledged, \
             {} unknown; {} members",
            self.register_operations,
            self.register_keys,
            self.reads,
            self.writes_acknowledged,
            self.writes_unknown,
            self.observations,
            self.sessions,
            self.sessions_expired,
            self.sessions_closed,
            self.sessions_abandoned,
            self.sessions_open,
            self.heard_from,
            self.marker_checks,
            self.marker_deletions,
            self.grants,
            self.locks,
            self.grants_lost,
            self.store_writes_accepted,
            self.store_writes_refused,
            self.children_acknowledged,
            self.children_unknown,
            self.members,
        )
    }
}

impl Counts {
    /// Tallies `history`.
    pub fn of(history: &History) -> Counts {
        let ops = &history.registers;
        let count = |keep: &dyn Fn(&Operation) -> bool| ops.iter().filter(|op| keep(op)).count();
        let deletions = history.first_deletions();
        let sessions = &history.sessions;
        let ends =
            |keep: &dyn Fn(&SessionLife) -> bool| sessions.iter().filter(|life| keep(life)).count();
        let writes = &history.store_writes;
        Counts {
            register_operations: ops.len(),
            register_keys: ops.iter().map(|op| op.key).collect::<BTreeSet<_>>().len(),
            reads: count(&|op| op.input == Input::Read),
            writes_acknowledged: count(&|op| matches!(op.output, Output::Written { .. })),
            writes_unknown: count(&|op| op.output == Output::Unknown),
            observations: history.observations.len(),
            sessions: sessions.len(),
            sessions_expired: ends(&|life| {
                life.expired_us(deletions.get(&life.session).copied())
                    .is_some()
            }),
            sessions_closed: ends(&|life| matches!(life.end, SessionEnd::Closed { .. })),
            sessions_abandoned: ends(&|life| matches!(life.end, SessionEnd::Abandoned { .. })),
            sessions_open: ends(&|life| life.end == SessionEnd::Open),
            heard_from: sessions.iter().map(|life| life.heard_us.len()).sum(),
            marker_checks: history.marker_checks.len(),
            marker_deletions: history.marker_deletions.len(),
            locks: history
                .grants
                .iter()
                .map(|g| &g.lock)
                .collect::<BTreeSet<_>>()
                .len(),
            grants: history.grants.len(),
            grants_lost: history
                .grants
                .iter()
                .filter(|g| g.end == GrantEnd::Lost)
                .count(),
            store_writes_accepted: writes.iter().filter(|w| w.accepted).count(),
            store_writes_refused: writes.iter().filter(|w| !w.accepted).count(),
            children_acknowledged: history.children.iter().filter(|c| c.name.is_some()).count(),
            children_unknown: history.children.iter().filter(|c| c.name.is_none()).count(),
            members: history.finals.len(),
        }
    }
}

/// A broken promise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Violation {
    /// No order of the key's operations explains what they answered.
    RegisterNotLinearizable { key: u32, anomaly: Anomaly },
    /// The history linearizes, but no read after all of it could return
    /// what this member ended with.
    FinalRegisterImpossible {
        member: String,
        key: u32,
        register: Register,
    },
    /// A session saw a register's version go down.
    ReadWentBack {
        process: u32,
        session: u64,
        key: u32,
        from_version: i32,
        from_us: u64,
        to_version: i32,
        to_us: u64,
    },
    /// A session was found expired before its timeout had run from the
    /// last time a member heard from it (less the slack).
    EarlyExpiry {
        process: u32,
        session: u64,
        heard_us: u64,
        expired_us: u64,
        timeout_us: u64,
    },
    /// A session was heard from after its marker was seen deleted.
    EphemeralGoneWhileLive {
        process: u32,
        session: u64,
        deleted_seen_us: u64,
        heard_us: u64,
    },
    /// A session's own synced `exists` found its marker absent.
    MarkerAbsent {
        session: u64,
        call_us: u64,
        ret_us: u64,
    },
    /// A member still holds the marker of a session that ended.
    EphemeralOutlivedSession {
        member: String,
        session: u64,
        marker: String,
        end: SessionEnd,
    },
    /// The later grant came before the earlier one ended.
    TwoHolders {
        lock: String,
        first: Holder,
        second: Holder,
    },
    /// A grant's token is not larger than the one granted before it.
    TokenNotIncreasing {
        lock: String,
        earlier: Holder,
        later: Holder,
    },
    /// The store admitted a token older than one it had already admitted.
    StaleWriteAccepted {
        lock: String,
        process: u32,
        token: u64,
        at_us: u64,
        newer_process: u32,
        newer_token: u64,
        newer_at_us: u64,
    },
    /// Two acknowledged creates got one name.
    DuplicateChild { first: Child, second: Child },
    /// A create acknowledged before another was called got a larger sequence number.
    ChildrenOutOfOrder { earlier: Child, later: Child },
    /// A member lacks a child whose create was acknowledged.
    ChildLost { member: String, child: Child },
    /// A lock queue still holds nodes once every contender stopped (its
    /// attempts cancelled, its grants released) while their sessions are
    /// still open: a node nobody knows it owns, blocking the queue.
    LockNodeLeftBehind {
        member: String,
        lock: String,
        nodes: Vec<QueueNode>,
    },
    /// Two members ended with different state.
    MembersDiffer {
        member: String,
        other: String,
        difference: Difference,
    },
}

impl Violation {
    /// A short stable name for the kind, for tallies and filters.
    pub fn kind(&self) -> &'static str {
        match self {
            Violation::RegisterNotLinearizable { .. } => "register-not-linearizable",
            Violation::FinalRegisterImpossible { .. } => "final-register-impossible",
            Violation::ReadWentBack { .. } => "read-went-back",
            Violation::EarlyExpiry { .. } => "early-expiry",
            Violation::EphemeralGoneWhileLive { .. } => "ephemeral-gone-while-live",
            Violation::MarkerAbsent { .. } => "marker-absent",
            Violation::EphemeralOutlivedSession { .. } => "ephemeral-outlived-session",
            Violation::TwoHolders { .. } => "two-holders",
            Violation::TokenNotIncreasing { .. } => "token-not-increasing",
            Violation::StaleWriteAccepted { .. } => "stale-write-accepted",
            Violation::DuplicateChild { .. } => "duplicate-child",
            Violation::ChildrenOutOfOrder { .. } => "children-out-of-order",
            Violation::ChildLost { .. } => "child-lost",
            Violation::LockNodeLeftBehind { .. } => "lock-node-left-behind",
            Violation::MembersDiffer { .. } => "members-differ",
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.kind())?;
        match self {
            Violation::RegisterNotLinearizable { key, anomaly } => {
                write!(f, "key {key} does not linearize: {anomaly}")
            }
            Violation::FinalRegisterImpossible {
                member,
                key,
                register,
            } => write!(
                f,
                "{member} ends with key {key} at value {} version {}, \
                 which no read after every operation could return",
                register.value, register.version
            ),
            Violation::ReadWentBack {
                process,
                session,
                key,
                from_version,
                from_us,
                to_version,
                to_us,
            } => write!(
                f,
                "session {session:#x} (process {process}) saw key {key} at version \
                 {from_version} at {from_us}us, then version {to_version} at {to_us}us"
            ),
            Violation::EarlyExpiry {
                process,
                session,
                heard_us,
                expired_us,
                timeout_us,
            } => write!(
                f,
                "session {session:#x} (process {process}) was heard from at {heard_us}us \
                 and expired by {expired_us}us, {}us into a {timeout_us}us timeout",
                expired_us.saturating_sub(*heard_us)
            ),
            Violation::EphemeralGoneWhileLive {
                process,
                session,
                deleted_seen_us,
                heard_us,
            } => write!(
                f,
                "the marker of session {session:#x} (process {process}) was seen deleted \
                 at {deleted_seen_us}us, yet the session was heard from at {heard_us}us"
            ),
            Violation::MarkerAbsent {
                session,
                call_us,
                ret_us,
            } => write!(
                f,
                "session {session:#x} synced and found its own marker absent \
                 (sent {call_us}us, answered {ret_us}us)"
            ),
            Violation::EphemeralOutlivedSession {
                member,
                session,
                marker,
                end,
            } => write!(
                f,
                "{member} still holds {marker}, the marker of session {session:#x}, \
                 which ended ({end:?})"
            ),
            Violation::TwoHolders {
                lock,
                first,
                second,
            } => write!(f, "{lock} was held by {first} and by {second} at once"),
            Violation::TokenNotIncreasing {
                lock,
                earlier,
                later,
            } => write!(f, "{lock} was granted to {earlier}, then to {later}"),
            Violation::StaleWriteAccepted {
                lock,
                process,
                token,
                at_us,
                newer_process,
                newer_token,
                newer_at_us,
            } => write!(
                f,
                "the store of {lock} admitted token {token} from process {process} at \
                 {at_us}us after admitting token {newer_token} from process \
                 {newer_process} at {newer_at_us}us"
            ),
            Violation::DuplicateChild { first, second } => {
                write!(f, "one name for two creates: {first}; {second}")
            }
            Violation::ChildrenOutOfOrder { earlier, later } => write!(
                f,
                "{earlier} returned before {later} was called, yet its sequence is not smaller"
            ),
            Violation::ChildLost { member, child } => {
                write!(f, "{member} lacks the acknowledged {child}")
            }
            Violation::LockNodeLeftBehind {
                member,
                lock,
                nodes,
            } => write!(
                f,
                "{member} still has {} node(s) in the queue of {lock} after every \
                 contender stopped: {}",
                nodes.len(),
                nodes
                    .iter()
                    .map(|node| format!(
                        "{} (session {:#x}, czxid {:#x})",
                        node.name, node.owner, node.czxid
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Violation::MembersDiffer {
                member,
                other,
                difference,
            } => write!(
                f,
                "{member} and {other} differ: {}",
                difference.between(member, other)
            ),
        }
    }
}

/// Something the promises allow but a reader should see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Warning {
    /// A session still open at the end has no marker on a member. The
    /// session may have expired after its client last looked, so this is
    /// not a broken promise; a marker gone while the session was heard
    /// from is, and the session checks catch that.
    OpenSessionMarkerMissing {
        member: String,
        session: u64,
        marker: String,
    },
    /// The store admitted a write from an older holder after a newer one
    /// was granted, because the newer holder had not yet written: what
    /// fencing allows (it can refuse only tokens older than one it has
    /// seen), and the reason a holder must write its token first.
    LateWriteAdmitted {
        lock: String,
        process: u32,
        token: u64,
        at_us: u64,
        newer_token: u64,
        newer_granted_us: u64,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::OpenSessionMarkerMissing {
                member,
                session,
                marker,
            } => write!(
                f,
                "open-session-marker-missing: {member} lacks {marker}, the marker \
                 of session {session:#x}, still open at the end"
            ),
            Warning::LateWriteAdmitted {
                lock,
                process,
                token,
                at_us,
                newer_token,
                newer_granted_us,
            } => write!(
                f,
                "late-write-admitted: the store of {lock} admitted token {token} from \
                 process {process} at {at_us}us, after token {newer_token} was granted \
                 at {newer_granted_us}us but before its holder wrote"
            ),
        }
    }
}

/// One grant, as a violation names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub process: u32,
    pub session: u64,
    pub token: u64,
    pub granted_us: u64,
    pub ended_us: Option<u64>,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Holder {
            process,
            session,
            token,
            granted_us,
            ended_us,
        } = self;
        write!(
            f,
            "process {process} session {session:#x} token {token} (granted {granted_us}us, "
        )?;
        match ended_us {
            Some(ended_us) => write!(f, "ended {ended_us}us)"),
            None => write!(f, "held to the end)"),
        }
    }
}

/// One acknowledged sequential create, as a violation names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Child {
    pub name: String,
    pub sequence: Option<u64>,
    pub process: u32,
    pub call_us: u64,
    pub ret_us: u64,
}

impl fmt::Display for Child {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "child {} of process {} (called {}us, returned {}us)",
            self.name, self.process, self.call_us, self.ret_us
        )
    }
}

/// The first thing two members' finals disagree on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Difference {
    /// `None`: the member has no such register.
    Register {
        key: u32,
        member: Option<Register>,
        other: Option<Register>,
    },
    /// A child name only one of them holds.
    Child { name: String, on_member: bool },
    /// A marker path only one of them holds.
    Marker { path: String, on_member: bool },
}

impl Difference {
    /// One line saying what differs between `member` and `other`.
    pub fn between(&self, member: &str, other: &str) -> String {
        let only_on = |on_member: bool| if on_member { member } else { other };
        match self {
            Difference::Register {
                key,
                member: on_member,
                other: on_other,
            } => format!(
                "key {key} is {} on {member}, {} on {other}",
                shown(on_member),
                shown(on_other)
            ),
            Difference::Child { name, on_member } => {
                format!("child {name} is only on {}", only_on(*on_member))
            }
            Difference::Marker { path, on_member } => {
                format!("marker {path} is only on {}", only_on(*on_member))
            }
        }
    }
}

fn shown(register: &Option<Register>) -> String {
    match register {
        Some(Register { value, version }) => format!("value {value} version {version}"),
        None => "absent".to_string(),
    }
}
