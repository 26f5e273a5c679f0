//! The task that keeps one [`TreeCache`](super::TreeCache) current: it owns
//! the recursive watch, turns events into reads, applies the answers through
//! the rules of [`super::tree`], and publishes each change.
//!
//! Invariants:
//! * The watch is registered before any read is sent (at start, and again
//!   after it lagged), and a walk after a reconnect is sent after the client
//!   registered the watch again: a change is either seen by a read or
//!   reported by an event.
//! * At most one read of a path is in flight; more events for it meanwhile
//!   ask for one more read after it (coalesced).
//! * Answers are applied in the order their reads were sent (one ordered
//!   queue), each under the publication lock with the changes it makes.
//!   While events are taken, the watch is drained before the next answer
//!   (`biased`); correctness does not depend on it (graves and stat order
//!   settle an event and an answer met in either order), it saves reads.
//! * At most [`TREE_CACHE_READS_IN_FLIGHT_MAX`] reads in flight; events are
//!   taken only while fewer than [`TREE_CACHE_PENDING_PATHS_MAX`] paths wait
//!   for a read and fewer than [`TREE_CACHE_GRAVES_MAX`] graves are kept (a
//!   watch that overflows meanwhile is registered again and the subtree
//!   walked).
//! * Every piece of work carries the number of the event (or walk) that
//!   caused it; [`TreeCache::sync`](super::TreeCache::sync) waits until no
//!   work caused before its barrier is left.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesOrdered;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, trace};

use super::tree::{Effects, Model, Want, WANT_CHILDREN, WANT_DATA, WANT_STAT};
use super::{Shared, TreeCacheError};
use crate::recipes::{is_transient, retrying};
use crate::{
    AddWatchMode, ChildEntry, Client, ConnectionState, Error, EventType, PersistentWatch, Stat,
    StateStream, WatchEvent, WatcherKind, Zxid,
};

/// Most reads one cache has in flight (a walk and event re-reads share
/// them); more wait, coalesced by path.
pub const TREE_CACHE_READS_IN_FLIGHT_MAX: usize = 64;

/// Most paths waiting for a read before the cache stops taking events
/// (until reads catch up; the watch's own buffer holds the rest, and one that
/// overflows is registered again and the subtree walked).
pub const TREE_CACHE_PENDING_PATHS_MAX: usize = 16_384;

/// Most graves (proofs that a deleted node is gone, kept while older reads
/// may still be answered) before the cache stops taking events.
pub const TREE_CACHE_GRAVES_MAX: usize = 65_536;

/// The pause before reading again after a read timed out or found no
/// leader while connected.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// What a [`super::TreeCache`] handle asks of its task.
pub(super) enum Command {
    /// Answer once every change applied by the server before now is cached.
    Sync(oneshot::Sender<Result<(), TreeCacheError>>),
}

/// Paths waiting for a read, and the paths being read.
#[derive(Default)]
struct Work {
    pending: HashMap<String, Pending>,
    /// Pending paths not being read, in the order first asked for.
    order: VecDeque<String>,
    /// Paths being read, with the cause number of what they serve.
    busy: HashMap<String, u64>,
}

struct Pending {
    want: Want,
    /// The oldest cause this read serves.
    since: u64,
    /// Whether the path is in `order` (it is not while being read).
    queued: bool,
}

impl Work {
    fn want(&mut self, path: String, want: Want, since: u64) {
        let busy = self.busy.contains_key(&path);
        match self.pending.entry(path) {
            Entry::Occupied(mut entry) => {
                let pending = entry.get_mut();
                pending.want |= want;
                pending.since = pending.since.min(since);
            }
            Entry::Vacant(entry) => {
                if !busy {
                    self.order.push_back(entry.key().clone());
                }
                entry.insert(Pending {
                    want,
                    since,
                    queued: !busy,
                });
            }
        }
    }

    /// The next path to read, marked busy.
    fn next(&mut self) -> Option<(String, Want, u64)> {
        while let Some(path) = self.order.pop_front() {
            if let Some(pending) = self.pending.remove(&path) {
                self.busy.insert(path.clone(), pending.since);
                return Some((path, pending.want, pending.since));
            }
        }
        None
    }

