//! A node's children, as the ids of their nodes.
//!
//! Four bytes a child: the name is in the child's node. The set is a hash
//! set, as ZooKeeper's: adding the millionth child of a queue or a bulk
//! load costs one hash and one probe, where an ordered set paid ~20 name
//! comparisons, each a cache miss (a quarter of a log replay). Listings
//! sort on the way out ([`Children::sorted`]); a big parent keeps the order
//! its last listing found until a child comes or goes. Only parents have a
//! set: the tree keeps them beside the nodes, not in them (see `DataTree`).

use std::collections::HashSet;
use std::sync::OnceLock;

use foldhash::fast::RandomState;

use super::node::{Node, NodeId};
use super::node_map::{prefetch, NodeSlab};

/// Children a listing looks ahead for names (twice as far for nodes).
const LIST_PREFETCH_AHEAD: usize = 8;

/// Parents with at least this many children keep the name order a listing
/// sorted out, until a child is added or removed: a big directory listed
/// again and again (members, configuration, a registry) is sorted once, not
/// on every listing. It costs four bytes a child, only for parents listed
/// at that size; smaller sets sort in less time than keeping it saves.
pub const SORTED_ORDER_KEPT_MIN: usize = 256;

/// A parent's children, in no order ([`Children::sorted`] for listings).
#[derive(Debug, Clone, Default)]
pub struct Children {
    ids: HashSet<NodeId, RandomState>,
    /// The ids in name order, as the first listing since the last change
    /// sorted them (see [`SORTED_ORDER_KEPT_MIN`]). Readers share the tree,
    /// so the first of them fills it; a change, which owns the set, clears it.
    order: OnceLock<Box<[NodeId]>>,
}

impl Children {
    pub fn new() -> Self {
        Children::default()
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn contains(&self, child: NodeId) -> bool {
        self.ids.contains(&child)
    }

    /// Adds a child; false if it was there already.
    pub fn insert(&mut self, child: NodeId) -> bool {
        let added = self.ids.insert(child);
        if added {
            self.order.take();
        }
        added
    }

    /// Removes a child; false if it was not there.
    pub fn remove(&mut self, child: NodeId) -> bool {
        let removed = self.ids.remove(&child);
        if removed {
            self.order.take();
        }
        removed
    }

    /// The children's ids, in no particular order.
    pub fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.ids.iter().copied()
    }

    /// The children's nodes, in no particular order.
    pub fn nodes<'a>(&'a self, slab: &'a NodeSlab) -> impl Iterator<Item = &'a Node> + 'a {
        self.ids().filter_map(|id| slab.get(id))
    }

    /// Whether a listing would find the name order already sorted out.
    #[cfg(test)]
    fn keeps_order(&self) -> bool {
        self.order.get().is_some()
    }

    /// The children's nodes sorted by name: what listings return.
    pub fn sorted<'a>(&'a self, slab: &'a NodeSlab) -> Sorted<'a> {
        if let Some(order) = self.order.get() {
            // Reads only the slots (in id order, mostly); the nodes and
            // their names are fetched ahead as the listing walks them.
            let nodes = order.iter().filter_map(|&id| slab.get(id)).collect();
            return Sorted { nodes, at: 0 };
        }
        let sorted = sort_by_name(
            self.ids()
                .filter_map(|id| slab.get(id).map(|node| (id, node)))
                .collect(),
        );
        if sorted.len() >= SORTED_ORDER_KEPT_MIN {
            // Another reader may have sorted them meanwhile: same order.
            let _ = self.order.set(sorted.iter().map(|&(id, _)| id).collect());
        }
        Sorted {
            nodes: sorted.into_iter().map(|(_, node)| node).collect(),
            at: 0,
        }
    }
}

/// A parent's children in name order. Each child's node and name are
/// asked for from memory a few children before the listing reaches them:
/// every one is a cache miss, and issued ahead they overlap.
pub struct Sorted<'a> {
    nodes: Vec<&'a Node>,
    at: usize,
}

impl<'a> Iterator for Sorted<'a> {
    type Item = &'a Node;

