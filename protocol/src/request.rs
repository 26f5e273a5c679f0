//! What a client sends.

use bincode::{Decode, Encode};

use crate::acl::Acl;
use crate::{SessionId, Zxid, SESSION_PASSWORD_BYTES};

/// The expected version that matches any version (ZooKeeper's `-1`).
pub const ANY_VERSION: i32 = -1;

/// A frame from client to server.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum ClientMessage {
    /// Must be the first frame of a connection.
    Connect(ConnectRequest),
    /// Any later frame. `xid` is chosen by the client and echoed in the reply.
    Request { xid: u64, op: Op },
}

/// Opens a new session, or resumes one when `session` is given.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct ConnectRequest {
    pub protocol_version: u32,
    /// The newest zxid this client has seen; a server behind it refuses.
    pub last_zxid_seen: Zxid,
    /// The timeout the client asks for; the server clamps it to its range.
    pub session_timeout_ms: u32,
    pub session: Option<SessionCredentials>,
}

/// What a client needs to resume its session on a new connection.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Encode, Decode)]
pub struct SessionCredentials {
    pub id: SessionId,
    pub password: [u8; SESSION_PASSWORD_BYTES],
}

/// Never prints the password: credentials end up in logs.
impl std::fmt::Debug for SessionCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCredentials")
            .field("id", &format_args!("{:#x}", self.id))
            .field("password", &"<redacted>")
            .finish()
    }
}

/// The kinds of znode a create can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Encode, Decode)]
pub enum CreateMode {
    Persistent,
    PersistentSequential,
    /// Deleted when the creating session ends.
    Ephemeral,
    EphemeralSequential,
    /// Deleted by the server once it has had children and has none left.
    Container,
    /// Deleted by the server once it has no children and was not modified for `ttl_ms`.
    PersistentWithTtl {
        ttl_ms: u64,
    },
    PersistentSequentialWithTtl {
        ttl_ms: u64,
    },
}

impl CreateMode {
    pub fn is_ephemeral(self) -> bool {
        matches!(
            self,
            CreateMode::Ephemeral | CreateMode::EphemeralSequential
        )
    }

    pub fn is_sequential(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentSequential
                | CreateMode::EphemeralSequential
                | CreateMode::PersistentSequentialWithTtl { .. }
        )
    }

    pub fn is_container(self) -> bool {
        matches!(self, CreateMode::Container)
    }

    pub fn ttl_ms(self) -> Option<u64> {
        match self {
            CreateMode::PersistentWithTtl { ttl_ms }
            | CreateMode::PersistentSequentialWithTtl { ttl_ms } => Some(ttl_ms),
            _ => None,
        }
    }
}

/// Persistent watch modes for [`Op::AddWatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Encode, Decode)]
pub enum AddWatchMode {
    /// Every change of the node itself and of its list of children; stays set.
    Persistent,
    /// Every create, delete and data change at or below the path; stays set.
    PersistentRecursive,
}

/// Which watches [`Op::RemoveWatches`] removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Encode, Decode)]
pub enum WatcherKind {
    /// One-shot child watches.
    Children,
    /// One-shot data and exists watches.
    Data,
    /// Every watch of the session on the path, one-shot and persistent.
    Any,
    Persistent,
    PersistentRecursive,
}

/// One operation of a [`Op::Multi`] transaction.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum MultiOp {
    /// Fails the transaction unless the node exists with this version
    /// (or any version, with [`ANY_VERSION`]).
    Check {
        path: String,
        version: i32,
    },
    Create {
        path: String,
        data: Vec<u8>,
        mode: CreateMode,
    },
    Delete {
        path: String,
        version: i32,
    },
    SetData {
        path: String,
        data: Vec<u8>,
        version: i32,
    },
    /// A create whose node gets `acl` instead of the open ACL (a `Create`
    /// gives the open one, and costs no bytes for it).
    CreateWithAcl {
        path: String,
        data: Vec<u8>,
        mode: CreateMode,
        acl: Vec<Acl>,
    },
}

impl MultiOp {
    pub fn path(&self) -> &str {
        match self {
            MultiOp::Check { path, .. }
            | MultiOp::Create { path, .. }
            | MultiOp::CreateWithAcl { path, .. }
            | MultiOp::Delete { path, .. }
            | MultiOp::SetData { path, .. } => path,
        }
    }

