//! The znodes, their stats, and the indexes the server needs to find
//! ephemerals, containers and TTL nodes without scanning.
//!
//! Every write is checked in full before anything changes: a single op is a
//! one-op transaction, and a multi is checked op by op against an [`Overlay`]
//! that records what the earlier ops of the same multi would do. Only when
//! every op passes are they applied, so a failed write changes nothing.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use arbor_protocol::acl::{Acl, Perms};
use arbor_protocol::path;
use arbor_protocol::{
    CreateMode, ErrorCode, MultiOp, MultiOpOutcome, OpResult, SessionId, Stat, Zxid, ANY_VERSION,
};
use foldhash::fast::RandomState;

use crate::acl::table::{AclId, AclList, TableBuilder, OPEN};
use crate::acl::{self, AclTable, Identity};

use super::children::{Children, Sorted};
use super::node::{Node, NodeId, NodeKind, NO_PARENT};
use super::node_map::{MapBuilder, NodeMap, NodeSlab, NODES_MAX};
use crate::txn::Txn;

/// Children one node may have. A constant, not a setting: apply must give the
/// same answer on every replay, whatever the configuration of the day.
pub const CHILDREN_PER_NODE_MAX: u32 = 1 << 20;

/// Ephemerals one session may own (a constant, as above). Each is deleted
/// by the session's end in one txn: a session with millions would make
/// that one write take seconds, and a client leaking them would fill the
/// tree with nodes nobody deletes until it goes.
pub const EPHEMERALS_PER_SESSION_MAX: usize = 1 << 16;

/// The sequence counters of the nodes that have had sequential children,
/// by node. Few nodes have one, so it is not a field of every node; shared
/// copy-on-write with views, as the nodes are.
type Sequences = Arc<HashMap<NodeId, u64, RandomState>>;

/// The tree's ACL lists, shared copy-on-write with views as the nodes are.
type Acls = Arc<AclTable>;

/// A frozen copy of the tree's nodes (see [`DataTree::view`]).
#[derive(Debug, Clone)]
pub struct TreeView {
    nodes: NodeSlab,
    sequences: Sequences,
    acls: Acls,
    len: usize,
}

/// One node of a [`TreeView`], with what a snapshot records beside it.
#[derive(Debug)]
pub struct ViewEntry<'a> {
    pub path: String,
    pub node: &'a Node,
    /// The next sequence number a sequential child of this node gets.
    pub sequence: u64,
}

impl TreeView {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ACL lists the nodes name, by id.
    pub fn acls(&self) -> &AclTable {
        &self.acls
    }

    /// Every node, in no particular order; the memory of the next ones is
    /// fetched while this one is used, for passes over the whole tree.
    pub fn iter(&self) -> impl Iterator<Item = ViewEntry<'_>> {
        self.nodes.iter().map(|(id, node)| ViewEntry {
            path: self.nodes.path_of(id),
            node,
            sequence: self.sequences.get(&id).copied().unwrap_or(0),
        })
    }
}

/// What a write did to the tree, for the watch manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Created(String),
    /// With the node's ACL if it was not the open one: the node is gone
    /// when its watchers are told, and who may hear of it is what its ACL
    /// said.
    Deleted(String, Option<AclList>),
    DataChanged(String),
    ChildrenChanged(String),
}

/// The children of one node, readable by name and stat.
#[derive(Debug, Clone, Copy)]
pub struct ChildList<'a> {
    children: &'a Children,
    nodes: &'a NodeSlab,
}

impl<'a> ChildList<'a> {
    pub fn len(&self) -> usize {
        self.children.len()
    }

    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    /// The children's nodes, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &'a Node> + 'a {
        self.children.nodes(self.nodes)
    }

    /// The children's nodes sorted by name, as listings return them.
    pub fn sorted(&self) -> Sorted<'a> {
        self.children.sorted(self.nodes)
    }
}

/// The tree of znodes. Nodes sit in a [`NodeMap`] whose slots are shared
/// copy-on-write, so that a snapshot can take a view of the whole tree at
/// once (see [`DataTree::view`]). Children sets sit beside it, owned by the
/// live tree alone: a snapshot does not need them (they are derived on
/// load), and a node copied because a view shares it stays a small copy,
/// however many children it has. Keeping the list in the node made the
/// first write under a big parent after each snapshot copy the whole list,
/// stalling writes.
#[derive(Debug)]
pub struct DataTree {
    nodes: NodeMap,
    /// The children of every node that has any, by the parent's id.
    children: HashMap<NodeId, Children, RandomState>,
    sequences: Sequences,
    acls: Acls,
    ephemerals: HashMap<SessionId, BTreeSet<String>>,
    containers: BTreeSet<String>,
    ttls: BTreeSet<String>,
    /// The data of every node, summed: kept as nodes change, because
    /// counting it for a metric would walk every node under the lock.
    data_bytes: u64,
}

/// Who asks for a write: the session, whether it may still own ephemerals
/// (it exists and is not closing), and what its ACL checks see.
#[derive(Debug, Clone, Copy)]
pub struct Writer<'a> {
    pub session_id: SessionId,
    pub alive: bool,
    pub identity: &'a Identity,
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
    /// The node's id in the tree; `None` for a node an earlier op of the
    /// multi creates. A node an earlier op deletes has no shadow at all, so
    /// an id here still names this path when the op is applied.
    id: Option<NodeId>,
    version: i32,
    ephemeral: bool,
    num_children: u32,
    sequence: u64,
    acl: ShadowAcl,
}

/// A node's ACL in the overlay: one the tree holds, or one a create earlier
/// in the multi gives its node.
#[derive(Debug, Clone, Copy)]
enum ShadowAcl {
    Stored(AclId),
    Pending(usize),
}

/// The tree as the ops checked so far would leave it.
struct Overlay<'a> {
    tree: &'a DataTree,
    /// False for a lone op: no later op reads what it would record, and a
    /// recorded path costs an allocation, a hash and a free on the serial
    /// commit thread, for every plain write.
    records: bool,
    changed: HashMap<String, Option<Shadow>, RandomState>,
    /// The lists of the creates checked so far that give one.
    pending: Vec<Vec<Acl>>,
    /// Ephemerals the creates checked so far add.
    ephemerals: usize,
    /// Nodes the ops checked so far add, less those they delete.
    added: isize,
}

/// What checking an op found that applying it needs.
#[derive(Debug, Default)]
struct Checked {
    /// A create's path, with any sequence suffix.
    created: Option<String>,
    /// A create's ACL; `None` for the open one.
    acl: Option<NewAcl>,
    /// The id of the node a set or delete changes, or a create adds under,
    /// as the check found it: apply uses it instead of looking the path up
    /// again on the serial commit thread. `None` if the node is one an
    /// earlier op of the multi creates.
    node: Option<NodeId>,
}