    /// The read of `path` was applied; what was asked meanwhile may go.
    fn done(&mut self, path: &str) {
        self.busy.remove(path);
        if let Some(pending) = self.pending.get_mut(path) {
            if !pending.queued {
                pending.queued = true;
                self.order.push_back(path.to_owned());
            }
        }
    }

    /// The oldest cause some work still serves.
    fn oldest_since(&self) -> Option<u64> {
        let pending = self.pending.values().map(|p| p.since);
        pending.chain(self.busy.values().copied()).min()
    }
}

/// What a read job brings back.
enum Answer {
    Data(Result<(Vec<u8>, Stat), Error>),
    Stat(Result<Option<Stat>, Error>),
    Children(Result<(Vec<ChildEntry>, Stat), Error>),
    Both(
        Result<(Vec<u8>, Stat), Error>,
        Result<(Vec<ChildEntry>, Stat), Error>,
    ),
    Synced(
        Result<(), Error>,
        oneshot::Sender<Result<(), TreeCacheError>>,
    ),
}

struct Done {
    path: String,
    want: Want,
    since: u64,
    /// The client's last zxid when the read was sent: its answer reflects
    /// at least this.
    sent_after: Zxid,
    answer: Answer,
}

/// Someone waiting for the cache to catch up with a cause number.
enum Barrier {
    Initialized,
    Sync(oneshot::Sender<Result<(), TreeCacheError>>),
}

pub(super) struct Engine {
    client: Client,
    root: String,
    model: Model,
    shared: Arc<Shared>,
    watch: PersistentWatch,
    states: StateStream,
    commands: mpsc::Receiver<Command>,
    cancel: CancellationToken,
    work: Work,
    in_flight: FuturesOrdered<BoxFuture<'static, Done>>,
    /// The sequence numbers of the jobs in `in_flight`, in the same order.
    in_flight_seqs: VecDeque<u64>,
    next_seq: u64,
    next_cause: u64,
    barriers: Vec<(u64, Barrier)>,
    retry_at: Option<Instant>,
}

/// The parts an engine starts from.
pub(super) struct Parts {
    pub(super) client: Client,
    pub(super) root: String,
    pub(super) nodes_max: usize,
    pub(super) shared: Arc<Shared>,
    pub(super) watch: PersistentWatch,
    pub(super) states: StateStream,
    pub(super) commands: mpsc::Receiver<Command>,
    pub(super) cancel: CancellationToken,
}

impl Engine {
    pub(super) fn new(parts: Parts) -> Self {
        let mut engine = Engine {
            model: Model::new(&parts.root, parts.nodes_max),
            client: parts.client,
            root: parts.root,
            shared: parts.shared,
            watch: parts.watch,
            states: parts.states,
            commands: parts.commands,
            cancel: parts.cancel,
            work: Work::default(),
            in_flight: FuturesOrdered::new(),
            in_flight_seqs: VecDeque::new(),
            next_seq: 0,
            next_cause: 0,
            barriers: Vec::new(),
            retry_at: None,
        };
        // The first load: the root's data and children, then down.
        let cause = engine.cause();
        engine
            .work
            .want(engine.root.clone(), WANT_DATA | WANT_CHILDREN, cause);
        let after = engine.next_cause;
        engine.barriers.push((after, Barrier::Initialized));
        engine
    }

    /// Runs until closed or failed; returns why it ended.
    pub(super) async fn run(mut self) -> TreeCacheError {
        let end = match self.serve().await {
            Ok(()) => TreeCacheError::Closed,
            Err(err) => err,
        };
        info!(path = %self.root, error = %end, "tree cache ended");
        self.shared.end(end.clone());
        for (_, barrier) in self.barriers.drain(..) {
            if let Barrier::Sync(reply) = barrier {
                let _ = reply.send(Err(end.clone()));
            }
        }
        end
    }