    fn next(&mut self) -> Option<&'a Node> {
        let node = *self.nodes.get(self.at)?;
        if let Some(&ahead) = self.nodes.get(self.at + 2 * LIST_PREFETCH_AHEAD) {
            prefetch(std::ptr::from_ref(ahead).cast());
        }
        if let Some(&ahead) = self.nodes.get(self.at + LIST_PREFETCH_AHEAD) {
            prefetch(ahead.name().as_ptr());
        }
        self.at += 1;
        Some(node)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.nodes.len() - self.at;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Sorted<'_> {}

/// `children` sorted by name. Sorted by the names' first 16 bytes, held
/// beside each child, and by the whole name only where those tie: a
/// comparison seldom follows two pointers to two names (that made listing
/// 100 000 children take 60 ms, three times ZooKeeper's time).
fn sort_by_name(children: Vec<(NodeId, &Node)>) -> Vec<(NodeId, &Node)> {
    // Each key waits on two misses, the node then its name: asked for a few
    // children ahead, they overlap (listing 100 000 children took a quarter
    // longer than with whole paths held, without this).
    let mut keyed: Vec<(u128, NodeId, &Node)> = Vec::with_capacity(children.len());
    for (i, &(id, node)) in children.iter().enumerate() {
        if let Some(&(_, ahead)) = children.get(i + 2 * LIST_PREFETCH_AHEAD) {
            prefetch(std::ptr::from_ref(ahead).cast());
        }
        if let Some(&(_, ahead)) = children.get(i + LIST_PREFETCH_AHEAD) {
            prefetch(ahead.name().as_ptr());
        }
        keyed.push((name_prefix(node.name().as_bytes()), id, node));
    }
    keyed.sort_unstable_by(|(key_a, _, a), (key_b, _, b)| {
        key_a.cmp(key_b).then_with(|| a.name().cmp(b.name()))
    });
    keyed.into_iter().map(|(_, id, node)| (id, node)).collect()
}

/// The first 16 bytes of `name`, big-endian, zero-padded: ordered as the
/// names are, up to ties (a name holds no NUL, so padding sorts first).
fn name_prefix(name: &[u8]) -> u128 {
    let mut bytes = [0u8; 16];
    let len = name.len().min(16);
    bytes[..len].copy_from_slice(&name[..len]);
    u128::from_be_bytes(bytes)
}

impl FromIterator<NodeId> for Children {
    fn from_iter<I: IntoIterator<Item = NodeId>>(iter: I) -> Self {
        Children {
            ids: iter.into_iter().collect(),
            order: OnceLock::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::node::NO_PARENT;
    use crate::tree::{NodeKind, NodeMap};

    /// A map holding the root and `/queue/<name>` for each name, and the
    /// queue's children.
    fn queue(names: &[String]) -> (NodeMap, Children) {
        let node = |name: &str| Node::new(name, &[], NodeKind::Persistent, 0, 1, 0);
        let mut map = NodeMap::new();
        let root = map.insert("/", NO_PARENT, node(""));
        let parent = map.insert("/queue", root, node("queue"));
        let mut children = Children::new();
        for name in names {
            if map.id(&format!("/queue/{name}")).is_none() {
                let id = map.insert(&format!("/queue/{name}"), parent, node(name));
                assert!(children.insert(id));
            }
        }
        (map, children)
    }

    fn names<'a>(children: &'a Children, map: &'a NodeMap) -> Vec<&'a str> {
        children.sorted(map.slab()).map(Node::name).collect()
    }

    // Proves the set holds each child once and forgets removed ones.
    #[test]
    fn holds_each_child_once() {
        let (map, mut children) = queue(&["b".into(), "a".into(), "c-0000000001".into()]);
        assert_eq!(names(&children, &map), ["a", "b", "c-0000000001"]);
        let a = map.id("/queue/a").expect("exists");
        assert!(!children.insert(a), "one entry per child");
        assert!(children.contains(a) && children.len() == 3);
        assert!(children.remove(a) && !children.remove(a));
        assert_eq!(names(&children, &map), ["b", "c-0000000001"]);
        let rebuilt: Children = children.ids().collect();
        assert_eq!(names(&rebuilt, &map), ["b", "c-0000000001"]);
    }

    // Proves a big parent keeps the order its listing sorted out, and that
    // adding or removing a child drops it, so the next listing is sorted
    // again and shows the change; a small parent keeps nothing.
    #[test]
    fn a_big_parent_keeps_its_order_until_a_child_changes() {
        let mut expected: Vec<String> = (0..SORTED_ORDER_KEPT_MIN)
            .map(|i| format!("member-{:05}", (i * 7919) % 100_000))
            .collect();
        let (mut map, mut children) = queue(&expected);
        expected.sort();
        assert!(!children.keeps_order());
        assert_eq!(names(&children, &map), expected);
        assert!(children.keeps_order(), "the first listing keeps the order");
        assert_eq!(
            names(&children, &map),
            expected,
            "and the kept order is the same"
        );

        let parent = map.id("/queue").expect("exists");
        let node = |name: &str| Node::new(name, &[], NodeKind::Persistent, 0, 1, 0);
        let added = map.insert("/queue/member-00000-new", parent, node("member-00000-new"));
        assert!(children.insert(added));
        assert!(!children.keeps_order(), "a new child drops the order");
        expected.push("member-00000-new".into());
        expected.sort();
        assert_eq!(names(&children, &map), expected);

        let gone = map.id(&format!("/queue/{}", expected[5])).expect("exists");
        assert!(children.remove(gone));
        assert!(!children.keeps_order(), "a removed child drops the order");
        expected.remove(5);
        assert_eq!(names(&children, &map), expected);
        assert!(children.keeps_order());
        assert!(!children.insert(added), "no change, order kept");
        assert!(children.keeps_order());

        let (small_map, small) = queue(&expected[..SORTED_ORDER_KEPT_MIN - 2]);
        assert_eq!(
            names(&small, &small_map),
            expected[..SORTED_ORDER_KEPT_MIN - 2]
        );
        assert!(!small.keeps_order(), "a small parent sorts every time");
    }

    // Proves the listing is in name order where names share long prefixes,
    // differ only past their 16th byte, are prefixes of each other, or are
    // not ASCII: the order of sorting the names themselves.
    #[test]
    fn listings_sort_as_the_names_do() {
        let mut expected: Vec<String> = vec![
            "a".into(),
            "ab".into(),
            "abcdefghijklmnop".into(),
            "abcdefghijklmnop0".into(),
            "abcdefghijklmnopq1".into(),
            "abcdefghijklmnopq0".into(),
            "é".into(),
            "z".into(),
        ];
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..2000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            expected.push(format!("lock-{:010}", seed % 5000));
            expected.push(format!("_c_{:x}-lock-{:010}", seed % 7, seed % 977));
        }
        let (map, children) = queue(&expected);
        expected.sort();
        expected.dedup();
        assert_eq!(names(&children, &map), expected);
    }
}