/// The ACL a create gives its node.
#[derive(Debug)]
enum NewAcl {
    /// A list the tree holds already: counted again, nothing hashed twice.
    Held(AclId),
    /// A list new to the tree.
    New(Vec<Acl>),
}

impl<'a> Overlay<'a> {
    /// An overlay for a multi of `ops` ops. Each op records at most two
    /// nodes (a create: the node and its parent), so the map is sized once:
    /// one of 1 000 creates grew it through eleven rehashes.
    fn for_multi(tree: &'a DataTree, ops: usize) -> Self {
        Self::new(tree, true, 2 * ops)
    }

    /// An overlay for a single op, which records nothing.
    fn for_one_op(tree: &'a DataTree) -> Self {
        Self::new(tree, false, 0)
    }

    fn new(tree: &'a DataTree, records: bool, capacity: usize) -> Self {
        Self {
            tree,
            records,
            changed: HashMap::with_capacity_and_hasher(capacity, Default::default()),
            pending: Vec::new(),
            ephemerals: 0,
            added: 0,
        }
    }

    fn get(&self, path: &str) -> Option<Shadow> {
        match self.changed.get(path) {
            Some(shadow) => *shadow,
            None => {
                let id = self.tree.nodes.id(path)?;
                let node = self.tree.nodes.node(id)?;
                Some(Shadow {
                    id: Some(id),
                    version: node.version,
                    ephemeral: node.is_ephemeral(),
                    num_children: node.num_children,
                    sequence: self.tree.sequence(id),
                    acl: ShadowAcl::Stored(node.acl_id()),
                })
            }
        }
    }

    fn set(&mut self, path: &str, shadow: Option<Shadow>) {
        if self.records {
            self.changed.insert(path.to_owned(), shadow);
        }
    }

    /// Records a new node: a fresh version, no children, and its ACL (a
    /// list new to the tree is kept here until the multi is applied).
    fn set_created(&mut self, path: &str, ephemeral: bool, acl: Option<&NewAcl>) {
        if !self.records {
            return;
        }
        let acl = match acl {
            Some(NewAcl::Held(id)) => ShadowAcl::Stored(*id),
            Some(NewAcl::New(list)) => {
                self.pending.push(list.clone());
                ShadowAcl::Pending(self.pending.len() - 1)
            }
            None => ShadowAcl::Stored(OPEN),
        };
        let shadow = Shadow {
            id: None,
            version: 0,
            ephemeral,
            num_children: 0,
            sequence: 0,
            acl,
        };
        self.set(path, Some(shadow));
    }

    fn acl(&self, shadow: &Shadow) -> &[Acl] {
        match shadow.acl {
            ShadowAcl::Stored(id) => self.tree.acls.get(id),
            ShadowAcl::Pending(index) => &self.pending[index],
        }
    }

    /// `NoAuth` unless `who` may do `wanted` to the node.
    fn allow(&self, shadow: &Shadow, who: &Identity, wanted: Perms) -> Result<(), ErrorCode> {
        // The open list grants everything to everybody: no lookup.
        if matches!(shadow.acl, ShadowAcl::Stored(OPEN)) || who.may(self.acl(shadow), wanted) {
            Ok(())
        } else {
            Err(ErrorCode::NoAuth)
        }
    }
}

fn version_matches(expected: i32, actual: i32) -> bool {
    expected == ANY_VERSION || expected == actual
}

impl DataTree {
    /// A tree holding only the root `/`.
    pub fn new() -> Self {
        let root = Node::new("", &[], NodeKind::Persistent, 0, 0, 0);
        let mut nodes = NodeMap::new();
        nodes.insert("/", NO_PARENT, root);
        Self::with_nodes(nodes)
    }

    fn with_nodes(nodes: NodeMap) -> Self {
        Self {
            nodes,
            children: HashMap::default(),
            sequences: Sequences::default(),
            acls: Acls::default(),
            ephemerals: HashMap::new(),
            containers: BTreeSet::new(),
            ttls: BTreeSet::new(),
            data_bytes: 0,
        }
    }

