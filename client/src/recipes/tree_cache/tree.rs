//! The cached tree and the rules that keep it consistent: plain data, no I/O,
//! so every rule is tested on its own.
//!
//! What each piece of information proves (zxids, as the server numbers
//! writes):
//! * A read that found a node proves it existed with that stat at the time
//!   the read was answered. Two stats of one path are ordered by [`age`]:
//!   the creation zxid first (a later incarnation is newer), then the
//!   modification counters, which only grow within one incarnation.
//! * A *grave* `(path, below)` proves that every incarnation of `path`, and
//!   of every node under it, created before `below` is gone: a node cannot
//!   outlive its parent. Graves come from a `NodeDeleted` event (`below` =
//!   its zxid), from a read that found no node (`below` = the client's last
//!   zxid when the read was sent, plus one: the reply reflects at least
//!   that), from a listing that lacks a cached child (`below` = the
//!   listing's lower bound or the parent's `pzxid`, whichever is later, plus
//!   one), and from a read that found a new incarnation (`below` = its
//!   creation zxid).
//!
//! Invariants (each rule keeps them):
//! * An entry's content comes only from a read of that node; events only
//!   ask for reads or dig graves.
//! * An entry is never replaced by an older stat ([`age`]) and never revived
//!   by a read that a grave proves stale.
//! * The cache is a tree: every cached node but the root has its parent
//!   cached. A read of a node whose parent is missing is not applied; the
//!   parent and then the node are read again.
//! * At most `nodes_max` entries.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use arbor_protocol::path;
use bytes::Bytes;

use crate::{ChildEntry, Stat, Zxid};

/// The cached nodes by path; paths sort so that a subtree is one range.
pub(crate) type Nodes = BTreeMap<Arc<str>, CachedNode>;

/// One cached node: its data and stat as the server last reported them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedNode {
    /// The node's data.
    pub data: Bytes,
    /// The node's stat.
    pub stat: Stat,
}

/// A change applied to the cache, in the order applied. Replaying them on
/// the snapshot taken when the stream began gives the cache's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeEvent {
    /// A node entered the cache.
    Added {
        path: Arc<str>,
        data: Bytes,
        stat: Stat,
    },
    /// A cached node's data or stat changed (same incarnation: same `czxid`).
    Updated {
        path: Arc<str>,
        data: Bytes,
        stat: Stat,
    },
    /// A node left the cache; `data` and `stat` are what it last held.
    /// A node deleted and created again is `Removed` then `Added`.
    Removed {
        path: Arc<str>,
        data: Bytes,
        stat: Stat,
    },
}

impl TreeEvent {
    /// The node the change is about.
    pub fn path(&self) -> &str {
        match self {
            TreeEvent::Added { path, .. }
            | TreeEvent::Updated { path, .. }
            | TreeEvent::Removed { path, .. } => path,
        }
    }

    fn of(
        kind: fn(Arc<str>, Bytes, Stat) -> TreeEvent,
        path: &Arc<str>,
        node: &CachedNode,
    ) -> Self {
        kind(path.clone(), node.data.clone(), node.stat)
    }
}

fn added(path: Arc<str>, data: Bytes, stat: Stat) -> TreeEvent {
    TreeEvent::Added { path, data, stat }
}

fn updated(path: Arc<str>, data: Bytes, stat: Stat) -> TreeEvent {
    TreeEvent::Updated { path, data, stat }
}

fn removed(path: Arc<str>, data: Bytes, stat: Stat) -> TreeEvent {
    TreeEvent::Removed { path, data, stat }
}

/// What to read of a node (bits, merged when asked for more than once).
pub(crate) type Want = u8;
/// The node's stat only (`exists`).
pub(crate) const WANT_STAT: Want = 1;
/// The node's data and stat (`get_data`).
pub(crate) const WANT_DATA: Want = 2;
/// The node's children with their stats (`get_children_with_stat`).
pub(crate) const WANT_CHILDREN: Want = 4;

/// What applying one piece of information did and asks for.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    pub(crate) changes: Vec<TreeEvent>,
    pub(crate) follow: Vec<(String, Want)>,
}

impl Effects {
    fn follow(&mut self, path: &str, want: Want) {
        self.follow.push((path.to_owned(), want));
    }
}

/// The cache would grow past its node limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooManyNodes {
    pub(crate) limit: usize,
}

