//! Reads: answered from the applied state under the read lock.
//!
//! A watch set by a read is registered while the read lock is held, so no
//! write can slip between what the read saw and the watch that covers it.

use arbor_protocol::{AddWatchMode, ChildEntry, ErrorCode, Op, OpResult, SessionId, Zxid};

use crate::context::Shared;
use crate::pipeline::prep::check_path;
use crate::tree::Node;
use crate::watch::WatchKind;

/// Answers a read-only op; returns the result and the zxid it reflects.
pub fn execute(
    shared: &Shared,
    session_id: SessionId,
    op: &Op,
) -> (Result<OpResult, ErrorCode>, Zxid) {
    let state = shared.state.read();
    let zxid = state.last_zxid();
    let watch = |kind: WatchKind, path: &str| shared.watches.lock().add(session_id, kind, path);
    let node = |path: &str| -> Result<&Node, ErrorCode> {
        check_path(path)?;
        state.tree.node(path).ok_or(ErrorCode::NoNode)
    };
    let result = match op {
        Op::GetData { path, watch: set } => node(path).and_then(|n| {
            if *set {
                watch(WatchKind::Data, path)?;
            }
            Ok(OpResult::Data {
                data: n.data.clone(),
                stat: n.stat,
            })
        }),
        Op::Exists { path, watch: set } => check_path(path).and_then(|()| {
            if *set {
                watch(WatchKind::Data, path)?;
            }
            Ok(OpResult::Exists(state.tree.node(path).map(|n| n.stat)))
        }),
        Op::GetChildren { path, watch: set } => node(path).and_then(|n| {
            if *set {
                watch(WatchKind::Child, path)?;
            }
            Ok(OpResult::Children {
                names: n.children.iter().cloned().collect(),
                stat: n.stat,
            })
        }),
        Op::GetChildrenWithStat { path, watch: set } => node(path).and_then(|n| {
            if *set {
                watch(WatchKind::Child, path)?;
            }
            let children = n
                .children
                .iter()
                .filter_map(|name| {
                    let child = state.tree.node(&arbor_protocol::path::join(path, name))?;
                    Some(ChildEntry {
                        name: name.clone(),
                        stat: child.stat,
                    })
                })
                .collect();
            Ok(OpResult::ChildrenWithStat {
                children,
                stat: n.stat,
            })
        }),
        // Standalone, every acknowledged write is already applied, and this
        // session's earlier writes were answered before this runs.
        Op::Sync { path } => check_path(path).map(|()| OpResult::Synced { path: path.clone() }),
        Op::AddWatch { path, mode } => check_path(path).and_then(|()| {
            let kind = match mode {
                AddWatchMode::Persistent => WatchKind::Persistent,
                AddWatchMode::PersistentRecursive => WatchKind::PersistentRecursive,
            };
            watch(kind, path).map(|()| OpResult::WatchesChanged)
        }),
        Op::RemoveWatches { path, kind } => check_path(path).and_then(|()| {
            if shared.watches.lock().remove(session_id, path, *kind) {
                Ok(OpResult::WatchesChanged)
            } else {
                Err(ErrorCode::NoWatcher)
            }
        }),
        Op::Ping => Ok(OpResult::Pong),
        Op::Create { .. }
        | Op::Delete { .. }
        | Op::SetData { .. }
        | Op::Multi { .. }
        | Op::CloseSession => Err(ErrorCode::Internal),
    };
    (result, zxid)
}
