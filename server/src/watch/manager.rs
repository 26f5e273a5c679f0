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

use std::hash::BuildHasher;
use std::num::NonZeroU8;

// foldhash, randomly seeded: every change looks its path up here, and
// SipHash showed in profiles of write load; the seed keeps clients from
// choosing colliding paths.
use foldhash::fast::RandomState;
use foldhash::{HashMap, HashMapExt, HashSet};
use hashbrown::HashTable;

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

/// A set of [`WatchKind`]s, one bit each.
type Kinds = u8;

impl WatchKind {
    /// Every kind, in the order [`WatchSummary::by_kind`] counts them.
    pub const ALL: [WatchKind; 4] = [
        WatchKind::Data,
        WatchKind::Child,
        WatchKind::Persistent,
        WatchKind::PersistentRecursive,
    ];

    /// The kind's name in metrics and listings.
    pub fn name(self) -> &'static str {
        match self {
            WatchKind::Data => "data",
            WatchKind::Child => "child",
            WatchKind::Persistent => "persistent",
            WatchKind::PersistentRecursive => "persistent_recursive",
        }
    }

    const fn bit(self) -> Kinds {
        match self {
            WatchKind::Data => 1,
            WatchKind::Child => 2,
            WatchKind::Persistent => 4,
            WatchKind::PersistentRecursive => 8,
        }
    }
}

/// The index of a kind's bit in [`WatchKind::ALL`].
fn kind_index(bit: Kinds) -> usize {
    bit.trailing_zeros() as usize
}

/// One session's registrations on one path. A watcher with no kinds left
/// is removed, so `kinds` is never 0, and that spare value is where
/// [`Watchers`] keeps its variant: 16 bytes, not 24.
#[derive(Debug, Clone, Copy)]
struct Watcher {
    session_id: SessionId,
    kinds: NonZeroU8,
}

impl Watcher {
    fn new(session_id: SessionId, kind: WatchKind) -> Self {
        let kinds = NonZeroU8::new(kind.bit()).expect("every kind has a bit");
        Watcher { session_id, kinds }
    }

    fn has_any(&self, kinds: Kinds) -> bool {
        self.kinds.get() & kinds != 0
    }
}

/// The sessions watching one path. Most paths have one (a lock waiter's
/// predecessor, a worker's own node), kept inline.
#[derive(Debug)]
enum Watchers {
    One(Watcher),
    // Boxed, the enum is 16 bytes rather than 24; a path with two watchers
    // can afford the second allocation.
    #[allow(clippy::box_collection)]
    Many(Box<Vec<Watcher>>),
}

impl Watchers {
    fn as_slice(&self) -> &[Watcher] {
        match self {
            Watchers::One(watcher) => std::slice::from_ref(watcher),
            Watchers::Many(watchers) => watchers,
        }
    }

    fn get_mut(&mut self, session_id: SessionId) -> Option<&mut Watcher> {
        match self {
            Watchers::One(watcher) => Some(watcher).filter(|w| w.session_id == session_id),
            Watchers::Many(watchers) => watchers.iter_mut().find(|w| w.session_id == session_id),
        }
    }

    fn push(&mut self, watcher: Watcher) {
        match self {
            Watchers::One(first) => *self = Watchers::Many(Box::new(vec![*first, watcher])),
            Watchers::Many(watchers) => watchers.push(watcher),
        }
    }

    /// Gives each watcher the kinds `update` returns for it (from its
    /// session and current kinds), removing those left with none; returns
    /// whether none is left.
    fn retain(&mut self, mut update: impl FnMut(SessionId, Kinds) -> Kinds) -> bool {
        let mut keep = |watcher: &mut Watcher| match NonZeroU8::new(update(
            watcher.session_id,
            watcher.kinds.get(),
        )) {
            Some(kinds) => {
                watcher.kinds = kinds;
                true
            }
            None => false,
        };
        match self {
            Watchers::One(watcher) => !keep(watcher),
            Watchers::Many(watchers) => {
                watchers.retain_mut(keep);
                match watchers.as_slice() {
                    [] => true,
                    [only] => {
                        *self = Watchers::One(*only);
                        false
                    }
                    _ => false,
                }
            }
        }
    }
}