/// Orders two stats of one path: later incarnations are newer, then every
/// counter only grows within an incarnation.
pub(crate) fn age(stat: &Stat) -> (Zxid, Zxid, Zxid, i32, i32, i32) {
    (
        stat.czxid,
        stat.mzxid,
        stat.pzxid,
        stat.version,
        stat.cversion,
        stat.aversion,
    )
}

/// Whether `stat` describes the same data as `known` (same incarnation and
/// same data change), so only the stat needs taking.
fn same_data(known: &Stat, stat: &Stat) -> bool {
    known.czxid == stat.czxid && known.mzxid == stat.mzxid
}

/// The nodes strictly below `path`.
pub(crate) fn below<'a>(
    nodes: &'a Nodes,
    path: &str,
) -> std::collections::btree_map::Range<'a, Arc<str>, CachedNode> {
    if path == "/" {
        return nodes.range::<str, _>((Bound::Excluded("/"), Bound::Unbounded));
    }
    // '0' is the character after '/': "/a/" ..< "/a0" is exactly "/a/…".
    let start = format!("{path}/");
    let end = format!("{path}0");
    nodes.range::<str, _>((
        Bound::Included(start.as_str()),
        Bound::Excluded(end.as_str()),
    ))
}

/// The names of `path`'s cached children, sorted. Skips each child's
/// subtree with one range step, so it costs O(children · log n).
pub(crate) fn children(nodes: &Nodes, path: &str) -> Vec<String> {
    let prefix = if path == "/" {
        "/".to_owned()
    } else {
        format!("{path}/")
    };
    let end = if path == "/" {
        Bound::Unbounded
    } else {
        Bound::Excluded(format!("{path}0"))
    };
    let mut cursor = Bound::Included(prefix.clone());
    let mut names = Vec::new();
    loop {
        let range = (
            cursor.as_ref().map(String::as_str),
            end.as_ref().map(String::as_str),
        );
        let Some((key, _)) = nodes.range::<str, _>(range).next() else {
            return names;
        };
        let rest = &key[prefix.len()..];
        match rest.find('/') {
            // The root itself, when listing "/".
            _ if rest.is_empty() => cursor = Bound::Excluded(key.to_string()),
            None => {
                names.push(rest.to_owned());
                cursor = Bound::Excluded(key.to_string());
            }
            // A grandchild: jump past its child's whole subtree.
            Some(at) => cursor = Bound::Included(format!("{prefix}{}0", &rest[..at])),
        }
    }
}

fn has_children(nodes: &Nodes, path: &str) -> bool {
    below(nodes, path).next().is_some()
}

/// One grave: incarnations created before `below` are gone (see the module
/// docs); kept while a read sent before it was dug may still be applied.
#[derive(Debug, Clone, Copy)]
struct Grave {
    below: Zxid,
    /// The sequence number the next read sent would have had when the grave
    /// was dug (or last deepened).
    dug_at: u64,
}

/// Graves by path, with the order they were dug in for pruning.
#[derive(Debug, Default)]
struct Graves {
    by_path: HashMap<String, Grave>,
    order: VecDeque<(u64, String)>,
}

impl Graves {
    fn dig(&mut self, path: &str, below: Zxid, dug_at: u64) {
        let grave = self
            .by_path
            .entry(path.to_owned())
            .or_insert(Grave { below, dug_at });
        grave.below = grave.below.max(below);
        grave.dug_at = dug_at;
        self.order.push_back((dug_at, path.to_owned()));
    }

    /// Forgets the graves no read still to be applied was sent before: a
    /// read sent after a grave was dug is answered from a state at least as
    /// new as what dug it, so it cannot show what the grave buries.
    fn prune(&mut self, oldest_unapplied_read: Option<u64>) {
        while let Some((dug_at, _)) = self.order.front() {
            if oldest_unapplied_read.is_some_and(|oldest| oldest < *dug_at) {
                return;
            }
            let Some((dug_at, path)) = self.order.pop_front() else {
                return;
            };
            if self.by_path.get(&path).is_some_and(|g| g.dug_at == dug_at) {
                self.by_path.remove(&path);
            }
        }
    }

    fn below(&self, path: &str) -> Zxid {
        self.by_path.get(path).map_or(0, |g| g.below)
    }
}

/// The rules, and the state they need besides the nodes themselves.
#[derive(Debug)]
pub(crate) struct Model {
    root: String,
    nodes_max: usize,
    graves: Graves,
}

impl Model {
    pub(crate) fn new(root: &str, nodes_max: usize) -> Self {
        Model {
            root: root.to_owned(),
            nodes_max,
            graves: Graves::default(),
        }
    }

