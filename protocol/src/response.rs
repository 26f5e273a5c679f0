//! What the server sends.

use bincode::{Decode, Encode};

use crate::acl::{Acl, Id};
use crate::{ChildNames, ErrorCode, SessionId, Stat, WatchEvent, Zxid, SESSION_PASSWORD_BYTES};

/// A frame from server to client.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum ServerMessage {
    /// The handshake succeeded.
    Connected(ConnectResponse),
    /// The answer to the request with this `xid`. `zxid` is the server's last
    /// applied zxid when the answer was made.
    Reply {
        xid: u64,
        zxid: Zxid,
        result: Result<OpResult, ErrorCode>,
    },
    /// A watch fired.
    Event(WatchEvent),
    /// The server is closing this connection, and says why. Sent for a refused
    /// handshake, a frame that breaks the protocol, or a server shutting down.
    Closing { code: ErrorCode, message: String },
}

/// The session a connection now serves, and the server's limits.
#[derive(Clone, PartialEq, Eq, Encode, Decode)]
pub struct ConnectResponse {
    pub protocol_version: u32,
    pub session_id: SessionId,
    pub password: [u8; SESSION_PASSWORD_BYTES],
    /// The negotiated timeout.
    pub session_timeout_ms: u32,
    /// The server's last applied zxid.
    pub zxid: Zxid,
    pub limits: ServerLimits,
}

/// Never prints the password: responses end up in logs.
impl std::fmt::Debug for ConnectResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectResponse")
            .field("protocol_version", &self.protocol_version)
            .field("session_id", &format_args!("{:#x}", self.session_id))
            .field("password", &"<redacted>")
            .field("session_timeout_ms", &self.session_timeout_ms)
            .field("zxid", &self.zxid)
            .field("limits", &self.limits)
            .finish()
    }
}

/// Limits a client should respect to avoid being refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub struct ServerLimits {
    /// Largest frame payload the server accepts or sends.
    pub frame_bytes_max: u32,
    /// Largest znode data.
    pub data_bytes_max: u32,
}

/// A child's name and stat.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct ChildEntry {
    pub name: String,
    pub stat: Stat,
}

/// The result of one multi op.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum MultiOpOutcome {
    /// The op was applied, with this result.
    Applied(OpResult),
    /// The op would have succeeded, but another op failed so nothing applied.
    RolledBack,
    /// This op failed, and so the transaction.
    Failed(ErrorCode),
    /// Not tried: an earlier op failed.
    NotRun,
}

/// A successful result.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum OpResult {
    /// The created node's actual path (with any sequence suffix) and stat.
    Created {
        path: String,
        stat: Stat,
    },
    Deleted,
    /// The node's stat after a set.
    SetData(Stat),
    /// A check in a multi passed.
    Checked,
    Data {
        data: Vec<u8>,
        stat: Stat,
    },
    /// `None` when the node does not exist.
    Exists(Option<Stat>),
    /// Child names and the parent's stat.
    Children {
        names: ChildNames,
        stat: Stat,
    },
    ChildrenWithStat {
        children: Vec<ChildEntry>,
        stat: Stat,
    },
    /// One outcome per op. If any op failed, none was applied.
    Multi(Vec<MultiOpOutcome>),
    Synced {
        path: String,
    },
    Pong,
    SessionClosed,
    /// A watch was added or removed.
    WatchesChanged,
    ClusterStatus(ClusterStatus),
    /// A node's ACL, and its stat (`aversion` counts the ACL's changes).
    Acl {
        acl: Vec<Acl>,
        stat: Stat,
    },
    /// The node's stat after a set-ACL.
    SetAcl(Stat),
    /// The credentials were accepted.
    Authenticated,
    /// The ids the session holds: its address, then what it proved.
    WhoAmI(Vec<Id>),
    /// The paths of the session's ephemerals asked for.
    Ephemerals(Vec<String>),
    /// How many nodes are below the one asked about.
    DescendantCount(u64),
    /// Each read's own answer, in order.
    MultiRead(Vec<Result<OpResult, ErrorCode>>),
    /// An admin command's answer, as a JSON document.
    AdminReport(String),
    /// A backup was written and can be read.
    BackupStarted(BackupInfo),
    /// Bytes of a backup; fewer than asked (or none) at its end.
    BackupChunk(Vec<u8>),
}

/// A backup the server has written, ready to be read.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct BackupInfo {
    pub id: u64,
    /// The state is exact as of this zxid.
    pub zxid: Zxid,
    pub bytes: u64,
    /// crc32c of the whole file.
    pub crc32c: u32,
    pub nodes: u64,
    pub sessions: u64,
}

/// One server's view of its ensemble (answer to `Op::ClusterStatus`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode, Decode)]
pub struct ClusterStatus {
    /// This server's member id; 0 for a standalone server.
    pub member_id: u64,
    /// The member it follows (itself, if it leads).
    pub leader: Option<u64>,
    pub term: u64,
    /// The last index in its log, and the last it has applied.
    pub last_log_index: Option<u64>,
    pub applied_index: Option<u64>,
    /// The membership in force, as this member has applied it.
    pub members: Vec<MemberStatus>,
}

/// One member of an ensemble.
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode, Decode)]
pub struct MemberStatus {
    pub id: u64,
    pub client_addr: String,
    pub peer_addr: String,
    /// Votes (a learner does not).
    pub voter: bool,
    /// Known only to the leader: the last index this member has confirmed.
    pub matched_index: Option<u64>,
}
