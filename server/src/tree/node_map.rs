//! The nodes, in slots numbered by [`NodeId`], and the index that finds a
//! node's id by its path.
//!
//! The slots ([`NodeSlab`]) sit in chunks shared copy-on-write with
//! snapshot views: a view clones the chunk list, one pointer per
//! [`CHUNK_NODES`] nodes, so writes wait microseconds for it instead of a
//! pass over every node. The first write to a chunk while a view still holds
//! it copies that chunk, and the node it changes; the cost of a snapshot is
//! spread over the writes that follow it rather than paid at once.
//!
//! The path index holds ids only, four bytes a node: it is hashed by the
//! full path and a candidate is confirmed by walking up its parents and
//! comparing names (a node holds its name, not its path). The node keeps
//! the half of that hash the index uses, so the index rehashes without
//! rebuilding paths. The parents of
//! the nodes a workload touches are few and stay in the cache, so the walk
//! costs about what comparing a stored path did. Only the live tree uses
//! the index; a view needs the slots alone.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::Arc;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use super::node::{Node, NodeId, NO_PARENT};

/// A shared node. No weak count (std's `Arc` has one): 8 bytes less per
/// node, the difference between the 96- and 112-byte allocation classes.
pub type NodeRef = triomphe::Arc<Node>;

/// Node slots per chunk. Smaller: less copied by the first write to a chunk
/// a view shares; larger: fewer pointers per view.
pub const CHUNK_NODES: usize = 4096;

/// Nodes a tree can hold: every id but `NO_PARENT`.
pub const NODES_MAX: usize = NO_PARENT as usize;

/// Shards of the path index. A shard grows by rehashing every id in it,
/// a cache miss or two each, so shards keep that pause small: a thousandth
/// of the tree, whatever its size.
const INDEX_SHARDS: usize = 1024;
const INDEX_SHARD_BITS: u32 = INDEX_SHARDS.trailing_zeros();

/// Parents followed at most when rebuilding or confirming a path: as deep
/// as a path of the longest length can go. More means the links are broken.
const DEPTH_MAX: usize = arbor_protocol::path::PATH_BYTES_MAX / 2 + 1;

type Chunk = Vec<Option<NodeRef>>;

/// The node slots, shareable with a view (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct NodeSlab {
    chunks: Vec<Arc<Chunk>>,
    /// Slots handed out so far: the next new id.
    high: usize,
}

impl NodeSlab {
    fn slot(id: NodeId) -> (usize, usize) {
        let id = id as usize;
        (id / CHUNK_NODES, id % CHUNK_NODES)
    }

    pub fn get(&self, id: NodeId) -> Option<&Node> {
        let (chunk, at) = Self::slot(id);
        self.chunks.get(chunk)?.get(at)?.as_deref()
    }

    /// The node, copied first if a view shares it (and its chunk).
    pub fn get_mut(&mut self, id: NodeId) -> Option<&mut Node> {
        let (chunk, at) = Self::slot(id);
        Arc::make_mut(self.chunks.get_mut(chunk)?)
            .get_mut(at)?
            .as_mut()
            .map(NodeRef::make_mut)
    }

    /// A slot never used before.
    fn grow(&mut self) -> NodeId {
        let id = self.high;
        assert!(id < NODES_MAX, "more than {NODES_MAX} nodes");
        if id / CHUNK_NODES == self.chunks.len() {
            self.chunks.push(Arc::new(vec![None; CHUNK_NODES]));
        }
        self.high += 1;
        id as NodeId
    }

    fn put(&mut self, id: NodeId, node: NodeRef) {
        let (chunk, at) = Self::slot(id);
        let slot = &mut Arc::make_mut(&mut self.chunks[chunk])[at];
        debug_assert!(slot.is_none(), "slot {id} is taken");
        *slot = Some(node);
    }

    fn take(&mut self, id: NodeId) -> Option<NodeRef> {
        let (chunk, at) = Self::slot(id);
        Arc::make_mut(self.chunks.get_mut(chunk)?)
            .get_mut(at)?
            .take()
    }

    /// The node's full path, written into `path` (cleared first).
    pub fn path_into(&self, id: NodeId, path: &mut String) {
        let mut names = Vec::new();
        let mut at = id;
        while let Some(node) = self.get(at) {
            if node.parent() == NO_PARENT || names.len() > DEPTH_MAX {
                break;
            }
            names.push(node.name());
            at = node.parent();
        }
        path.clear();
        if names.is_empty() {
            path.push('/');
        }
        for name in names.iter().rev() {
            path.push('/');
            path.push_str(name);
        }
    }

    pub fn path_of(&self, id: NodeId) -> String {
        let mut path = String::new();
        self.path_into(id, &mut path);
        path
    }