/// Everyone watching one path. The path is held here once, however many
/// sessions and kinds watch it: a watch costs its path and a few words, not
/// two copies of the path and a set per kind.
#[derive(Debug)]
struct Watched {
    path: Box<str>,
    watchers: Watchers,
}

impl Watched {
    fn has(&self, session_id: SessionId) -> bool {
        self.watchers
            .as_slice()
            .iter()
            .any(|w| w.session_id == session_id)
    }
}

/// What the manager knows of one session: enough to find its watches again
/// without a second copy of their paths.
#[derive(Debug, Default)]
struct SessionWatches {
    /// Registrations, each (kind, path) once: what the limit counts.
    count: usize,
    /// The bytes of the paths of those registrations: a session watching
    /// 100 000 paths of 4 KB held 820 MB when only `count` was limited.
    path_bytes: usize,
    /// The hashes of the paths it watches. A hash that two paths share
    /// finds both; the session is looked for in each.
    hashes: HashSet<u64>,
}

/// Bytes of watched paths one session may register (each registration of a
/// path counts its length), beside the configured count of watches: room
/// for 50 000 watches of 1 KB paths (what `arbor-bench watch-memory` sets
/// from one session), an eighth of what the count alone let 4 KB paths
/// take.
pub const WATCH_PATH_BYTES_PER_SESSION_MAX: usize = 64 * 1024 * 1024;

/// How much is watched, as `wchs` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchSummary {
    /// Sessions with at least one watch.
    pub sessions: usize,
    /// Paths with at least one watcher.
    pub paths: usize,
    /// Registrations: a path a session watches for data and for children
    /// counts twice (as ZooKeeper's `zk_watch_count` counts them), the figure
    /// `watches_per_session_max` limits.
    pub watches: usize,
    /// Registrations by kind, in [`WatchKind::ALL`]'s order.
    pub by_kind: [usize; 4],
}

#[derive(Debug)]
pub struct WatchManager {
    /// Watched paths, boxed so that a table slot is one word: the table is
    /// rehashed as it grows, and most lookups (every change is one) miss.
    paths: HashTable<Box<Watched>>,
    by_session: HashMap<SessionId, SessionWatches>,
    /// Recursive registrations: while there are none, a change does not
    /// look up its ancestors.
    recursive: usize,
    /// Registrations by kind (as [`WatchKind::ALL`]), kept as they come and
    /// go so that a metric does not walk every path.
    by_kind: [usize; 4],
    hasher: RandomState,
    watches_per_session_max: usize,
    /// Every path hashes alike: only tests set it, to exercise collisions.
    collide: bool,
}

fn path_hash(hasher: &RandomState, collide: bool, path: &str) -> u64 {
    if collide {
        0
    } else {
        hasher.hash_one(path)
    }
}

/// One-shot kinds a change fires and clears, and whether recursive watches
/// of the path and its ancestors fire; persistent watches of the path
/// always do.
fn fired_by(change: &Change) -> (EventType, &str, Kinds, bool) {
    let data = WatchKind::Data.bit();
    let child = WatchKind::Child.bit();
    match change {
        Change::Created(p) => (EventType::NodeCreated, p, data, true),
        Change::DataChanged(p) => (EventType::NodeDataChanged, p, data, true),
        Change::Deleted(p, _) => (EventType::NodeDeleted, p, data | child, true),
        Change::ChildrenChanged(p) => (EventType::NodeChildrenChanged, p, child, false),
    }
}

impl WatchManager {
    pub fn new(watches_per_session_max: usize) -> Self {
        Self {
            paths: HashTable::new(),
            by_session: HashMap::new(),
            recursive: 0,
            by_kind: [0; 4],
            hasher: RandomState::default(),
            watches_per_session_max,
            collide: false,
        }
    }

    /// A manager whose paths all share one hash.
    #[cfg(test)]
    fn colliding(watches_per_session_max: usize) -> Self {
        Self {
            collide: true,
            ..Self::new(watches_per_session_max)
        }
    }

    fn hash(&self, path: &str) -> u64 {
        path_hash(&self.hasher, self.collide, path)
    }

