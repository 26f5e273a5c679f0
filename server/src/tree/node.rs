//! One znode.

use arbor_protocol::{CreateMode, SessionId, Stat, Zxid};
use bincode::{Decode, Encode};

use crate::acl::table::{AclId, OPEN};

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

/// Where a node sits in the tree: an index into the tree's node slots
/// (`NodeMap`). Four bytes where a path is dozens, so children and the path
/// index hold these instead of paths.
pub type NodeId = u32;

/// The parent of the root, which has none.
pub const NO_PARENT: NodeId = NodeId::MAX;

/// A znode: its name, its data and the stored part of its stat. A million
/// nodes are a million of these, so only what cannot be derived is kept,
/// packed to fit a 96-byte allocation with its reference count (a test holds
/// it there): the data length is the data's, the ephemeral owner and the
/// TTL share a word (a node has at most one), and the sequence counter of
/// the few nodes with sequential children sits beside the tree. The ACL is
/// an id in the tree's table of lists; it and the ACL version sit in front
/// of the name, in the same allocation, only for a node whose ACL is not
/// the open one or was ever set: most nodes have the open ACL and pay
/// nothing for it. A node holds its name, not its path, and its parent's
/// id: a path is mostly its parent's path again, and holding it whole was
/// the biggest part of a znode's memory. Children are not here but beside
/// the node map (`DataTree`): nodes are shared copy-on-write with
/// snapshots, and a parent copied for a write must not copy a million ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The ACL header if `acl_header` (id and ACL version, 4 bytes each,
    /// little-endian), the name, then the data: one allocation for all.
    bytes: Box<[u8]>,
    pub czxid: Zxid,
    pub mzxid: Zxid,
    pub pzxid: Zxid,
    pub ctime_ms: u64,
    pub mtime_ms: u64,
    /// The owner of an ephemeral, the TTL of a TTL node, else 0.
    owner_or_ttl: u64,
    pub version: i32,
    pub cversion: i32,
    pub num_children: u32,
    parent: NodeId,
    /// The low half of the path's hash in the tree's index: the index grows
    /// by rehashing its entries, and without this each would need its path
    /// rebuilt from its parents (a third of a restart's time, measured).
    path_hash: u32,
    name_len: u16,
    tag: KindTag,
    acl_header: bool,
}

/// Bytes of the ACL header: the list's id and the ACL version.
const ACL_HEADER_BYTES: usize = 8;

/// Longest name a node can hold: a name is at most a whole path.
const NAME_BYTES_MAX: usize = u16::MAX as usize;
const _: () = assert!(arbor_protocol::path::PATH_BYTES_MAX <= NAME_BYTES_MAX);

/// A node's bytes: the ACL header if there is one, the name, the data.
fn node_bytes(acl: Option<(AclId, i32)>, name: &str, data: &[u8]) -> Box<[u8]> {
    let header = if acl.is_some() { ACL_HEADER_BYTES } else { 0 };
    let mut bytes = Vec::with_capacity(header + name.len() + data.len());
    if let Some((id, aversion)) = acl {
        bytes.extend_from_slice(&id.to_le_bytes());
        bytes.extend_from_slice(&aversion.to_le_bytes());
    }
    bytes.extend_from_slice(name.as_bytes());
    bytes.extend_from_slice(data);
    bytes.into_boxed_slice()
}

impl Node {
    /// A new node named `name` as a create at `zxid`, `time_ms` makes it.
    /// `owner` is the owning session of an ephemeral and ignored for other
    /// kinds. The tree sets its parent when it links it.
    ///
    /// # Panics
    /// If `name` is longer than a path may be (paths are checked first).
    pub fn new(
        name: &str,
        data: &[u8],
        kind: NodeKind,
        owner: SessionId,
        zxid: Zxid,
        time_ms: u64,
    ) -> Self {
        assert!(name.len() <= NAME_BYTES_MAX, "name of {} bytes", name.len());
        let (tag, owner_or_ttl) = match kind {
            NodeKind::Persistent => (KindTag::Persistent, 0),
            NodeKind::Ephemeral => (KindTag::Ephemeral, owner),
            NodeKind::Container => (KindTag::Container, 0),
            NodeKind::Ttl { ttl_ms } => (KindTag::Ttl, ttl_ms),
        };
        Self {
            bytes: node_bytes(None, name, data),
            czxid: zxid,
            mzxid: zxid,
            pzxid: zxid,
            ctime_ms: time_ms,
            mtime_ms: time_ms,
            owner_or_ttl,
            version: 0,
            cversion: 0,
            num_children: 0,
            parent: NO_PARENT,
            path_hash: 0,
            name_len: name.len() as u16,
            tag,
            acl_header: false,
        }
    }

