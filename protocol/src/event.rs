//! Watch events pushed by the server.

use bincode::{Decode, Encode};

use crate::Zxid;

/// What happened to the watched node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Encode, Decode)]
pub enum EventType {
    NodeCreated,
    NodeDeleted,
    NodeDataChanged,
    NodeChildrenChanged,
}

/// A change to a watched path. The server sends one event per session for each
/// (type, path) change, however many of the session's watches it matches; the
/// client routes it to its watchers by type and path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Encode, Decode)]
pub struct WatchEvent {
    pub event_type: EventType,
    pub path: String,
    /// The zxid of the write that caused the event.
    pub zxid: Zxid,
}
