//! Client-side watch registry, and the handles a caller waits on.
//!
//! The server sends one [`WatchEvent`] per session for each (type, path) change,
//! however many of the session's watches it matches; this registry routes it to
//! the local watchers, as ZooKeeper's client does:
//!
//! | event                 | one-shot data/exists | one-shot child | persistent (path) | recursive (path or ancestor) |
//! |-----------------------|:--:|:--:|:--:|:--:|
//! | `NodeCreated`         | ✓ |   | ✓ | ✓ |
//! | `NodeDataChanged`     | ✓ |   | ✓ | ✓ |
//! | `NodeDeleted`         | ✓ | ✓ | ✓ | ✓ |
//! | `NodeChildrenChanged` |   | ✓ | ✓ |   |
//!
//! Invariants:
//! * A one-shot watcher is removed the moment it fires, so it fires at most once.
//! * The registry holds at most [`WATCHERS_MAX`] watchers; a registration past
//!   it is refused with [`Error::LimitExceeded`].
//! * Routing never blocks and never grows memory: a persistent stream holds at
//!   most [`PERSISTENT_WATCH_EVENTS_MAX`] undelivered events, and a stream that
//!   would need more is ended with [`Error::WatchLagged`]. Each stream channel
//!   has one slot more than that, kept free for the final error, so the reason
//!   a stream ended is always delivered.
//! * Once the client ends ([`WatchRegistry::end_all`]: expired or closed) every
//!   watcher gets the terminal error and later registrations are refused with
//!   it, so nobody waits forever. A mere connection loss ends nothing: after a
//!   resume the connection task registers every watcher again
//!   ([`WatchRegistry::set_watches`]), and the server fires at once those whose
//!   node changed meanwhile.
//!
//! The registry is plain data behind a short `parking_lot` lock: the connection
//! task routes events, callers register and drop handles. The lock is never
//! held across an `.await`.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use arbor_protocol::{AddWatchMode, EventType, SetWatches, WatchEvent, WatcherKind};
use futures_util::Stream;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

use crate::error::{Ended, Error};

/// Most watchers (one-shot and persistent) one client holds at a time.
pub const WATCHERS_MAX: usize = 65_536;

/// Most events a [`PersistentWatch`] buffers for a slow consumer before the
/// stream is ended with [`Error::WatchLagged`].
pub const PERSISTENT_WATCH_EVENTS_MAX: usize = 1024;

/// Which local table a watcher lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Table {
    /// One-shot data and exists watchers.
    Data,
    /// One-shot child watchers.
    Child,
    /// Persistent watchers of one node.
    Persistent,
    /// Persistent watchers of a node and everything below it.
    Recursive,
}

impl Table {
    const ALL: [Table; 4] = [
        Table::Data,
        Table::Child,
        Table::Persistent,
        Table::Recursive,
    ];

    fn index(self) -> usize {
        self as usize
    }

    fn for_mode(mode: AddWatchMode) -> Table {
        match mode {
            AddWatchMode::Persistent => Table::Persistent,
            AddWatchMode::PersistentRecursive => Table::Recursive,
        }
    }

    /// The tables a server-side `RemoveWatches` of `kind` empties.
    fn for_kind(kind: WatcherKind) -> &'static [Table] {
        match kind {
            WatcherKind::Children => &[Table::Child],
            WatcherKind::Data => &[Table::Data],
            WatcherKind::Any => &Table::ALL,
            WatcherKind::Persistent => &[Table::Persistent],
            WatcherKind::PersistentRecursive => &[Table::Recursive],
        }
    }
}

/// Finds one watcher again, to remove it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WatcherKey {
    table: Table,
    path: String,
    id: u64,
}

type OneshotSender = oneshot::Sender<Result<WatchEvent, Error>>;
type StreamSender = mpsc::Sender<Result<WatchEvent, Error>>;

enum Sink {
    Oneshot(OneshotSender),
    Stream(StreamSender),
}

impl Sink {
    /// Delivers `event`; returns whether the watcher stays registered.
    fn deliver(&mut self, event: &WatchEvent) -> bool {
        match self {
            // The caller removes one-shots; this only hands the event over.
            Sink::Oneshot(_) => false,
            Sink::Stream(tx) => {
                if tx.is_closed() {
                    return false;
                }
                // Keep the last slot for the final error (see module docs).
                if tx.capacity() > 1 {
                    tx.try_send(Ok(event.clone())).is_ok()
                } else {
                    let _ = tx.try_send(Err(Error::WatchLagged));
                    false
                }
            }
        }
    }

