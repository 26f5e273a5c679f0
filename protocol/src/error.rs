//! Error codes on the wire. They mirror ZooKeeper's meanings.

use bincode::{Decode, Encode};

/// Why the server refused a request (or a connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Encode, Decode, thiserror::Error)]
pub enum ErrorCode {
    /// The node does not exist (or, for create, its parent does not).
    #[error("no node")]
    NoNode,
    /// A node already exists at that path.
    #[error("node exists")]
    NodeExists,
    /// The expected version did not match the node's version.
    #[error("bad version")]
    BadVersion,
    /// The node has children and cannot be deleted.
    #[error("node has children")]
    NotEmpty,
    /// Ephemeral nodes cannot have children.
    #[error("ephemeral nodes may not have children")]
    NoChildrenForEphemerals,
    /// The path breaks the path rules.
    #[error("invalid path")]
    InvalidPath,
    /// The session has expired or was closed (or is closing).
    #[error("session expired")]
    SessionExpired,
    /// The session is now served by another connection.
    #[error("session moved to another connection")]
    SessionMoved,
    /// This server is not the leader and cannot order writes.
    #[error("not leader")]
    NotLeader,
    /// The service cannot take requests now.
    #[error("service unavailable")]
    Unavailable,
    /// Data, a reply or a batch is over a limit.
    #[error("too large")]
    TooLarge,
    /// The credentials were refused.
    #[error("authentication failed")]
    AuthFailed,
    /// The session may not do this.
    #[error("not authorized")]
    NoAuth,
    /// The operation is not supported.
    #[error("unimplemented")]
    Unimplemented,
    /// An argument is not valid (for example a TTL of 0).
    #[error("bad arguments")]
    BadArguments,
    /// There was no such watch to remove.
    #[error("no such watcher")]
    NoWatcher,
    /// A limit on this session or node was reached (watches, children).
    #[error("limit exceeded")]
    LimitExceeded,
    /// The request could not be decoded or is not allowed at this point.
    #[error("bad request")]
    BadRequest,
    /// An invariant broke inside the server; the request had no effect.
    #[error("internal server error")]
    Internal,
    /// An ACL is empty, names an unknown scheme or a malformed id, or uses
    /// `auth` in a session that has proved no id.
    #[error("invalid ACL")]
    InvalidAcl,
    /// The request may or may not have taken effect: the ensemble's leader
    /// changed under it, or did not answer in time. The connection stays
    /// open; clients report it as a connection loss (ZooKeeper's code).
    #[error("outcome unknown")]
    OutcomeUnknown,
}
