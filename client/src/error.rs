//! The one error type of the client.
//!
//! Every wire [`ErrorCode`] has its own variant, so callers `match` on meaning,
//! not on numbers. Errors about a node carry the path of the call that got them
//! (empty for a call without a single path, such as a multi). Next to the server's
//! answers sit the outcomes only the client can see: [`Error::ConnectionLoss`]
//! (a write may or may not have happened), [`Error::Closed`], a refused
//! [`Error::MultiFailed`] transaction, and the end of a watch stream.
//!
//! `Error` is `Clone` so one terminal cause can be handed to every waiter.

use std::sync::Arc;

use arbor_protocol::path::PathError;
use arbor_protocol::{ErrorCode, MultiOpOutcome};

/// What went wrong with a call, a connection or a watch.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The node does not exist (or, for a create, its parent does not).
    #[error("no node at {path:?}")]
    NoNode { path: String },
    /// A node already exists at that path.
    #[error("node {path:?} already exists")]
    NodeExists { path: String },
    /// The expected version did not match the node's version.
    #[error("bad version for {path:?}")]
    BadVersion { path: String },
    /// The node has children and cannot be deleted.
    #[error("node {path:?} has children")]
    NotEmpty { path: String },
    /// Ephemeral nodes cannot have children.
    #[error("cannot create {path:?}: ephemeral nodes may not have children")]
    NoChildrenForEphemerals { path: String },
    /// The path breaks the path rules. `reason` is set when the client found
    /// it before sending; `None` when the server refused it.
    #[error("invalid path {path:?}")]
    InvalidPath {
        path: String,
        #[source]
        reason: Option<PathError>,
    },
    /// The session has expired or was closed by the server. Terminal: every
    /// later call of this client gets it too.
    #[error("session expired")]
    SessionExpired,
    /// The session is now served by another connection.
    #[error("session moved to another connection")]
    SessionMoved,
    /// The server is not the leader and cannot order writes.
    #[error("server is not the leader")]
    NotLeader,
    /// The service cannot take requests now.
    #[error("service unavailable")]
    Unavailable,
    /// Data, a request or a reply is over a limit. When the client found it
    /// before sending, `bytes` and `max` say by how much.
    #[error("too large{}", too_large_detail(*bytes, *max))]
    TooLarge {
        bytes: Option<usize>,
        max: Option<usize>,
    },
    /// The credentials were refused.
    #[error("authentication failed")]
    AuthFailed,
    /// The session may not do this (the node's ACL does not allow it).
    #[error("not authorized")]
    NoAuth,
    /// The ACL is empty, names an unknown scheme or a malformed id, or uses
    /// `auth` in a session that has proved no id.
    #[error("invalid ACL")]
    InvalidAcl,
    /// The server does not support this operation.
    #[error("operation not implemented by the server")]
    Unimplemented,
    /// TLS options could not be made (a certificate or key file missing or
    /// unreadable).
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// An argument is not valid (for example a TTL of 0, or bad client options).
    #[error("bad arguments")]
    BadArguments,
    /// There was no such watch to remove.
    #[error("no watcher on {path:?}")]
    NoWatcher { path: String },
    /// A limit on this session or node was reached (watches, children), on
    /// the server or on the client's own watcher table.
    #[error("limit exceeded")]
    LimitExceeded,
    /// The server could not decode the request or did not allow it here.
    #[error("bad request")]
    BadRequest,
    /// An invariant broke inside the server; the request had no effect.
    #[error("internal server error")]
    Internal,
    /// The connection ended while the call was in flight (a write may or may
    /// not have been applied), or the call was made while the client was
    /// [`Suspended`](crate::ConnectionState::Suspended) (nothing was sent).
    /// Not terminal: the client reconnects by itself; calls never are retried
    /// for you, so re-read before retrying a write.
    #[error("connection to the server lost")]
    ConnectionLoss,
    /// No reply within [`ClientOptions::request_timeout`](crate::ClientOptions::request_timeout).
    /// As with [`Error::ConnectionLoss`], a write may or may not have been
    /// applied. Not terminal.
    #[error("no reply within the request timeout")]
    Timeout,
    /// No server in the connect string could be reached.
    #[error("cannot connect to {addrs}")]
    Connect {
        addrs: String,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The server turned the connection away before any session, saying
    /// why: it is serving as many connections as it allows in all, or from
    /// this client's address (`code` is
    /// [`ErrorCode::LimitExceeded`]). The server is up; retry later or
    /// close other connections.
    #[error("the server refused the connection: {message}")]
    Refused {
        addr: String,
        code: ErrorCode,
        message: String,
    },
    /// Writing what a call fetched (a backup) to its destination failed.
    #[error("cannot write the result: {0}")]
    Io(Arc<std::io::Error>),
    /// The client was closed (by [`Client::close`](crate::Client::close)).
    #[error("client closed")]
    Closed,
    /// A multi transaction was refused: op `index` failed with `code`, so no op
    /// was applied. `outcomes` has one entry per op.
    #[error("multi op {index} failed: {code}")]
    MultiFailed {
        index: usize,
        code: ErrorCode,
        outcomes: Vec<MultiOpOutcome>,
    },
    /// A persistent watch stream fell so far behind that it was ended rather
    /// than block the connection or grow without bound.
    #[error("watch consumer fell behind; stream ended")]
    WatchLagged,
    /// The watch was removed by [`Client::remove_watches`](crate::Client::remove_watches).
    #[error("watch removed")]
    WatchRemoved,
    /// The server broke the protocol (an unexpected message or result).
    #[error("protocol violation: {0}")]
    Protocol(String),
}