    /// Whether the node `id` is the one at `path`: its name ends the path,
    /// its parent's name ends what is left, and so on up to the root.
    fn is_at(&self, id: NodeId, path: &str) -> bool {
        let mut rest = path;
        let mut at = id;
        for _ in 0..=DEPTH_MAX {
            let Some(node) = self.get(at) else {
                return false;
            };
            if node.parent() == NO_PARENT {
                // The root's path is "/"; as a parent it adds nothing.
                return if at == id {
                    path == "/"
                } else {
                    rest.is_empty()
                };
            }
            let name = node.name();
            let Some(before) = rest.strip_suffix(name) else {
                return false;
            };
            let Some(before) = before.strip_suffix('/') else {
                return false;
            };
            rest = before;
            at = node.parent();
        }
        false
    }

    /// Every node with its id, in slot order; the memory of the next ones
    /// is asked for while this one is used (see `Prefetched`).
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, &Node)> {
        let slots = self.chunks.iter().flat_map(|chunk| chunk.iter());
        Prefetched {
            inner: slots
                .enumerate()
                .filter_map(|(id, node)| Some((id as NodeId, node.as_ref()?))),
            ahead: VecDeque::with_capacity(PREFETCH_AHEAD),
        }
    }
}

/// The live tree's nodes: the slots, the path index, and the free slots.
#[derive(Debug)]
pub struct NodeMap {
    slab: NodeSlab,
    index: Vec<HashTable<NodeId>>,
    /// Hashes paths for the index; randomly keyed per process, so clients
    /// cannot aim at one shard or one probe sequence.
    hasher: RandomState,
    /// Slots of deleted nodes, taken again first.
    free: Vec<NodeId>,
    len: usize,
}

impl Default for NodeMap {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeMap {
    /// An empty map: not even a root (`DataTree` adds it).
    pub fn new() -> Self {
        Self {
            slab: NodeSlab::default(),
            index: (0..INDEX_SHARDS).map(|_| HashTable::new()).collect(),
            hasher: RandomState::default(),
            free: Vec::new(),
            len: 0,
        }
    }

    pub fn hash(&self, path: &str) -> u64 {
        self.hasher.hash_one(path)
    }

    /// What the index keeps of a path's hash, in the node too: 32 bits
    /// pick the shard and the place in it. Paths equal in all 32 are told
    /// apart by their names, a walk the index's tags almost always spare.
    fn low(hash: u64) -> u32 {
        (hash ^ (hash >> 32)) as u32
    }

    /// The shard: the top bits of the low word.
    fn shard(low: u32) -> usize {
        (low >> (32 - INDEX_SHARD_BITS)) as usize
    }

    /// The hash a shard's table files a node under: the low word mixed
    /// (bijectively) over 64 bits, since the table takes buckets from the
    /// low bits and tags from the top seven, and every entry of a shard
    /// shares the low word's top bits.
    fn table_hash(low: u32) -> u64 {
        let mixed = u64::from(low).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        mixed ^ (mixed >> 29)
    }

    /// The table hash of an indexed node, for a rehash.
    fn rehash(slab: &NodeSlab, id: NodeId) -> u64 {
        Self::table_hash(slab.get(id).map_or(0, Node::path_hash))
    }

    pub fn slab(&self) -> &NodeSlab {
        &self.slab
    }

    /// The id of the node at `path`.
    pub fn id(&self, path: &str) -> Option<NodeId> {
        let low = Self::low(self.hash(path));
        self.index[Self::shard(low)]
            .find(Self::table_hash(low), |&id| self.slab.is_at(id, path))
            .copied()
    }

    pub fn get(&self, path: &str) -> Option<&Node> {
        self.slab.get(self.id(path)?)
    }

    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.slab.get(id)
    }

    /// The node, copied first if a view shares it.
    pub fn node_mut(&mut self, id: NodeId) -> Option<&mut Node> {
        self.slab.get_mut(id)
    }

    /// Adds `node` at `path`, a child of `parent` (the root: `NO_PARENT`).
    /// The caller has checked that the parent is there and the path is not.
    pub fn insert(&mut self, path: &str, parent: NodeId, mut node: Node) -> NodeId {
        let low = Self::low(self.hash(path));
        node.set_parent(parent);
        node.set_path_hash(low);
        let id = self.free.pop().unwrap_or_else(|| self.slab.grow());
        self.slab.put(id, NodeRef::new(node));
        self.len += 1;
        let Self { slab, index, .. } = self;
        index[Self::shard(low)].insert_unique(Self::table_hash(low), id, |&other| {
            Self::rehash(slab, other)
        });
        id
    }

