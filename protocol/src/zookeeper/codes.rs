//! The numbers of ZooKeeper's client protocol: op codes, special xids,
//! error codes, event types and states, and how Arbor's own error codes
//! map onto them.

use crate::{ErrorCode, EventType};

/// Op codes of a `RequestHeader` (ZooKeeper's `ZooDefs.OpCode`).
pub mod op {
    pub const NOTIFICATION: i32 = 0;
    pub const CREATE: i32 = 1;
    pub const DELETE: i32 = 2;
    pub const EXISTS: i32 = 3;
    pub const GET_DATA: i32 = 4;
    pub const SET_DATA: i32 = 5;
    pub const GET_ACL: i32 = 6;
    pub const SET_ACL: i32 = 7;
    pub const GET_CHILDREN: i32 = 8;
    pub const SYNC: i32 = 9;
    pub const PING: i32 = 11;
    pub const GET_CHILDREN2: i32 = 12;
    pub const CHECK: i32 = 13;
    pub const MULTI: i32 = 14;
    pub const CREATE2: i32 = 15;
    pub const RECONFIG: i32 = 16;
    pub const CHECK_WATCHES: i32 = 17;
    pub const REMOVE_WATCHES: i32 = 18;
    pub const CREATE_CONTAINER: i32 = 19;
    pub const DELETE_CONTAINER: i32 = 20;
    pub const CREATE_TTL: i32 = 21;
    pub const MULTI_READ: i32 = 22;
    pub const AUTH: i32 = 100;
    pub const SET_WATCHES: i32 = 101;
    pub const SASL: i32 = 102;
    pub const GET_EPHEMERALS: i32 = 103;
    pub const GET_ALL_CHILDREN_NUMBER: i32 = 104;
    pub const SET_WATCHES2: i32 = 105;
    pub const ADD_WATCH: i32 = 106;
    pub const WHO_AM_I: i32 = 107;
    pub const CREATE_SESSION: i32 = -10;
    pub const CLOSE_SESSION: i32 = -11;
    /// The op type of a multi header that ends the ops, and of a result
    /// that is an error.
    pub const ERROR: i32 = -1;
}

/// Xids the protocol reserves.
pub mod xid {
    /// A watch event.
    pub const NOTIFICATION: i32 = -1;
    pub const PING: i32 = -2;
    pub const AUTH: i32 = -4;
    pub const SET_WATCHES: i32 = -8;
}

/// ZooKeeper's `KeeperException.Code` values Arbor sends.
pub mod err {
    pub const OK: i32 = 0;
    pub const SYSTEM_ERROR: i32 = -1;
    pub const RUNTIME_INCONSISTENCY: i32 = -2;
    pub const CONNECTION_LOSS: i32 = -4;
    pub const MARSHALLING_ERROR: i32 = -5;
    pub const UNIMPLEMENTED: i32 = -6;
    pub const OPERATION_TIMEOUT: i32 = -7;
    pub const BAD_ARGUMENTS: i32 = -8;
    pub const NO_NODE: i32 = -101;
    pub const NO_AUTH: i32 = -102;
    pub const BAD_VERSION: i32 = -103;
    pub const NO_CHILDREN_FOR_EPHEMERALS: i32 = -108;
    pub const NODE_EXISTS: i32 = -110;
    pub const NOT_EMPTY: i32 = -111;
    pub const SESSION_EXPIRED: i32 = -112;
    pub const INVALID_ACL: i32 = -114;
    pub const AUTH_FAILED: i32 = -115;
    pub const SESSION_MOVED: i32 = -118;
    pub const NO_WATCHER: i32 = -121;
    pub const RECONFIG_DISABLED: i32 = -123;
    pub const QUOTA_EXCEEDED: i32 = -125;
}

/// `Watcher.Event.EventType` of a notification.
pub mod event {
    pub const NODE_CREATED: i32 = 1;
    pub const NODE_DELETED: i32 = 2;
    pub const NODE_DATA_CHANGED: i32 = 3;
    pub const NODE_CHILDREN_CHANGED: i32 = 4;
}

