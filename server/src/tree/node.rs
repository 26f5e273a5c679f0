//! One znode.

use arbor_protocol::{CreateMode, Stat};
use bincode::{Decode, Encode};

/// What kind of node this is; decides when the server deletes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub enum NodeKind {
    Persistent,
    /// Owned by `stat.ephemeral_owner`; deleted when that session ends.
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

/// A znode: its data and stat. Kept small (a million of them are a million
/// of these; data is boxed to its exact length). Its children are not here
/// but beside the node map (`DataTree`): nodes are shared copy-on-write with
/// snapshots, and a parent copied for a write must not copy a million names.
#[derive(Debug, Clone)]
pub struct Node {
    pub data: Box<[u8]>,
    pub stat: Stat,
    pub kind: NodeKind,
    /// The next sequence number a sequential child of this node gets.
    pub sequence: u64,
}

impl Node {
    pub fn is_ephemeral(&self) -> bool {
        self.kind == NodeKind::Ephemeral
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves a node and its Arc header fit a 128-byte allocation: a million
    // nodes are a million of these, and the next size class is 160 bytes.
    #[test]
    fn a_node_fits_128_bytes_with_its_arc() {
        let arc_header = 2 * std::mem::size_of::<usize>();
        assert!(
            std::mem::size_of::<Node>() + arc_header <= 128,
            "Node is {} bytes",
            std::mem::size_of::<Node>()
        );
    }
}