    /// Ends the watcher with `error` (the stream's last item).
    fn end(self, error: Error) {
        match self {
            Sink::Oneshot(tx) => {
                let _ = tx.send(Err(error));
            }
            Sink::Stream(tx) => {
                let _ = tx.try_send(Err(error));
            }
        }
    }
}

struct Watcher {
    id: u64,
    sink: Sink,
    /// Set by an `exists` watch on a node that did not exist: after a
    /// reconnect it is registered as an exist watch (fires on creation).
    absent: bool,
}

/// Every local watcher of one client, by table and path.
pub(crate) struct WatchRegistry {
    tables: [HashMap<String, Vec<Watcher>>; 4],
    len: usize,
    next_id: u64,
    ended: Option<Ended>,
}

impl WatchRegistry {
    pub(crate) fn new() -> Self {
        WatchRegistry {
            tables: Default::default(),
            len: 0,
            next_id: 1,
            ended: None,
        }
    }

    /// Number of registered watchers.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn add(&mut self, path: &str, table: Table, sink: Sink) -> Result<WatcherKey, Error> {
        if let Some(ended) = self.ended {
            return Err(ended.error());
        }
        if self.len >= WATCHERS_MAX {
            return Err(Error::LimitExceeded);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.tables[table.index()]
            .entry(path.to_owned())
            .or_default()
            .push(Watcher {
                id,
                sink,
                absent: false,
            });
        self.len += 1;
        Ok(WatcherKey {
            table,
            path: path.to_owned(),
            id,
        })
    }

    pub(crate) fn add_oneshot(
        &mut self,
        path: &str,
        table: Table,
    ) -> Result<(WatcherKey, oneshot::Receiver<Result<WatchEvent, Error>>), Error> {
        debug_assert!(matches!(table, Table::Data | Table::Child));
        let (tx, rx) = oneshot::channel();
        let key = self.add(path, table, Sink::Oneshot(tx))?;
        Ok((key, rx))
    }

    pub(crate) fn add_stream(
        &mut self,
        path: &str,
        mode: AddWatchMode,
    ) -> Result<(WatcherKey, mpsc::Receiver<Result<WatchEvent, Error>>), Error> {
        let (tx, rx) = mpsc::channel(PERSISTENT_WATCH_EVENTS_MAX + 1);
        let key = self.add(path, Table::for_mode(mode), Sink::Stream(tx))?;
        Ok((key, rx))
    }

    /// Removes one watcher without telling it (its handle is gone or was never
    /// handed out). Returns whether it was still registered.
    pub(crate) fn remove(&mut self, key: &WatcherKey) -> bool {
        let table = &mut self.tables[key.table.index()];
        let Some(list) = table.get_mut(&key.path) else {
            return false;
        };
        let Some(at) = list.iter().position(|w| w.id == key.id) else {
            return false;
        };
        list.swap_remove(at);
        if list.is_empty() {
            table.remove(&key.path);
        }
        self.len -= 1;
        true
    }

    /// Records that `key` was set by `exists` on a node that did not exist.
    pub(crate) fn mark_absent(&mut self, key: &WatcherKey) {
        let watcher = self.tables[key.table.index()]
            .get_mut(&key.path)
            .and_then(|list| list.iter_mut().find(|w| w.id == key.id));
        if let Some(watcher) = watcher {
            watcher.absent = true;
        }
    }

    /// Every watched path by kind, for [`arbor_protocol::Op::SetWatches`]
    /// after a resume (one entry per path and kind, sorted). A data path goes
    /// in `exist` only if every one-shot on it was set on a missing node.
    pub(crate) fn set_watches(&self, relative_zxid: u64) -> SetWatches {
        let paths = |table: Table| {
            let mut paths: Vec<String> = self.tables[table.index()].keys().cloned().collect();
            paths.sort_unstable();
            paths
        };
        // Partitioning keeps the sorted order.
        let data_table = &self.tables[Table::Data.index()];
        let (exist, data): (Vec<String>, Vec<String>) =
            paths(Table::Data).into_iter().partition(|path| {
                data_table
                    .get(path)
                    .is_some_and(|list| list.iter().all(|w| w.absent))
            });
        SetWatches {
            relative_zxid,
            data,
            exist,
            child: paths(Table::Child),
            persistent: paths(Table::Persistent),
            persistent_recursive: paths(Table::Recursive),
        }
    }

