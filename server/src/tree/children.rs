//! A node's children, as the ids of their nodes.
//!
//! Four bytes a child: the name is in the child's node. The set is a hash
//! set, as ZooKeeper's: adding the millionth child of a queue or a bulk
//! load costs one hash and one probe, where an ordered set paid ~20 name
//! comparisons, each a cache miss (a quarter of a log replay). Listings
//! sort on the way out ([`Children::sorted`]). Only parents have a set: the
//! tree keeps them beside the nodes, not in them (see `DataTree`).

use std::collections::HashSet;

use foldhash::fast::RandomState;

use super::node::{Node, NodeId};
use super::node_map::{prefetch, NodeSlab};

/// Children a listing looks ahead for names (twice as far for nodes).
const LIST_PREFETCH_AHEAD: usize = 8;

/// A parent's children, in no order ([`Children::sorted`] for listings).
#[derive(Debug, Clone, Default)]
pub struct Children(HashSet<NodeId, RandomState>);

impl Children {
    pub fn new() -> Self {
        Children::default()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, child: NodeId) -> bool {
        self.0.contains(&child)
    }

    /// Adds a child; false if it was there already.
    pub fn insert(&mut self, child: NodeId) -> bool {
        self.0.insert(child)
    }

    /// Removes a child; false if it was not there.
    pub fn remove(&mut self, child: NodeId) -> bool {
        self.0.remove(&child)
    }

    /// The children's ids, in no particular order.
    pub fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.0.iter().copied()
    }

    /// The children's nodes, in no particular order.
    pub fn nodes<'a>(&'a self, slab: &'a NodeSlab) -> impl Iterator<Item = &'a Node> + 'a {
        self.ids().filter_map(|id| slab.get(id))
    }

    /// The children's nodes sorted by name: what listings return.
    pub fn sorted<'a>(&'a self, slab: &'a NodeSlab) -> Vec<&'a Node> {
        // Sorted by the names' first 16 bytes, held beside each child, and
        // by the whole name only where those tie: a comparison seldom
        // follows two pointers to two names (that made listing 100 000
        // children take 60 ms, three times ZooKeeper's time).
        let nodes: Vec<&Node> = self.nodes(slab).collect();
        // Each key waits on two misses, the node then its name: asked for
        // a few children ahead, they overlap (listing 100 000 children
        // took a quarter longer than with whole paths held, without this).
        let mut keyed: Vec<(u128, &Node)> = Vec::with_capacity(nodes.len());
        for (i, &node) in nodes.iter().enumerate() {
            if let Some(&ahead) = nodes.get(i + 2 * LIST_PREFETCH_AHEAD) {
                prefetch(std::ptr::from_ref(ahead).cast());
            }
            if let Some(&ahead) = nodes.get(i + LIST_PREFETCH_AHEAD) {
                prefetch(ahead.name().as_ptr());
            }
            keyed.push((name_prefix(node.name().as_bytes()), node));
        }
        keyed.sort_unstable_by(|(key_a, a), (key_b, b)| {
            key_a.cmp(key_b).then_with(|| a.name().cmp(b.name()))
        });
        keyed.into_iter().map(|(_, node)| node).collect()
    }
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
        Children(iter.into_iter().collect())
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
        children
            .sorted(map.slab())
            .into_iter()
            .map(Node::name)
            .collect()
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