    /// Whether `path` is the cached root or below it.
    pub(crate) fn in_subtree(&self, path: &str) -> bool {
        in_subtree(&self.root, path)
    }

    /// How many graves are kept now.
    pub(crate) fn graves(&self) -> usize {
        self.graves.by_path.len()
    }

    /// See [`Graves::prune`].
    pub(crate) fn prune(&mut self, oldest_unapplied_read: Option<u64>) {
        self.graves.prune(oldest_unapplied_read);
    }

    /// The parent whose stat a change of `path`'s existence changes, if it
    /// is cached here.
    pub(crate) fn parent_in_subtree<'a>(&self, path: &'a str) -> Option<&'a str> {
        if path == self.root {
            return None;
        }
        path::parent(path)
    }

    /// Whether a node of `path` created at `czxid` is proven gone.
    fn buried(&self, path: &str, czxid: Zxid) -> bool {
        let mut at = Some(path);
        while let Some(current) = at {
            if self.graves.below(current) > czxid {
                return true;
            }
            if current == self.root {
                return false;
            }
            at = path::parent(current);
        }
        false
    }

    /// `NodeDeleted` at `zxid`.
    pub(crate) fn deleted(
        &mut self,
        nodes: &mut Nodes,
        path: &str,
        zxid: Zxid,
        dug_at: u64,
        out: &mut Effects,
    ) {
        self.bury(nodes, path, zxid, dug_at, out);
    }

    /// The answer to `get_data(path)` sent when the client's last zxid was
    /// `sent_after`: `None` for no node.
    pub(crate) fn data_read(
        &mut self,
        nodes: &mut Nodes,
        path: &str,
        read: Option<(Bytes, Stat)>,
        sent_after: Zxid,
        dug_at: u64,
        out: &mut Effects,
    ) -> Result<(), TooManyNodes> {
        let Some((data, stat)) = read else {
            self.bury(nodes, path, sent_after + 1, dug_at, out);
            return Ok(());
        };
        if self.buried(path, stat.czxid) {
            return Ok(());
        }
        let known = nodes.get(path).map(|node| node.stat);
        if known.is_some_and(|known| age(&known) >= age(&stat)) {
            return Ok(());
        }
        if let Some(parent) = self.parent_in_subtree(path) {
            if !nodes.contains_key(parent) {
                // Its parent's read is still to come (its creation came
                // first) or it is gone: read both again, the parent first.
                out.follow(parent, WANT_DATA);
                out.follow(path, WANT_DATA);
                return Ok(());
            }
        }
        if known.is_some_and(|known| known.czxid != stat.czxid) {
            // A new incarnation: everything older at and under it is gone.
            self.bury(nodes, path, stat.czxid, dug_at, out);
        }
        let path: Arc<str> = match nodes.get_key_value(path) {
            Some((key, _)) => key.clone(),
            None if nodes.len() >= self.nodes_max => {
                return Err(TooManyNodes {
                    limit: self.nodes_max,
                })
            }
            None => Arc::from(path),
        };
        let node = CachedNode { data, stat };
        let kind = if nodes.contains_key(&path) {
            updated
        } else {
            added
        };
        out.changes.push(TreeEvent::of(kind, &path, &node));
        nodes.insert(path, node);
        Ok(())
    }

    /// The answer to `exists(path)`: takes the stat if the data it describes
    /// is the cached one, else asks for the data.
    pub(crate) fn stat_read(
        &mut self,
        nodes: &mut Nodes,
        path: &str,
        read: Option<Stat>,
        sent_after: Zxid,
        dug_at: u64,
        out: &mut Effects,
    ) {
        let Some(stat) = read else {
            self.bury(nodes, path, sent_after + 1, dug_at, out);
            return;
        };
        if !self.buried(path, stat.czxid) {
            self.take_stat(nodes, path, &stat, WANT_DATA, out);
        }
    }

    /// The answer to `get_children_with_stat(path)`: takes the node's and
    /// its children's stats where their data is the cached one, buries the
    /// cached children it lacks, and asks for the rest.
    pub(crate) fn children_read(
        &mut self,
        nodes: &mut Nodes,
        path: &str,
        read: Option<(Vec<ChildEntry>, Stat)>,
        sent_after: Zxid,
        dug_at: u64,
        out: &mut Effects,
    ) {
        let Some((listed, stat)) = read else {
            self.bury(nodes, path, sent_after + 1, dug_at, out);
            return;
        };
        if self.buried(path, stat.czxid) {
            return;
        }
        match nodes.get(path) {
            Some(known) if known.stat.czxid == stat.czxid => {}
            // Another incarnation (or none yet): the node first, then this.
            _ => {
                let newer = nodes.get(path).is_none_or(|k| age(&k.stat) < age(&stat));
                if newer {
                    out.follow(path, WANT_DATA | WANT_CHILDREN);
                }
                return;
            }
        }
        self.take_stat(nodes, path, &stat, WANT_DATA, out);
        // Absent at the listing, which reflects at least `sent_after` and
        // the parent's last child change.
        let gone_below = sent_after.max(stat.pzxid) + 1;
        let names: HashSet<&str> = listed.iter().map(|c| c.name.as_str()).collect();
        for name in children(nodes, path) {
            if !names.contains(name.as_str()) {
                let child = path::join(path, &name);
                self.bury(nodes, &child, gone_below, dug_at, out);
            }
        }
        for entry in &listed {
            let child = path::join(path, &entry.name);
            if self.buried(&child, entry.stat.czxid) {
                continue;
            }
            let mut want = 0;
            if !self.take_stat(nodes, &child, &entry.stat, 0, out) {
                want |= WANT_DATA;
            }
            if entry.stat.num_children > 0 || has_children(nodes, &child) {
                want |= WANT_CHILDREN;
            }
            if want != 0 {
                out.follow(&child, want);
            }
        }
    }

    /// Takes `stat` for a cached node whose data it describes (if newer);
    /// otherwise asks for `want_else` unless the cache is newer. Returns
    /// whether the cached data is current as far as `stat` tells.
    fn take_stat(
        &mut self,
        nodes: &mut Nodes,
        path: &str,
        stat: &Stat,
        want_else: Want,
        out: &mut Effects,
    ) -> bool {
        let Some((key, node)) = nodes.get_key_value(path) else {
            if want_else != 0 {
                out.follow(path, want_else);
            }
            return false;
        };
        if age(&node.stat) >= age(stat) {
            return true;
        }
        if !same_data(&node.stat, stat) {
            if want_else != 0 {
                out.follow(path, want_else);
            }
            return false;
        }
        let key = key.clone();
        let node = CachedNode {
            data: node.data.clone(),
            stat: *stat,
        };
        out.changes.push(TreeEvent::of(updated, &key, &node));
        nodes.insert(key, node);
        true
    }

    /// Digs a grave at `path` and removes what it buries, and the cached
    /// nodes left without a parent (asking to read those again: they may be
    /// alive under a newer parent still to be read).
    fn bury(
        &mut self,
        nodes: &mut Nodes,
        path: &str,
        below_zxid: Zxid,
        dug_at: u64,
        out: &mut Effects,
    ) {
        self.graves.dig(path, below_zxid, dug_at);
        let mut gone: HashSet<Arc<str>> = HashSet::new();
        let mut doomed: Vec<(Arc<str>, bool)> = Vec::new();
        if let Some((key, node)) = nodes.get_key_value(path) {
            if node.stat.czxid < below_zxid {
                gone.insert(key.clone());
                doomed.push((key.clone(), false));
            }
        }
        // Parents sort before their descendants, so each parent is decided
        // before its children are looked at.
        for (key, node) in below(nodes, path) {
            let orphaned = path::parent(key).is_some_and(|p| gone.contains(p));
            if node.stat.czxid < below_zxid || orphaned {
                gone.insert(key.clone());
                doomed.push((key.clone(), node.stat.czxid >= below_zxid));
            }
        }
        for (key, read_again) in doomed {
            if let Some(node) = nodes.remove(&key) {
                out.changes.push(TreeEvent::of(removed, &key, &node));
            }
            if read_again {
                out.follow(&key, WANT_DATA);
            }
        }
    }
}