    /// Whether `id` is the node at `path` (for checks that an id handed
    /// along still names the node it was found for).
    pub fn is_at(&self, id: NodeId, path: &str) -> bool {
        self.slab.is_at(id, path)
    }

    /// Removes the node `id`, found by an earlier lookup: its index entry is
    /// found by the hash the node keeps, so the path is neither hashed nor
    /// walked again.
    pub fn remove(&mut self, id: NodeId) -> Option<NodeRef> {
        let low = self.slab.get(id)?.path_hash();
        let entry = self.index[Self::shard(low)]
            .find_entry(Self::table_hash(low), |&other| other == id)
            .ok()?;
        entry.remove();
        let node = self.slab.take(id)?;
        self.free.push(id);
        self.len -= 1;
        Some(node)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds a node whose parent is not known yet, without indexing it: for
    /// [`MapBuilder`], which links and indexes every node at the end.
    fn push_unlinked(&mut self, node: Node) -> NodeId {
        let id = self.slab.grow();
        self.slab.put(id, NodeRef::new(node));
        self.len += 1;
        id
    }
}

/// Fills a [`NodeMap`] from nodes that arrive in any order, children before
/// their parents as well as after (a snapshot's order): nodes go in as they
/// come, their parents are set by [`MapBuilder::link`], and the index is
/// built last, when every path can be confirmed.
#[derive(Debug, Default)]
pub struct MapBuilder {
    map: NodeMap,
    /// Nodes added to each index shard.
    per_shard: Vec<usize>,
}

impl MapBuilder {
    pub fn new() -> Self {
        Self {
            map: NodeMap::new(),
            per_shard: vec![0; INDEX_SHARDS],
        }
    }

    pub fn hash(&self, path: &str) -> u64 {
        self.map.hash(path)
    }

    /// Adds the node at `path`; its parent comes later from `link`.
    pub fn add(&mut self, path: &str, mut node: Node) -> NodeId {
        let low = NodeMap::low(self.map.hash(path));
        node.set_path_hash(low);
        self.per_shard[NodeMap::shard(low)] += 1;
        self.map.push_unlinked(node)
    }

    /// Nodes added so far.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether some node added has this path hash: a clue, not a proof,
    /// for error messages only.
    pub fn may_hold(&self, hash: u64) -> bool {
        let low = NodeMap::low(hash);
        self.map
            .slab
            .iter()
            .any(|(_, node)| node.path_hash() == low)
    }

    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.map.node(id)
    }

    /// Sets the parent of `child`.
    pub fn link(&mut self, child: NodeId, parent: NodeId) {
        if let Some(node) = self.map.node_mut(child) {
            node.set_parent(parent);
        }
    }

    /// Indexes every node by its path. Every node but the root must be
    /// linked by now. Fails with the path of a node that appears twice.
    pub fn finish(self) -> Result<NodeMap, String> {
        let MapBuilder { mut map, per_shard } = self;
        let NodeMap { slab, index, .. } = &mut map;
        // Sized once instead of grown.
        for (table, count) in index.iter_mut().zip(per_shard) {
            table.reserve(count, |&other| NodeMap::rehash(slab, other));
        }
        for (id, node) in slab.iter() {
            let table_hash = NodeMap::table_hash(node.path_hash());
            let table = &mut index[NodeMap::shard(node.path_hash())];
            // Two nodes at one path have the same parent and name.
            let same_place = |other: &NodeId| {
                slab.get(*other)
                    .is_some_and(|o| o.parent() == node.parent() && o.name() == node.name())
            };
            if table.find(table_hash, same_place).is_some() {
                return Err(format!("node {} appears twice", slab.path_of(id)));
            }
            table.insert_unique(table_hash, id, |&other| NodeMap::rehash(slab, other));
        }
        Ok(map)
    }
}

/// Entries [`NodeSlab::iter`] looks ahead: enough misses in flight to hide
/// their latency, few enough that what they bring is still in the
/// first-level cache when it is used.
const PREFETCH_AHEAD: usize = 16;

/// A pass over every node (a snapshot) waits on two cache misses per node,
/// one after the other: the node, then its name and data. Asked for early,
/// they overlap.
struct Prefetched<'a, I> {
    inner: I,
    ahead: VecDeque<(NodeId, &'a NodeRef)>,
}

impl<'a, I: Iterator<Item = (NodeId, &'a NodeRef)>> Iterator for Prefetched<'a, I> {
    type Item = (NodeId, &'a Node);

    fn next(&mut self) -> Option<Self::Item> {
        while self.ahead.len() < PREFETCH_AHEAD {
            let Some((id, node)) = self.inner.next() else {
                break;
            };
            // An address only: the node is not read here.
            let node_ptr = NodeRef::as_ptr(node).cast::<u8>();
            prefetch(node_ptr);
            prefetch(node_ptr.wrapping_add(64));
            self.ahead.push_back((id, node));
        }
        // Halfway along, the node asked for earlier has arrived: its bytes
        // pointer can be read without waiting.
        if let Some((_, node)) = self.ahead.get(PREFETCH_AHEAD / 2) {
            prefetch(node.name().as_ptr());
        }
        self.ahead.pop_front().map(|(id, node)| (id, &**node))
    }
}

