//! The watch manager: registrations by path, fired at the moment of change.
//!
//! Firing costs O(watchers of the changed path) — plus, only while any
//! recursive watch exists, one lookup per ancestor. A lock waiter's exists
//! watch on its predecessor therefore wakes exactly that waiter.
//!
//! One-shot watches (data/exists and child) are removed when they fire;
//! persistent and persistent-recursive watches stay until removed. A session
//! receives at most one event per change however many of its watches match;
//! the client routes it to its own watchers. Watches belong to a connection:
//! the server drops a session's watches when its connection ends, and the
//! client registers them again on the next one.

// foldhash, randomly seeded: every change looks its path up here, and
// SipHash showed in profiles of write load; the seed keeps clients from
// choosing colliding paths.
use foldhash::{HashMap, HashMapExt, HashSet};

use arbor_protocol::{path, ErrorCode, EventType, SessionId, WatchEvent, WatcherKind, Zxid};

use crate::tree::Change;

/// The kinds of registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchKind {
    /// One-shot: set by get-data and exists; fires on create, delete, data change.
    Data,
    /// One-shot: set by get-children; fires on child list change and delete.
    Child,
    /// Fires on every change of the node and of its child list.
    Persistent,
    /// Fires on create, delete and data change at or below the path.
    PersistentRecursive,
}

type Watchers = HashMap<String, HashSet<SessionId>>;

#[derive(Debug)]
pub struct WatchManager {
    data: Watchers,
    child: Watchers,
    persistent: Watchers,
    recursive: Watchers,
    by_session: HashMap<SessionId, HashSet<(WatchKind, String)>>,
    watches_per_session_max: usize,
}

impl WatchManager {
    pub fn new(watches_per_session_max: usize) -> Self {
        Self {
            data: HashMap::new(),
            child: HashMap::new(),
            persistent: HashMap::new(),
            recursive: HashMap::new(),
            by_session: HashMap::new(),
            watches_per_session_max,
        }
    }

    fn table(&mut self, kind: WatchKind) -> &mut Watchers {
        match kind {
            WatchKind::Data => &mut self.data,
            WatchKind::Child => &mut self.child,
            WatchKind::Persistent => &mut self.persistent,
            WatchKind::PersistentRecursive => &mut self.recursive,
        }
    }

    /// Registers a watch. Registering the same watch twice is one watch.
    pub fn add(
        &mut self,
        session_id: SessionId,
        kind: WatchKind,
        path: &str,
    ) -> Result<(), ErrorCode> {
        let limit = self.watches_per_session_max;
        let mine = self.by_session.entry(session_id).or_default();
        let key = (kind, path.to_owned());
        if mine.contains(&key) {
            return Ok(());
        }
        if mine.len() >= limit {
            return Err(ErrorCode::LimitExceeded);
        }
        mine.insert(key);
        self.table(kind)
            .entry(path.to_owned())
            .or_default()
            .insert(session_id);
        Ok(())
    }

    /// Removes a session's watches of the given kinds on `path`. Returns
    /// whether any was there (ZooKeeper answers `NoWatcher` otherwise).
    pub fn remove(&mut self, session_id: SessionId, path: &str, which: WatcherKind) -> bool {
        let kinds: &[WatchKind] = match which {
            WatcherKind::Children => &[WatchKind::Child],
            WatcherKind::Data => &[WatchKind::Data],
            WatcherKind::Persistent => &[WatchKind::Persistent],
            WatcherKind::PersistentRecursive => &[WatchKind::PersistentRecursive],
            WatcherKind::Any => &[
                WatchKind::Data,
                WatchKind::Child,
                WatchKind::Persistent,
                WatchKind::PersistentRecursive,
            ],
        };
        let mut removed = false;
        for &kind in kinds {
            removed |= self.remove_one(session_id, kind, path);
        }
        removed
    }

    fn remove_one(&mut self, session_id: SessionId, kind: WatchKind, path: &str) -> bool {
        let Some(mine) = self.by_session.get_mut(&session_id) else {
            return false;
        };
        if !mine.remove(&(kind, path.to_owned())) {
            return false;
        }
        if mine.is_empty() {
            self.by_session.remove(&session_id);
        }
        unregister(self.table(kind), path, session_id);
        true
    }

    /// Drops every watch of a session (its connection ended).
    pub fn remove_session(&mut self, session_id: SessionId) {
        let Some(mine) = self.by_session.remove(&session_id) else {
            return;
        };
        for (kind, path) in mine {
            unregister(self.table(kind), &path, session_id);
        }
    }

    /// Number of watches a session holds.
    pub fn count(&self, session_id: SessionId) -> usize {
        self.by_session.get(&session_id).map_or(0, HashSet::len)
    }

