//! The names of a node's children, stored without a copy of any name.
//!
//! Each child is kept as its full path: the same `Arc<str>` the node map
//! uses as the child's key, so listing a child costs a reference count, not
//! an allocation per name. The set orders them by the last path segment,
//! which is the name. A leaf (most nodes) holds no set at all: one null
//! pointer instead of an empty `BTreeSet`.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::sync::Arc;

/// A child, held by its full path and ordered by its name.
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
        self.name() == other.name()
    }
}

impl Eq for ChildName {}

impl PartialOrd for ChildName {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ChildName {
    fn cmp(&self, other: &Self) -> Ordering {
        self.name().cmp(other.name())
    }
}

/// Lookups by name: consistent with `Ord`, which compares names only.
impl Borrow<str> for ChildName {
    fn borrow(&self) -> &str {
        self.name()
    }
}

/// A node's children, sorted by name (listings and snapshots are
/// deterministic).
#[derive(Debug, Clone, Default)]
// Boxed on purpose: 8 bytes in every node instead of a 24-byte empty set,
// and most nodes are leaves.
#[allow(clippy::box_collection)]
pub struct Children(Option<Box<BTreeSet<ChildName>>>);

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

    pub fn contains(&self, name: &str) -> bool {
        self.0.as_ref().is_some_and(|set| set.contains(name))
    }

    /// Adds a child; false if one of that name was there already.
    pub fn insert(&mut self, child: ChildName) -> bool {
        self.0.get_or_insert_with(Default::default).insert(child)
    }

    /// Removes a child by name; false if there was none.
    pub fn remove(&mut self, name: &str) -> bool {
        let Some(set) = self.0.as_mut() else {
            return false;
        };
        let removed = set.remove(name);
        if set.is_empty() {
            self.0 = None;
        }
        removed
    }

    pub fn clear(&mut self) {
        self.0 = None;
    }

    /// The children, in name order.
    pub fn iter(&self) -> impl Iterator<Item = &ChildName> {
        self.0.iter().flat_map(|set| set.iter())
    }

    /// The names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.iter().map(ChildName::name)
    }
}

impl FromIterator<ChildName> for Children {
    fn from_iter<I: IntoIterator<Item = ChildName>>(iter: I) -> Self {
        let set: BTreeSet<ChildName> = iter.into_iter().collect();
        if set.is_empty() {
            Children(None)
        } else {
            Children(Some(Box::new(set)))
        }
    }
}

impl PartialEq for Children {
    fn eq(&self, other: &Self) -> bool {
        self.names().eq(other.names())
    }
}

impl Eq for Children {}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(path: &str) -> ChildName {
        ChildName::new(Arc::from(path))
    }

    // Proves children sort and are found by name alone, and an emptied set frees its box.
    #[test]
    fn ordered_by_name_and_found_by_name() {
        let mut children = Children::new();
        assert!(children.is_empty());
        assert!(children.insert(child("/p/b")));
        assert!(children.insert(child("/p/a")));
        assert!(children.insert(child("/p/c-0000000001")));
        assert!(!children.insert(child("/p/a")), "one child per name");
        assert_eq!(
            children.names().collect::<Vec<_>>(),
            ["a", "b", "c-0000000001"]
        );
        assert!(children.contains("b") && !children.contains("/p/b"));
        assert_eq!(children.len(), 3);
        assert!(children.remove("a") && !children.remove("a"));
        assert!(children.remove("b") && children.remove("c-0000000001"));
        assert!(children.is_empty() && children.0.is_none());
        let rebuilt: Children = [child("/x/2"), child("/x/1")].into_iter().collect();
        assert_eq!(rebuilt.names().collect::<Vec<_>>(), ["1", "2"]);
        assert_eq!(
            rebuilt,
            [child("/y/1"), child("/y/2")].into_iter().collect()
        );
    }
}
