//! The metadata of a znode, as ZooKeeper's `Stat`.

use bincode::{Decode, Encode};

use crate::{SessionId, Zxid};

/// A znode's metadata.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Encode, Decode)]
pub struct Stat {
    /// zxid of the write that created the node.
    pub czxid: Zxid,
    /// zxid of the write that last changed the node's data (or created it).
    pub mzxid: Zxid,
    /// zxid of the write that last added or removed a child (or created it).
    pub pzxid: Zxid,
    /// Creation time, milliseconds since the Unix epoch (fixed by the server).
    pub ctime_ms: u64,
    /// Time of the last data change, milliseconds since the Unix epoch.
    pub mtime_ms: u64,
    /// Number of data changes.
    pub version: i32,
    /// Number of child additions and removals.
    pub cversion: i32,
    /// Number of ACL changes.
    pub aversion: i32,
    /// Session that owns this ephemeral node; 0 for any other node.
    pub ephemeral_owner: SessionId,
    /// Length of the node's data in bytes.
    pub data_length: u32,
    /// Number of children.
    pub num_children: u32,
}