    pub fn node(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path)
    }

    /// The children of the node at `path`; `None` if it has none (or does
    /// not exist).
    pub fn children(&self, path: &str) -> Option<ChildList<'_>> {
        let children = self.children.get(&self.nodes.id(path)?)?;
        Some(ChildList {
            children,
            nodes: self.nodes.slab(),
        })
    }

    fn sequence(&self, id: NodeId) -> u64 {
        self.sequences.get(&id).copied().unwrap_or(0)
    }

    /// The ACL of a node.
    pub fn acl_of(&self, node: &Node) -> &[Acl] {
        self.acls.get(node.acl_id())
    }

    /// The ACL lists the tree's nodes use.
    pub fn acls(&self) -> &AclTable {
        &self.acls
    }

    /// Whether `who` may do `wanted` to `node` (the open ACL: yes, at once).
    pub fn allows(&self, node: &Node, who: &Identity, wanted: Perms) -> bool {
        node.acl_id() == OPEN || who.may(self.acl_of(node), wanted)
    }

    /// A frozen copy of every node as of now, for a snapshot. Costs one
    /// pointer copy per chunk of nodes; later writes copy the chunks and
    /// nodes they change (see [`NodeMap`]).
    pub fn view(&self) -> TreeView {
        TreeView {
            nodes: self.nodes.slab().clone(),
            sequences: self.sequences.clone(),
            acls: self.acls.clone(),
            len: self.nodes.len(),
        }
    }

    /// Rebuilds a tree from the nodes of a snapshot, with their sequence
    /// counters (children sets and the indexes are derived from the paths
    /// and kinds). Fails if a node's parent is missing or a path repeats.
    /// See [`TreeBuilder`] to build one node at a time.
    pub fn from_nodes(
        nodes: impl IntoIterator<Item = (String, Node, u64)>,
    ) -> Result<Self, String> {
        let mut builder = TreeBuilder::new();
        for (path, node, sequence) in nodes {
            builder.add(path, node, sequence)?;
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

    /// The bytes of data every node holds, together.
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    /// How many ephemeral nodes there are.
    pub fn ephemeral_count(&self) -> usize {
        self.ephemerals.values().map(BTreeSet::len).sum()
    }

    /// Every session that owns ephemerals, with them in path order; the
    /// sessions in no particular order (`dump`).
    pub fn ephemerals_by_session(
        &self,
    ) -> impl ExactSizeIterator<Item = (SessionId, impl Iterator<Item = &String>)> {
        self.ephemerals
            .iter()
            .map(|(&session_id, paths)| (session_id, paths.iter()))
    }

    /// The ephemerals a session owns, in path order.
    pub fn ephemerals_of(&self, session_id: SessionId) -> impl Iterator<Item = &String> {
        self.ephemerals.get(&session_id).into_iter().flatten()
    }

    /// Runs a multi: every op checked (against the earlier ops' effects),
    /// then all applied, or none.
    pub fn write_multi(
        &mut self,
        who: Writer<'_>,
        ops: &[MultiOp],
        zxid: Zxid,
        time_ms: u64,
        changes: &mut Vec<Change>,
    ) -> Vec<MultiOpOutcome> {
        let mut resolved = Vec::with_capacity(ops.len());
        let mut overlay = Overlay::for_multi(self, ops.len());
        for (index, op) in ops.iter().enumerate() {
            match check_op(&mut overlay, op, who) {
                Ok(checked) => resolved.push(checked),
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
            .map(|(op, checked)| {
                MultiOpOutcome::Applied(self.apply_checked(
                    op,
                    checked,
                    who.session_id,
                    zxid,
                    time_ms,
                    changes,
                ))
            })
            .collect()
    }

    /// Runs a single write op: a one-op multi, with the result unwrapped.
    pub fn write(
        &mut self,
        who: Writer<'_>,
        op: &MultiOp,
        zxid: Zxid,
        time_ms: u64,
        changes: &mut Vec<Change>,
    ) -> Result<OpResult, ErrorCode> {
        let mut overlay = Overlay::for_one_op(self);
        let checked = check_op(&mut overlay, op, who)?;
        Ok(self.apply_checked(op, checked, who.session_id, zxid, time_ms, changes))
    }

    /// Replaces a node's ACL (ZooKeeper's order of checks: the list, the
    /// node, ADMIN on it, then its ACL version). The data and `mzxid` stay;
    /// `aversion` counts the change.
    pub fn set_acl(
        &mut self,
        who: &Identity,
        path: &str,
        acl: &[Acl],
        version: i32,
    ) -> Result<Stat, ErrorCode> {
        let resolved = acl::resolve(acl, who)?;
        let id = self.nodes.id(path).ok_or(ErrorCode::NoNode)?;
        let node = self.nodes.node(id).ok_or(ErrorCode::NoNode)?;
        if !self.allows(node, who, Perms::ADMIN) {
            return Err(ErrorCode::NoAuth);
        }
        if !version_matches(version, node.aversion()) {
            return Err(ErrorCode::BadVersion);
        }
        if !self.acls.has_room_for(&resolved) {
            return Err(ErrorCode::LimitExceeded);
        }
        let (old, aversion) = (node.acl_id(), node.aversion().wrapping_add(1));
        let acls = Arc::make_mut(&mut self.acls);
        let new = acls.acquire(&resolved);
        acls.release(old);
        let node = self.nodes.node_mut(id).ok_or(ErrorCode::Internal)?;
        node.set_acl(new, aversion);
        Ok(node.stat())
    }

    /// Applies an op that passed [`check_op`]; it cannot fail.
    fn apply_checked(
        &mut self,
        op: &MultiOp,
        checked: Checked,
        session_id: SessionId,
        zxid: Zxid,
        time_ms: u64,
        changes: &mut Vec<Change>,
    ) -> OpResult {
        match op {
            MultiOp::Check { .. } => OpResult::Checked,
            MultiOp::Create { data, mode, .. } | MultiOp::CreateWithAcl { data, mode, .. } => {
                let path = checked
                    .created
                    .expect("check_op resolves the path of every create");
                let owner = if mode.is_ephemeral() { session_id } else { 0 };
                let acl = match &checked.acl {
                    Some(NewAcl::Held(id)) => {
                        Arc::make_mut(&mut self.acls).add_user(*id);
                        *id
                    }
                    Some(NewAcl::New(list)) => Arc::make_mut(&mut self.acls).acquire(list),
                    None => OPEN,
                };
                let parent_path = path::parent(&path).expect("created paths have a parent");
                let parent_id = self.checked_id(checked.node, parent_path);
                let stat = self.insert(
                    &path, parent_id, data, *mode, owner, acl, zxid, time_ms, changes,
                );
                OpResult::Created { path, stat }
            }
            MultiOp::Delete { path, .. } => {
                let id = self.checked_id(checked.node, path);
                self.remove_node(id, path, zxid, changes);
                OpResult::Deleted
            }
            MultiOp::SetData { path, data, .. } => {
                let id = self.checked_id(checked.node, path);
                let node = self
                    .nodes
                    .node_mut(id)
                    .expect("check_op verified the node exists");
                self.data_bytes =
                    self.data_bytes.saturating_sub(node.data().len() as u64) + data.len() as u64;
                node.set_data(data);
                node.version = node.version.wrapping_add(1);
                node.mzxid = zxid;
                node.mtime_ms = time_ms;
                changes.push(Change::DataChanged(path.clone()));
                OpResult::SetData(node.stat())
            }
        }
    }

    /// The id of the node at `path`, which check_op found: the id it
    /// handed on, or (for a node an earlier op of the multi made) the one
    /// the index holds now.
    fn checked_id(&self, found: Option<NodeId>, path: &str) -> NodeId {
        let id = found.or_else(|| self.nodes.id(path));
        debug_assert!(
            id.is_some_and(|id| self.nodes.is_at(id, path)),
            "check_op verified {path} exists"
        );
        id.expect("check_op verified the node exists")
    }

    #[allow(clippy::too_many_arguments)]
    fn insert(
        &mut self,
        path: &str,
        parent_id: NodeId,
        data: &[u8],
        mode: CreateMode,
        owner: SessionId,
        acl: AclId,
        zxid: Zxid,
        time_ms: u64,
        changes: &mut Vec<Change>,
    ) -> Stat {
        let parent_path = path::parent(path).expect("created paths have a parent");
        let parent = self
            .nodes
            .node_mut(parent_id)
            .expect("check_op verified the parent exists");
        parent.num_children += 1;
        parent.cversion = parent.cversion.wrapping_add(1);
        parent.pzxid = zxid;
        if mode.is_sequential() {
            *Arc::make_mut(&mut self.sequences)
                .entry(parent_id)
                .or_insert(0) += 1;
        }
        let kind = NodeKind::of(mode);
        self.index(path, kind, owner);
        let mut node = Node::new(path::name(path), data, kind, owner, zxid, time_ms);
        node.set_acl(acl, 0);
        let stat = node.stat();
        self.data_bytes += data.len() as u64;
        let id = self.nodes.insert(path, parent_id, node);
        self.children.entry(parent_id).or_default().insert(id);
        changes.push(Change::Created(path.to_owned()));
        changes.push(Change::ChildrenChanged(parent_path.to_owned()));
        stat
    }

    /// Removes a childless node. Returns false if there was nothing to remove.
    fn remove(&mut self, path: &str, zxid: Zxid, changes: &mut Vec<Change>) -> bool {
        match self.nodes.id(path) {
            Some(id) => self.remove_node(id, path, zxid, changes),
            None => false,
        }
    }

    /// Removes the childless node `id`, which is at `path`.
    fn remove_node(
        &mut self,
        id: NodeId,
        path: &str,
        zxid: Zxid,
        changes: &mut Vec<Change>,
    ) -> bool {
        let Some(node) = self.nodes.remove(id) else {
            return false;
        };
        debug_assert!(
            !self.children.contains_key(&id),
            "only childless nodes are removed"
        );
        self.data_bytes = self.data_bytes.saturating_sub(node.data().len() as u64);
        if self.sequences.contains_key(&id) {
            Arc::make_mut(&mut self.sequences).remove(&id);
        }
        let acl = self.acls.list(node.acl_id());
        if acl.is_some() {
            Arc::make_mut(&mut self.acls).release(node.acl_id());
        }
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
            let parent_id = node.parent();
            if let Some(parent) = self.nodes.node_mut(parent_id) {
                parent.num_children = parent.num_children.saturating_sub(1);
                parent.cversion = parent.cversion.wrapping_add(1);
                parent.pzxid = zxid;
            }
            if let Some(siblings) = self.children.get_mut(&parent_id) {
                siblings.remove(id);
                if siblings.is_empty() {
                    self.children.remove(&parent_id);
                }
            }
            changes.push(Change::Deleted(path.to_owned(), acl));
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
        let id = self.nodes.id(path).ok_or(ErrorCode::NoNode)?;
        let node = self.nodes.node(id).ok_or(ErrorCode::NoNode)?;
        if node.kind() != NodeKind::Container {
            return Err(ErrorCode::BadArguments);
        }
        if node.num_children > 0 || node.cversion == 0 {
            return Err(ErrorCode::NotEmpty);
        }
        self.remove_node(id, path, zxid, changes);
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
        let id = self.nodes.id(path).ok_or(ErrorCode::NoNode)?;
        let node = self.nodes.node(id).ok_or(ErrorCode::NoNode)?;
        let NodeKind::Ttl { ttl_ms } = node.kind() else {
            return Err(ErrorCode::BadArguments);
        };
        if node.num_children > 0 {
            return Err(ErrorCode::NotEmpty);
        }
        if !ttl_elapsed(node, ttl_ms, time_ms) {
            return Err(ErrorCode::BadVersion);
        }
        self.remove_node(id, path, zxid, changes);
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
/// them all in a list first: a million nodes go straight into the slots.
///
/// Everything a node contributes is taken while it is in the cache, as it is
/// added: its index entry, its place among its parent's children (gathered by
/// the parent's path, since a child may arrive before its parent). `finish`
/// then touches parents only, and builds the path index in one pass; two
/// more passes over every node (one to index, one to check the child counts)
/// were a fifth of a restart at 3 M znodes.
pub struct TreeBuilder {
    nodes: MapBuilder,
    tree: DataTree,
    /// The nodes that can have children (those recording some, and the
    /// root), by path: the only paths kept while loading.
    parents: HashMap<Box<str>, NodeId, RandomState>,
    /// Each parent's children so far, by the parent's path.
    children: HashMap<Box<str>, Vec<NodeId>, RandomState>,
    sequences: HashMap<NodeId, u64, RandomState>,
    acls: TableBuilder,
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
            nodes: MapBuilder::new(),
            tree: DataTree::with_nodes(NodeMap::new()),
            parents: HashMap::default(),
            children: HashMap::default(),
            sequences: HashMap::default(),
            acls: TableBuilder::default(),
            recorded_children: 0,
        }
    }

    /// An ACL list the snapshot holds under `id`; before any node naming it.
    pub fn acl(&mut self, id: AclId, acl: Vec<Acl>) -> Result<(), String> {
        acl::validate(&acl).map_err(|_| format!("ACL list {id} is not a valid ACL"))?;
        self.acls.list(id, acl)
    }

    /// Adds one node, in any order, with its sequence counter (children
    /// sets are completed by [`TreeBuilder::finish`]).
    pub fn add(&mut self, path: String, node: Node, sequence: u64) -> Result<(), String> {
        if !path.starts_with('/') {
            return Err(format!("node path {path:?} does not start with /"));
        }
        if self.nodes.len() >= NODES_MAX {
            return Err(format!("more than {NODES_MAX} nodes"));
        }
        let parent = path::parent(&path);
        let name = if parent.is_some() {
            path::name(&path)
        } else {
            ""
        };
        let node = node.renamed(name)?;
        self.acls.user(node.acl_id())?;
        let (kind, owner, num_children) = (node.kind(), node.ephemeral_owner(), node.num_children);
        self.recorded_children += u64::from(num_children);
        let id = self.nodes.add(&path, node);
        if sequence > 0 {
            self.sequences.insert(id, sequence);
        }
        self.tree.index(&path, kind, owner);
        if let Some(parent) = parent {
            match self.children.get_mut(parent) {
                Some(siblings) => siblings.push(id),
                None => {
                    self.children.insert(parent.into(), vec![id]);
                }
            }
        }
        // The root, and every node that records children, can be a parent.
        let can_be_parent = parent.is_none() || num_children > 0;
        if can_be_parent && self.parents.insert(path.as_str().into(), id).is_some() {
            return Err(format!("node {path} appears twice"));
        }
        Ok(())
    }

    /// Links every parent to its children and indexes every path. Fails if
    /// a parent is missing, a node's recorded child count is wrong, or a
    /// path appears twice.
    pub fn finish(self) -> Result<DataTree, String> {
        let TreeBuilder {
            mut nodes,
            mut tree,
            parents,
            children,
            sequences,
            acls,
            recorded_children,
        } = self;
        if !parents.contains_key("/") {
            return Err("the root node is missing".into());
        }
        let mut found = 0u64;
        for (parent, ids) in children {
            let Some(&parent_id) = parents.get(&parent) else {
                // Either no node has this path, or it records no children.
                if nodes.may_hold(nodes.hash(&parent)) {
                    return Err(format!(
                        "node {parent} records 0 children but {} were found",
                        ids.len()
                    ));
                }
                let name = ids
                    .first()
                    .and_then(|&id| nodes.node(id))
                    .map_or("", Node::name);
                return Err(format!("node {} has no parent", path::join(&parent, name)));
            };
            let recorded = nodes.node(parent_id).map_or(0, |node| node.num_children);
            if recorded as usize != ids.len() {
                return Err(format!(
                    "node {parent} records {recorded} children but {} were found",
                    ids.len(),
                ));
            }
            found += ids.len() as u64;
            for &id in &ids {
                nodes.link(id, parent_id);
            }
            // Sized once from the list instead of grown.
            tree.children.insert(parent_id, ids.into_iter().collect());
        }
        if found != recorded_children {
            // Some childless node claims children.
            let (path, node) = parents
                .iter()
                .filter(|(_, id)| !tree.children.contains_key(id))
                .find_map(|(path, &id)| {
                    let node = nodes.node(id).filter(|node| node.num_children > 0)?;
                    Some((path, node))
                })
                .ok_or_else(|| "the recorded child counts do not add up".to_owned())?;
            return Err(format!(
                "node {path} records {} children but 0 were found",
                node.num_children
            ));
        }
        tree.nodes = nodes.finish()?;
        tree.data_bytes = tree
            .nodes
            .slab()
            .iter()
            .map(|(_, node)| node.data().len() as u64)
            .sum();
        tree.sequences = Arc::new(sequences);
        tree.acls = Arc::new(acls.finish());
        Ok(tree)
    }
}

fn ttl_elapsed(node: &Node, ttl_ms: u64, now_ms: u64) -> bool {
    now_ms.saturating_sub(node.mtime_ms) >= ttl_ms
}

/// Checks one op against the overlay and records its effect there, in
/// ZooKeeper's order: what the op names, then the permission on the node
/// ZooKeeper checks (create and delete: the parent's CREATE and DELETE;
/// set: WRITE; check: READ), then versions and the tree's rules.
fn check_op(
    overlay: &mut Overlay<'_>,
    op: &MultiOp,
    who: Writer<'_>,
) -> Result<Checked, ErrorCode> {
    match op {
        MultiOp::Check { path, version } => {
            let node = overlay.get(path).ok_or(ErrorCode::NoNode)?;
            overlay.allow(&node, who.identity, Perms::READ)?;
            if !version_matches(*version, node.version) {
                return Err(ErrorCode::BadVersion);
            }
            Ok(Checked::default())
        }
        MultiOp::Create { path, mode, .. } | MultiOp::CreateWithAcl { path, mode, .. } => {
            let acl = match op.acl() {
                Some(list) => {
                    let resolved = acl::resolve(list, who.identity)?;
                    match overlay.tree.acls.find(&resolved) {
                        Some(OPEN) => None,
                        Some(id) => Some(NewAcl::Held(id)),
                        None => Some(NewAcl::New(resolved.into_owned())),
                    }
                }
                None => None,
            };
            let parent_path = parent_for_create(path, *mode)?;
            let mut parent = overlay.get(parent_path).ok_or(ErrorCode::NoNode)?;
            overlay.allow(&parent, who.identity, Perms::CREATE)?;
            if parent.ephemeral {
                return Err(ErrorCode::NoChildrenForEphemerals);
            }
            if mode.is_ephemeral() && !who.alive {
                return Err(ErrorCode::SessionExpired);
            }
            if mode.is_ephemeral() {
                let owned = overlay
                    .tree
                    .ephemerals
                    .get(&who.session_id)
                    .map_or(0, BTreeSet::len);
                if owned + overlay.ephemerals >= EPHEMERALS_PER_SESSION_MAX {
                    return Err(ErrorCode::LimitExceeded);
                }
                overlay.ephemerals += 1;
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
            if parent.num_children >= CHILDREN_PER_NODE_MAX
                || overlay.tree.len() as isize + overlay.added >= NODES_MAX as isize
                || (matches!(acl, Some(NewAcl::New(_)))
                    && overlay.tree.acls.len() >= crate::acl::table::ACL_LISTS_MAX)
            {
                return Err(ErrorCode::LimitExceeded);
            }
            overlay.added += 1;
            parent.num_children += 1;
            overlay.set(parent_path, Some(parent));
            overlay.set_created(&created, mode.is_ephemeral(), acl.as_ref());
            Ok(Checked {
                created: Some(created),
                acl,
                node: parent.id,
            })
        }
        MultiOp::Delete { path, version } => {
            let parent_path = path::parent(path).ok_or(ErrorCode::BadArguments)?;
            let mut parent = overlay.get(parent_path).ok_or(ErrorCode::NoNode)?;
            overlay.allow(&parent, who.identity, Perms::DELETE)?;
            let node = overlay.get(path).ok_or(ErrorCode::NoNode)?;
            if !version_matches(*version, node.version) {
                return Err(ErrorCode::BadVersion);
            }
            if node.num_children > 0 {
                return Err(ErrorCode::NotEmpty);
            }
            parent.num_children = parent.num_children.saturating_sub(1);
            overlay.set(parent_path, Some(parent));
            overlay.set(path, None);
            overlay.added -= 1;
            Ok(Checked {
                node: node.id,
                ..Checked::default()
            })
        }
        MultiOp::SetData { path, version, .. } => {
            let mut node = overlay.get(path).ok_or(ErrorCode::NoNode)?;
            overlay.allow(&node, who.identity, Perms::WRITE)?;
            if !version_matches(*version, node.version) {
                return Err(ErrorCode::BadVersion);
            }
            node.version = node.version.wrapping_add(1);
            overlay.set(path, Some(node));
            Ok(Checked {
                node: node.id,
                ..Checked::default()
            })
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
    use crate::acl::identity::ANYBODY;

    /// A writer with no identity but `world`'s.
    fn anybody(session_id: SessionId, alive: bool) -> Writer<'static> {
        Writer {
            session_id,
            alive,
            identity: &ANYBODY,
        }
    }

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
        match tree.write(anybody(7, true), &op, zxid, T, &mut Vec::new())? {
            OpResult::Created { path, .. } => Ok(path),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Runs `ops` as one multi at zxid 2, which must apply every op.
    fn apply_all(tree: &mut DataTree, ops: &[MultiOp]) {
        let outcomes = tree.write_multi(anybody(7, true), ops, 2, T, &mut Vec::new());
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, MultiOpOutcome::Applied(_))),
            "{outcomes:?}"
        );
    }

    /// What a view holds, as `from_nodes` takes it.
    fn entries(view: &TreeView) -> Vec<(String, Node, u64)> {
        view.iter()
            .map(|e| (e.path, e.node.clone(), e.sequence))
            .collect()
    }

    // Proves the data byte count follows creates, sets and deletes, and is
    // the same when the tree is rebuilt from its view.
    #[test]
    fn data_bytes_follow_every_change() {
        let mut tree = DataTree::new();
        let sum = |tree: &DataTree| -> u64 {
            entries(&tree.view())
                .iter()
                .map(|(_, node, _)| node.data().len() as u64)
                .sum()
        };
        create(&mut tree, "/a", CreateMode::Persistent, 1).expect("created");
        create(&mut tree, "/a/b", CreateMode::Ephemeral, 2).expect("created");
        assert_eq!(tree.data_bytes(), 2);
        assert_eq!(tree.ephemeral_count(), 1);
        let set = MultiOp::SetData {
            path: "/a".into(),
            data: vec![0; 100],
            version: ANY_VERSION,
        };
        tree.write(anybody(7, true), &set, 3, T, &mut Vec::new())
            .expect("set");
        assert_eq!(tree.data_bytes(), 101);
        let delete = MultiOp::Delete {
            path: "/a/b".into(),
            version: ANY_VERSION,
        };
        tree.write(anybody(7, true), &delete, 4, T, &mut Vec::new())
            .expect("deleted");
        assert_eq!((tree.data_bytes(), sum(&tree)), (100, 100));
        assert_eq!(tree.ephemeral_count(), 0);
        let rebuilt = DataTree::from_nodes(entries(&tree.view())).expect("rebuilt");
        assert_eq!(rebuilt.data_bytes(), 100);
    }

    fn child_names(tree: &DataTree, path: &str) -> Vec<String> {
        tree.children(path)
            .map(|children| children.sorted().map(|n| n.name().to_owned()).collect())
            .unwrap_or_default()
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
            tree.write(anybody(9, false), &op, 5, T, &mut Vec::new()),
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
            tree.write(anybody(7, true), &del("/a", -1), 3, T, &mut ch),
            Err(ErrorCode::NotEmpty)
        );
        assert_eq!(
            tree.write(anybody(7, true), &del("/a/b", 4), 3, T, &mut ch),
            Err(ErrorCode::BadVersion)
        );
        assert_eq!(
            tree.write(anybody(7, true), &del("/nope", -1), 3, T, &mut ch),
            Err(ErrorCode::NoNode)
        );
        assert!(ch.is_empty(), "failed writes change nothing");
        tree.write(anybody(7, true), &del("/a/b", 0), 3, T, &mut ch)
            .expect("deleted");
        assert_eq!(
            ch,
            vec![
                Change::Deleted("/a/b".into(), None),
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
        let outcomes = tree.write_multi(anybody(7, true), &ops, 2, T, &mut changes);
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
        assert_eq!(tree.node("/a").expect("exists").data(), b"x");
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
        apply_all(&mut tree, &ops);
        assert!(tree.node("/p/c").is_none());
        assert_eq!(tree.node("/p").expect("exists").cversion, 2);
    }

    /// Apply reuses the ids check_op found; a multi that frees a slot and
    /// fills it again, or deletes a path and creates it anew, must still
    /// change the nodes its ops name.
    #[test]
    fn multi_ops_change_the_nodes_they_name_when_slots_are_reused() {
        let mut tree = DataTree::new();
        for path in ["/q", "/s", "/a", "/p"] {
            create(&mut tree, path, CreateMode::Persistent, 1).expect("created");
        }
        let set = |path: &str, data: &[u8], version| MultiOp::SetData {
            path: path.into(),
            data: data.to_vec(),
            version,
        };
        let create_op = |path: &str| MultiOp::Create {
            path: path.into(),
            data: b"new".to_vec(),
            mode: CreateMode::Persistent,
        };
        let delete = |path: &str| MultiOp::Delete {
            path: path.into(),
            version: -1,
        };
        // Slots are taken again last-freed first: the new /a takes /q's
        // slot and /r takes the old /a's.
        let ops = vec![
            delete("/a"),
            delete("/q"),
            create_op("/a"),
            create_op("/r"),
            set("/s", b"s1", 0),
            set("/a", b"a1", 0),
            set("/r", b"r1", 0),
            create_op("/p/c"),
            delete("/s"),
            create_op("/s"),
            create_op("/s/t"),
        ];
        apply_all(&mut tree, &ops);
        assert!(tree.node("/q").is_none());
        let data = |path: &str| tree.node(path).map(|n| (n.data().to_vec(), n.version));
        assert_eq!(data("/r"), Some((b"r1".to_vec(), 1)));
        assert_eq!(data("/a"), Some((b"a1".to_vec(), 1)));
        assert_eq!(data("/s"), Some((b"new".to_vec(), 0)));
        assert_eq!(data("/s/t"), Some((b"new".to_vec(), 0)));
        assert_eq!(tree.node("/s").map(|n| n.num_children), Some(1));
        assert_eq!(tree.node("/p").map(|n| n.num_children), Some(1));
        assert_eq!(tree.node("/").map(|n| n.num_children), Some(4));
        assert_eq!(tree.len(), 7, "/, /r, /s, /s/t, /a, /p, /p/c");
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
        assert!(changes.contains(&Change::Deleted("/e1".into(), None)));
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
        tree.write(anybody(7, true), &del, 4, T, &mut Vec::new())
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
        tree.write(anybody(7, true), &set, 4, T, &mut Vec::new())
            .expect("set");
        let frozen: HashMap<String, &Node> = view.iter().map(|e| (e.path, e.node)).collect();
        assert_eq!(
            frozen["/a"].data(),
            b"x",
            "the view does not see later writes"
        );
        let rebuilt = DataTree::from_nodes(entries(&view)).expect("rebuilds");
        assert_eq!(rebuilt.len(), 4);
        assert_eq!(child_names(&rebuilt, "/a"), ["e"]);
        assert_eq!(rebuilt.ephemerals_of(7).count(), 1);
        assert_eq!(rebuilt.containers.len(), 1);
    }

    #[test]
    fn rebuilding_takes_children_before_their_parents() {
        let mut tree = DataTree::new();
        create(&mut tree, "/a", CreateMode::Persistent, 1).expect("created");
        create(&mut tree, "/a/b", CreateMode::Persistent, 2).expect("created");
        create(&mut tree, "/a/b/c", CreateMode::Ephemeral, 3).expect("created");
        let mut nodes = entries(&tree.view());
        // Deepest first: every child arrives before its parent.
        nodes.sort_by_key(|(path, _, _)| std::cmp::Reverse(path.len()));
        let rebuilt = DataTree::from_nodes(nodes).expect("rebuilds");
        assert_eq!(rebuilt.len(), 4);
        assert_eq!(child_names(&rebuilt, "/a"), ["b"]);
        assert_eq!(child_names(&rebuilt, "/a/b"), ["c"]);
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
        let at = |path: &str, node: &Node| (path.to_owned(), node.clone(), 0);
        let err = DataTree::from_nodes([at("/", &root), at("/x/y", &root)]).unwrap_err();
        assert_eq!(err, "node /x/y has no parent");
        // A childless node that claims children.
        let mut lying = root.clone();
        lying.num_children = 3;
        let err = DataTree::from_nodes([at("/", &lying)]).unwrap_err();
        assert_eq!(err, "node / records 3 children but 0 were found");
        // A parent whose count is off by one, and one that records none.
        let mut parent = root.clone();
        parent.num_children = 2;
        let err = DataTree::from_nodes([at("/", &parent), at("/a", &root)]).unwrap_err();
        assert_eq!(err, "node / records 2 children but 1 were found");
        let nodes = [at("/", &root), at("/a", &root), at("/a/b", &root)];
        let err = DataTree::from_nodes(nodes).unwrap_err();
        assert!(
            err.starts_with("node / records 0") || err.starts_with("node /a records 0"),
            "{err}"
        );
        // A leaf claiming children beside a parent whose count is right.
        let mut parent = root.clone();
        parent.num_children = 1;
        let mut leaf = root.clone();
        leaf.num_children = 1;
        let err = DataTree::from_nodes([at("/", &parent), at("/a", &leaf)]).unwrap_err();
        assert_eq!(err, "node /a records 1 children but 0 were found");
        let dup = DataTree::from_nodes([at("/", &root), at("/", &root)]).unwrap_err();
        assert_eq!(dup, "node / appears twice");
        let mut parent = root.clone();
        parent.num_children = 2;
        let nodes = [at("/", &parent), at("/a", &root), at("/a", &root)];
        let dup = DataTree::from_nodes(nodes).unwrap_err();
        assert_eq!(dup, "node /a appears twice");
    }

    // Proves sequence counters live with their parent: kept in a view and
    // a rebuild, dropped with the node, so a node made again at the same
    // path starts from 0 as ZooKeeper's does.
    #[test]
    fn sequence_counters_survive_a_rebuild_and_go_with_their_node() {
        let mut tree = DataTree::new();
        create(&mut tree, "/q", CreateMode::Persistent, 1).expect("created");
        create(&mut tree, "/q/n-", CreateMode::PersistentSequential, 2).expect("created");
        create(&mut tree, "/q/n-", CreateMode::PersistentSequential, 3).expect("created");
        let view = tree.view();
        let q = view.iter().find(|e| e.path == "/q").expect("in view");
        assert_eq!(q.sequence, 2);
        let mut rebuilt = DataTree::from_nodes(entries(&view)).expect("rebuilds");
        let third = create(&mut rebuilt, "/q/n-", CreateMode::PersistentSequential, 4);
        assert_eq!(third.as_deref(), Ok("/q/n-0000000002"));
        let del = |path: &str| MultiOp::Delete {
            path: path.into(),
            version: -1,
        };
        for path in [
            "/q/n-0000000000",
            "/q/n-0000000001",
            "/q/n-0000000002",
            "/q",
        ] {
            rebuilt
                .write(anybody(7, true), &del(path), 5, T, &mut Vec::new())
                .expect("deleted");
        }
        create(&mut rebuilt, "/q", CreateMode::Persistent, 6).expect("created");
        let first = create(&mut rebuilt, "/q/n-", CreateMode::PersistentSequential, 7);
        assert_eq!(first.as_deref(), Ok("/q/n-0000000000"));
    }

    // Proves the tree agrees with a plain map of paths after many random
    // creates and deletes, slots reused and a view held across them: the
    // path index, the children sets and the parents stay in step.
    #[test]
    fn random_creates_and_deletes_agree_with_a_model() {
        let mut tree = DataTree::new();
        let mut model = std::collections::BTreeMap::<String, Vec<u8>>::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut view = tree.view();
        for step in 0..4000u64 {
            let r = next();
            let depth = 1 + r % 3;
            let path: String = (0..depth)
                .map(|d| format!("/{}", (r >> (8 * d + 8)) % 4))
                .collect();
            if r % 5 == 0 {
                let del = MultiOp::Delete {
                    path: path.clone(),
                    version: -1,
                };
                let has_children = model.keys().any(|p| p.starts_with(&format!("{path}/")));
                let result = tree.write(anybody(7, true), &del, step, T, &mut Vec::new());
                assert_eq!(
                    result.is_ok(),
                    model.contains_key(&path) && !has_children,
                    "{path}"
                );
                if result.is_ok() {
                    model.remove(&path);
                }
            } else {
                let parent_ok =
                    path::parent(&path).is_some_and(|p| p == "/" || model.contains_key(p));
                let created = create(&mut tree, &path, CreateMode::Persistent, step);
                assert_eq!(
                    created.is_ok(),
                    parent_ok && !model.contains_key(&path),
                    "{path}"
                );
                if created.is_ok() {
                    model.insert(path, b"x".to_vec());
                }
            }
            if step % 500 == 0 {
                view = tree.view();
            }
        }
        assert_eq!(tree.len(), model.len() + 1);
        for (path, data) in &model {
            assert_eq!(tree.node(path).map(Node::data), Some(&data[..]), "{path}");
            let children: Vec<String> = model
                .keys()
                .filter(|p| path::parent(p) == Some(path.as_str()))
                .map(|p| path::name(p).to_owned())
                .collect();
            assert_eq!(child_names(&tree, path), children, "{path}");
        }
        let rebuilt = DataTree::from_nodes(entries(&tree.view())).expect("rebuilds");
        assert_eq!(rebuilt.len(), tree.len());
        assert!(model.keys().all(|path| rebuilt.node(path).is_some()));
        assert!(view.len() <= 4000);
    }

    #[test]
    fn acls_guard_each_op_and_lists_are_shared_and_freed() {
        use arbor_protocol::acl::{Id, DIGEST};
        let alice_id = Identity {
            ids: vec![Id::new(DIGEST, "alice:h")],
            ..Identity::default()
        };
        let alice = Writer {
            session_id: 8,
            alive: true,
            identity: &alice_id,
        };
        let hers = vec![
            Acl::new(Perms::ALL, DIGEST, "alice:h"),
            Acl::new(Perms::READ, "world", "anyone"),
        ];
        let create_hers = |path: &str| MultiOp::CreateWithAcl {
            path: path.into(),
            data: vec![],
            mode: CreateMode::Persistent,
            acl: hers.clone(),
        };
        let mut tree = DataTree::new();
        let mut ch = Vec::new();
        tree.write(alice, &create_hers("/a"), 2, T, &mut ch)
            .expect("creates");
        let node = tree.node("/a").expect("exists");
        assert_eq!(tree.acl_of(node), &hers[..]);
        // Anybody may read /a, nobody else may create under it, set it or
        // delete under it; alice may.
        let child = MultiOp::Create {
            path: "/a/b".into(),
            data: vec![],
            mode: CreateMode::Persistent,
        };
        let set = MultiOp::SetData {
            path: "/a".into(),
            data: b"v".to_vec(),
            version: -1,
        };
        let check = MultiOp::Check {
            path: "/a".into(),
            version: -1,
        };
        assert_eq!(
            tree.write(anybody(7, true), &child, 3, T, &mut ch),
            Err(ErrorCode::NoAuth)
        );
        assert_eq!(
            tree.write(anybody(7, true), &set, 3, T, &mut ch),
            Err(ErrorCode::NoAuth)
        );
        assert_eq!(
            tree.write(anybody(7, true), &check, 3, T, &mut ch),
            Ok(OpResult::Checked)
        );
        tree.write(alice, &child, 3, T, &mut ch)
            .expect("alice creates");
        let del = MultiOp::Delete {
            path: "/a/b".into(),
            version: -1,
        };
        assert_eq!(
            tree.write(anybody(7, true), &del, 4, T, &mut ch),
            Err(ErrorCode::NoAuth)
        );
        // Deleting a missing child still needs DELETE on the parent.
        let del_missing = MultiOp::Delete {
            path: "/a/none".into(),
            version: -1,
        };
        assert_eq!(
            tree.write(anybody(7, true), &del_missing, 4, T, &mut ch),
            Err(ErrorCode::NoAuth)
        );
        assert_eq!(
            tree.write(alice, &del_missing, 4, T, &mut ch),
            Err(ErrorCode::NoNode)
        );

        // In a multi, a node created by an earlier op is guarded by its new ACL.
        let outcomes = tree.write_multi(
            anybody(7, true),
            &[
                MultiOp::CreateWithAcl {
                    path: "/m".into(),
                    data: vec![],
                    mode: CreateMode::Persistent,
                    acl: vec![Acl::new(Perms::READ, "world", "anyone")],
                },
                MultiOp::Create {
                    path: "/m/c".into(),
                    data: vec![],
                    mode: CreateMode::Persistent,
                },
            ],
            5,
            T,
            &mut ch,
        );
        assert_eq!(outcomes[1], MultiOpOutcome::Failed(ErrorCode::NoAuth));
        assert!(tree.node("/m").is_none());

        // `auth` needs a proved id; the same list is stored once.
        let auth_acl = MultiOp::CreateWithAcl {
            path: "/x".into(),
            data: vec![],
            mode: CreateMode::Persistent,
            acl: vec![Acl::new(Perms::ALL, "auth", "")],
        };
        assert_eq!(
            tree.write(anybody(7, true), &auth_acl, 6, T, &mut ch),
            Err(ErrorCode::InvalidAcl)
        );
        tree.write(alice, &create_hers("/c"), 6, T, &mut ch)
            .expect("creates");
        assert_eq!(tree.acls().len(), 1);
        assert_eq!(
            tree.node("/a").map(Node::acl_id),
            tree.node("/c").map(Node::acl_id)
        );

        // Set-ACL: ADMIN, then the ACL version.
        let open = Acl::open();
        assert_eq!(
            tree.set_acl(&ANYBODY, "/a", &open, -1),
            Err(ErrorCode::NoAuth)
        );
        assert_eq!(
            tree.set_acl(&alice_id, "/a", &open, 3),
            Err(ErrorCode::BadVersion)
        );
        assert_eq!(
            tree.set_acl(&alice_id, "/nope", &open, -1),
            Err(ErrorCode::NoNode)
        );
        let stat = tree.set_acl(&alice_id, "/a", &open, 0).expect("sets");
        assert_eq!(stat.aversion, 1);
        assert_eq!(
            tree.write(anybody(7, true), &set, 7, T, &mut ch)
                .map(|_| ()),
            Ok(())
        );
        // /a/b and /c still hold the list; deleting them frees it.
        tree.write(alice, &del, 8, T, &mut ch).expect("deletes");
        let del_c = MultiOp::Delete {
            path: "/c".into(),
            version: -1,
        };
        assert_eq!(tree.acls().len(), 1);
        tree.write(alice, &del_c, 9, T, &mut ch).expect("deletes");
        assert!(tree.acls().is_empty());

        // A view and a rebuild keep ACLs and ACL versions.
        tree.write(alice, &create_hers("/d"), 10, T, &mut ch)
            .expect("creates");
        let view = tree.view();
        let mut builder = TreeBuilder::new();
        for (id, acl) in view.acls().iter() {
            builder.acl(id, acl.to_vec()).expect("valid");
        }
        for (path, node, sequence) in entries(&view) {
            builder.add(path, node, sequence).expect("adds");
        }
        let rebuilt = builder.finish().expect("rebuilds");
        let d = rebuilt.node("/d").expect("exists");
        assert_eq!(rebuilt.acl_of(d), &hers[..]);
        assert_eq!(rebuilt.node("/a").map(Node::aversion), Some(1));
    }

    #[test]
    fn a_session_owns_at_most_so_many_ephemerals() {
        let mut tree = DataTree::new();
        let ops: Vec<MultiOp> = (0..EPHEMERALS_PER_SESSION_MAX)
            .map(|i| MultiOp::Create {
                path: format!("/e{i}"),
                data: vec![],
                mode: CreateMode::Ephemeral,
            })
            .collect();
        for chunk in ops.chunks(4096) {
            let outcomes = tree.write_multi(anybody(7, true), chunk, 2, T, &mut Vec::new());
            assert!(outcomes
                .iter()
                .all(|o| matches!(o, MultiOpOutcome::Applied(_))));
        }
        let one_more = MultiOp::Create {
            path: "/one-more".into(),
            data: vec![],
            mode: CreateMode::Ephemeral,
        };
        assert_eq!(
            tree.write(anybody(7, true), &one_more, 3, T, &mut Vec::new()),
            Err(ErrorCode::LimitExceeded)
        );
        // Another session, and persistent nodes, are not held back.
        assert!(tree
            .write(anybody(8, true), &one_more, 3, T, &mut Vec::new())
            .is_ok());
        let persistent = MultiOp::Create {
            path: "/p".into(),
            data: vec![],
            mode: CreateMode::Persistent,
        };
        assert!(tree
            .write(anybody(7, true), &persistent, 4, T, &mut Vec::new())
            .is_ok());
    }
}
