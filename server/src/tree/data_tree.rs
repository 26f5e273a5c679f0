//! The znodes, their stats, and the indexes the server needs to find
//! ephemerals, containers and TTL nodes without scanning.
//!
//! Every write is checked in full before anything changes: a single op is a
//! one-op transaction, and a multi is checked op by op against an [`Overlay`]
//! that records what the earlier ops of the same multi would do. Only when
//! every op passes are they applied, so a failed write changes nothing.

use std::collections::{BTreeSet, HashMap};

use arbor_protocol::path;
use arbor_protocol::{
    CreateMode, ErrorCode, MultiOp, MultiOpOutcome, OpResult, SessionId, Stat, Zxid, ANY_VERSION,
};

use super::children::{ChildName, Children};
use super::node::{Node, NodeKind};
use super::node_map::{NodeMap, NodeRef};
use super::PathKey;
use crate::txn::Txn;

/// Children one node may have. A constant, not a setting: apply must give the
/// same answer on every replay, whatever the configuration of the day.
pub const CHILDREN_PER_NODE_MAX: u32 = 1 << 20;

/// A frozen copy of the tree's nodes (see [`DataTree::view`]).
#[derive(Debug, Clone)]
pub struct TreeView {
    nodes: NodeMap,
}

impl TreeView {
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Every node, in no particular order; the memory of the next ones is
    /// fetched while this one is used, for passes over the whole tree.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Node)> {
        self.nodes
            .iter_prefetched()
            .map(|(path, node)| (&**path, &**node))
    }
}

/// What a write did to the tree, for the watch manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Created(String),
    Deleted(String),
    DataChanged(String),
    ChildrenChanged(String),
}

/// The tree of znodes. Nodes sit in a copy-on-write [`NodeMap`], so that a
/// snapshot can take a view of the whole tree at once (see [`DataTree::view`]).
/// Children lists sit beside it, owned by the live tree alone: a snapshot
/// does not need them (they are derived from the paths on load), and a node
/// copied because a view shares it stays a small copy, however many
/// children it has. Keeping the list in the node made the first write under
/// a big parent after each snapshot copy the whole list, stalling writes.
#[derive(Debug)]
pub struct DataTree {
    nodes: NodeMap,
    /// The children of every node that has any, by the parent's path.
    children: HashMap<PathKey, Children, foldhash::fast::RandomState>,
    ephemerals: HashMap<SessionId, BTreeSet<String>>,
    containers: BTreeSet<String>,
    ttls: BTreeSet<String>,
}

impl Default for DataTree {
    fn default() -> Self {
        Self::new()
    }
}

/// What the checker needs to know of a node, as it will be after the earlier
/// ops of a multi.
#[derive(Debug, Clone, Copy)]
struct Shadow {
    version: i32,
    ephemeral: bool,
    num_children: u32,
    sequence: u64,
}

/// The tree as the ops checked so far would leave it.
struct Overlay<'a> {
    tree: &'a DataTree,
    changed: HashMap<String, Option<Shadow>, foldhash::fast::RandomState>,
}

impl<'a> Overlay<'a> {
    /// An overlay sized for `ops` ops. Each op records at most two nodes (a
    /// create: the node and its parent), so a multi's map is sized once: one
    /// of 1 000 creates grew it through eleven rehashes. 0: allocated on the
    /// first record, as a single op that fails its check never needs.
    fn new(tree: &'a DataTree, ops: usize) -> Self {
        Self {
            tree,
            changed: HashMap::with_capacity_and_hasher(2 * ops, Default::default()),
        }
    }

    fn get(&self, path: &str) -> Option<Shadow> {
        match self.changed.get(path) {
            Some(shadow) => *shadow,
            None => self.tree.nodes.get(path).map(|node| Shadow {
                version: node.version,
                ephemeral: node.is_ephemeral(),
                num_children: node.num_children,
                sequence: node.sequence,
            }),
        }
    }

    fn set(&mut self, path: &str, shadow: Option<Shadow>) {
        self.changed.insert(path.to_owned(), shadow);
    }
}

fn version_matches(expected: i32, actual: i32) -> bool {
    expected == ANY_VERSION || expected == actual
}

