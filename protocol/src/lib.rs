//! The Arbor wire protocol, shared by the server, the client and the tools.
//!
//! A connection carries length-prefixed frames ([`frame`]): a `u32` big-endian
//! payload length, then one bincode-encoded message ([`codec`]). The client
//! speaks [`ClientMessage`], the server answers with [`ServerMessage`].
//!
//! The first client frame must be [`ClientMessage::Connect`], which opens or
//! resumes a session. After it the client sends [`ClientMessage::Request`]s,
//! each with a client-chosen `xid`; the server answers every request with a
//! [`ServerMessage::Reply`] carrying the same `xid`, in request order, and
//! pushes [`ServerMessage::Event`]s for watches that fire. A watch event is
//! always sent before any reply that reflects the change it reports.
//!
//! Every reply carries the server's last applied zxid: the position of the
//! newest write in the server's total order of writes.

pub mod acl;
pub mod child_names;
pub mod codec;
pub mod error;
pub mod event;
pub mod frame;
/// Fuzz target bodies, shared by `fuzz/` and the stable smoke test.
#[doc(hidden)]
pub mod fuzzing;
pub mod path;
pub mod request;
pub mod response;
pub mod stat;
pub mod zookeeper;

pub use acl::{Acl, Id, Perms};
pub use child_names::ChildNames;
pub use error::ErrorCode;
pub use event::{EventType, WatchEvent};
pub use request::{
    AddWatchMode, AdminCommand, ClientMessage, ConnectRequest, CreateMode, MultiOp, Op, ReadOp,
    SessionCredentials, SetWatches, WatcherKind, ANY_VERSION, BACKUP_CHUNK_BYTES_MAX,
    CHILDREN_BELOW_MAX,
};
pub use response::{
    BackupInfo, ChildEntry, ClusterStatus, ConnectResponse, MemberStatus, MultiOpOutcome, OpResult,
    ServerLimits, ServerMessage,
};
pub use stat::Stat;

/// A transaction id: the position of a write in the server's total order.
pub type Zxid = u64;

/// A session id, chosen by the server; never 0 (0 means "no session").
pub type SessionId = u64;

/// The version of this protocol; the handshake refuses any other.
pub const PROTOCOL_VERSION: u32 = 1;

/// Length of a session password in bytes.
pub const SESSION_PASSWORD_BYTES: usize = 16;

/// A session id or zxid as the tools print it, `0x…`: logs, four-letter
/// words and the CLI all use this form, so an id seen in one can be
/// grepped for in the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hex(pub u64);

impl std::fmt::Display for Hex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}
