//! The lazily loaded tree model.
//!
//! Only what the user opened is held: the root, and the children of every
//! expanded node (each with the stat its parent's listing returned). A node
//! that was never expanded has no entry for its children, so nothing below
//! it was ever fetched; collapsing a node forgets its subtree again, so memory
//! (and the watches kept for it) scales with what is on screen, not with the
//! size of the tree.
//!
//! The model knows nothing about the server or the terminal: the app feeds it
//! listings and asks it for the rows to draw.

use std::collections::HashMap;

use arbor_client::{ChildEntry, Stat};

use crate::commands::child_path;

/// Most children of one node held and shown; the rest are summarised by one
/// "… N more" row, so a node with a huge number of children cannot flood the
/// screen or the memory of the browser.
pub const CHILDREN_SHOWN_MAX: usize = 1000;

/// The root's path.
pub const ROOT: &str = "/";

/// One node the browser knows about.
#[derive(Debug, Clone, Default)]
pub struct Node {
    /// The stat from the parent's listing (or the node's own load); `None`
    /// until one arrived (only the root starts without).
    pub stat: Option<Stat>,
    /// The names of the children shown, sorted; `None` while not loaded.
    pub children: Option<Vec<String>>,
    /// Children beyond [`CHILDREN_SHOWN_MAX`], not held.
    pub hidden: usize,
    pub expanded: bool,
    /// A load of the children is in flight.
    pub loading: bool,
}

/// What a row of the tree panel shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowKind {
    /// A node, by path.
    Node(String),
    /// Children of `parent` not shown because of [`CHILDREN_SHOWN_MAX`].
    More { parent: String, hidden: usize },
    /// The children of `parent` are being loaded.
    Loading { parent: String },
}

/// One visible line of the tree panel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub depth: usize,
    pub kind: RowKind,
}

impl Row {
    /// The node path of this row, if it is a node.
    pub fn path(&self) -> Option<&str> {
        match &self.kind {
            RowKind::Node(path) => Some(path),
            _ => None,
        }
    }
}

/// The known part of the tree, keyed by path.
#[derive(Debug, Clone)]
pub struct Tree {
    nodes: HashMap<String, Node>,
}

impl Default for Tree {
    fn default() -> Self {
        Self::new()
    }
}

impl Tree {
    /// A tree that knows only the root, not yet loaded.
    pub fn new() -> Tree {
        let mut nodes = HashMap::new();
        nodes.insert(ROOT.to_owned(), Node::default());
        Tree { nodes }
    }