impl DataTree {
    /// A tree holding only the root `/`.
    pub fn new() -> Self {
        let root = Node::new(&[], NodeKind::Persistent, 0, 0, 0);
        let mut nodes = NodeMap::new();
        nodes.insert(PathKey::new("/"), NodeRef::new(root));
        Self {
            nodes,
            children: HashMap::default(),
            ephemerals: HashMap::new(),
            containers: BTreeSet::new(),
            ttls: BTreeSet::new(),
        }
    }

    pub fn node(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path).map(|node| &**node)
    }

    /// The children of the node at `path`; `None` if it has none (or does
    /// not exist).
    pub fn children(&self, path: &str) -> Option<&Children> {
        self.children.get(path)
    }

    fn node_mut(&mut self, path: &str) -> Option<&mut Node> {
        self.nodes.get_mut(path)
    }

    /// A frozen copy of every node as of now, for a snapshot. Costs one
    /// pointer copy per shard; later writes copy the shards and nodes they
    /// change (see [`NodeMap`]).
    pub fn view(&self) -> TreeView {
        TreeView {
            nodes: self.nodes.clone(),
        }
    }

    /// Rebuilds a tree from the nodes of a snapshot (children lists and the
    /// indexes are derived from the paths and kinds). Fails if a node's
    /// parent is missing or a path repeats. See [`TreeBuilder`] to build one
    /// node at a time.
    pub fn from_nodes(nodes: impl IntoIterator<Item = (String, Node)>) -> Result<Self, String> {
        let mut builder = TreeBuilder::new();
        for (path, node) in nodes {
            builder.add(path, node)?;
        }
        builder.finish()
    }

    fn index(&mut self, path: &str, kind: NodeKind, owner: SessionId) {
        match kind {
            NodeKind::Ephemeral => {
                self.ephemerals
                    .entry(owner)
                    .or_default()
                    .insert(path.to_owned());
            }
            NodeKind::Container => {
                self.containers.insert(path.to_owned());
            }
            NodeKind::Ttl { .. } => {
                self.ttls.insert(path.to_owned());
            }
            NodeKind::Persistent => {}
        }
    }

    /// Number of znodes, the root included.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// The ephemerals a session owns, in path order.
    pub fn ephemerals_of(&self, session_id: SessionId) -> impl Iterator<Item = &String> {
        self.ephemerals.get(&session_id).into_iter().flatten()
    }

    /// Runs one txn-level write. `owner_alive` says whether `session_id` may
    /// create ephemerals (it exists and is not closing).
    pub fn write_multi(
        &mut self,
        session_id: SessionId,
        owner_alive: bool,
        ops: &[MultiOp],
        zxid: Zxid,
        time_ms: u64,
        changes: &mut Vec<Change>,
    ) -> Vec<MultiOpOutcome> {
        let mut resolved = Vec::with_capacity(ops.len());
        let mut overlay = Overlay::new(self, ops.len());
        for (index, op) in ops.iter().enumerate() {
            match check_op(&mut overlay, op, owner_alive) {
                Ok(created) => resolved.push(created),
                Err(code) => {
                    return (0..ops.len())
                        .map(|i| match i.cmp(&index) {
                            std::cmp::Ordering::Less => MultiOpOutcome::RolledBack,
                            std::cmp::Ordering::Equal => MultiOpOutcome::Failed(code),
                            std::cmp::Ordering::Greater => MultiOpOutcome::NotRun,
                        })
                        .collect();
                }
            }
        }
        ops.iter()
            .zip(resolved)
            .map(|(op, created)| {
                MultiOpOutcome::Applied(
                    self.apply_checked(op, created, session_id, zxid, time_ms, changes),
                )
            })
            .collect()
    }

    /// Runs a single write op: a one-op multi, with the result unwrapped.
    pub fn write(
        &mut self,
        session_id: SessionId,
        owner_alive: bool,
        op: &MultiOp,
        zxid: Zxid,
        time_ms: u64,
        changes: &mut Vec<Change>,
    ) -> Result<OpResult, ErrorCode> {
        let mut overlay = Overlay::new(self, 0);
        let created = check_op(&mut overlay, op, owner_alive)?;
        Ok(self.apply_checked(op, created, session_id, zxid, time_ms, changes))
    }

    /// Applies an op that passed [`check_op`]; it cannot fail.
    fn apply_checked(
        &mut self,
        op: &MultiOp,
        created: Option<String>,
        session_id: SessionId,
        zxid: Zxid,
        time_ms: u64,
        changes: &mut Vec<Change>,
    ) -> OpResult {
        match op {
            MultiOp::Check { .. } => OpResult::Checked,
            MultiOp::Create { data, mode, .. } => {
                let path = created.expect("check_op resolves the path of every create");
                let owner = if mode.is_ephemeral() { session_id } else { 0 };
                let stat = self.insert(&path, data, *mode, owner, zxid, time_ms, changes);
                OpResult::Created { path, stat }
            }
            MultiOp::Delete { path, .. } => {
                self.remove(path, zxid, changes);
                OpResult::Deleted
            }
            MultiOp::SetData { path, data, .. } => {
                let node = self
                    .node_mut(path)
                    .expect("check_op verified the node exists");
                node.data = data.as_slice().into();
                node.version = node.version.wrapping_add(1);
                node.mzxid = zxid;
                node.mtime_ms = time_ms;
                changes.push(Change::DataChanged(path.clone()));
                OpResult::SetData(node.stat())
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn insert(
        &mut self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
        owner: SessionId,
        zxid: Zxid,
        time_ms: u64,
        changes: &mut Vec<Change>,
    ) -> Stat {
        let parent_path = path::parent(path).expect("created paths have a parent");
        let parent = self
            .node_mut(parent_path)
            .expect("check_op verified the parent exists");
        let key = PathKey::new(path);

        parent.num_children += 1;
        parent.cversion = parent.cversion.wrapping_add(1);
        parent.pzxid = zxid;
        if mode.is_sequential() {
            parent.sequence += 1;
        }
        let kind = NodeKind::of(mode);
        self.index(path, kind, owner);
        let node = Node::new(data, kind, owner, zxid, time_ms);
        let stat = node.stat();
        self.nodes.insert(key.clone(), NodeRef::new(node));
        let child = ChildName::new(key);
        if let Some(siblings) = self.children.get_mut(parent_path) {
            siblings.insert(child);
        } else {
            // A parent's first child: its key (the shared path) is looked
            // up once, not on every create.
            let parent_key = self
                .nodes
                .get_key_value(parent_path)
                .map(|(parent_key, _)| parent_key.clone())
                .expect("check_op verified the parent exists");
            self.children
                .insert(parent_key, [child].into_iter().collect());
        }
        changes.push(Change::Created(path.to_owned()));
        changes.push(Change::ChildrenChanged(parent_path.to_owned()));
        stat
    }

    /// Removes a childless node. Returns false if there was nothing to remove.
    fn remove(&mut self, path: &str, zxid: Zxid, changes: &mut Vec<Change>) -> bool {
        let Some(node) = self.nodes.remove(path) else {
            return false;
        };
        debug_assert!(
            !self.children.contains_key(path),
            "only childless nodes are removed"
        );
        match node.kind() {
            NodeKind::Ephemeral => {
                let owner = node.ephemeral_owner();
                if let Some(set) = self.ephemerals.get_mut(&owner) {
                    set.remove(path);
                    if set.is_empty() {
                        self.ephemerals.remove(&owner);
                    }
                }
            }
            NodeKind::Container => {
                self.containers.remove(path);
            }
            NodeKind::Ttl { .. } => {
                self.ttls.remove(path);
            }
            NodeKind::Persistent => {}
        }
        if let Some(parent_path) = path::parent(path) {
            if let Some(parent) = self.node_mut(parent_path) {
                parent.num_children = parent.num_children.saturating_sub(1);
                parent.cversion = parent.cversion.wrapping_add(1);
                parent.pzxid = zxid;
            }
            if let Some(siblings) = self.children.get_mut(parent_path) {
                siblings.remove(path);
                if siblings.is_empty() {
                    self.children.remove(parent_path);
                }
            }
            changes.push(Change::Deleted(path.to_owned()));
            changes.push(Change::ChildrenChanged(parent_path.to_owned()));
        }
        true
    }

    /// Deletes every ephemeral of a session, in path order. Ephemerals never
    /// have children, so each deletion is a leaf removal.
    pub fn remove_ephemerals(
        &mut self,
        session_id: SessionId,
        zxid: Zxid,
        changes: &mut Vec<Change>,
    ) {
        let Some(paths) = self.ephemerals.remove(&session_id) else {
            return;
        };
        for path in paths {
            self.remove(&path, zxid, changes);
        }
    }

    /// Deletes a container that has had children and has none now.
    pub fn reap_container(
        &mut self,
        path: &str,
        zxid: Zxid,
        changes: &mut Vec<Change>,
    ) -> Result<(), ErrorCode> {
        let node = self.nodes.get(path).ok_or(ErrorCode::NoNode)?;
        if node.kind() != NodeKind::Container {
            return Err(ErrorCode::BadArguments);
        }
        if node.num_children > 0 || node.cversion == 0 {
            return Err(ErrorCode::NotEmpty);
        }
        self.remove(path, zxid, changes);
        Ok(())
    }

    /// Deletes a TTL node that is childless and was not modified for its TTL.
    pub fn reap_ttl(
        &mut self,
        path: &str,
        zxid: Zxid,
        time_ms: u64,
        changes: &mut Vec<Change>,
    ) -> Result<(), ErrorCode> {
        let node = self.nodes.get(path).ok_or(ErrorCode::NoNode)?;
        let NodeKind::Ttl { ttl_ms } = node.kind() else {
            return Err(ErrorCode::BadArguments);
        };
        if node.num_children > 0 {
            return Err(ErrorCode::NotEmpty);
        }
        if !ttl_elapsed(node, ttl_ms, time_ms) {
            return Err(ErrorCode::BadVersion);
        }
        self.remove(path, zxid, changes);
        Ok(())
    }

    /// Txns that would delete the containers and TTL nodes due at `now_ms`,
    /// at most `limit` of them. Apply checks each again, so a node that gained
    /// a child or was modified meanwhile stays.
    pub fn reap_candidates(&self, now_ms: u64, limit: usize) -> Vec<Txn> {
        let containers = self.containers.iter().filter(|path| {
            self.nodes
                .get(path.as_str())
                .is_some_and(|n| n.num_children == 0 && n.cversion > 0)
        });
        let containers = containers.map(|path| Txn::ReapContainer { path: path.clone() });
        let ttls = self.ttls.iter().filter(|path| {
            self.nodes
                .get(path.as_str())
                .is_some_and(|n| match n.kind() {
                    NodeKind::Ttl { ttl_ms } => {
                        n.num_children == 0 && ttl_elapsed(n, ttl_ms, now_ms)
                    }
                    _ => false,
                })
        });
        let ttls = ttls.map(|path| Txn::ReapTtl { path: path.clone() });
        containers.chain(ttls).take(limit).collect()
    }
}

/// Builds a tree from a snapshot's nodes as they are read, without holding
/// them all in a list first: a million nodes go straight into the map.
///
/// Everything a node contributes is taken while it is in the cache, as it is
/// added: its index entry, its place among its parent's children (gathered by
/// the parent's path, since a child may arrive before its parent). `finish`
/// then touches parents only; two more passes over every node (one to index,
/// one to check the child counts) were a fifth of a restart at 3 M znodes.
pub struct TreeBuilder {
    tree: DataTree,
    /// Each parent's children so far, by the parent's path.
    children: HashMap<Box<str>, Vec<ChildName>, foldhash::fast::RandomState>,
    /// The child counts the nodes record, summed: the check that no node
    /// outside `children` claims any.
    recorded_children: u64,
}

impl Default for TreeBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl TreeBuilder {
    pub fn new() -> Self {
        Self {
            tree: DataTree {
                nodes: NodeMap::new(),
                children: HashMap::default(),
                ephemerals: HashMap::new(),
                containers: BTreeSet::new(),
                ttls: BTreeSet::new(),
            },
            children: HashMap::default(),
            recorded_children: 0,
        }
    }

    /// Adds one node, in any order (children lists are completed by
    /// [`TreeBuilder::finish`]).
    pub fn add(&mut self, path: String, node: Node) -> Result<(), String> {
        let path = PathKey::new(&path);
        let (kind, owner) = (node.kind(), node.ephemeral_owner());
        self.recorded_children += u64::from(node.num_children);
        if self
            .tree
            .nodes
            .insert(path.clone(), NodeRef::new(node))
            .is_some()
        {
            return Err(format!("node {path} appears twice"));
        }
        self.tree.index(&path, kind, owner);
        if let Some(parent) = path::parent(&path) {
            let child = ChildName::new(path.clone());
            match self.children.get_mut(parent) {
                Some(siblings) => siblings.push(child),
                None => {
                    self.children.insert(parent.into(), vec![child]);
                }
            }
        }
        Ok(())
    }

    /// Links every parent to its children. Fails if a parent is missing or a
    /// node's recorded child count is wrong.
    pub fn finish(self) -> Result<DataTree, String> {
        let TreeBuilder {
            mut tree,
            children,
            recorded_children,
        } = self;
        if !tree.nodes.contains_key("/") {
            return Err("the root node is missing".into());
        }
        let mut found = 0u64;
        for (parent, names) in children {
            let Some((key, node)) = tree.nodes.get_key_value(&parent) else {
                let orphan = names.first().map_or(&*parent, ChildName::path);
                return Err(format!("node {orphan} has no parent"));
            };
            if node.num_children as usize != names.len() {
                return Err(format!(
                    "node {parent} records {} children but {} were found",
                    node.num_children,
                    names.len(),
                ));
            }
            found += names.len() as u64;
            let key = key.clone();
            // Sized once from the list instead of grown.
            tree.children.insert(key, names.into_iter().collect());
        }
        if found != recorded_children {
            // Some childless node claims children: the one pass that names
            // it runs only on this error.
            let (path, node) = tree
                .nodes
                .iter()
                .find(|(path, node)| node.num_children > 0 && !tree.children.contains_key(&***path))
                .ok_or_else(|| "the recorded child counts do not add up".to_owned())?;
            return Err(format!(
                "node {path} records {} children but 0 were found",
                node.num_children
            ));
        }
        Ok(tree)
    }
}

fn ttl_elapsed(node: &Node, ttl_ms: u64, now_ms: u64) -> bool {
    now_ms.saturating_sub(node.mtime_ms) >= ttl_ms
}

/// Checks one op against the overlay and records its effect there. For a
/// create, returns the path it will create (with any sequence suffix).
fn check_op(
    overlay: &mut Overlay<'_>,
    op: &MultiOp,
    owner_alive: bool,
) -> Result<Option<String>, ErrorCode> {
    match op {
        MultiOp::Check { path, version } => {
            let node = overlay.get(path).ok_or(ErrorCode::NoNode)?;
            if !version_matches(*version, node.version) {
                return Err(ErrorCode::BadVersion);
            }
            Ok(None)
        }
        MultiOp::Create { path, mode, .. } => {
            let parent_path = parent_for_create(path, *mode)?;
            let mut parent = overlay.get(parent_path).ok_or(ErrorCode::NoNode)?;
            if parent.ephemeral {
                return Err(ErrorCode::NoChildrenForEphemerals);
            }
            if mode.is_ephemeral() && !owner_alive {
                return Err(ErrorCode::SessionExpired);
            }
            let created = if mode.is_sequential() {
                let suffix = path::sequence_suffix(parent.sequence);
                parent.sequence += 1;
                format!("{path}{suffix}")
            } else {
                path.clone()
            };
            if overlay.get(&created).is_some() {
                return Err(ErrorCode::NodeExists);
            }
            if parent.num_children >= CHILDREN_PER_NODE_MAX {
                return Err(ErrorCode::LimitExceeded);
            }
            parent.num_children += 1;
            overlay.set(parent_path, Some(parent));
            let shadow = Shadow {
                version: 0,
                ephemeral: mode.is_ephemeral(),
                num_children: 0,
                sequence: 0,
            };
            overlay.set(&created, Some(shadow));
            Ok(Some(created))
        }
        MultiOp::Delete { path, version } => {
            let parent_path = path::parent(path).ok_or(ErrorCode::BadArguments)?;
            let node = overlay.get(path).ok_or(ErrorCode::NoNode)?;
            if !version_matches(*version, node.version) {
                return Err(ErrorCode::BadVersion);
            }
            if node.num_children > 0 {
                return Err(ErrorCode::NotEmpty);
            }
            let mut parent = overlay.get(parent_path).ok_or(ErrorCode::Internal)?;
            parent.num_children = parent.num_children.saturating_sub(1);
            overlay.set(parent_path, Some(parent));
            overlay.set(path, None);
            Ok(None)
        }
        MultiOp::SetData { path, version, .. } => {
            let mut node = overlay.get(path).ok_or(ErrorCode::NoNode)?;
            if !version_matches(*version, node.version) {
                return Err(ErrorCode::BadVersion);
            }
            node.version = node.version.wrapping_add(1);
            overlay.set(path, Some(node));
            Ok(None)
        }
    }
}

/// The parent a create adds to. A sequential prefix may end in `/` (the new
/// name is then only the suffix); `/` itself always exists.
fn parent_for_create(path: &str, mode: CreateMode) -> Result<&str, ErrorCode> {
    if mode.is_sequential() && path.ends_with('/') {
        return Ok(if path.len() == 1 {
            "/"
        } else {
            &path[..path.len() - 1]
        });
    }
    path::parent(path).ok_or(ErrorCode::NodeExists)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_000;

    fn create(
        tree: &mut DataTree,
        path: &str,
        mode: CreateMode,
        zxid: Zxid,
    ) -> Result<String, ErrorCode> {
        let op = MultiOp::Create {
            path: path.into(),
            data: b"x".to_vec(),
            mode,
        };
        match tree.write(7, true, &op, zxid, T, &mut Vec::new())? {
            OpResult::Created { path, .. } => Ok(path),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn create_sets_stat_and_parent_counters() {
        let mut tree = DataTree::new();
        create(&mut tree, "/a", CreateMode::Persistent, 5).expect("created");
        create(&mut tree, "/a/b", CreateMode::Persistent, 6).expect("created");
        let a = tree.node("/a").expect("exists");
        assert_eq!((a.czxid, a.mzxid, a.pzxid), (5, 5, 6));
        assert_eq!(
            (a.cversion, a.num_children, a.stat().data_length),
            (1, 1, 1)
        );
        let b = tree.node("/a/b").expect("exists");
        assert_eq!((b.czxid, b.pzxid, b.ctime_ms), (6, 6, T));
    }

    #[test]
    fn create_errors_match_zookeeper() {
        let mut tree = DataTree::new();
        assert_eq!(
            create(&mut tree, "/a/b", CreateMode::Persistent, 1),
            Err(ErrorCode::NoNode)
        );
        create(&mut tree, "/e", CreateMode::Ephemeral, 2).expect("created");
        assert_eq!(
            create(&mut tree, "/e/x", CreateMode::Persistent, 3),
            Err(ErrorCode::NoChildrenForEphemerals)
        );
        assert_eq!(
            create(&mut tree, "/e", CreateMode::Persistent, 4),
            Err(ErrorCode::NodeExists)
        );
        assert_eq!(
            create(&mut tree, "/", CreateMode::Persistent, 4),
            Err(ErrorCode::NodeExists)
        );
        let op = MultiOp::Create {
            path: "/dead".into(),
            data: vec![],
            mode: CreateMode::Ephemeral,
        };
        assert_eq!(
            tree.write(9, false, &op, 5, T, &mut Vec::new()),
            Err(ErrorCode::SessionExpired)
        );
    }

    #[test]
    fn sequential_suffixes_come_from_the_parent_counter() {
        let mut tree = DataTree::new();
        create(&mut tree, "/q", CreateMode::Persistent, 1).expect("created");
        let a = create(&mut tree, "/q/n-", CreateMode::PersistentSequential, 2).expect("created");
        create(&mut tree, "/q/plain", CreateMode::Persistent, 3).expect("created");
        let b = create(&mut tree, "/q/", CreateMode::EphemeralSequential, 4).expect("created");
        assert_eq!(a, "/q/n-0000000000");
        assert_eq!(b, "/q/0000000001");
    }

    #[test]
    fn delete_checks_version_and_children() {
        let mut tree = DataTree::new();
        create(&mut tree, "/a", CreateMode::Persistent, 1).expect("created");
        create(&mut tree, "/a/b", CreateMode::Persistent, 2).expect("created");
        let del = |path: &str, version| MultiOp::Delete {
            path: path.into(),
            version,
        };
        let mut ch = Vec::new();
        assert_eq!(
            tree.write(7, true, &del("/a", -1), 3, T, &mut ch),
            Err(ErrorCode::NotEmpty)
        );
        assert_eq!(
            tree.write(7, true, &del("/a/b", 4), 3, T, &mut ch),
            Err(ErrorCode::BadVersion)
        );
        assert_eq!(
            tree.write(7, true, &del("/nope", -1), 3, T, &mut ch),
            Err(ErrorCode::NoNode)
        );
        assert!(ch.is_empty(), "failed writes change nothing");
        tree.write(7, true, &del("/a/b", 0), 3, T, &mut ch)
            .expect("deleted");
        assert_eq!(
            ch,
            vec![
                Change::Deleted("/a/b".into()),
                Change::ChildrenChanged("/a".into())
            ]
        );
        let a = tree.node("/a").expect("exists");
        assert_eq!((a.num_children, a.cversion, a.pzxid), (0, 2, 3));
    }

    #[test]
    fn multi_is_all_or_nothing() {
        let mut tree = DataTree::new();
        create(&mut tree, "/a", CreateMode::Persistent, 1).expect("created");
        let ops = vec![
            MultiOp::Create {
                path: "/b".into(),
                data: vec![],
                mode: CreateMode::Persistent,
            },
            MultiOp::SetData {
                path: "/a".into(),
                data: b"new".to_vec(),
                version: 0,
            },
            MultiOp::Check {
                path: "/a".into(),
                version: 0,
            },
            MultiOp::Delete {
                path: "/a".into(),
                version: -1,
            },
        ];
        let mut changes = Vec::new();
        let outcomes = tree.write_multi(7, true, &ops, 2, T, &mut changes);
        assert_eq!(
            outcomes,
            vec![
                MultiOpOutcome::RolledBack,
                MultiOpOutcome::RolledBack,
                MultiOpOutcome::Failed(ErrorCode::BadVersion),
                MultiOpOutcome::NotRun,
            ]
        );
        assert!(changes.is_empty());
        assert!(tree.node("/b").is_none());
        assert_eq!(tree.node("/a").expect("exists").data[..], b"x"[..]);
    }

    #[test]
    fn multi_ops_see_earlier_ops() {
        let mut tree = DataTree::new();
        let ops = vec![
            MultiOp::Create {
                path: "/p".into(),
                data: vec![],
                mode: CreateMode::Persistent,
            },
            MultiOp::Create {
                path: "/p/c".into(),
                data: vec![],
                mode: CreateMode::Persistent,
            },
            MultiOp::SetData {
                path: "/p/c".into(),
                data: b"1".to_vec(),
                version: 0,
            },
            MultiOp::Check {
                path: "/p/c".into(),
                version: 1,
            },
            MultiOp::Delete {
                path: "/p/c".into(),
                version: 1,
            },
        ];
        let outcomes = tree.write_multi(7, true, &ops, 2, T, &mut Vec::new());
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, MultiOpOutcome::Applied(_))),
            "{outcomes:?}"
        );
        assert!(tree.node("/p/c").is_none());
        assert_eq!(tree.node("/p").expect("exists").cversion, 2);
    }

    #[test]
    fn ephemerals_go_with_their_session() {
        let mut tree = DataTree::new();
        create(&mut tree, "/e1", CreateMode::Ephemeral, 1).expect("created");
        create(&mut tree, "/e2", CreateMode::EphemeralSequential, 2).expect("created");
        assert_eq!(tree.ephemerals_of(7).count(), 2);
        let mut changes = Vec::new();
        tree.remove_ephemerals(7, 3, &mut changes);
        assert_eq!(tree.len(), 1);
        assert!(changes.contains(&Change::Deleted("/e1".into())));
    }

    #[test]
    fn containers_and_ttl_nodes_are_reaped_only_when_due() {
        let mut tree = DataTree::new();
        create(&mut tree, "/c", CreateMode::Container, 1).expect("created");
        create(
            &mut tree,
            "/t",
            CreateMode::PersistentWithTtl { ttl_ms: 500 },
            2,
        )
        .expect("created");
        assert!(
            tree.reap_candidates(T + 499, 10).is_empty(),
            "fresh container, young ttl"
        );
        create(&mut tree, "/c/x", CreateMode::Persistent, 3).expect("created");
        let del = MultiOp::Delete {
            path: "/c/x".into(),
            version: -1,
        };
        tree.write(7, true, &del, 4, T, &mut Vec::new())
            .expect("deleted");
        let due = tree.reap_candidates(T + 500, 10);
        assert_eq!(
            due,
            vec![
                Txn::ReapContainer { path: "/c".into() },
                Txn::ReapTtl { path: "/t".into() }
            ]
        );
        assert_eq!(
            tree.reap_ttl("/t", 5, T + 10, &mut Vec::new()),
            Err(ErrorCode::BadVersion)
        );
        tree.reap_container("/c", 5, &mut Vec::new())
            .expect("reaped");
        tree.reap_ttl("/t", 6, T + 500, &mut Vec::new())
            .expect("reaped");
        assert_eq!(tree.len(), 1);
    }

    #[test]
    fn a_view_is_frozen_and_rebuilds_the_same_tree() {
        let mut tree = DataTree::new();
        create(&mut tree, "/a", CreateMode::Persistent, 1).expect("created");
        create(&mut tree, "/a/e", CreateMode::Ephemeral, 2).expect("created");
        create(&mut tree, "/c", CreateMode::Container, 3).expect("created");
        let view = tree.view();
        let set = MultiOp::SetData {
            path: "/a".into(),
            data: b"later".to_vec(),
            version: -1,
        };
        tree.write(7, true, &set, 4, T, &mut Vec::new())
            .expect("set");
        let frozen: HashMap<&str, &Node> = view.iter().collect();
        assert_eq!(
            frozen["/a"].data[..],
            b"x"[..],
            "the view does not see later writes"
        );
        let rebuilt = DataTree::from_nodes(view.iter().map(|(p, n)| (p.to_owned(), n.clone())))
            .expect("rebuilds");
        assert_eq!(rebuilt.len(), 4);
        assert!(rebuilt
            .children("/a")
            .is_some_and(|children| children.contains("/a/e")));
        assert_eq!(rebuilt.ephemerals_of(7).count(), 1);
        assert_eq!(rebuilt.containers.len(), 1);
    }

    #[test]
    fn rebuilding_takes_children_before_their_parents() {
        let mut tree = DataTree::new();
        create(&mut tree, "/a", CreateMode::Persistent, 1).expect("created");
        create(&mut tree, "/a/b", CreateMode::Persistent, 2).expect("created");
        create(&mut tree, "/a/b/c", CreateMode::Ephemeral, 3).expect("created");
        let mut nodes: Vec<(String, Node)> = tree
            .view()
            .iter()
            .map(|(p, n)| (p.to_owned(), n.clone()))
            .collect();
        // Deepest first: every child arrives before its parent.
        nodes.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
        let rebuilt = DataTree::from_nodes(nodes).expect("rebuilds");
        assert_eq!(rebuilt.len(), 4);
        assert!(rebuilt.children("/a").is_some_and(|c| c.contains("/a/b")));
        assert!(rebuilt
            .children("/a/b")
            .is_some_and(|c| c.contains("/a/b/c")));
        assert!(rebuilt.children("/a/b/c").is_none());
        assert_eq!(
            rebuilt.ephemerals_of(7).count(),
            1,
            "the owner is session 7"
        );
    }

    #[test]
    fn rebuilding_refuses_orphans_and_wrong_child_counts() {
        let tree = DataTree::new();
        let root = tree.node("/").expect("root").clone();
        let orphan = (String::from("/x/y"), root.clone());
        let err = DataTree::from_nodes([("/".to_owned(), root.clone()), orphan]).unwrap_err();
        assert_eq!(err, "node /x/y has no parent");
        // A childless node that claims children.
        let mut lying = root.clone();
        lying.num_children = 3;
        let err = DataTree::from_nodes([("/".to_owned(), lying)]).unwrap_err();
        assert_eq!(err, "node / records 3 children but 0 were found");
        // A parent whose count is off by one.
        let mut parent = root.clone();
        parent.num_children = 2;
        let child = (String::from("/a"), root.clone());
        let err = DataTree::from_nodes([("/".to_owned(), parent), child]).unwrap_err();
        assert_eq!(err, "node / records 2 children but 1 were found");
        // A leaf claiming children beside a parent whose count is right.
        let mut parent = root.clone();
        parent.num_children = 1;
        let mut leaf = root.clone();
        leaf.num_children = 1;
        let err =
            DataTree::from_nodes([("/".to_owned(), parent), ("/a".to_owned(), leaf)]).unwrap_err();
        assert_eq!(err, "node /a records 1 children but 0 were found");
        let dup = DataTree::from_nodes([
            ("/".to_owned(), root.clone()),
            ("/".to_owned(), root.clone()),
        ])
        .unwrap_err();
        assert_eq!(dup, "node / appears twice");
    }
}