/// Asks for the cache line at `ptr`; a hint that reads nothing and cannot
/// fault, whatever the address.
#[inline(always)]
pub(super) fn prefetch(ptr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 has no architectural effect and never faults.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ptr.cast::<i8>())
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::NodeKind;

    fn node(name: &str, version: i32) -> Node {
        let mut node = Node::new(name, &[], NodeKind::Persistent, 0, 1, 0);
        node.version = version;
        node
    }

    fn with_root() -> (NodeMap, NodeId) {
        let mut map = NodeMap::new();
        let root = map.insert("/", NO_PARENT, node("", 0));
        (map, root)
    }

    // Proves paths find their own node only, whatever shares a name or a
    // suffix, and that slots of deleted nodes are reused.
    #[test]
    fn paths_find_their_node_through_the_parents() {
        let (mut map, root) = with_root();
        let a = map.insert("/a", root, node("a", 1));
        let b = map.insert("/b", root, node("b", 2));
        let ab = map.insert("/a/b", a, node("b", 3));
        let ba = map.insert("/b/a", b, node("a", 4));
        let aab = map.insert("/a/b/a", ab, node("a", 5));
        for (path, id) in [
            ("/", root),
            ("/a", a),
            ("/b", b),
            ("/a/b", ab),
            ("/b/a", ba),
        ] {
            assert_eq!(map.id(path), Some(id), "{path}");
            assert_eq!(map.slab().path_of(id), path);
        }
        assert_eq!(map.get("/a/b/a").map(|n| n.version), Some(5));
        for missing in ["/c", "/a/a", "/b/b", "a", "/a/", "//a", "/a/b/a/b", ""] {
            assert_eq!(map.id(missing), None, "{missing:?}");
        }
        assert!(map.is_at(aab, "/a/b/a") && !map.is_at(aab, "/b/a/a"));
        assert_eq!(map.remove(aab).map(|n| n.version), Some(5));
        assert_eq!((map.id("/a/b/a"), map.len()), (None, 5));
        assert!(map.remove(aab).is_none(), "gone already");
        let again = map.insert("/b/a/c", ba, node("c", 6));
        assert_eq!(again, aab, "the freed slot is taken again");
        assert_eq!(map.get("/b/a/c").map(|n| n.version), Some(6));
    }

    #[test]
    fn a_view_of_the_slots_is_frozen_while_the_map_changes() {
        let (mut map, root) = with_root();
        for i in 0..5000 {
            map.insert(&format!("/n{i}"), root, node(&format!("n{i}"), 0));
        }
        let view = map.slab().clone();
        let n7 = map.id("/n7").expect("exists");
        map.node_mut(n7).expect("exists").version = 9;
        let n8 = map.id("/n8").expect("exists");
        map.remove(n8).expect("exists");
        let new = map.insert("/new", root, node("new", 1));
        assert_eq!(new, n8, "reused in the map, not in the view");
        assert_eq!(view.get(n7).map(|n| n.version), Some(0));
        assert_eq!(view.path_of(n8), "/n8");
        assert_eq!(map.slab().path_of(n8), "/new");
        assert_eq!(view.iter().count(), 5001);
        assert_eq!(map.get("/n7").map(|n| n.version), Some(9));
        // Enough nodes to rehash every shard several times: all still found.
        for i in 0..5000 {
            assert!(map.id(&format!("/n{i}")).is_some() || i == 8, "/n{i}");
        }
    }

    #[test]
    fn a_builder_links_in_any_order_and_refuses_a_path_twice() {
        let mut builder = MapBuilder::new();
        let c = builder.add("/a/c", node("c", 3));
        let a = builder.add("/a", node("a", 1));
        let root = builder.add("/", node("", 0));
        builder.link(c, a);
        builder.link(a, root);
        let map = builder.finish().expect("builds");
        assert_eq!(
            (map.id("/a/c"), map.id("/a"), map.id("/")),
            (Some(c), Some(a), Some(root))
        );

        let mut builder = MapBuilder::new();
        let root = builder.add("/", node("", 0));
        let x = builder.add("/x", node("x", 0));
        let y = builder.add("/x", node("x", 1));
        builder.link(x, root);
        builder.link(y, root);
        assert_eq!(builder.finish().unwrap_err(), "node /x appears twice");
    }
}