    /// A node from a snapshot record: `stat` as [`Node::stat`] gave it (its
    /// ACL is set apart, with [`Node::set_acl`]). Fails on a name no path
    /// could have.
    pub fn restore(name: &str, data: &[u8], stat: &Stat, kind: NodeKind) -> Result<Self, String> {
        if name.len() > NAME_BYTES_MAX {
            return Err(format!("a node name of {} bytes", name.len()));
        }
        let mut node = Node::new(
            name,
            data,
            kind,
            stat.ephemeral_owner,
            stat.czxid,
            stat.ctime_ms,
        );
        node.mzxid = stat.mzxid;
        node.pzxid = stat.pzxid;
        node.mtime_ms = stat.mtime_ms;
        node.version = stat.version;
        node.cversion = stat.cversion;
        node.num_children = stat.num_children;
        Ok(node)
    }

    /// The node's ACL: an id in the tree's table ([`OPEN`] for the open
    /// list).
    pub fn acl_id(&self) -> AclId {
        self.acl_header().0
    }

    /// How many times the node's ACL was set.
    pub fn aversion(&self) -> i32 {
        self.acl_header().1
    }

    fn acl_header(&self) -> (AclId, i32) {
        if !self.acl_header {
            return (OPEN, 0);
        }
        let word = |at: usize| {
            let mut four = [0u8; 4];
            four.copy_from_slice(&self.bytes[at..at + 4]);
            four
        };
        (AclId::from_le_bytes(word(0)), i32::from_le_bytes(word(4)))
    }

    /// Gives the node ACL `id` at ACL version `aversion`; the header goes
    /// away again for the open ACL at version 0.
    pub fn set_acl(&mut self, id: AclId, aversion: i32) {
        let header = (id != OPEN || aversion != 0).then_some((id, aversion));
        if header.is_none() && !self.acl_header {
            return;
        }
        self.bytes = node_bytes(header, self.name(), self.data());
        self.acl_header = header.is_some();
    }

    /// Where the name starts in `bytes`.
    fn name_start(&self) -> usize {
        if self.acl_header {
            ACL_HEADER_BYTES
        } else {
            0
        }
    }

    /// The last component of the node's path ("" for the root).
    pub fn name(&self) -> &str {
        let start = self.name_start();
        let name = &self.bytes[start..start + usize::from(self.name_len)];
        // SAFETY: these bytes were copied from a `&str` in `new` and are
        // never changed; `set_data`, `set_acl` and `renamed` copy them whole.
        unsafe { std::str::from_utf8_unchecked(name) }
    }

    pub fn data(&self) -> &[u8] {
        &self.bytes[self.name_start() + usize::from(self.name_len)..]
    }

    fn header(&self) -> Option<(AclId, i32)> {
        self.acl_header.then(|| self.acl_header())
    }

    /// Replaces the data, keeping the name and the ACL.
    pub fn set_data(&mut self, data: &[u8]) {
        self.bytes = node_bytes(self.header(), self.name(), data);
    }

    /// This node under another name (the same one: no copy).
    pub(super) fn renamed(mut self, name: &str) -> Result<Self, String> {
        if self.name() != name {
            if name.len() > NAME_BYTES_MAX {
                return Err(format!("a node name of {} bytes", name.len()));
            }
            self.bytes = node_bytes(self.header(), name, self.data());
            self.name_len = name.len() as u16;
        }
        Ok(self)
    }

    pub(super) fn parent(&self) -> NodeId {
        self.parent
    }

    pub(super) fn set_parent(&mut self, parent: NodeId) {
        self.parent = parent;
    }

    pub(super) fn path_hash(&self) -> u32 {
        self.path_hash
    }

    pub(super) fn set_path_hash(&mut self, hash: u32) {
        self.path_hash = hash;
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
            aversion: self.aversion(),
            ephemeral_owner: self.ephemeral_owner(),
            data_length: self.data().len() as u32,
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
            let mut node = Node::new("n-1", b"abc", kind, 0x77, 5, 1000);
            node.mzxid = 9;
            node.pzxid = 8;
            node.mtime_ms = 2000;
            node.version = 3;
            node.cversion = 4;
            node.num_children = 2;
            let stat = node.stat();
            assert_eq!(node.kind(), kind);
            assert_eq!(stat.data_length, 3);
            assert_eq!(
                stat.ephemeral_owner,
                if kind == NodeKind::Ephemeral { 0x77 } else { 0 }
            );
            assert_eq!((node.name(), node.data()), ("n-1", &b"abc"[..]));
            let restored = Node::restore("n-1", b"abc", &stat, kind).expect("restores");
            assert_eq!(restored, node);
            let mut renamed = restored.renamed("other").expect("renames");
            renamed.set_acl(7, 3);
            assert_eq!((renamed.acl_id(), renamed.aversion()), (7, 3));
            renamed.set_data(b"longer data");
            assert_eq!(
                (renamed.name(), renamed.data(), renamed.stat().data_length),
                ("other", &b"longer data"[..], 11)
            );
            assert_eq!((renamed.acl_id(), renamed.stat().aversion), (7, 3));
            renamed.set_acl(OPEN, 0);
            assert_eq!(
                (
                    renamed.name(),
                    renamed.data(),
                    renamed.acl_id(),
                    renamed.aversion()
                ),
                ("other", &b"longer data"[..], OPEN, 0)
            );
            assert_eq!(renamed.bytes.len(), "other".len() + 11, "no header left");
        }
    }
}