    /// The server refused to register `batch` again: its watchers can never
    /// fire, so they end with `error`. Returns how many.
    pub(crate) fn end_batch(&mut self, batch: &SetWatches, error: &Error) -> usize {
        let lists = [
            (Table::Data, &batch.data),
            (Table::Data, &batch.exist),
            (Table::Child, &batch.child),
            (Table::Persistent, &batch.persistent),
            (Table::Recursive, &batch.persistent_recursive),
        ];
        let mut ended = 0;
        for (table, paths) in lists {
            for path in paths {
                if let Some(list) = self.tables[table.index()].remove(path) {
                    ended += list.len();
                    for watcher in list {
                        watcher.sink.end(error.clone());
                    }
                }
            }
        }
        self.len -= ended;
        ended
    }

    /// Mirrors a server-side `RemoveWatches`: ends every local watcher of
    /// `kind` on `path` with [`Error::WatchRemoved`]. Returns how many.
    pub(crate) fn remove_kind(&mut self, path: &str, kind: WatcherKind) -> usize {
        let mut removed = 0;
        for &table in Table::for_kind(kind) {
            if let Some(list) = self.tables[table.index()].remove(path) {
                removed += list.len();
                for watcher in list {
                    watcher.sink.end(Error::WatchRemoved);
                }
            }
        }
        self.len -= removed;
        removed
    }

    /// Routes one event (see the module docs' table). Returns how many
    /// watchers it reached.
    pub(crate) fn route(&mut self, event: &WatchEvent) -> usize {
        let path = event.path.as_str();
        let mut reached = 0;
        match event.event_type {
            EventType::NodeCreated | EventType::NodeDataChanged => {
                reached += self.fire(Table::Data, path, event);
                reached += self.deliver(Table::Persistent, path, event);
                reached += self.deliver_recursive(path, event);
            }
            EventType::NodeDeleted => {
                reached += self.fire(Table::Data, path, event);
                reached += self.fire(Table::Child, path, event);
                reached += self.deliver(Table::Persistent, path, event);
                reached += self.deliver_recursive(path, event);
            }
            EventType::NodeChildrenChanged => {
                reached += self.fire(Table::Child, path, event);
                reached += self.deliver(Table::Persistent, path, event);
            }
        }
        reached
    }

    /// The client ended: every watcher gets `ended`'s error, and later
    /// registrations are refused with it.
    pub(crate) fn end_all(&mut self, ended: Ended) {
        if self.ended.is_none() {
            self.ended = Some(ended);
        }
        for table in &mut self.tables {
            for (_, list) in table.drain() {
                for watcher in list {
                    watcher.sink.end(ended.error());
                }
            }
        }
        self.len = 0;
    }

    /// Fires and removes every one-shot watcher of `path` in `table`.
    fn fire(&mut self, table: Table, path: &str, event: &WatchEvent) -> usize {
        let Some(list) = self.tables[table.index()].remove(path) else {
            return 0;
        };
        self.len -= list.len();
        let fired = list.len();
        for watcher in list {
            if let Sink::Oneshot(tx) = watcher.sink {
                // A dropped handle just means nobody waits any more.
                let _ = tx.send(Ok(event.clone()));
            }
        }
        fired
    }

    /// Hands `event` to every stream of `path` in `table`, dropping the ones
    /// that are closed or lagging.
    fn deliver(&mut self, table: Table, path: &str, event: &WatchEvent) -> usize {
        let map = &mut self.tables[table.index()];
        let Some(list) = map.get_mut(path) else {
            return 0;
        };
        let before = list.len();
        list.retain_mut(|watcher| watcher.sink.deliver(event));
        let after = list.len();
        if list.is_empty() {
            map.remove(path);
        }
        self.len -= before - after;
        before
    }

    fn deliver_recursive(&mut self, path: &str, event: &WatchEvent) -> usize {
        let mut reached = 0;
        let mut at = Some(path);
        while let Some(current) = at {
            reached += self.deliver(Table::Recursive, current, event);
            at = arbor_protocol::path::parent(current);
        }
        reached
    }
}

/// The registry as shared between the client handles and the connection task.
#[derive(Clone)]
pub(crate) struct Watches(Arc<Mutex<WatchRegistry>>);

impl Watches {
    pub(crate) fn new() -> Self {
        Watches(Arc::new(Mutex::new(WatchRegistry::new())))
    }

    pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, WatchRegistry> {
        self.0.lock()
    }

    /// Registers a one-shot watcher (`Table::Data` or `Table::Child`).
    pub(crate) fn oneshot(&self, path: &str, table: Table) -> Result<OneshotWatch, Error> {
        let (key, rx) = self.0.lock().add_oneshot(path, table)?;
        Ok(OneshotWatch {
            key,
            rx,
            registry: Arc::downgrade(&self.0),
            done: false,
        })
    }

    /// Registers a persistent watcher.
    pub(crate) fn persistent(
        &self,
        path: &str,
        mode: AddWatchMode,
    ) -> Result<PersistentWatch, Error> {
        let (key, rx) = self.0.lock().add_stream(path, mode)?;
        Ok(PersistentWatch {
            key,
            mode,
            rx,
            registry: Arc::downgrade(&self.0),
            end: None,
        })
    }
}

/// A one-shot watch: resolves to the first matching event, once.
///
/// Await it (it is a `Future`). It stays pending across connection losses:
/// after a resume the client registers it again, and the server fires it at
/// once if its node changed while the client was away. It resolves to `Err`
/// only if the watch can no longer fire: [`Error::SessionExpired`] or
/// [`Error::Closed`] when the client ends first, [`Error::WatchRemoved`] after
/// [`Client::remove_watches`](crate::Client::remove_watches), or the server's
/// error if it refused to register it again after a resume. Dropping it
/// unregisters the local watcher (the server's one-shot watch stays until it
/// fires, and its event is then ignored).
///
/// ```no_run
/// # async fn demo(client: arbor_client::Client) -> Result<(), arbor_client::Error> {
/// let (_stat, watch) = client.exists_watch("/ready").await?;
/// let event = watch.await?; // NodeCreated, even if it happened while disconnected
/// println!("{:?}", event.event_type);
/// # Ok(()) }
/// ```
#[must_use = "a watch does nothing unless awaited"]
pub struct OneshotWatch {
    key: WatcherKey,
    rx: oneshot::Receiver<Result<WatchEvent, Error>>,
    registry: Weak<Mutex<WatchRegistry>>,
    done: bool,
}

impl OneshotWatch {
    /// The watched path.
    pub fn path(&self) -> &str {
        &self.key.path
    }

    pub(crate) fn key(&self) -> &WatcherKey {
        &self.key
    }
}

impl std::fmt::Debug for OneshotWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OneshotWatch")
            .field("path", &self.key.path)
            .field("done", &self.done)
            .finish()
    }
}

impl Future for OneshotWatch {
    type Output = Result<WatchEvent, Error>;

    /// Polling again after it resolved gives `Err(Error::Closed)`.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(Err(Error::Closed));
        }
        match Pin::new(&mut this.rx).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(result) => {
                this.done = true;
                // The sender is only dropped unsent when the client is gone.
                Poll::Ready(result.unwrap_or(Err(Error::Closed)))
            }
        }
    }
}

impl Drop for OneshotWatch {
    fn drop(&mut self) {
        if !self.done {
            if let Some(registry) = self.registry.upgrade() {
                registry.lock().remove(&self.key);
            }
        }
    }
}

/// A persistent (or persistent-recursive) watch: a stream of events that stays
/// until [`Client::remove_watches`](crate::Client::remove_watches), the end of
/// the client (expired or closed), or a consumer that falls
/// [`PERSISTENT_WATCH_EVENTS_MAX`] events behind. It carries on across
/// reconnects; changes made while the client was away are reported (as
/// `NodeDataChanged` / `NodeChildrenChanged` of the watched path itself) when
/// the watch is registered again, not one by one.
///
/// Read it with [`PersistentWatch::next`], or as a
/// [`Stream`](futures_util::Stream) of `Result<WatchEvent, Error>`. Either way
/// the stream ends with exactly one `Err` saying why ([`Error::WatchRemoved`],
/// [`Error::WatchLagged`], [`Error::SessionExpired`] or [`Error::Closed`]); after it the `Stream` yields `None` and `next` repeats
/// the error. Dropping the handle unregisters the local watcher only: the
/// server-side watch stays (its events are ignored) until `remove_watches`.
pub struct PersistentWatch {
    key: WatcherKey,
    mode: AddWatchMode,
    rx: mpsc::Receiver<Result<WatchEvent, Error>>,
    registry: Weak<Mutex<WatchRegistry>>,
    /// Why the stream ended, once it has.
    end: Option<Error>,
}

