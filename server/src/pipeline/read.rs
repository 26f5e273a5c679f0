//! Reads: answered from the applied state under the read lock.
//!
//! A watch set by a read is registered while the read lock is held, so no
//! write can slip between what the read saw and the watch that covers it;
//! and the read's answer is queued before the lock is let go, so the event
//! of a write right after it cannot reach the client first. ZooKeeper's
//! clients (kazoo, Curator, the Java client) attach a watcher only when the
//! answer arrives, and an event ahead of it was lost: a kazoo semaphore
//! waited for a wake-up that had gone by.

use arbor_protocol::acl::{Acl, Perms, DIGEST};
use arbor_protocol::{
    AddWatchMode, ChildEntry, ChildNames, ErrorCode, EventType, Op, OpResult, ReadOp, SessionId,
    SetWatches, WatchEvent, Zxid, CHILDREN_BELOW_MAX,
};

use crate::acl;
use crate::config::MULTI_OPS_MAX;
use crate::context::Shared;
use crate::pipeline::apply::StateMachine;
use crate::pipeline::prep::check_path;
use crate::tree::Node;
use crate::watch::WatchKind;

/// The children of `path`, sorted by name, as listings return them.
fn sorted_children<'a>(state: &'a StateMachine, path: &str) -> impl Iterator<Item = &'a Node> {
    state
        .tree
        .children(path)
        .map(|children| children.sorted())
        .into_iter()
        .flatten()
}

/// Answers a read-only op: `answer` gets the result and the zxid it
/// reflects, and runs while the read lock is still held (no write applies,
/// so no watch the read set can fire, until it returns).
pub fn execute<T>(
    shared: &Shared,
    session_id: SessionId,
    op: &Op,
    answer: impl FnOnce(Result<OpResult, ErrorCode>, Zxid) -> T,
) -> T {
    let state = shared.state.read();
    answer(read(shared, session_id, &state, op), state.last_zxid())
}