    async fn serve(&mut self) -> Result<(), TreeCacheError> {
        loop {
            self.dispatch();
            self.settle_barriers();
            self.model.prune(self.in_flight_seqs.front().copied());
            let intake = self.work.pending.len() < TREE_CACHE_PENDING_PATHS_MAX
                && self.model.graves() < TREE_CACHE_GRAVES_MAX;
            let retry_at = self.retry_at;
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => return self.close().await,
                event = self.watch.next(), if intake => self.on_watch(event).await?,
                state = self.states.next() => self.on_state(state)?,
                Some(done) = self.in_flight.next(), if !self.in_flight.is_empty() => {
                    self.on_done(done).await?;
                }
                command = self.commands.recv() => match command {
                    Some(Command::Sync(reply)) => self.send_sync(reply),
                    None => return self.close().await,
                },
                () = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)),
                    if retry_at.is_some() => self.retry_at = None,
            }
        }
    }

    fn cause(&mut self) -> u64 {
        let cause = self.next_cause;
        self.next_cause += 1;
        cause
    }

    /// Sends what waits, up to the limit, while connected.
    fn dispatch(&mut self) {
        if self.retry_at.is_some() || !self.client.state().is_connected() {
            return;
        }
        while self.in_flight.len() < TREE_CACHE_READS_IN_FLIGHT_MAX {
            let Some((path, want, since)) = self.work.next() else {
                return;
            };
            self.send(path, want, since);
        }
    }

    fn push(&mut self, job: BoxFuture<'static, Done>) {
        self.in_flight.push_back(job);
        self.in_flight_seqs.push_back(self.next_seq);
        self.next_seq += 1;
    }

    fn send(&mut self, path: String, want: Want, since: u64) {
        // Read before the request goes: the answer reflects at least this.
        let sent_after = self.client.last_zxid();
        let client = self.client.clone();
        let job = async move {
            let answer = if want & WANT_DATA != 0 && want & WANT_CHILDREN != 0 {
                // Both go out together, the data first.
                let (data, children) = futures_util::future::join(
                    client.get_data(&path),
                    client.get_children_with_stat(&path),
                )
                .await;
                Answer::Both(data, children)
            } else if want & WANT_DATA != 0 {
                Answer::Data(client.get_data(&path).await)
            } else if want & WANT_CHILDREN != 0 {
                Answer::Children(client.get_children_with_stat(&path).await)
            } else {
                Answer::Stat(client.exists(&path).await)
            };
            Done {
                path,
                want,
                since,
                sent_after,
                answer,
            }
        };
        self.push(job.boxed());
    }

    fn send_sync(&mut self, reply: oneshot::Sender<Result<(), TreeCacheError>>) {
        let client = self.client.clone();
        let root = self.root.clone();
        let job = async move {
            let synced = retrying(&client, || client.sync(&root)).await;
            Done {
                path: root,
                want: 0,
                since: 0,
                sent_after: 0,
                answer: Answer::Synced(synced, reply),
            }
        };
        self.push(job.boxed());
    }

    /// Walks the subtree again, comparing stats: after a reconnect or a
    /// watch that lagged, whose missed events are not replayed.
    fn walk(&mut self) {
        let cause = self.cause();
        self.work.want(self.root.clone(), WANT_CHILDREN, cause);
    }

    async fn on_watch(&mut self, event: Result<WatchEvent, Error>) -> Result<(), TreeCacheError> {
        match event {
            Ok(event) => {
                self.on_event(event);
                Ok(())
            }
            Err(err @ (Error::WatchLagged | Error::WatchRemoved)) => {
                info!(path = %self.root, error = %err, "watch ended; registering it again and walking the subtree");
                self.watch = retrying(&self.client, || {
                    self.client
                        .watch(&self.root, AddWatchMode::PersistentRecursive)
                })
                .await?;
                self.walk();
                Ok(())
            }
            Err(err) => Err(err.into()),
        }
    }

    fn on_event(&mut self, event: WatchEvent) {
        if !self.model.in_subtree(&event.path) {
            return;
        }
        trace!(path = %event.path, event_type = ?event.event_type, zxid = event.zxid, "tree cache event");
        let cause = self.cause();
        let parent = self.model.parent_in_subtree(&event.path).map(str::to_owned);
        match event.event_type {
            EventType::NodeCreated => self.work.want(event.path, WANT_DATA, cause),
            EventType::NodeDataChanged => {
                self.work.want(event.path, WANT_DATA, cause);
                return;
            }
            EventType::NodeChildrenChanged => {
                self.work.want(event.path, WANT_STAT, cause);
                return;
            }
            EventType::NodeDeleted => {
                let mut out = Effects::default();
                let dug_at = self.next_seq;
                {
                    let mut published = self.shared.tree.write();
                    let nodes = Arc::make_mut(&mut published.nodes);
                    self.model
                        .deleted(nodes, &event.path, event.zxid, dug_at, &mut out);
                    published.publish(&mut out.changes);
                }
                for (path, want) in out.follow {
                    self.work.want(path, want, cause);
                }
            }
        }
        // A child came or went: the parent's stat changed.
        if let Some(parent) = parent {
            self.work.want(parent, WANT_STAT, cause);
        }
    }

    fn on_state(&mut self, state: Option<ConnectionState>) -> Result<(), TreeCacheError> {
        match state {
            Some(ConnectionState::Reconnected) => {
                // Changes below a recursive watch made while away are not
                // replayed: compare stats to find them.
                info!(path = %self.root, "reconnected; walking the subtree for missed changes");
                self.retry_at = None;
                self.walk();
                Ok(())
            }
            Some(ConnectionState::Expired) => Err(Error::SessionExpired.into()),
            Some(ConnectionState::Closed) | None => Err(Error::Closed.into()),
            Some(ConnectionState::Connected | ConnectionState::Suspended) => Ok(()),
        }
    }

    async fn on_done(&mut self, done: Done) -> Result<(), TreeCacheError> {
        self.in_flight_seqs.pop_front();
        let Done {
            path,
            want,
            since,
            sent_after,
            answer,
        } = done;
        let answer = match answer {
            Answer::Synced(synced, reply) => return self.on_synced(synced, reply).await,
            other => other,
        };
        let mut out = Effects::default();
        let mut retry = 0;
        let applied = {
            let mut published = self.shared.tree.write();
            let nodes = Arc::make_mut(&mut published.nodes);
            let applied = apply(
                &mut self.model,
                nodes,
                Read {
                    path: &path,
                    want,
                    sent_after,
                    dug_at: self.next_seq,
                },
                answer,
                &mut out,
                &mut retry,
            );
            published.publish(&mut out.changes);
            applied
        };
        applied?;
        for (follow, want) in out.follow {
            self.work.want(follow, want, since);
        }
        if retry != 0 {
            debug!(path = %path, "read failed for now; reading again");
            self.work.want(path.clone(), retry, since);
            if self.client.state().is_connected() {
                self.retry_at = Some(Instant::now() + RETRY_PAUSE);
            }
        }
        self.work.done(&path);
        Ok(())
    }

    async fn on_synced(
        &mut self,
        synced: Result<(), Error>,
        reply: oneshot::Sender<Result<(), TreeCacheError>>,
    ) -> Result<(), TreeCacheError> {
        if let Err(err) = synced {
            let _ = reply.send(Err(err.into()));
            return Ok(());
        }
        // Events for writes before the sync reached the watch before its
        // reply did; take them before drawing the line.
        while let Some(event) = self.watch.next().now_or_never() {
            self.on_watch(event).await?;
        }
        let after = self.next_cause;
        self.barriers.push((after, Barrier::Sync(reply)));
        Ok(())
    }

    fn settle_barriers(&mut self) {
        if self.barriers.is_empty() {
            return;
        }
        let oldest = self.work.oldest_since().unwrap_or(u64::MAX);
        let (met, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.barriers)
            .into_iter()
            .partition(|(after, _)| *after <= oldest);
        self.barriers = waiting;
        for (_, barrier) in met {
            match barrier {
                Barrier::Initialized => {
                    debug!(path = %self.root, "tree cache initialized");
                    self.shared.status.send_modify(|s| s.initialized = true);
                }
                Barrier::Sync(reply) => {
                    let _ = reply.send(Ok(()));
                }
            }
        }
    }

    /// Removes the watch (this session's recursive watch on the path). If
    /// the client is disconnected the server already dropped it with the
    /// connection, and it is not registered again: its handle is gone.
    async fn close(&mut self) -> Result<(), TreeCacheError> {
        let removed = self
            .client
            .remove_watches(&self.root, WatcherKind::PersistentRecursive)
            .await;
        match removed {
            Ok(()) | Err(Error::NoWatcher { .. }) => {}
            Err(err) => debug!(path = %self.root, error = %err, "watch not removed"),
        }
        Ok(())
    }
}

