//! One znode.

use arbor_protocol::{CreateMode, SessionId, Stat, Zxid};
use bincode::{Decode, Encode};

/// What kind of node this is; decides when the server deletes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub enum NodeKind {
    Persistent,
    /// Owned by the session in the stat's `ephemeral_owner`; deleted when
    /// that session ends.
    Ephemeral,
    /// Deleted by the reaper once it has had children and has none left.
    Container,
    /// Deleted by the reaper once childless and unmodified for `ttl_ms`.
    Ttl {
        ttl_ms: u64,
    },
}

impl NodeKind {
    pub fn of(mode: CreateMode) -> NodeKind {
        match mode {
            CreateMode::Persistent | CreateMode::PersistentSequential => NodeKind::Persistent,
            CreateMode::Ephemeral | CreateMode::EphemeralSequential => NodeKind::Ephemeral,
            CreateMode::Container => NodeKind::Container,
            CreateMode::PersistentWithTtl { ttl_ms }
            | CreateMode::PersistentSequentialWithTtl { ttl_ms } => NodeKind::Ttl { ttl_ms },
        }
    }
}

/// The kind without its payload: one byte, so it packs beside the counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KindTag {
    Persistent,
    Ephemeral,
    Container,
    Ttl,
}

/// A znode: its data and the stored part of its stat. A million nodes are a
/// million of these, so only what cannot be derived is kept, packed to fit
/// a 96-byte allocation with its reference count (a test holds it there):
/// the data length is the data's, the ACL version is always 0, and the
/// ephemeral owner and the TTL share a word (a node has at most one). Its
/// children are not here but beside the node map (`DataTree`): nodes are
/// shared copy-on-write with snapshots, and a parent copied for a write must
/// not copy a million names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub data: Box<[u8]>,
    pub czxid: Zxid,
    pub mzxid: Zxid,
    pub pzxid: Zxid,
    pub ctime_ms: u64,
    pub mtime_ms: u64,
    pub version: i32,
    pub cversion: i32,
    pub num_children: u32,
    tag: KindTag,
    /// The owner of an ephemeral, the TTL of a TTL node, else 0.
    owner_or_ttl: u64,
    /// The next sequence number a sequential child of this node gets.
    pub sequence: u64,
}

impl Node {
    /// A new node as a create at `zxid`, `time_ms` makes it. `owner` is the
    /// owning session of an ephemeral and ignored for other kinds.
    pub fn new(data: &[u8], kind: NodeKind, owner: SessionId, zxid: Zxid, time_ms: u64) -> Self {
        let (tag, owner_or_ttl) = match kind {
            NodeKind::Persistent => (KindTag::Persistent, 0),
            NodeKind::Ephemeral => (KindTag::Ephemeral, owner),
            NodeKind::Container => (KindTag::Container, 0),
            NodeKind::Ttl { ttl_ms } => (KindTag::Ttl, ttl_ms),
        };
        Self {
            data: data.into(),
            czxid: zxid,
            mzxid: zxid,
            pzxid: zxid,
            ctime_ms: time_ms,
            mtime_ms: time_ms,
            version: 0,
            cversion: 0,
            num_children: 0,
            tag,
            owner_or_ttl,
            sequence: 0,
        }
    }

    /// A node from a snapshot record: `stat` as [`Node::stat`] gave it.
    pub fn restore(data: Box<[u8]>, stat: &Stat, kind: NodeKind, sequence: u64) -> Self {
        let mut node = Node::new(&[], kind, stat.ephemeral_owner, stat.czxid, stat.ctime_ms);
        node.data = data;
        node.mzxid = stat.mzxid;
        node.pzxid = stat.pzxid;
        node.mtime_ms = stat.mtime_ms;
        node.version = stat.version;
        node.cversion = stat.cversion;
        node.num_children = stat.num_children;
        node.sequence = sequence;
        node
    }

    pub fn kind(&self) -> NodeKind {
        match self.tag {
            KindTag::Persistent => NodeKind::Persistent,
            KindTag::Ephemeral => NodeKind::Ephemeral,
            KindTag::Container => NodeKind::Container,
            KindTag::Ttl => NodeKind::Ttl {
                ttl_ms: self.owner_or_ttl,
            },
        }
    }

    /// The owning session of an ephemeral; 0 for any other node.
    pub fn ephemeral_owner(&self) -> SessionId {
        if self.tag == KindTag::Ephemeral {
            self.owner_or_ttl
        } else {
            0
        }
    }

    pub fn is_ephemeral(&self) -> bool {
        self.tag == KindTag::Ephemeral
    }

    /// The stat clients see.
    pub fn stat(&self) -> Stat {
        Stat {
            czxid: self.czxid,
            mzxid: self.mzxid,
            pzxid: self.pzxid,
            ctime_ms: self.ctime_ms,
            mtime_ms: self.mtime_ms,
            version: self.version,
            cversion: self.cversion,
            aversion: 0,
            ephemeral_owner: self.ephemeral_owner(),
            data_length: self.data.len() as u32,
            num_children: self.num_children,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A node and its reference count fit a 96-byte allocation: a million
    // nodes are a million of these, and the next size classes are 112 and
    // 128 bytes.
    #[test]
    fn a_node_fits_96_bytes_with_its_reference_count() {
        let header = std::mem::size_of::<triomphe::Arc<Node>>();
        assert!(
            std::mem::size_of::<Node>() + header <= 96,
            "Node is {} bytes",
            std::mem::size_of::<Node>()
        );
    }

    #[test]
    fn kinds_and_stats_round_trip_through_restore() {
        for kind in [
            NodeKind::Persistent,
            NodeKind::Ephemeral,
            NodeKind::Container,
            NodeKind::Ttl { ttl_ms: 1234 },
        ] {
            let mut node = Node::new(b"abc", kind, 0x77, 5, 1000);
            node.mzxid = 9;
            node.pzxid = 8;
            node.mtime_ms = 2000;
            node.version = 3;
            node.cversion = 4;
            node.num_children = 2;
            node.sequence = 11;
            let stat = node.stat();
            assert_eq!(node.kind(), kind);
            assert_eq!(stat.data_length, 3);
            assert_eq!(
                stat.ephemeral_owner,
                if kind == NodeKind::Ephemeral { 0x77 } else { 0 }
            );
            let restored = Node::restore(node.data.clone(), &stat, kind, 11);
            assert_eq!(restored, node);
        }
    }
}