impl PersistentWatch {
    /// The watched path.
    pub fn path(&self) -> &str {
        &self.key.path
    }

    /// Whether this watch also sees the nodes below its path.
    pub fn mode(&self) -> AddWatchMode {
        self.mode
    }

    pub(crate) fn key(&self) -> &WatcherKey {
        &self.key
    }

    /// The next event, or why the stream ended.
    pub async fn next(&mut self) -> Result<WatchEvent, Error> {
        if let Some(end) = &self.end {
            return Err(end.clone());
        }
        let item = std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await;
        match item {
            Some(result) => result,
            None => Err(self.end.clone().unwrap_or(Error::Closed)),
        }
    }
}

impl std::fmt::Debug for PersistentWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentWatch")
            .field("path", &self.key.path)
            .field("mode", &self.mode)
            .field("end", &self.end)
            .finish()
    }
}

impl Stream for PersistentWatch {
    type Item = Result<WatchEvent, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.end.is_some() {
            return Poll::Ready(None);
        }
        match this.rx.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(event))) => Poll::Ready(Some(Ok(event))),
            Poll::Ready(Some(Err(error))) => {
                this.end = Some(error.clone());
                Poll::Ready(Some(Err(error)))
            }
            // The sender is only dropped without a final error when the
            // client is gone.
            Poll::Ready(None) => {
                this.end = Some(Error::Closed);
                Poll::Ready(Some(Err(Error::Closed)))
            }
        }
    }
}