    pub fn get(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path)
    }

    /// Every path the model holds.
    #[cfg(test)]
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.nodes.keys().map(String::as_str)
    }

    /// Paths of the expanded nodes (each holds a persistent watch).
    pub fn expanded(&self) -> Vec<String> {
        let mut paths: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, node)| node.expanded)
            .map(|(path, _)| path.clone())
            .collect();
        paths.sort();
        paths
    }

    /// Marks `path` expanded and loading; false if it is unknown or already
    /// expanded (nothing to request then).
    pub fn expand(&mut self, path: &str) -> bool {
        match self.nodes.get_mut(path) {
            Some(node) if !node.expanded => {
                node.expanded = true;
                node.loading = true;
                true
            }
            _ => false,
        }
    }

    /// Collapses `path` and forgets everything below it. Returns the paths
    /// that were expanded (`path` included), whose watches must go.
    pub fn collapse(&mut self, path: &str) -> Vec<String> {
        let Some(node) = self.nodes.get_mut(path) else {
            return Vec::new();
        };
        if !node.expanded {
            return Vec::new();
        }
        node.expanded = false;
        node.loading = false;
        node.hidden = 0;
        let children = node.children.take().unwrap_or_default();
        let mut unwatched = vec![path.to_owned()];
        for name in children {
            self.forget(&child_path(path, &name), &mut unwatched);
        }
        unwatched
    }

    /// Marks a reload of `path`'s children in flight; false if one already
    /// is (or the node is not expanded), so reloads coalesce.
    pub fn start_reload(&mut self, path: &str) -> bool {
        match self.nodes.get_mut(path) {
            Some(node) if node.expanded && !node.loading => {
                node.loading = true;
                true
            }
            _ => false,
        }
    }

    /// The load of `path`'s children ended without a listing.
    pub fn load_failed(&mut self, path: &str) {
        if let Some(node) = self.nodes.get_mut(path) {
            node.loading = false;
        }
    }

    /// Applies a fresh listing of `path`'s children. Children that are gone
    /// are forgotten with their subtrees; returns the expanded paths among
    /// them, whose watches must go. A listing for a node collapsed meanwhile
    /// is dropped.
    pub fn set_children(
        &mut self,
        path: &str,
        mut entries: Vec<ChildEntry>,
        stat: Stat,
    ) -> Vec<String> {
        let Some(node) = self.nodes.get_mut(path) else {
            return Vec::new();
        };
        node.loading = false;
        node.stat = Some(stat);
        if !node.expanded {
            return Vec::new();
        }
        entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        let hidden = entries.len().saturating_sub(CHILDREN_SHOWN_MAX);
        entries.truncate(CHILDREN_SHOWN_MAX);
        let names: Vec<String> = entries.iter().map(|entry| entry.name.clone()).collect();
        let old = node.children.replace(names.clone()).unwrap_or_default();
        node.hidden = hidden;

        let mut unwatched = Vec::new();
        for name in old {
            if names.binary_search(&name).is_err() {
                self.forget(&child_path(path, &name), &mut unwatched);
            }
        }
        for entry in entries {
            let child = self.nodes.entry(child_path(path, &entry.name)).or_default();
            child.stat = Some(entry.stat);
        }
        unwatched
    }

    /// Updates the stat of a known node (its own data load is fresher than
    /// the parent's listing).
    pub fn set_stat(&mut self, path: &str, stat: Stat) {
        if let Some(node) = self.nodes.get_mut(path) {
            node.stat = Some(stat);
        }
    }

    /// Removes `path` and its subtree, collecting the expanded paths.
    fn forget(&mut self, path: &str, unwatched: &mut Vec<String>) {
        // Iterative: the depth of a subtree is the user's doing, not ours.
        let mut stack = vec![path.to_owned()];
        while let Some(path) = stack.pop() {
            if let Some(node) = self.nodes.remove(&path) {
                if node.expanded {
                    unwatched.push(path.clone());
                }
                for name in node.children.unwrap_or_default() {
                    stack.push(child_path(&path, &name));
                }
            }
        }
    }

    /// The visible rows, depth first, children in name order.
    pub fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        // A stack of (depth, row): a node's "more"/"loading" row is pushed
        // before its children, so it pops after them.
        let mut stack: Vec<(usize, RowKind)> = vec![(0, RowKind::Node(ROOT.to_owned()))];
        while let Some((depth, kind)) = stack.pop() {
            let RowKind::Node(path) = &kind else {
                rows.push(Row { depth, kind });
                continue;
            };
            let Some(node) = self.nodes.get(path) else {
                continue;
            };
            let path = path.clone();
            rows.push(Row { depth, kind });
            if !node.expanded {
                continue;
            }
            match &node.children {
                None => stack.push((
                    depth + 1,
                    RowKind::Loading {
                        parent: path.clone(),
                    },
                )),
                Some(children) => {
                    if node.hidden > 0 {
                        stack.push((
                            depth + 1,
                            RowKind::More {
                                parent: path.clone(),
                                hidden: node.hidden,
                            },
                        ));
                    }
                    for name in children.iter().rev() {
                        stack.push((depth + 1, RowKind::Node(child_path(&path, name))));
                    }
                }
            }
        }
        rows
    }
}

/// The last segment of a path (the root is `/`).
pub fn name_of(path: &str) -> &str {
    if path == ROOT {
        return ROOT;
    }
    path.rsplit('/').next().unwrap_or(path)
}

/// The parent of a path; `None` for the root.
pub fn parent_of(path: &str) -> Option<&str> {
    if path == ROOT {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some(ROOT),
        Some(at) => Some(&path[..at]),
        None => None,
    }
}