/// One read against a locked state.
fn read(
    shared: &Shared,
    session_id: SessionId,
    state: &StateMachine,
    op: &Op,
) -> Result<OpResult, ErrorCode> {
    let watch = |kind: WatchKind, path: &str| shared.watches.lock().add(session_id, kind, path);
    let who = || state.identity(session_id);
    // The session is looked up only for a node whose ACL is not the open one.
    let readable =
        |n: &Node| n.acl_id() == acl::table::OPEN || state.tree.allows(n, who(), Perms::READ);
    // Every read of a node needs READ on it.
    let node = |path: &str| -> Result<&Node, ErrorCode> {
        check_path(path)?;
        let node = state.tree.node(path).ok_or(ErrorCode::NoNode)?;
        if readable(node) {
            Ok(node)
        } else {
            Err(ErrorCode::NoAuth)
        }
    };
    match op {
        Op::GetData { path, watch: set } => node(path).and_then(|n| {
            if *set {
                watch(WatchKind::Data, path)?;
            }
            Ok(OpResult::Data {
                data: n.data().to_vec(),
                stat: n.stat(),
            })
        }),
        // A stat is the node's to give: READ, as for its data (ZooKeeper
        // checks nothing here). A missing node has no ACL to ask.
        Op::Exists { path, watch: set } => check_path(path).and_then(|()| {
            let found = state.tree.node(path);
            if found.is_some_and(|n| !readable(n)) {
                return Err(ErrorCode::NoAuth);
            }
            if *set {
                watch(WatchKind::Data, path)?;
            }
            Ok(OpResult::Exists(found.map(|n| n.stat())))
        }),
        Op::GetChildren { path, watch: set } => node(path).and_then(|n| {
            if *set {
                watch(WatchKind::Child, path)?;
            }
            // Straight into the reply's bytes: no string per child.
            let names = ChildNames::encode_names(sorted_children(state, path).map(Node::name))
                .map_err(|_| ErrorCode::Internal)?;
            Ok(OpResult::Children {
                names,
                stat: n.stat(),
            })
        }),
        Op::GetChildrenWithStat { path, watch: set } => node(path).and_then(|n| {
            if *set {
                watch(WatchKind::Child, path)?;
            }
            let children = sorted_children(state, path)
                .map(|child| ChildEntry {
                    name: child.name().to_owned(),
                    stat: child.stat(),
                })
                .collect();
            Ok(OpResult::ChildrenWithStat {
                children,
                stat: n.stat(),
            })
        }),
        Op::ChildrenBelow {
            path,
            sequence,
            limit,
        } => node(path).map(|n| {
            let limit = (*limit).min(CHILDREN_BELOW_MAX) as usize;
            // One pass over the names, keeping the `limit` highest below
            // `sequence`: no allocation per child, one lookup per result.
            let mut best: Vec<(u64, &Node)> = Vec::with_capacity(limit + 1);
            for child in state.tree.children(path).into_iter().flat_map(|c| c.iter()) {
                let Some(seq) = arbor_protocol::path::parse_sequence(child.name()) else {
                    continue;
                };
                if seq >= *sequence
                    || (best.len() == limit && best.last().is_some_and(|b| b.0 >= seq))
                {
                    continue;
                }
                let at = best.partition_point(|b| b.0 > seq);
                best.insert(at, (seq, child));
                best.truncate(limit);
            }
            let children = best
                .into_iter()
                .map(|(_, child)| ChildEntry {
                    name: child.name().to_owned(),
                    stat: child.stat(),
                })
                .collect();
            OpResult::ChildrenWithStat {
                children,
                stat: n.stat(),
            }
        }),
        // Taken by prep before it gets here (they are no reads).
        Op::AddMember { .. } | Op::RemoveMember { .. } | Op::Admin(_) => Err(ErrorCode::BadRequest),
        Op::ClusterStatus => Ok(OpResult::ClusterStatus(
            shared
                .ensemble()
                .map(|ensemble| ensemble.status())
                .unwrap_or_default(),
        )),
        // Standalone, every acknowledged write is already applied, and this
        // session's earlier writes were answered before this runs.
        Op::Sync { path } => check_path(path).map(|()| OpResult::Synced { path: path.clone() }),
        // A persistent watch reports what the node's readers may see:
        // READ on it if it exists (a recursive one is checked again for each
        // node below, as events fire).
        Op::AddWatch { path, mode } => check_path(path).and_then(|()| {
            if state.tree.node(path).is_some_and(|n| !readable(n)) {
                return Err(ErrorCode::NoAuth);
            }
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
        Op::SetWatches(watches) => {
            set_watches(shared, session_id, state, watches).map(|()| OpResult::WatchesChanged)
        }
        Op::GetAcl { path } => get_acl(state, who(), path),
        Op::WhoAmI => Ok(OpResult::WhoAmI(who().listed())),
        Op::Ping => Ok(OpResult::Pong),
        // Writes, and auth (prep's), never come here.
        Op::Create { .. }
        | Op::CreateWithAcl { .. }
        | Op::Delete { .. }
        | Op::SetData { .. }
        | Op::SetAcl { .. }
        | Op::Auth { .. }
        | Op::Multi { .. }
        | Op::CloseSession => Err(ErrorCode::Internal),
        // Another session's ephemerals are its own business; a session's
        // own need no permission (ZooKeeper checks none either).
        Op::GetEphemerals { prefix } => check_path(prefix).map(|()| {
            let paths = state
                .tree
                .ephemerals_of(session_id)
                .filter(|path| path.starts_with(prefix.as_str()))
                .cloned()
                .collect();
            OpResult::Ephemerals(paths)
        }),
        Op::CountDescendants { path } => {
            node(path).map(|_| OpResult::DescendantCount(count_descendants(state, path)))
        }
        Op::MultiRead { ops } => {
            if ops.len() > MULTI_OPS_MAX {
                return Err(ErrorCode::TooLarge);
            }
            let results = ops
                .iter()
                .map(|op| {
                    let op = match op {
                        ReadOp::GetData { path } => Op::GetData {
                            path: path.clone(),
                            watch: false,
                        },
                        ReadOp::GetChildren { path } => Op::GetChildren {
                            path: path.clone(),
                            watch: false,
                        },
                    };
                    read(shared, session_id, state, &op)
                })
                .collect();
            Ok(OpResult::MultiRead(results))
        }
        Op::CheckWatches { path, kind } => check_path(path).and_then(|()| {
            if shared.watches.lock().has(session_id, path, *kind) {
                Ok(OpResult::Checked)
            } else {
                Err(ErrorCode::NoWatcher)
            }
        }),
    }
}

/// The nodes below `path` at any depth, walked through the children lists.
fn count_descendants(state: &StateMachine, path: &str) -> u64 {
    if path == "/" {
        return state.tree.len().saturating_sub(1) as u64;
    }
    let mut count = 0;
    let mut pending = vec![path.to_owned()];
    while let Some(parent) = pending.pop() {
        let Some(children) = state.tree.children(&parent) else {
            continue;
        };
        for child in children.iter() {
            count += 1;
            if child.num_children > 0 {
                pending.push(format!("{parent}/{}", child.name()));
            }
        }
    }
    count
}

/// A node's ACL: for READ or ADMIN on it, and without ADMIN every digest
/// shows only its user (`user:x`): a digest is a password's unsalted hash,
/// and showing it to readers was ZooKeeper's CVE-2019-0201.
fn get_acl(state: &StateMachine, who: &acl::Identity, path: &str) -> Result<OpResult, ErrorCode> {
    check_path(path)?;
    let node = state.tree.node(path).ok_or(ErrorCode::NoNode)?;
    let acl = state.tree.acl_of(node);
    if !who.may_any(acl, Perms::READ | Perms::ADMIN) {
        return Err(ErrorCode::NoAuth);
    }
    let admin = who.may(acl, Perms::ADMIN);
    let shown = acl
        .iter()
        .map(|entry| match entry.id.id.split_once(':') {
            Some((user, _)) if entry.id.scheme == DIGEST && !admin => {
                Acl::new(entry.perms, DIGEST, format!("{user}:x"))
            }
            _ => entry.clone(),
        })
        .collect();
    Ok(OpResult::Acl {
        acl: shown,
        stat: node.stat(),
    })
}

/// Re-registers a reconnecting client's watches. A one-shot watch whose node
/// changed after `relative_zxid` fires at once instead (the event goes out
/// before the reply); so does a persistent watch on a node whose data or
/// children changed. Changes below a recursive watch are not replayed: the
/// client re-reads after it reconnects.
fn set_watches(
    shared: &Shared,
    session_id: SessionId,
    state: &StateMachine,
    watches: &SetWatches,
) -> Result<(), ErrorCode> {
    // A node this session may no longer read (its ACL changed while the
    // client was away) gets no watch and tells nothing: the watch was
    // allowed on what the node was, not on what it is.
    let who = state.identity(session_id);
    let hidden = |path: &str| {
        state.tree.node(path).is_some_and(|n| {
            n.acl_id() != acl::table::OPEN && !state.tree.allows(n, who, Perms::READ)
        })
    };
    let after = watches.relative_zxid;
    let mut fired = Vec::new();
    let mut register = Vec::new();
    let event = |event_type, path: &str, zxid| WatchEvent {
        event_type,
        path: path.to_owned(),
        zxid,
    };
    for path in watches.data.iter() {
        check_path(path)?;
        if hidden(path) {
            continue;
        }
        match state.tree.node(path) {
            None => fired.push(event(EventType::NodeDeleted, path, state.last_zxid())),
            Some(n) if n.mzxid > after => {
                fired.push(event(EventType::NodeDataChanged, path, n.mzxid))
            }
            Some(_) => register.push((WatchKind::Data, path)),
        }
    }
    for path in watches.exist.iter() {
        check_path(path)?;
        match state.tree.node(path) {
            Some(n) => fired.push(event(EventType::NodeCreated, path, n.czxid)),
            None => register.push((WatchKind::Data, path)),
        }
    }
    for path in watches.child.iter() {
        check_path(path)?;
        if hidden(path) {
            continue;
        }
        match state.tree.node(path) {
            None => fired.push(event(EventType::NodeDeleted, path, state.last_zxid())),
            Some(n) if n.pzxid > after => {
                fired.push(event(EventType::NodeChildrenChanged, path, n.pzxid))
            }
            Some(_) => register.push((WatchKind::Child, path)),
        }
    }
    let persistent = watches
        .persistent
        .iter()
        .map(|p| (WatchKind::Persistent, p))
        .chain(
            watches
                .persistent_recursive
                .iter()
                .map(|p| (WatchKind::PersistentRecursive, p)),
        );
    for (kind, path) in persistent {
        check_path(path)?;
        if hidden(path) {
            continue;
        }
        register.push((kind, path));
        if let Some(n) = state.tree.node(path) {
            if n.mzxid > after {
                fired.push(event(EventType::NodeDataChanged, path, n.mzxid));
            }
            if kind == WatchKind::Persistent && n.pzxid > after && n.pzxid != n.czxid {
                fired.push(event(EventType::NodeChildrenChanged, path, n.pzxid));
            }
        }
    }
    {
        let mut manager = shared.watches.lock();
        for (kind, path) in register {
            manager.add(session_id, kind, path)?;
        }
    }
    // One event per change, as a live trigger sends: a node deleted under
    // both a data and a child watch is one NodeDeleted, which the client
    // routes to both (and to its persistent watchers only once).
    let mut sent = std::collections::HashSet::new();
    fired.retain(|e| sent.insert((e.event_type, e.path.clone())));
    let connections = shared.connections.lock();
    for event in fired {
        connections.deliver(session_id, event);
    }
    Ok(())
}