/// Whether `path` is `root` or below it.
pub(crate) fn in_subtree(root: &str, path: &str) -> bool {
    root == "/"
        || path == root
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(czxid: Zxid, mzxid: Zxid, pzxid: Zxid) -> Stat {
        Stat {
            czxid,
            mzxid,
            pzxid,
            version: (mzxid - czxid) as i32,
            cversion: (pzxid - czxid) as i32,
            ..Stat::default()
        }
    }

    fn data(model: &mut Model, nodes: &mut Nodes, path: &str, s: Stat) -> Effects {
        let mut out = Effects::default();
        model
            .data_read(
                nodes,
                path,
                Some((Bytes::from(path.to_owned()), s)),
                0,
                0,
                &mut out,
            )
            .expect("within the limit");
        out
    }

    fn tree(paths: &[(&str, Stat)]) -> (Model, Nodes) {
        let mut model = Model::new("/r", 100);
        let mut nodes = Nodes::new();
        for (path, s) in paths {
            data(&mut model, &mut nodes, path, *s);
        }
        (model, nodes)
    }

    fn keys(nodes: &Nodes) -> Vec<&str> {
        nodes.keys().map(|k| &**k).collect()
    }

    // Proves children() lists direct children only, sorted, skipping look-alike siblings' subtrees.
    #[test]
    fn children_lists_direct_children_only() {
        let (_, nodes) = tree(&[
            ("/r", stat(1, 1, 1)),
            ("/r/a", stat(2, 2, 2)),
            ("/r/a-x", stat(3, 3, 3)),
            ("/r/a/b", stat(4, 4, 4)),
            ("/r/a/b/c", stat(5, 5, 5)),
            ("/r/b", stat(6, 6, 6)),
        ]);
        assert_eq!(children(&nodes, "/r"), vec!["a", "a-x", "b"]);
        assert_eq!(children(&nodes, "/r/a"), vec!["b"]);
        assert!(children(&nodes, "/r/b").is_empty());
        assert_eq!(below(&nodes, "/r/a").count(), 2);
        let mut root = Nodes::new();
        for path in ["/", "/x", "/x/y", "/z"] {
            root.insert(
                Arc::from(path),
                CachedNode {
                    data: Bytes::new(),
                    stat: Stat::default(),
                },
            );
        }
        assert_eq!(children(&root, "/"), vec!["x", "z"]);
    }

    // Proves an older stat never replaces a newer one, and a newer one does.
    #[test]
    fn older_reads_never_win() {
        let (mut model, mut nodes) = tree(&[("/r", stat(1, 5, 1))]);
        let out = data(&mut model, &mut nodes, "/r", stat(1, 3, 1));
        assert!(out.changes.is_empty());
        assert_eq!(nodes["/r"].stat.mzxid, 5);
        let out = data(&mut model, &mut nodes, "/r", stat(1, 7, 1));
        assert!(matches!(out.changes[..], [TreeEvent::Updated { .. }]));
        assert_eq!(nodes["/r"].stat.mzxid, 7);
    }

    // Proves a delete buries the subtree, and a read sent before it cannot bring a node back.
    #[test]
    fn a_delete_buries_and_stale_reads_stay_buried() {
        let (mut model, mut nodes) = tree(&[
            ("/r", stat(1, 1, 3)),
            ("/r/a", stat(2, 2, 3)),
            ("/r/a/b", stat(3, 3, 3)),
        ]);
        let mut out = Effects::default();
        // Dug when the next read to be sent was number 5.
        model.deleted(&mut nodes, "/r/a/b", 9, 5, &mut out);
        model.deleted(&mut nodes, "/r/a", 10, 5, &mut out);
        assert_eq!(keys(&nodes), vec!["/r"]);
        assert_eq!(out.changes.len(), 2);
        // A stale read of the old incarnation, answered before the delete.
        let stale = data(&mut model, &mut nodes, "/r/a/b", stat(3, 4, 3));
        assert!(stale.changes.is_empty() && stale.follow.is_empty());
        // A new incarnation (created after the delete) is taken.
        let fresh = data(&mut model, &mut nodes, "/r/a", stat(11, 11, 11));
        assert!(matches!(fresh.changes[..], [TreeEvent::Added { .. }]));
        // Graves go once no read sent before them is still to be applied.
        model.prune(Some(4));
        assert_eq!(model.graves(), 2, "read 4 was sent before the deletes");
        model.prune(Some(5));
        assert_eq!(model.graves(), 0);
    }

    // Proves a node whose parent is not cached is not applied: parent, then node, are read again.
    #[test]
    fn orphans_are_read_again_after_their_parent() {
        let (mut model, mut nodes) = tree(&[("/r", stat(1, 1, 1))]);
        let out = data(&mut model, &mut nodes, "/r/a/b", stat(5, 5, 5));
        assert!(out.changes.is_empty());
        assert_eq!(
            out.follow,
            vec![
                ("/r/a".to_owned(), WANT_DATA),
                ("/r/a/b".to_owned(), WANT_DATA)
            ]
        );
    }

    // Proves a new incarnation replaces the old and buries the old one's children.
    #[test]
    fn a_new_incarnation_buries_the_old_subtree() {
        let (mut model, mut nodes) = tree(&[
            ("/r", stat(1, 1, 2)),
            ("/r/a", stat(2, 2, 3)),
            ("/r/a/b", stat(3, 3, 3)),
        ]);
        let out = data(&mut model, &mut nodes, "/r/a", stat(8, 8, 8));
        assert_eq!(keys(&nodes), vec!["/r", "/r/a"]);
        assert_eq!(nodes["/r/a"].stat.czxid, 8);
        let kinds: Vec<_> = out
            .changes
            .iter()
            .map(|c| match c {
                TreeEvent::Added { .. } => "added",
                TreeEvent::Updated { .. } => "updated",
                TreeEvent::Removed { .. } => "removed",
            })
            .collect();
        assert_eq!(kinds, vec!["removed", "removed", "added"]);
        assert!(out.follow.is_empty());
    }

    // Proves a listing takes unchanged children's stats, reads changed ones, lists deeper, and buries the missing.
    #[test]
    fn a_listing_reads_only_what_changed() {
        let (mut model, mut nodes) = tree(&[
            ("/r", stat(1, 1, 4)),
            ("/r/same", stat(2, 2, 2)),
            ("/r/changed", stat(3, 3, 3)),
            ("/r/gone", stat(4, 4, 4)),
            ("/r/late", stat(20, 20, 20)),
        ]);
        let listed = vec![
            ChildEntry {
                name: "same".into(),
                stat: stat(2, 2, 12),
            },
            ChildEntry {
                name: "changed".into(),
                stat: stat(3, 9, 3),
            },
            ChildEntry {
                name: "new".into(),
                stat: Stat {
                    num_children: 1,
                    ..stat(11, 11, 13)
                },
            },
        ];
        let mut out = Effects::default();
        // The listing was sent after zxid 14; /r/late was created after it.
        model.children_read(
            &mut nodes,
            "/r",
            Some((listed, stat(1, 1, 11))),
            14,
            0,
            &mut out,
        );
        assert_eq!(keys(&nodes), vec!["/r", "/r/changed", "/r/late", "/r/same"]);
        assert_eq!(
            nodes["/r/same"].stat.pzxid, 12,
            "the stat was taken without a read"
        );
        assert_eq!(nodes["/r"].stat.pzxid, 11);
        assert_eq!(
            out.follow,
            vec![
                ("/r/changed".to_owned(), WANT_DATA),
                ("/r/new".to_owned(), WANT_DATA | WANT_CHILDREN)
            ]
        );
    }

    // Proves a read that found no node buries what the client had seen before sending it, not later nodes.
    #[test]
    fn no_node_buries_up_to_what_was_seen() {
        let (mut model, mut nodes) = tree(&[
            ("/r", stat(1, 1, 2)),
            ("/r/a", stat(2, 2, 3)),
            ("/r/a/old", stat(3, 3, 3)),
            ("/r/a/new", stat(30, 30, 30)),
        ]);
        let mut out = Effects::default();
        model
            .data_read(&mut nodes, "/r/a", None, 10, 0, &mut out)
            .expect("within the limit");
        assert_eq!(keys(&nodes), vec!["/r"]);
        // /r/a/new may be alive under a newer /r/a: read again.
        assert_eq!(out.follow, vec![("/r/a/new".to_owned(), WANT_DATA)]);
    }

    // Proves the node limit is enforced on insert, not on update.
    #[test]
    fn the_node_limit_holds() {
        let mut model = Model::new("/r", 2);
        let mut nodes = Nodes::new();
        data(&mut model, &mut nodes, "/r", stat(1, 1, 1));
        data(&mut model, &mut nodes, "/r/a", stat(2, 2, 2));
        let mut out = Effects::default();
        let read = Some((Bytes::new(), stat(3, 3, 3)));
        assert_eq!(
            model.data_read(&mut nodes, "/r/b", read, 0, 0, &mut out),
            Err(TooManyNodes { limit: 2 })
        );
        data(&mut model, &mut nodes, "/r/a", stat(2, 4, 2));
        assert_eq!(nodes.len(), 2);
    }

    #[test]
    fn subtree_membership() {
        assert!(in_subtree("/r", "/r") && in_subtree("/r", "/r/x"));
        assert!(!in_subtree("/r", "/rx") && !in_subtree("/r", "/"));
        assert!(in_subtree("/", "/anything"));
    }
}
