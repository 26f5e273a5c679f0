//! Transactions: requests with everything non-deterministic fixed.
//!
//! Prep turns a client request into a [`Txn`]; the commit step gives it the
//! next zxid and makes it durable as a [`TxnEntry`]; apply executes it against
//! the state machine. Apply reads nothing but the entry and the current state,
//! so the same entries replayed in zxid order rebuild the same state.

use std::net::IpAddr;

use arbor_protocol::acl::{Acl, Id};
use arbor_protocol::{MultiOp, SessionId, Zxid, SESSION_PASSWORD_BYTES};
use bincode::{Decode, Encode};

use crate::acl::identity::Origin;

/// A deterministic change to the state machine.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum Txn {
    /// Opens a session (id and password were drawn by prep).
    CreateSession {
        session_id: SessionId,
        password: [u8; SESSION_PASSWORD_BYTES],
        timeout_ms: u32,
    },
    /// Ends a session, deleting its ephemerals (closed by the client, or expired).
    CloseSession {
        session_id: SessionId,
        reason: CloseReason,
    },
    /// One create, delete or set-data (a check is only meaningful in a multi).
    Write { session_id: SessionId, op: MultiOp },
    Multi {
        session_id: SessionId,
        ops: Vec<MultiOp>,
    },
    /// Deletes a container if it has had children and has none now.
    ReapContainer { path: String },
    /// Deletes a TTL node if it has no children and was not modified for its TTL.
    ReapTtl { path: String },
    /// An ensemble member took over a live session (the client resumed it
    /// there). Writes of the session that other members propose after this
    /// are refused with `SessionMoved` (see `crate::cluster::state_machine`);
    /// here it only checks that the session is alive.
    MoveSession { session_id: SessionId },
    // Variants are only ever added below: the log holds every one ever
    // written. Before ACLs, `CreateSession` and `MoveSession` were written
    // without the connection's address; they still apply, as anonymous.
    /// Opens a session from a connection at `ip`.
    OpenSession {
        session_id: SessionId,
        password: [u8; SESSION_PASSWORD_BYTES],
        timeout_ms: u32,
        ip: Option<IpAddr>,
    },
    /// `MoveSession`, from a connection at `ip`: the session's address for
    /// `ip` ACL entries is its newest connection's.
    ClaimSession {
        session_id: SessionId,
        ip: Option<IpAddr>,
    },
    /// The session proved `id` (prep checked the credentials; `superuser`
    /// if they were the server's superuser's).
    Authenticate {
        session_id: SessionId,
        id: Id,
        superuser: bool,
    },
    /// Replaces a node's ACL if its ACL version matches.
    SetAcl {
        session_id: SessionId,
        path: String,
        acl: Vec<Acl>,
        version: i32,
    },
    // With TLS, a connection proves a certificate's subject too; these two
    // replace `OpenSession` and `ClaimSession` (still applied from older
    // logs, as connections that proved only their address).
    /// Opens a session from a connection that proves `origin`.
    OpenSessionFrom {
        session_id: SessionId,
        password: [u8; SESSION_PASSWORD_BYTES],
        timeout_ms: u32,
        origin: Origin,
    },
    /// `MoveSession`, from a connection that proves `origin`: the session's
    /// address and certificate id become that connection's.
    ClaimSessionFrom {
        session_id: SessionId,
        origin: Origin,
    },
    /// What the ensemble's leader of `term` decided on its own: an expiry
    /// or a reap. Applied only from a log entry of that same term
    /// (`crate::cluster::state_machine`): nothing a deposed leader decided
    /// takes effect, even if it reaches a later leader's log. A standalone
    /// server never writes it.
    Decided { term: u64, decision: Decision },
}

/// What only the ensemble's leader decides, from its own view of time:
/// nobody asked for it, so it carries no session's request.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum Decision {
    /// The session's deadline passed, as the leader tracked it.
    Expire {
        session_id: SessionId,
    },
    ReapContainer {
        path: String,
    },
    ReapTtl {
        path: String,
    },
}

impl Decision {
    /// The txn that carries the decision out.
    pub fn txn(&self) -> Txn {
        match self {
            Decision::Expire { session_id } => Txn::CloseSession {
                session_id: *session_id,
                reason: CloseReason::Expired,
            },
            Decision::ReapContainer { path } => Txn::ReapContainer { path: path.clone() },
            Decision::ReapTtl { path } => Txn::ReapTtl { path: path.clone() },
        }
    }

