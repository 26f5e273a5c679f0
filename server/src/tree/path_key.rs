//! A path as the tree holds it: one allocation, shared by the node map and
//! the parent's child set, behind a one-word handle.
//!
//! `Arc<str>` is a two-word handle with a strong and a weak count; a million
//! nodes each hold their path twice (the map's key and the parent's child
//! entry), so the second word of each handle was 16 bytes per node and the
//! weak count 8 more.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use triomphe::ThinArc;

/// A shared, immutable path. Hashes, compares and borrows as `str`, so maps
/// keyed by it are looked up with a `&str`.
#[derive(Clone)]
pub struct PathKey(ThinArc<(), u8>);

impl PathKey {
    pub fn new(path: &str) -> Self {
        PathKey(ThinArc::from_header_and_slice((), path.as_bytes()))
    }

    /// Where the path lives, without reading it (for prefetching).
    pub fn heap_ptr(&self) -> *const u8 {
        self.0.heap_ptr().cast()
    }

    pub fn as_str(&self) -> &str {
        // SAFETY: the bytes were copied from a `&str` in `new` and are never
        // changed, so they are valid UTF-8.
        unsafe { std::str::from_utf8_unchecked(&self.0.slice) }
    }
}

impl Deref for PathKey {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for PathKey {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

/// As `str` hashes, so that `Borrow<str>` lookups find it.
impl Hash for PathKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialEq for PathKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for PathKey {}

impl fmt::Debug for PathKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for PathKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn one_word_found_by_str_and_shared_by_clones() {
        assert_eq!(std::mem::size_of::<PathKey>(), 8);
        let key = PathKey::new("/a/é");
        let copy = key.clone();
        assert_eq!((key.as_str(), &*copy), ("/a/é", "/a/é"));
        assert!(std::ptr::eq(key.as_str(), copy.as_str()), "one allocation");
        let mut map = HashMap::new();
        map.insert(key, 7);
        assert_eq!(map.get("/a/é"), Some(&7));
        assert_eq!(map.get("/a"), None);
        assert_eq!(format!("{copy} {copy:?}"), "/a/é \"/a/é\"");
    }
}