    /// The ACL a create gives its node; `None` for the open ACL, and for ops
    /// that are not creates.
    pub fn acl(&self) -> Option<&[Acl]> {
        match self {
            MultiOp::CreateWithAcl { acl, .. } => Some(acl),
            _ => None,
        }
    }
}

/// An operation on the tree or the session.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum Op {
    Create {
        path: String,
        data: Vec<u8>,
        mode: CreateMode,
    },
    Delete {
        path: String,
        version: i32,
    },
    SetData {
        path: String,
        data: Vec<u8>,
        version: i32,
    },
    /// With `watch`, sets a one-shot data watch (only if the node exists).
    GetData {
        path: String,
        watch: bool,
    },
    /// With `watch`, sets a one-shot exists watch, also on a missing node.
    Exists {
        path: String,
        watch: bool,
    },
    /// With `watch`, sets a one-shot child watch (only if the node exists).
    GetChildren {
        path: String,
        watch: bool,
    },
    GetChildrenWithStat {
        path: String,
        watch: bool,
    },
    /// All or nothing.
    Multi {
        ops: Vec<MultiOp>,
    },
    /// Answers once every write ordered before it has been applied.
    Sync {
        path: String,
    },
    Ping,
    CloseSession,
    AddWatch {
        path: String,
        mode: AddWatchMode,
    },
    RemoveWatches {
        path: String,
        kind: WatcherKind,
    },
    /// Registers again, on a new connection, the watches a client held on
    /// its previous one. The server fires at once every one-shot watch whose
    /// node changed after `relative_zxid` (the last zxid the client saw), so
    /// no change is missed across a reconnect. Clients send these in batches
    /// that fit the frame limit.
    SetWatches(SetWatches),
    /// The sequential children whose sequence number (the digits ending the
    /// name) is below `sequence`, highest first, at most `limit` of them
    /// (capped at [`CHILDREN_BELOW_MAX`]), with their stats. A lock waiter
    /// asks for its own node and the one just ahead of it with one small
    /// reply, however long the queue (etcd's "newest key created before
    /// mine", for sequential znodes).
    ChildrenBelow {
        path: String,
        sequence: u64,
        limit: u32,
    },
    /// The answering server's view of its ensemble: who it is, who leads,
    /// how far it has come, and (from the leader) how far each member is.
    ClusterStatus,
    /// Adds a member to an ensemble online: first as a learner, answered
    /// once it has caught up, then as a voter (a joint change). The new
    /// member must be running (started with `--join`).
    AddMember {
        id: u64,
        client_addr: String,
        peer_addr: String,
    },
    /// Removes a member from an ensemble (a joint change). Answered with
    /// the answering member's status once it has applied the change (a
    /// removed member never does: its answer shows its last view).
    RemoveMember {
        id: u64,
    },
    /// A create whose node gets `acl` (see [`MultiOp::CreateWithAcl`]).
    CreateWithAcl {
        path: String,
        data: Vec<u8>,
        mode: CreateMode,
        acl: Vec<Acl>,
    },
    /// The node's ACL and stat; needs READ or ADMIN on the node, and without
    /// ADMIN digests are shown as `user:x`.
    GetAcl {
        path: String,
    },
    /// Replaces the node's ACL if its ACL version (`aversion`) is `version`
    /// (or any, with [`ANY_VERSION`]); needs ADMIN on the node.
    SetAcl {
        path: String,
        acl: Vec<Acl>,
        version: i32,
    },
    /// Proves an id for this session: scheme `digest`, credentials
    /// `user:password`. Refused credentials close the connection
    /// (`AuthFailed`), as in ZooKeeper.
    Auth {
        scheme: String,
        credentials: Vec<u8>,
    },
    /// The ids this session holds.
    WhoAmI,
    /// The paths of this session's ephemeral nodes that start with
    /// `prefix` (as a string: `/a` also matches `/ab`), in path order:
    /// ZooKeeper's getEphemerals.
    GetEphemerals {
        prefix: String,
    },
    /// How many nodes are below `path`, at any depth (READ on `path`):
    /// ZooKeeper's getAllChildrenNumber.
    CountDescendants {
        path: String,
    },
    /// Reads run together against one state, each answered on its own (one
    /// failing does not fail the others): ZooKeeper's multiRead.
    MultiRead {
        ops: Vec<ReadOp>,
    },
    /// Whether the session has a watch of `kind` on `path`, leaving it in
    /// place (`NoWatcher` if not): ZooKeeper's checkWatches.
    CheckWatches {
        path: String,
        kind: WatcherKind,
    },
    /// An operator's command: the server's figures and listings, evicting
    /// a session, a backup. Needs ADMIN on `/` (or the superuser).
    Admin(AdminCommand),
}