    /// The decision a server-made txn carries out, if it is one.
    pub fn of(txn: &Txn) -> Option<Self> {
        match txn {
            Txn::CloseSession {
                session_id,
                reason: CloseReason::Expired,
            } => Some(Decision::Expire {
                session_id: *session_id,
            }),
            Txn::ReapContainer { path } => Some(Decision::ReapContainer { path: path.clone() }),
            Txn::ReapTtl { path } => Some(Decision::ReapTtl { path: path.clone() }),
            _ => None,
        }
    }
}

impl Txn {
    /// The session whose request this txn is, if any.
    pub fn session_id(&self) -> Option<SessionId> {
        match self {
            Txn::CloseSession { session_id, .. }
            | Txn::Write { session_id, .. }
            | Txn::Multi { session_id, .. }
            | Txn::MoveSession { session_id }
            | Txn::CreateSession { session_id, .. }
            | Txn::OpenSession { session_id, .. }
            | Txn::ClaimSession { session_id, .. }
            | Txn::OpenSessionFrom { session_id, .. }
            | Txn::ClaimSessionFrom { session_id, .. }
            | Txn::Authenticate { session_id, .. }
            | Txn::SetAcl { session_id, .. } => Some(*session_id),
            Txn::ReapContainer { .. } | Txn::ReapTtl { .. } | Txn::Decided { .. } => None,
        }
    }
}

/// Why a session ended.
impl Txn {
    /// The tree writes this txn carries (each op of a multi counts): what
    /// replaying it costs, and what snapshots are spaced by.
    pub fn op_count(&self) -> u64 {
        match self {
            Txn::Multi { ops, .. } => ops.len().max(1) as u64,
            _ => 1,
        }
    }

    /// About how many bytes this txn takes encoded: its paths and data,
    /// plus [`TXN_FIXED_BYTES_MAX`] for everything of fixed size. Never
    /// below the real size; for batching writes under a byte limit.
    pub fn encoded_bytes_bound(&self) -> usize {
        let acl_bytes = |acl: &[Acl]| -> usize {
            acl.iter()
                .map(|entry| entry.id.scheme.len() + entry.id.id.len() + TXN_FIXED_BYTES_MAX)
                .sum()
        };
        let op_bytes = |op: &MultiOp| {
            let data = match op {
                MultiOp::Create { data, .. }
                | MultiOp::CreateWithAcl { data, .. }
                | MultiOp::SetData { data, .. } => data.len(),
                MultiOp::Check { .. } | MultiOp::Delete { .. } => 0,
            };
            op.path().len() + data + op.acl().map_or(0, acl_bytes) + TXN_FIXED_BYTES_MAX
        };
        TXN_FIXED_BYTES_MAX
            + match self {
                Txn::Write { op, .. } => op_bytes(op),
                Txn::Multi { ops, .. } => ops.iter().map(op_bytes).sum(),
                Txn::ReapContainer { path }
                | Txn::ReapTtl { path }
                | Txn::Decided {
                    decision: Decision::ReapContainer { path } | Decision::ReapTtl { path },
                    ..
                } => path.len(),
                Txn::SetAcl { path, acl, .. } => path.len() + acl_bytes(acl),
                Txn::Authenticate { id, .. } => id.scheme.len() + id.id.len(),
                Txn::OpenSessionFrom { origin, .. } | Txn::ClaimSessionFrom { origin, .. } => {
                    origin.x509.as_ref().map_or(0, String::len)
                }
                Txn::CreateSession { .. }
                | Txn::OpenSession { .. }
                | Txn::ClaimSession { .. }
                | Txn::CloseSession { .. }
                | Txn::MoveSession { .. }
                | Txn::Decided { .. } => 0,
            }
    }
}

/// More than the fixed-size fields of a txn or of one op take encoded
/// (tags, ids, versions, lengths, a session password).
pub const TXN_FIXED_BYTES_MAX: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub enum CloseReason {
    Closed,
    Expired,
}

/// A txn in the total order: its zxid and the wall time prep fixed for it.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct TxnEntry {
    pub zxid: Zxid,
    pub time_ms: u64,
    pub txn: Txn,
}