/// One answered read, as [`apply`] needs it.
struct Read<'a> {
    path: &'a str,
    want: Want,
    sent_after: Zxid,
    dug_at: u64,
}

/// `Ok(None)` for no node; other errors stay errors.
fn settle<T>(result: Result<T, Error>) -> Result<Option<T>, Error> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(Error::NoNode { .. }) => Ok(None),
        Err(err) => Err(err),
    }
}

/// Applies one answer; a transient failure adds what to read again to
/// `retry`, any other ends the cache.
fn apply(
    model: &mut Model,
    nodes: &mut super::tree::Nodes,
    read: Read<'_>,
    answer: Answer,
    out: &mut Effects,
    retry: &mut Want,
) -> Result<(), TreeCacheError> {
    let Read {
        path,
        want,
        sent_after,
        dug_at,
    } = read;
    let mut failed = |err: Error, again: Want| {
        if is_transient(&err) {
            *retry |= again;
            Ok(())
        } else {
            Err(TreeCacheError::from(err))
        }
    };
    let data = |model: &mut Model,
                nodes: &mut super::tree::Nodes,
                out: &mut Effects,
                read: Option<(Vec<u8>, Stat)>| {
        let read = read.map(|(data, stat)| (Bytes::from(data), stat));
        model
            .data_read(nodes, path, read, sent_after, dug_at, out)
            .map_err(|full| TreeCacheError::TooManyNodes { limit: full.limit })
    };
    match answer {
        Answer::Data(result) => match settle(result) {
            Ok(read) => data(model, nodes, out, read)?,
            Err(err) => failed(err, want)?,
        },
        Answer::Stat(result) => match result {
            Ok(stat) => model.stat_read(nodes, path, stat, sent_after, dug_at, out),
            Err(err) => failed(err, want)?,
        },
        Answer::Children(result) => match settle(result) {
            Ok(read) => model.children_read(nodes, path, read, sent_after, dug_at, out),
            Err(err) => failed(err, want)?,
        },
        Answer::Both(data_result, children_result) => {
            match settle(data_result) {
                Ok(read) => data(model, nodes, out, read)?,
                Err(err) => failed(err, WANT_DATA)?,
            }
            match settle(children_result) {
                Ok(read) => model.children_read(nodes, path, read, sent_after, dug_at, out),
                Err(err) => failed(err, WANT_CHILDREN)?,
            }
        }
        Answer::Synced(..) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves a path is read once at a time: asks while it is read wait, merged, and keep the oldest cause.
    #[test]
    fn work_coalesces_by_path() {
        let mut work = Work::default();
        work.want("/a".into(), WANT_DATA, 3);
        work.want("/b".into(), WANT_STAT, 4);
        work.want("/a".into(), WANT_STAT, 5);
        assert_eq!(work.next(), Some(("/a".into(), WANT_DATA | WANT_STAT, 3)));
        work.want("/a".into(), WANT_CHILDREN, 7);
        assert_eq!(work.next(), Some(("/b".into(), WANT_STAT, 4)));
        assert_eq!(work.next(), None, "/a is being read");
        assert_eq!(work.oldest_since(), Some(3));
        work.done("/a");
        assert_eq!(work.next(), Some(("/a".into(), WANT_CHILDREN, 7)));
        work.done("/a");
        work.done("/b");
        assert_eq!(work.oldest_since(), None);
    }
}