/// What an [`Op::Admin`] asks.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum AdminCommand {
    /// The server's figures, as JSON (the admin port's `/commands/stat`).
    Stat,
    /// The settings in force, as JSON (`/commands/conf`).
    Conf,
    /// Connections serving sessions, as JSON (`/commands/cons`).
    Connections,
    /// Every session, as JSON (`/commands/sessions`).
    Sessions,
    /// Watch counts, as JSON (`/commands/watches`).
    Watches,
    /// Ends another session as if it had expired: its ephemerals go, its
    /// client is told `SessionExpired`. For a stuck client an operator must
    /// evict.
    CloseSession { session_id: SessionId },
    /// Writes a consistent snapshot of the whole state, to be read with
    /// [`AdminCommand::BackupRead`].
    BackupStart,
    /// Up to [`BACKUP_CHUNK_BYTES_MAX`] bytes of backup `id` from `offset`.
    BackupRead { id: u64, offset: u64 },
}

/// The most bytes one [`AdminCommand::BackupRead`] returns (less if the
/// frame limit is smaller).
pub const BACKUP_CHUNK_BYTES_MAX: u32 = 512 * 1024;

/// One read of an [`Op::MultiRead`].
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum ReadOp {
    GetData { path: String },
    GetChildren { path: String },
}

/// The most children one [`Op::ChildrenBelow`] returns.
pub const CHILDREN_BELOW_MAX: u32 = 64;

/// The watches of [`Op::SetWatches`], by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode, Decode)]
pub struct SetWatches {
    pub relative_zxid: Zxid,
    /// One-shot data watches (set by get-data): fire on change or deletion.
    pub data: Vec<String>,
    /// One-shot exists watches: fire on creation, change or deletion.
    pub exist: Vec<String>,
    /// One-shot child watches: fire on a child change or deletion.
    pub child: Vec<String>,
    pub persistent: Vec<String>,
    pub persistent_recursive: Vec<String>,
}

impl SetWatches {
    /// Number of paths in this batch.
    pub fn len(&self) -> usize {
        self.data.len()
            + self.exist.len()
            + self.child.len()
            + self.persistent.len()
            + self.persistent_recursive.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Op {
    /// Whether this operation changes the tree or the session table, and so
    /// must go through the commit log.
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Op::Create { .. }
                | Op::CreateWithAcl { .. }
                | Op::Delete { .. }
                | Op::SetData { .. }
                | Op::SetAcl { .. }
                | Op::Multi { .. }
                | Op::CloseSession
        )
    }

    /// A short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Create { .. } => "create",
            Op::Delete { .. } => "delete",
            Op::SetData { .. } => "set_data",
            Op::GetData { .. } => "get_data",
            Op::Exists { .. } => "exists",
            Op::GetChildren { .. } => "get_children",
            Op::GetChildrenWithStat { .. } => "get_children_with_stat",
            Op::Multi { .. } => "multi",
            Op::Sync { .. } => "sync",
            Op::Ping => "ping",
            Op::CloseSession => "close_session",
            Op::AddWatch { .. } => "add_watch",
            Op::RemoveWatches { .. } => "remove_watches",
            Op::SetWatches(_) => "set_watches",
            Op::ChildrenBelow { .. } => "children_below",
            Op::ClusterStatus => "cluster_status",
            Op::AddMember { .. } => "add_member",
            Op::RemoveMember { .. } => "remove_member",
            Op::CreateWithAcl { .. } => "create",
            Op::GetAcl { .. } => "get_acl",
            Op::SetAcl { .. } => "set_acl",
            Op::Auth { .. } => "auth",
            Op::WhoAmI => "who_am_i",
            Op::GetEphemerals { .. } => "get_ephemerals",
            Op::CountDescendants { .. } => "count_descendants",
            Op::MultiRead { .. } => "multi_read",
            Op::CheckWatches { .. } => "check_watches",
            Op::Admin(_) => "admin",
        }
    }
}