impl Drop for PersistentWatch {
    fn drop(&mut self) {
        if self.end.is_none() {
            if let Some(registry) = self.registry.upgrade() {
                registry.lock().remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    fn event(event_type: EventType, path: &str) -> WatchEvent {
        WatchEvent {
            event_type,
            path: path.to_owned(),
            zxid: 7,
        }
    }

    fn ready<F: Future + Unpin>(future: &mut F) -> Option<F::Output> {
        future.now_or_never()
    }

    // Proves NodeDeleted fires both the data/exists and the child one-shots of the path.
    #[test]
    fn node_deleted_fires_data_and_child_oneshots() {
        let watches = Watches::new();
        let mut data = watches.oneshot("/a", Table::Data).expect("registers");
        let mut child = watches.oneshot("/a", Table::Child).expect("registers");
        let mut other = watches.oneshot("/b", Table::Data).expect("registers");
        let reached = watches.lock().route(&event(EventType::NodeDeleted, "/a"));
        assert_eq!(reached, 2);
        let got = ready(&mut data).expect("fired").expect("an event");
        assert_eq!(got.event_type, EventType::NodeDeleted);
        assert!(ready(&mut child).expect("fired").is_ok());
        assert!(ready(&mut other).is_none());
        assert_eq!(watches.lock().len(), 1);
    }

    // Proves a one-shot watcher fires once and is then gone from the registry.
    #[test]
    fn oneshots_fire_once() {
        let watches = Watches::new();
        let mut data = watches.oneshot("/a", Table::Data).expect("registers");
        let changed = event(EventType::NodeDataChanged, "/a");
        assert_eq!(watches.lock().route(&changed), 1);
        assert_eq!(watches.lock().route(&changed), 0);
        assert_eq!(watches.lock().len(), 0);
        assert_eq!(ready(&mut data).expect("fired").expect("an event"), changed);
    }

    // Proves NodeChildrenChanged reaches child one-shots and persistent watchers only.
    #[test]
    fn children_changed_skips_recursive_and_data_watchers() {
        let watches = Watches::new();
        let mut recursive = watches
            .persistent("/a", AddWatchMode::PersistentRecursive)
            .expect("registers");
        let mut persistent = watches
            .persistent("/a", AddWatchMode::Persistent)
            .expect("registers");
        let mut data = watches.oneshot("/a", Table::Data).expect("registers");
        let mut child = watches.oneshot("/a", Table::Child).expect("registers");
        let changed = event(EventType::NodeChildrenChanged, "/a");
        assert_eq!(watches.lock().route(&changed), 2);
        assert!(ready(&mut child).expect("fired").is_ok());
        assert!(ready(&mut data).is_none());
        assert_eq!(
            persistent
                .next()
                .now_or_never()
                .expect("ready")
                .expect("event"),
            changed
        );
        assert!(recursive.next().now_or_never().is_none());
    }

    // Proves recursive watchers see descendants, persistent ones only their node.
    #[test]
    fn recursive_watchers_see_descendants() {
        let watches = Watches::new();
        let mut recursive = watches
            .persistent("/a", AddWatchMode::PersistentRecursive)
            .expect("registers");
        let mut root = watches
            .persistent("/", AddWatchMode::PersistentRecursive)
            .expect("registers");
        let mut persistent = watches
            .persistent("/a", AddWatchMode::Persistent)
            .expect("registers");
        let deep = event(EventType::NodeCreated, "/a/b/c");
        assert_eq!(watches.lock().route(&deep), 2);
        assert_eq!(
            watches.lock().route(&event(EventType::NodeDeleted, "/ab")),
            1
        );
        assert_eq!(
            recursive
                .next()
                .now_or_never()
                .expect("ready")
                .expect("event"),
            deep
        );
        assert_eq!(
            root.next().now_or_never().expect("ready").expect("event"),
            deep
        );
        assert!(persistent.next().now_or_never().is_none());
        assert_eq!(watches.lock().len(), 3);
    }

    // Proves a stream too far behind ends with WatchLagged after its buffered events.
    #[test]
    fn lagging_stream_ends_with_watch_lagged() {
        let watches = Watches::new();
        let mut stream = watches
            .persistent("/a", AddWatchMode::Persistent)
            .expect("registers");
        let changed = event(EventType::NodeDataChanged, "/a");
        for _ in 0..PERSISTENT_WATCH_EVENTS_MAX + 5 {
            watches.lock().route(&changed);
        }
        assert_eq!(watches.lock().len(), 0);
        for _ in 0..PERSISTENT_WATCH_EVENTS_MAX {
            assert!(stream.next().now_or_never().expect("ready").is_ok());
        }
        let end = stream.next().now_or_never().expect("ready");
        assert!(matches!(end, Err(Error::WatchLagged)), "{end:?}");
        assert!(matches!(
            stream.next().now_or_never().expect("ready"),
            Err(Error::WatchLagged)
        ));
    }

    // Proves remove_kind ends only the matching tables, with WatchRemoved.
    #[test]
    fn remove_kind_ends_matching_watchers() {
        let watches = Watches::new();
        let mut data = watches.oneshot("/a", Table::Data).expect("registers");
        let mut child = watches.oneshot("/a", Table::Child).expect("registers");
        let mut stream = watches
            .persistent("/a", AddWatchMode::Persistent)
            .expect("registers");
        assert_eq!(watches.lock().remove_kind("/a", WatcherKind::Children), 1);
        assert!(matches!(ready(&mut child), Some(Err(Error::WatchRemoved))));
        assert!(ready(&mut data).is_none());
        assert_eq!(watches.lock().remove_kind("/a", WatcherKind::Any), 2);
        assert!(matches!(ready(&mut data), Some(Err(Error::WatchRemoved))));
        assert!(matches!(
            stream.next().now_or_never(),
            Some(Err(Error::WatchRemoved))
        ));
        assert_eq!(watches.lock().len(), 0);
    }

    // Proves dropping a handle unregisters its watcher, and the limit is enforced.
    #[test]
    fn dropped_handles_unregister_and_limit_holds() {
        let watches = Watches::new();
        let held: Vec<_> = (0..WATCHERS_MAX)
            .map(|i| {
                watches
                    .oneshot(&format!("/a{i}"), Table::Data)
                    .expect("registers")
            })
            .collect();
        assert!(matches!(
            watches.oneshot("/b", Table::Data),
            Err(Error::LimitExceeded)
        ));
        drop(held);
        assert_eq!(watches.lock().len(), 0);
        assert!(watches.oneshot("/b", Table::Data).is_ok());
    }

    // Proves the end of the client resolves every watcher and refuses new ones.
    #[test]
    fn end_all_resolves_everyone() {
        let watches = Watches::new();
        let mut data = watches.oneshot("/a", Table::Data).expect("registers");
        let mut stream = watches
            .persistent("/", AddWatchMode::PersistentRecursive)
            .expect("registers");
        watches.lock().end_all(Ended::SessionExpired);
        assert!(matches!(ready(&mut data), Some(Err(Error::SessionExpired))));
        assert!(matches!(
            stream.next().now_or_never(),
            Some(Err(Error::SessionExpired))
        ));
        assert!(matches!(
            watches.oneshot("/a", Table::Data),
            Err(Error::SessionExpired)
        ));
    }
}
