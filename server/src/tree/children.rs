//! The names of a node's children, stored without a copy of any name.
//!
//! Each child is kept as its full path: the same `Arc<str>` the node map
//! uses as the child's key, so holding a child costs a reference count, not
//! an allocation per name. It is hashed and found by that full path (the
//! caller always has it), so no operation but a listing looks for the name.
//! The set is a hash set, as ZooKeeper's: adding the millionth child of a
//! queue or a bulk load costs one hash and one probe, where an ordered set
//! paid ~20 name comparisons, each a cache miss (a quarter of a log replay).
//! Listings sort on the way out ([`Children::sorted`]). A leaf (most nodes)
//! holds no set at all: one null pointer instead of an empty set.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use foldhash::fast::RandomState;

/// A child, held, hashed and compared by its full path.
#[derive(Debug, Clone)]
pub struct ChildName(Arc<str>);

impl ChildName {
    /// `path` must be a child path (`/parent/name`); the name is what follows
    /// its last `/`.
    pub fn new(path: Arc<str>) -> Self {
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

/// A node's children, in no order ([`Children::sorted`] for listings).
#[derive(Debug, Clone, Default)]
// Boxed on purpose: 8 bytes in every node instead of a 32-byte empty set,
// and most nodes are leaves.
#[allow(clippy::box_collection)]
pub struct Children(Option<Box<ChildSet>>);

impl Children {
    pub fn new() -> Self {
        Children(None)
    }

    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |set| set.len())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Whether the child at `path` (the full path) is here.
    pub fn contains(&self, path: &str) -> bool {
        self.0.as_ref().is_some_and(|set| set.contains(path))
    }

    /// Adds a child; false if one of that name was there already.
    pub fn insert(&mut self, child: ChildName) -> bool {
        self.0.get_or_insert_with(Default::default).insert(child)
    }

    /// Removes the child at `path` (the full path); false if there was none.
    pub fn remove(&mut self, path: &str) -> bool {
        let Some(set) = self.0.as_mut() else {
            return false;
        };
        let removed = set.remove(path);
        if set.is_empty() {
            self.0 = None;
        }
        removed
    }

    pub fn clear(&mut self) {
        self.0 = None;
    }

    /// The children, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &ChildName> {
        self.0.iter().flat_map(|set| set.iter())
    }

    /// The children sorted by name: what listings return.
    pub fn sorted(&self) -> Vec<&ChildName> {
        let mut children: Vec<&ChildName> = self.iter().collect();
        children.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        children
    }
}

impl FromIterator<ChildName> for Children {
    fn from_iter<I: IntoIterator<Item = ChildName>>(iter: I) -> Self {
        let set: ChildSet = iter.into_iter().collect();
        if set.is_empty() {
            Children(None)
        } else {
            Children(Some(Box::new(set)))
        }
    }
}

impl PartialEq for Children {
    fn eq(&self, other: &Self) -> bool {
        let (mine, theirs) = (self.sorted(), other.sorted());
        mine.len() == theirs.len() && mine.iter().zip(&theirs).all(|(a, b)| a.name() == b.name())
    }
}

impl Eq for Children {}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(path: &str) -> ChildName {
        ChildName::new(Arc::from(path))
    }

    fn names(children: &Children) -> Vec<&str> {
        children.sorted().into_iter().map(ChildName::name).collect()
    }

    // Proves children list sorted by name, are found by path, and an emptied set frees its box.
    #[test]
    fn ordered_by_name_and_found_by_name() {
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
        assert!(children.is_empty() && children.0.is_none());
        let rebuilt: Children = [child("/x/2"), child("/x/1")].into_iter().collect();
        assert_eq!(names(&rebuilt), ["1", "2"]);
        assert_eq!(
            rebuilt,
            [child("/y/1"), child("/y/2")].into_iter().collect()
        );
    }
}