    /// Registers a watch. Registering the same watch twice is one watch.
    pub fn add(
        &mut self,
        session_id: SessionId,
        kind: WatchKind,
        path: &str,
    ) -> Result<(), ErrorCode> {
        let hash = self.hash(path);
        let bit = kind.bit();
        let (count, path_bytes) = self
            .by_session
            .get(&session_id)
            .map_or((0, 0), |mine| (mine.count, mine.path_bytes));
        let entry = self.paths.find_mut(hash, |w| &*w.path == path);
        let existing = entry.as_ref().and_then(|w| {
            w.watchers
                .as_slice()
                .iter()
                .find(|w| w.session_id == session_id)
        });
        if existing.is_some_and(|w| w.has_any(bit)) {
            return Ok(());
        }
        if count >= self.watches_per_session_max
            || path_bytes + path.len() > WATCH_PATH_BYTES_PER_SESSION_MAX
        {
            return Err(ErrorCode::LimitExceeded);
        }
        match entry {
            Some(watched) => match watched.watchers.get_mut(session_id) {
                Some(watcher) => watcher.kinds |= bit,
                None => watched.watchers.push(Watcher::new(session_id, kind)),
            },
            None => {
                let watched = Box::new(Watched {
                    path: path.into(),
                    watchers: Watchers::One(Watcher::new(session_id, kind)),
                });
                let (hasher, collide) = (&self.hasher, self.collide);
                self.paths
                    .insert_unique(hash, watched, |w| path_hash(hasher, collide, &w.path));
            }
        }
        let mine = self.by_session.entry(session_id).or_default();
        mine.count += 1;
        self.by_kind[kind_index(bit)] += 1;
        mine.path_bytes += path.len();
        mine.hashes.insert(hash);
        if kind == WatchKind::PersistentRecursive {
            self.recursive += 1;
        }
        Ok(())
    }

    /// Whether a session has a watch of the given kinds on `path`.
    pub fn has(&self, session_id: SessionId, path: &str, which: WatcherKind) -> bool {
        let kinds = kinds_of(which);
        self.paths
            .find(self.hash(path), |w| &*w.path == path)
            .is_some_and(|watched| {
                watched
                    .watchers
                    .as_slice()
                    .iter()
                    .any(|watcher| watcher.session_id == session_id && watcher.has_any(kinds))
            })
    }

    /// Removes a session's watches of the given kinds on `path`. Returns
    /// whether any was there (ZooKeeper answers `NoWatcher` otherwise).
    pub fn remove(&mut self, session_id: SessionId, path: &str, which: WatcherKind) -> bool {
        let kinds = kinds_of(which);
        let hash = self.hash(path);
        let Ok(mut entry) = self.paths.find_entry(hash, |w| &*w.path == path) else {
            return false;
        };
        let mut removed = 0;
        let none_left = entry.get_mut().watchers.retain(|watcher, has| {
            if watcher != session_id {
                return has;
            }
            removed = has & kinds;
            has & !kinds
        });
        if none_left {
            entry.remove();
        }
        if removed == 0 {
            return false;
        }
        self.forget(session_id, hash, removed, path.len());
        true
    }

    /// Drops every watch of a session (its connection ended).
    pub fn remove_session(&mut self, session_id: SessionId) {
        let Some(mine) = self.by_session.remove(&session_id) else {
            return;
        };
        for hash in mine.hashes {
            // Each path of this hash that the session watches (paths may
            // share a hash).
            while let Ok(mut entry) = self.paths.find_entry(hash, |w| w.has(session_id)) {
                let mut kinds = 0;
                let none_left = entry.get_mut().watchers.retain(|watcher, has| {
                    if watcher != session_id {
                        return has;
                    }
                    kinds = has;
                    0
                });
                if none_left {
                    entry.remove();
                }
                self.count_out(kinds);
            }
        }
    }

    /// Takes `removed` kinds out of the counts by kind.
    fn count_out(&mut self, removed: Kinds) {
        if removed & WatchKind::PersistentRecursive.bit() != 0 {
            self.recursive -= 1;
        }
        for kind in WatchKind::ALL {
            if removed & kind.bit() != 0 {
                let count = &mut self.by_kind[kind_index(kind.bit())];
                *count = count.saturating_sub(1);
            }
        }
    }