    /// Fires the watches a change matches; returns one event per session.
    pub fn trigger(&mut self, change: &Change, zxid: Zxid) -> Vec<(SessionId, WatchEvent)> {
        let (event_type, path, one_shot, recursive): (_, _, &[WatchKind], _) = match change {
            Change::Created(p) => (EventType::NodeCreated, p, &[WatchKind::Data], true),
            Change::DataChanged(p) => (EventType::NodeDataChanged, p, &[WatchKind::Data], true),
            Change::Deleted(p) => (
                EventType::NodeDeleted,
                p,
                &[WatchKind::Data, WatchKind::Child],
                true,
            ),
            Change::ChildrenChanged(p) => (
                EventType::NodeChildrenChanged,
                p,
                &[WatchKind::Child],
                false,
            ),
        };
        let mut sessions: Vec<SessionId> = Vec::new();
        for &kind in one_shot {
            if let Some(fired) = self.table(kind).remove(path.as_str()) {
                for session_id in fired {
                    self.forget(session_id, kind, path);
                    sessions.push(session_id);
                }
            }
        }
        if let Some(set) = self.persistent.get(path.as_str()) {
            sessions.extend(set.iter().copied());
        }
        if recursive && !self.recursive.is_empty() {
            let mut at = Some(path.as_str());
            while let Some(p) = at {
                if let Some(set) = self.recursive.get(p) {
                    sessions.extend(set.iter().copied());
                }
                at = path::parent(p);
            }
        }
        sessions.sort_unstable();
        sessions.dedup();
        sessions
            .into_iter()
            .map(|session_id| {
                let event = WatchEvent {
                    event_type,
                    path: path.clone(),
                    zxid,
                };
                (session_id, event)
            })
            .collect()
    }

    fn forget(&mut self, session_id: SessionId, kind: WatchKind, path: &str) {
        if let Some(mine) = self.by_session.get_mut(&session_id) {
            mine.remove(&(kind, path.to_owned()));
            if mine.is_empty() {
                self.by_session.remove(&session_id);
            }
        }
    }
}

fn unregister(table: &mut Watchers, path: &str, session_id: SessionId) {
    if let Some(set) = table.get_mut(path) {
        set.remove(&session_id);
        if set.is_empty() {
            table.remove(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fired(manager: &mut WatchManager, change: Change) -> Vec<SessionId> {
        manager
            .trigger(&change, 1)
            .into_iter()
            .map(|(s, _)| s)
            .collect()
    }

    #[test]
    fn one_shot_watches_fire_once() {
        let mut m = WatchManager::new(100);
        m.add(1, WatchKind::Data, "/a").expect("added");
        assert_eq!(fired(&mut m, Change::DataChanged("/a".into())), vec![1]);
        assert!(fired(&mut m, Change::DataChanged("/a".into())).is_empty());
        assert_eq!(m.count(1), 0);
    }

    #[test]
    fn delete_fires_data_and_child_watches_as_one_event() {
        let mut m = WatchManager::new(100);
        m.add(1, WatchKind::Data, "/a").expect("added");
        m.add(1, WatchKind::Child, "/a").expect("added");
        m.add(2, WatchKind::Child, "/a").expect("added");
        let events = m.trigger(&Change::Deleted("/a".into()), 9);
        assert_eq!(events.len(), 2);
        assert!(events
            .iter()
            .all(|(_, e)| e.event_type == EventType::NodeDeleted && e.zxid == 9));
        assert_eq!(m.count(1) + m.count(2), 0);
    }

    #[test]
    fn persistent_watches_stay_and_recursive_ones_see_descendants() {
        let mut m = WatchManager::new(100);
        m.add(1, WatchKind::Persistent, "/a").expect("added");
        m.add(2, WatchKind::PersistentRecursive, "/a")
            .expect("added");
        for _ in 0..2 {
            assert_eq!(fired(&mut m, Change::DataChanged("/a".into())), vec![1, 2]);
        }
        assert_eq!(fired(&mut m, Change::Created("/a/b/c".into())), vec![2]);
        assert_eq!(fired(&mut m, Change::ChildrenChanged("/a".into())), vec![1]);
        assert!(fired(&mut m, Change::Created("/ab".into())).is_empty());
    }

    #[test]
    fn only_the_watched_path_fires() {
        let mut m = WatchManager::new(1000);
        for session in 0..100u64 {
            m.add(session, WatchKind::Data, &format!("/lock/n{session}"))
                .expect("added");
        }
        assert_eq!(fired(&mut m, Change::Deleted("/lock/n41".into())), vec![41]);
    }

    #[test]
    fn remove_and_limits() {
        let mut m = WatchManager::new(2);
        m.add(1, WatchKind::Data, "/a").expect("added");
        m.add(1, WatchKind::Persistent, "/a").expect("added");
        assert_eq!(
            m.add(1, WatchKind::Child, "/a"),
            Err(ErrorCode::LimitExceeded)
        );
        assert!(m.remove(1, "/a", WatcherKind::Persistent));
        assert!(!m.remove(1, "/a", WatcherKind::Persistent));
        m.remove_session(1);
        assert!(fired(&mut m, Change::DataChanged("/a".into())).is_empty());
    }
}
