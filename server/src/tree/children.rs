//! The names of a node's children, stored without a copy of any name.
//!
//! Each child is kept as its full path: the same [`PathKey`] the node map
//! uses as the child's key, so holding a child costs one word and a
//! reference count, not an allocation per name. It is hashed and found by that full path (the
//! caller always has it), so no operation but a listing looks for the name.
//! The set is a hash set, as ZooKeeper's: adding the millionth child of a
//! queue or a bulk load costs one hash and one probe, where an ordered set
//! paid ~20 name comparisons, each a cache miss (a quarter of a log replay).
//! Listings sort on the way out ([`Children::sorted`]). Only parents have
//! a set: the tree keeps them beside the node map, not in the nodes (see
//! `DataTree`).

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use foldhash::fast::RandomState;

use super::PathKey;

/// A child, held, hashed and compared by its full path.
#[derive(Debug, Clone)]
pub struct ChildName(PathKey);

impl ChildName {
    /// `path` must be a child path (`/parent/name`); the name is what follows
    /// its last `/`.
    pub fn new(path: PathKey) -> Self {
        debug_assert!(path.len() > 1 && path.starts_with('/'), "{path}");
        ChildName(path)
    }

    /// The child's full path.
    pub fn path(&self) -> &str {
        &self.0
    }

    pub fn name(&self) -> &str {
        match self.0.rfind('/') {
            Some(slash) => &self.0[slash + 1..],
            None => &self.0,
        }
    }
}

impl PartialEq for ChildName {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for ChildName {}

/// Hashes as `str` does, so lookups can go by the path (`Borrow<str>`).
impl Hash for ChildName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.path().hash(state);
    }
}

/// Lookups by full path: consistent with `Eq` and `Hash`.
impl Borrow<str> for ChildName {
    fn borrow(&self) -> &str {
        self.path()
    }
}

type ChildSet = HashSet<ChildName, RandomState>;

/// A parent's children, in no order ([`Children::sorted`] for listings).
#[derive(Debug, Clone, Default)]
pub struct Children(ChildSet);

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

    /// Whether the child at `path` (the full path) is here.
    pub fn contains(&self, path: &str) -> bool {
        self.0.contains(path)
    }

    /// Adds a child; false if one of that name was there already.
    pub fn insert(&mut self, child: ChildName) -> bool {
        self.0.insert(child)
    }

    /// Removes the child at `path` (the full path); false if there was none.
    pub fn remove(&mut self, path: &str) -> bool {
        self.0.remove(path)
    }

    /// The children, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &ChildName> {
        self.0.iter()
    }

    /// The children sorted by name: what listings return.
    pub fn sorted(&self) -> Vec<&ChildName> {
        // Every child's path is its parent's path, a slash, then its name,
        // so every name starts at the same offset: found once, not searched
        // for in both paths of every comparison.
        let start = self
            .iter()
            .next()
            .map_or(0, |child| child.path().len() - child.name().len());
        fn name(child: &ChildName, start: usize) -> &[u8] {
            &child.path().as_bytes()[start..]
        }
        // Sorted by the names' first 16 bytes, held beside each child, and
        // by the whole name only where those tie: a comparison seldom
        // follows two pointers to two paths (that made listing 100 000
        // children take 60 ms, three times ZooKeeper's time).
        let mut keyed: Vec<(u128, &ChildName)> = self
            .iter()
            .map(|child| {
                debug_assert_eq!(child.path().len() - child.name().len(), start);
                (name_prefix(name(child, start)), child)
            })
            .collect();
        keyed.sort_unstable_by(|(key_a, a), (key_b, b)| {
            key_a
                .cmp(key_b)
                .then_with(|| name(a, start).cmp(name(b, start)))
        });
        keyed.into_iter().map(|(_, child)| child).collect()
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

impl FromIterator<ChildName> for Children {
    fn from_iter<I: IntoIterator<Item = ChildName>>(iter: I) -> Self {
        Children(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(path: &str) -> ChildName {
        ChildName::new(PathKey::new(path))
    }

    fn names(children: &Children) -> Vec<&str> {
        children.sorted().into_iter().map(ChildName::name).collect()
    }

    // Proves children list sorted by name and are found by their full path.
    #[test]
    fn listed_by_name_and_found_by_path() {
        let mut children = Children::new();
        assert!(children.is_empty());
        assert!(children.insert(child("/p/b")));
        assert!(children.insert(child("/p/a")));
        assert!(children.insert(child("/p/c-0000000001")));
        assert!(!children.insert(child("/p/a")), "one child per name");
        assert_eq!(names(&children), ["a", "b", "c-0000000001"]);
        assert!(children.contains("/p/b") && !children.contains("b"));
        assert_eq!(children.len(), 3);
        assert!(children.remove("/p/a") && !children.remove("/p/a"));
        assert!(children.remove("/p/b") && children.remove("/p/c-0000000001"));
        assert!(children.is_empty());
        let rebuilt: Children = [child("/x/2"), child("/x/1")].into_iter().collect();
        assert_eq!(names(&rebuilt), ["1", "2"]);
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
        let children: Children = expected
            .iter()
            .map(|name| child(&format!("/queue/{name}")))
            .collect();
        expected.sort();
        expected.dedup();
        assert_eq!(names(&children), expected);
    }
}