fn too_large_detail(bytes: Option<usize>, max: Option<usize>) -> String {
    match (bytes, max) {
        (Some(bytes), Some(max)) => format!(": {bytes} bytes, the limit is {max}"),
        _ => String::new(),
    }
}

impl Error {
    /// The error for a wire code answered to a call on `path` (`""` when the
    /// call had no single path).
    pub fn from_code(code: ErrorCode, path: &str) -> Error {
        let path = path.to_owned();
        match code {
            ErrorCode::NoNode => Error::NoNode { path },
            ErrorCode::NodeExists => Error::NodeExists { path },
            ErrorCode::BadVersion => Error::BadVersion { path },
            ErrorCode::NotEmpty => Error::NotEmpty { path },
            ErrorCode::NoChildrenForEphemerals => Error::NoChildrenForEphemerals { path },
            ErrorCode::InvalidPath => Error::InvalidPath { path, reason: None },
            ErrorCode::SessionExpired => Error::SessionExpired,
            ErrorCode::SessionMoved => Error::SessionMoved,
            ErrorCode::NotLeader => Error::NotLeader,
            ErrorCode::Unavailable => Error::Unavailable,
            ErrorCode::TooLarge => Error::TooLarge {
                bytes: None,
                max: None,
            },
            ErrorCode::AuthFailed => Error::AuthFailed,
            ErrorCode::NoAuth => Error::NoAuth,
            ErrorCode::Unimplemented => Error::Unimplemented,
            ErrorCode::BadArguments => Error::BadArguments,
            ErrorCode::NoWatcher => Error::NoWatcher { path },
            ErrorCode::LimitExceeded => Error::LimitExceeded,
            ErrorCode::BadRequest => Error::BadRequest,
            ErrorCode::Internal => Error::Internal,
            ErrorCode::InvalidAcl => Error::InvalidAcl,
            ErrorCode::OutcomeUnknown => Error::ConnectionLoss,
        }
    }

    /// The wire code this error stands for; `None` for client-side outcomes
    /// such as [`Error::ConnectionLoss`]. For [`Error::MultiFailed`] it is the
    /// failing op's code.
    pub fn code(&self) -> Option<ErrorCode> {
        let code = match self {
            Error::NoNode { .. } => ErrorCode::NoNode,
            Error::NodeExists { .. } => ErrorCode::NodeExists,
            Error::BadVersion { .. } => ErrorCode::BadVersion,
            Error::NotEmpty { .. } => ErrorCode::NotEmpty,
            Error::NoChildrenForEphemerals { .. } => ErrorCode::NoChildrenForEphemerals,
            Error::InvalidPath { .. } => ErrorCode::InvalidPath,
            Error::SessionExpired => ErrorCode::SessionExpired,
            Error::SessionMoved => ErrorCode::SessionMoved,
            Error::NotLeader => ErrorCode::NotLeader,
            Error::Unavailable => ErrorCode::Unavailable,
            Error::TooLarge { .. } => ErrorCode::TooLarge,
            Error::AuthFailed => ErrorCode::AuthFailed,
            Error::NoAuth => ErrorCode::NoAuth,
            Error::Unimplemented => ErrorCode::Unimplemented,
            Error::BadArguments => ErrorCode::BadArguments,
            Error::NoWatcher { .. } => ErrorCode::NoWatcher,
            Error::LimitExceeded => ErrorCode::LimitExceeded,
            Error::BadRequest => ErrorCode::BadRequest,
            Error::Internal => ErrorCode::Internal,
            Error::InvalidAcl => ErrorCode::InvalidAcl,
            Error::MultiFailed { code, .. } => *code,
            Error::Refused { code, .. } => *code,
            Error::ConnectionLoss
            | Error::Timeout
            | Error::Connect { .. }
            | Error::Tls(_)
            | Error::Closed
            | Error::WatchLagged
            | Error::WatchRemoved
            | Error::Io(_)
            | Error::Protocol(_) => return None,
        };
        Some(code)
    }

    /// Whether the session is gone for good: expired, or closed by this client.
    pub fn is_session_ended(&self) -> bool {
        matches!(self, Error::SessionExpired | Error::Closed)
    }
}

/// How the client ended; once set it never changes, and every later call
/// gets [`Ended::error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Closed by the client (explicitly, or because every handle was dropped).
    Closed,
    /// The server declared the session expired, or it could not be resumed
    /// within the session timeout.
    SessionExpired,
}

impl Ended {
    pub(crate) fn error(self) -> Error {
        match self {
            Ended::Closed => Error::Closed,
            Ended::SessionExpired => Error::SessionExpired,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves every wire code maps to a variant that maps back to the same code.
    #[test]
    fn wire_codes_round_trip() {
        let codes = [
            ErrorCode::NoNode,
            ErrorCode::NodeExists,
            ErrorCode::BadVersion,
            ErrorCode::NotEmpty,
            ErrorCode::NoChildrenForEphemerals,
            ErrorCode::InvalidPath,
            ErrorCode::SessionExpired,
            ErrorCode::SessionMoved,
            ErrorCode::NotLeader,
            ErrorCode::Unavailable,
            ErrorCode::TooLarge,
            ErrorCode::AuthFailed,
            ErrorCode::NoAuth,
            ErrorCode::Unimplemented,
            ErrorCode::BadArguments,
            ErrorCode::NoWatcher,
            ErrorCode::LimitExceeded,
            ErrorCode::BadRequest,
            ErrorCode::Internal,
            ErrorCode::InvalidAcl,
        ];
        for code in codes {
            assert_eq!(Error::from_code(code, "/a").code(), Some(code), "{code:?}");
        }
        assert_eq!(Error::ConnectionLoss.code(), None);
    }
}