/// `Watcher.Event.KeeperState` of a notification: a server only sends
/// events to connected clients.
pub const STATE_SYNC_CONNECTED: i32 = 3;

/// `CreateMode` flags of a create request.
pub mod create_flags {
    pub const PERSISTENT: i32 = 0;
    pub const EPHEMERAL: i32 = 1;
    pub const PERSISTENT_SEQUENTIAL: i32 = 2;
    pub const EPHEMERAL_SEQUENTIAL: i32 = 3;
    pub const CONTAINER: i32 = 4;
    pub const PERSISTENT_WITH_TTL: i32 = 5;
    pub const PERSISTENT_SEQUENTIAL_WITH_TTL: i32 = 6;
}

/// `WatcherType` of checkWatches and removeWatches.
pub mod watcher_type {
    pub const CHILDREN: i32 = 1;
    pub const DATA: i32 = 2;
    pub const ANY: i32 = 3;
    /// 3.9's persistent and persistent-recursive watches.
    pub const PERSISTENT: i32 = 4;
    pub const PERSISTENT_RECURSIVE: i32 = 5;
}

/// `AddWatchMode` of addWatch.
pub mod add_watch_mode {
    pub const PERSISTENT: i32 = 0;
    pub const PERSISTENT_RECURSIVE: i32 = 1;
}

/// The ZooKeeper code for an Arbor error. Where ZooKeeper has no code of
/// the same meaning, the nearest one a client handles the same way.
pub fn error_code(code: ErrorCode) -> i32 {
    match code {
        ErrorCode::NoNode => err::NO_NODE,
        ErrorCode::NodeExists => err::NODE_EXISTS,
        ErrorCode::BadVersion => err::BAD_VERSION,
        ErrorCode::NotEmpty => err::NOT_EMPTY,
        ErrorCode::NoChildrenForEphemerals => err::NO_CHILDREN_FOR_EPHEMERALS,
        // ZooKeeper's server answers a malformed path with BadArguments.
        ErrorCode::InvalidPath | ErrorCode::BadArguments => err::BAD_ARGUMENTS,
        ErrorCode::SessionExpired => err::SESSION_EXPIRED,
        ErrorCode::SessionMoved => err::SESSION_MOVED,
        ErrorCode::NoAuth => err::NO_AUTH,
        ErrorCode::AuthFailed => err::AUTH_FAILED,
        ErrorCode::InvalidAcl => err::INVALID_ACL,
        ErrorCode::Unimplemented => err::UNIMPLEMENTED,
        ErrorCode::NoWatcher => err::NO_WATCHER,
        ErrorCode::LimitExceeded => err::QUOTA_EXCEEDED,
        // A request larger than the limits ZooKeeper answers by closing
        // the connection; one that gets this far is a bad argument.
        ErrorCode::TooLarge => err::BAD_ARGUMENTS,
        ErrorCode::BadRequest => err::MARSHALLING_ERROR,
        ErrorCode::Internal => err::SYSTEM_ERROR,
        // No leader for now (nothing was done), or a write's fate unknown:
        // a ZooKeeper server in that state drops its clients, and they
        // retry what a connection loss interrupted, everywhere (a lock's
        // background delete retries nothing else). Here the connection
        // stays; the code is the one they handle.
        ErrorCode::NotLeader | ErrorCode::Unavailable | ErrorCode::OutcomeUnknown => {
            err::CONNECTION_LOSS
        }
    }
}

/// The notification type of an Arbor watch event.
pub fn event_type(event: EventType) -> i32 {
    match event {
        EventType::NodeCreated => event::NODE_CREATED,
        EventType::NodeDeleted => event::NODE_DELETED,
        EventType::NodeDataChanged => event::NODE_DATA_CHANGED,
        EventType::NodeChildrenChanged => event::NODE_CHILDREN_CHANGED,
    }
}
