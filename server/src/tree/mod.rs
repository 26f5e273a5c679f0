//! The znode tree: pure data, no I/O, no clock, no locks.
//!
//! [`DataTree`] is the deterministic heart of the state machine. Every
//! mutation takes the zxid and wall time of the txn that causes it and
//! reports what changed as [`Change`]s, from which the watch manager makes
//! events. Nothing here knows about sessions beyond the ids it is given.

mod children;
mod data_tree;
mod node;
mod node_map;

pub use children::{Children, Sorted};
pub use data_tree::{
    Change, ChildList, DataTree, TreeBuilder, TreeView, ViewEntry, Writer, CHILDREN_PER_NODE_MAX,
    EPHEMERALS_PER_SESSION_MAX,
};
pub use node::{Node, NodeId, NodeKind};
pub use node_map::{NodeMap, NodeSlab, CHUNK_NODES, NODES_MAX};