    /// Accounts for `removed` kinds a session no longer has on a path of
    /// `hash` and `path_len` bytes.
    fn forget(&mut self, session_id: SessionId, hash: u64, removed: Kinds, path_len: usize) {
        self.count_out(removed);
        let still_there = self
            .paths
            .iter_hash(hash)
            .any(|watched| watched.has(session_id));
        let Some(mine) = self.by_session.get_mut(&session_id) else {
            return;
        };
        let registrations = removed.count_ones() as usize;
        mine.count = mine.count.saturating_sub(registrations);
        mine.path_bytes = mine.path_bytes.saturating_sub(registrations * path_len);
        if !still_there {
            mine.hashes.remove(&hash);
        }
        if mine.count == 0 {
            self.by_session.remove(&session_id);
        }
    }

    /// Number of watches a session holds.
    pub fn count(&self, session_id: SessionId) -> usize {
        self.by_session
            .get(&session_id)
            .map_or(0, |mine| mine.count)
    }

    /// Every watched path with the sessions watching it, in no particular
    /// order (`wchp`). A caller that stops early pays only for what it read.
    pub fn sessions_by_path(
        &self,
    ) -> impl ExactSizeIterator<Item = (&str, impl Iterator<Item = SessionId> + '_)> + '_ {
        self.paths.iter().map(|watched| {
            let sessions = watched.watchers.as_slice().iter().map(|w| w.session_id);
            (&*watched.path, sessions)
        })
    }

    /// Every session with watches, with the paths it watches, in no
    /// particular order (`wchc`). Found through the session's path hashes,
    /// so listing one session costs its own watches, not a scan.
    pub fn paths_by_session(
        &self,
    ) -> impl ExactSizeIterator<Item = (SessionId, impl Iterator<Item = &str> + '_)> + '_ {
        let table = &self.paths;
        self.by_session.iter().map(move |(&session_id, mine)| {
            let paths = mine.hashes.iter().flat_map(move |&hash| {
                table
                    .iter_hash(hash)
                    .filter(move |watched| watched.has(session_id))
                    .map(|watched| &*watched.path)
            });
            (session_id, paths)
        })
    }

    /// The counts `wchs` reports.
    pub fn summary(&self) -> WatchSummary {
        WatchSummary {
            sessions: self.by_session.len(),
            paths: self.paths.len(),
            watches: self.by_session.values().map(|mine| mine.count).sum(),
            by_kind: self.by_kind,
        }
    }

    /// Fires the watches a change matches; returns one event per session.
    /// A persistent or recursive watch fires only for sessions `may_see`
    /// lets through (READ on the changed node, as it is now): a recursive
    /// watch was allowed on an ancestor, not on whatever is below it
    /// (ZooKeeper's CVE-2024-23944), and a persistent one on what the node's
    /// ACL was when it was set. A one-shot watch fires once whatever: it
    /// was set by a read that passed.
    pub fn trigger(
        &mut self,
        change: &Change,
        zxid: Zxid,
        mut may_see: impl FnMut(SessionId) -> bool,
    ) -> Vec<(SessionId, WatchEvent)> {
        let (event_type, path, one_shot, recursive) = fired_by(change);
        let recursive_bit = if recursive {
            WatchKind::PersistentRecursive.bit()
        } else {
            0
        };
        let lasting = WatchKind::Persistent.bit() | recursive_bit;
        let mut sessions: Vec<SessionId> = Vec::new();
        // One-shot registrations that fired: (session, kinds).
        let mut spent: Vec<(SessionId, Kinds)> = Vec::new();
        let hash = self.hash(path);
        if let Ok(mut entry) = self.paths.find_entry(hash, |w| &*w.path == path) {
            let none_left = entry.get_mut().watchers.retain(|watcher, has| {
                if has & one_shot != 0 || (has & lasting != 0 && may_see(watcher)) {
                    sessions.push(watcher);
                }
                if has & one_shot != 0 {
                    spent.push((watcher, has & one_shot));
                }
                has & !one_shot
            });
            if none_left {
                entry.remove();
            }
        }
        for (session_id, kinds) in spent {
            self.forget(session_id, hash, kinds, path.len());
        }
        if recursive && self.recursive > 0 {
            let mut at = path::parent(path);
            while let Some(p) = at {
                let found = self.paths.find(self.hash(p), |w| &*w.path == p);
                if let Some(watched) = found {
                    sessions.extend(
                        watched
                            .watchers
                            .as_slice()
                            .iter()
                            .filter(|w| w.has_any(recursive_bit))
                            .map(|w| w.session_id)
                            .filter(|&session_id| may_see(session_id)),
                    );
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
                    path: path.to_owned(),
                    zxid,
                };
                (session_id, event)
            })
            .collect()
    }
}

/// The kinds a `WatcherKind` of removeWatches or checkWatches names.
fn kinds_of(which: WatcherKind) -> Kinds {
    match which {
        WatcherKind::Children => WatchKind::Child.bit(),
        WatcherKind::Data => WatchKind::Data.bit(),
        WatcherKind::Persistent => WatchKind::Persistent.bit(),
        WatcherKind::PersistentRecursive => WatchKind::PersistentRecursive.bit(),
        WatcherKind::Any => Kinds::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fired(manager: &mut WatchManager, change: Change) -> Vec<SessionId> {
        manager
            .trigger(&change, 1, |_| true)
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
        let events = m.trigger(&Change::Deleted("/a".into(), None), 9, |_| true);
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
        assert_eq!(
            fired(&mut m, Change::Deleted("/lock/n41".into(), None)),
            vec![41]
        );
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

    // Proves that paths sharing a hash are kept apart: each fires, is
    // counted and is removed on its own.
    #[test]
    fn paths_that_share_a_hash_stay_apart() {
        let mut m = WatchManager::colliding(100);
        m.add(1, WatchKind::Data, "/a").expect("added");
        m.add(1, WatchKind::Child, "/b").expect("added");
        m.add(2, WatchKind::Data, "/a").expect("added");
        m.add(1, WatchKind::Persistent, "/c").expect("added");
        assert_eq!(m.count(1), 3);
        assert_eq!(fired(&mut m, Change::DataChanged("/a".into())), vec![1, 2]);
        assert_eq!((m.count(1), m.count(2)), (2, 0));
        assert!(fired(&mut m, Change::DataChanged("/b".into())).is_empty());
        assert_eq!(fired(&mut m, Change::ChildrenChanged("/b".into())), vec![1]);
        assert!(!m.remove(1, "/b", WatcherKind::Children));
        m.add(2, WatchKind::Persistent, "/c").expect("added");
        m.remove_session(1);
        assert_eq!(m.count(1), 0);
        assert_eq!(fired(&mut m, Change::DataChanged("/c".into())), vec![2]);
        assert!(m.remove(2, "/c", WatcherKind::Any));
        assert!(m.paths.is_empty() && m.by_session.is_empty());
    }

    #[test]
    fn watched_path_bytes_are_limited_per_session_and_given_back() {
        let mut m = WatchManager::new(usize::MAX);
        let long = format!("/{}", "p".repeat(4095));
        let fits = WATCH_PATH_BYTES_PER_SESSION_MAX / long.len();
        for i in 0..fits {
            let path = format!("{}{i:08}", &long[..long.len() - 8]);
            m.add(1, WatchKind::Data, &path)
                .expect("within the bytes limit");
        }
        let one_more = format!("{}x", &long[..long.len() - 1]);
        assert_eq!(
            m.add(1, WatchKind::Data, &one_more),
            Err(ErrorCode::LimitExceeded)
        );
        // Another session has its own budget; a fired one-shot watch gives
        // its bytes back.
        m.add(2, WatchKind::Data, &one_more)
            .expect("another session");
        let first = format!("{}{:08}", &long[..long.len() - 8], 0);
        assert_eq!(fired(&mut m, Change::DataChanged(first)), vec![1]);
        m.add(1, WatchKind::Data, &one_more).expect("room again");
    }

    // Persistent and recursive watches reveal a change only to the sessions
    // the check lets through; one-shot watches fire as set.
    #[test]
    fn lasting_watches_fire_only_for_sessions_that_may_see() {
        let mut m = WatchManager::new(100);
        m.add(1, WatchKind::PersistentRecursive, "/")
            .expect("added");
        m.add(2, WatchKind::PersistentRecursive, "/")
            .expect("added");
        m.add(2, WatchKind::Persistent, "/secret/child")
            .expect("added");
        m.add(3, WatchKind::PersistentRecursive, "/secret/child")
            .expect("added");
        let mut asked = Vec::new();
        let mut events: Vec<SessionId> = m
            .trigger(&Change::DataChanged("/secret/child".into()), 4, |session| {
                asked.push(session);
                session == 1
            })
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        events.sort_unstable();
        assert_eq!(
            events,
            vec![1],
            "lasting watches need the check, on the node too"
        );
        asked.sort_unstable();
        asked.dedup();
        assert_eq!(asked, vec![1, 2, 3]);
        let below: Vec<SessionId> = m
            .trigger(&Change::Created("/secret/child/x".into()), 5, |session| {
                session == 1
            })
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        assert_eq!(below, vec![1]);
        // A one-shot watch fires once whatever the check says.
        m.add(4, WatchKind::Data, "/secret/child").expect("added");
        let one_shot: Vec<SessionId> = m
            .trigger(&Change::DataChanged("/secret/child".into()), 7, |_| false)
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        assert_eq!(one_shot, vec![4]);
    }

    // Proves recursive watches are counted out however they go, so changes
    // stop walking their ancestors once none is left.
    #[test]
    fn recursive_watches_are_counted_out() {
        let mut m = WatchManager::new(100);
        m.add(1, WatchKind::PersistentRecursive, "/a")
            .expect("added");
        m.add(1, WatchKind::PersistentRecursive, "/a")
            .expect("added twice");
        m.add(2, WatchKind::PersistentRecursive, "/b")
            .expect("added");
        assert_eq!(m.recursive, 2);
        assert_eq!(
            fired(&mut m, Change::Deleted("/a/x/y".into(), None)),
            vec![1]
        );
        m.remove_session(1);
        assert!(m.remove(2, "/b", WatcherKind::PersistentRecursive));
        assert_eq!(m.recursive, 0);
        assert!(m.paths.is_empty() && m.by_session.is_empty());
    }

    // Proves the counts by kind follow adds, firing, removal and a
    // session's end, and add up to the registrations.
    #[test]
    fn counts_by_kind_follow_every_change() {
        let mut m = WatchManager::new(100);
        m.add(1, WatchKind::Data, "/a").expect("added");
        m.add(1, WatchKind::Child, "/a").expect("added");
        m.add(2, WatchKind::Data, "/a").expect("added");
        m.add(2, WatchKind::Persistent, "/b").expect("added");
        m.add(3, WatchKind::PersistentRecursive, "/")
            .expect("added");
        assert_eq!(m.summary().by_kind, [2, 1, 1, 1]);
        fired(&mut m, Change::DataChanged("/a".into()));
        assert_eq!(m.summary().by_kind, [0, 1, 1, 1]);
        m.remove_session(2);
        assert!(m.remove(3, "/", WatcherKind::PersistentRecursive));
        let summary = m.summary();
        assert_eq!(summary.by_kind, [0, 1, 0, 0]);
        assert_eq!(summary.by_kind.iter().sum::<usize>(), summary.watches);
    }

    // A path watched by several sessions is held once; one watched path is
    // a pointer in the table and a small box beside its path.
    #[test]
    fn a_watched_path_is_small() {
        assert_eq!(std::mem::size_of::<Watchers>(), 16);
        assert!(std::mem::size_of::<Watched>() <= 32);
        let mut m = WatchManager::new(100);
        for session in 0..10 {
            m.add(session, WatchKind::Data, "/shared").expect("added");
        }
        assert_eq!(m.paths.len(), 1);
        m.remove_session(3);
        assert_eq!(
            fired(&mut m, Change::Deleted("/shared".into(), None)).len(),
            9
        );
        assert!(m.paths.is_empty());
    }
}
