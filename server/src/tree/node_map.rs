//! The map from path to node, split into shards that are shared
//! copy-on-write with snapshot views.
//!
//! A snapshot view clones the shard table: [`NODE_SHARDS`] pointer copies,
//! whatever the size of the tree, so writes wait microseconds for it instead
//! of a pass over every node. The first write to a shard while a view still
//! holds it copies that shard (1/[`NODE_SHARDS`] of the tree), and the node
//! it changes; the cost of a snapshot is spread over the writes that follow
//! it rather than paid at once.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::Arc;

use foldhash::fast::RandomState;

use super::{Node, PathKey};

/// Shards of the node map. More shards: smaller copies per write during a
/// snapshot, a slightly larger fixed cost per view.
pub const NODE_SHARDS: usize = 1024;

/// Keyed with foldhash, randomly seeded per process (the shard choice below
/// too): several times faster than SipHash on paths, which showed up at 8 %
/// of a log replay.
type Shard = HashMap<PathKey, NodeRef, RandomState>;

/// A shared node. No weak count (std's `Arc` has one): 8 bytes less per
/// node, the difference between the 96- and 112-byte allocation classes.
pub type NodeRef = triomphe::Arc<Node>;

#[derive(Debug, Clone)]
pub struct NodeMap {
    shards: Vec<Arc<Shard>>,
    /// Picks the shard; randomly keyed, so clients cannot aim at one shard.
    hasher: RandomState,
    len: usize,
}

impl Default for NodeMap {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeMap {
    pub fn new() -> Self {
        Self {
            shards: (0..NODE_SHARDS)
                .map(|_| Arc::new(Shard::default()))
                .collect(),
            hasher: RandomState::default(),
            len: 0,
        }
    }

    fn shard(&self, path: &str) -> usize {
        (self.hasher.hash_one(path) % NODE_SHARDS as u64) as usize
    }

    pub fn get(&self, path: &str) -> Option<&NodeRef> {
        self.shards[self.shard(path)].get(path)
    }

    pub fn get_key_value(&self, path: &str) -> Option<(&PathKey, &NodeRef)> {
        self.shards[self.shard(path)].get_key_value(path)
    }

    pub fn contains_key(&self, path: &str) -> bool {
        self.get(path).is_some()
    }

    /// The node, copied first if a view shares it (and its shard).
    pub fn get_mut(&mut self, path: &str) -> Option<&mut Node> {
        let shard = self.shard(path);
        Arc::make_mut(&mut self.shards[shard])
            .get_mut(path)
            .map(NodeRef::make_mut)
    }

    pub fn insert(&mut self, path: PathKey, node: NodeRef) -> Option<NodeRef> {
        let shard = self.shard(&path);
        let old = Arc::make_mut(&mut self.shards[shard]).insert(path, node);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    pub fn remove(&mut self, path: &str) -> Option<NodeRef> {
        let shard = self.shard(path);
        let old = Arc::make_mut(&mut self.shards[shard]).remove(path);
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = (&PathKey, &NodeRef)> {
        self.shards.iter().flat_map(|shard| shard.iter())
    }

    /// As [`NodeMap::iter`], with the memory of the entries a little ahead
    /// asked for before they are reached. A pass over every node (a
    /// snapshot) waits on three cache misses per node, one after another:
    /// the path, the node, then its data; perf put 60 % of a snapshot's
    /// time on the first and last. Asked for early, they overlap.
    pub fn iter_prefetched(&self) -> impl Iterator<Item = (&PathKey, &NodeRef)> {
        Prefetched {
            inner: self.iter(),
            ahead: VecDeque::with_capacity(PREFETCH_AHEAD),
        }
    }
}

/// Entries [`NodeMap::iter_prefetched`] looks ahead: enough misses in
/// flight to hide their latency, few enough that what they bring is still
/// in the first-level cache when it is used.
const PREFETCH_AHEAD: usize = 16;

struct Prefetched<'a, I> {
    inner: I,
    ahead: VecDeque<(&'a PathKey, &'a NodeRef)>,
}

impl<'a, I: Iterator<Item = (&'a PathKey, &'a NodeRef)>> Iterator for Prefetched<'a, I> {
    type Item = (&'a PathKey, &'a NodeRef);

    fn next(&mut self) -> Option<Self::Item> {
        while self.ahead.len() < PREFETCH_AHEAD {
            let Some((path, node)) = self.inner.next() else {
                break;
            };
            // Addresses only: neither pointer is read here.
            prefetch(path.heap_ptr());
            let node_ptr = NodeRef::as_ptr(node).cast::<u8>();
            prefetch(node_ptr);
            prefetch(node_ptr.wrapping_add(64));
            self.ahead.push_back((path, node));
        }
        // Halfway along, the node asked for earlier has arrived: its data
        // pointer can be read without waiting.
        if let Some((_, node)) = self.ahead.get(PREFETCH_AHEAD / 2) {
            prefetch(node.data.as_ptr());
        }
        self.ahead.pop_front()
    }
}

/// Asks for the cache line at `ptr`; a hint that reads nothing and cannot
/// fault, whatever the address.
#[inline(always)]
fn prefetch(ptr: *const u8) {
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

    fn node(version: i32) -> NodeRef {
        let mut node = Node::new(&[], NodeKind::Persistent, 0, 1, 0);
        node.version = version;
        NodeRef::new(node)
    }

    #[test]
    fn a_clone_is_frozen_while_the_original_changes() {
        let mut map = NodeMap::new();
        for i in 0..5000 {
            map.insert(PathKey::new(&format!("/n{i}")), node(0));
        }
        let view = map.clone();
        map.get_mut("/n7").expect("exists").version = 9;
        map.remove("/n8");
        map.insert(PathKey::new("/new"), node(1));
        assert_eq!(view.get("/n7").expect("in view").version, 0);
        assert!(view.get("/n8").is_some() && view.get("/new").is_none());
        assert_eq!((view.len(), map.len()), (5000, 5000));
        assert_eq!(map.get("/n7").expect("exists").version, 9);
        assert_eq!(view.iter().count(), 5000);
    }
}
