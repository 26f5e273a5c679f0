//! A local, consistent copy of a subtree: every node's data and stat, kept
//! current from one persistent recursive watch — the way workers read
//! configuration.
//!
//! The rules are in `tree.rs`, the task in `engine.rs`; what they promise is
//! on [`TreeCache`].

mod engine;
mod tree;

use std::sync::Arc;

use parking_lot::RwLock;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use engine::{
    TREE_CACHE_GRAVES_MAX, TREE_CACHE_PENDING_PATHS_MAX, TREE_CACHE_READS_IN_FLIGHT_MAX,
};
pub use tree::{CachedNode, TreeEvent};

use engine::{Command, Engine, Parts};
use tree::Nodes;

use crate::recipes::retrying;
use crate::{AddWatchMode, Client, Error};

/// The default most nodes a cache holds; past it the cache ends with
/// [`TreeCacheError::TooManyNodes`] rather than hold a partial copy.
pub const TREE_CACHE_NODES_MAX: usize = 100_000;

/// The default most changes a [`TreeChanges`] stream buffers for a slow
/// consumer before it ends with [`TreeCacheError::Lagged`].
pub const TREE_CACHE_CHANGES_MAX: usize = 1024;

/// Most [`TreeCache::sync`] calls queued for the cache's task at once;
/// more wait for room.
const COMMANDS_MAX: usize = 16;

/// Why a cache (or one change stream) stopped.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TreeCacheError {
    /// The subtree has more nodes than the cache may hold.
    #[error("the subtree has more than {limit} nodes")]
    TooManyNodes { limit: usize },
    /// This change stream fell `missed` changes behind and was ended; the
    /// cache itself is still current (take a new snapshot and stream).
    #[error("the change stream fell {missed} changes behind")]
    Lagged { missed: u64 },
    /// The path asked for is not in the cached subtree.
    #[error("{path} is not under the cached path {root}")]
    OutsideSubtree { path: String, root: String },
    /// The cache was closed or dropped.
    #[error("the tree cache was closed")]
    Closed,
    /// The client failed for good: [`Error::SessionExpired`], [`Error::Closed`],
    /// or an error a read cannot ride out (such as [`Error::NoAuth`] on a
    /// node below the path).
    #[error(transparent)]
    Client(#[from] Error),
}

/// How big a cache may grow. Its memory is bounded by `nodes_max` times
/// the server's data limit per node (announced in
/// [`Client::server_limits`]), plus `changes_max` changes per open stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeCacheOptions {
    nodes_max: usize,
    changes_max: usize,
}

impl Default for TreeCacheOptions {
    fn default() -> Self {
        TreeCacheOptions {
            nodes_max: TREE_CACHE_NODES_MAX,
            changes_max: TREE_CACHE_CHANGES_MAX,
        }
    }
}

impl TreeCacheOptions {
    /// The most nodes the cache holds (default [`TREE_CACHE_NODES_MAX`]).
    pub fn with_nodes_max(mut self, nodes_max: usize) -> Self {
        self.nodes_max = nodes_max;
        self
    }

    /// The most changes each [`TreeChanges`] buffers (default
    /// [`TREE_CACHE_CHANGES_MAX`]).
    pub fn with_changes_max(mut self, changes_max: usize) -> Self {
        self.changes_max = changes_max;
        self
    }

    fn validate(&self) -> Result<(), TreeCacheError> {
        if self.nodes_max == 0 || self.changes_max == 0 {
            return Err(Error::BadArguments.into());
        }
        Ok(())
    }
}

/// What readers see: the nodes, and the stream changes go out on, swapped
/// together under one lock.
struct Published {
    nodes: Arc<Nodes>,
    /// `None` once the cache ended: streams then end too.
    changes: Option<broadcast::Sender<TreeEvent>>,
}

impl Published {
    /// Sends `changes` to every stream, under the same lock that made them.
    fn publish(&self, changes: &mut Vec<TreeEvent>) {
        if let Some(sender) = &self.changes {
            for change in changes.drain(..) {
                // No stream open is not an error.
                let _ = sender.send(change);
            }
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Status {
    initialized: bool,
    ended: Option<TreeCacheError>,
}

/// What the handle, its streams and the task share.
struct Shared {
    tree: RwLock<Published>,
    status: watch::Sender<Status>,
}

impl Shared {
    /// Records why the cache ended (the first reason stays), then ends the
    /// streams, so a stream that sees its end finds the reason.
    fn end(&self, error: TreeCacheError) {
        self.status.send_modify(|status| {
            if status.ended.is_none() {
                status.ended = Some(error);
            }
        });
        self.tree.write().changes = None;
    }

    fn ended(&self) -> Option<TreeCacheError> {
        self.status.borrow().ended.clone()
    }
}

/// A local copy of the subtree at a path, kept current from a persistent
/// recursive watch.
///
/// # How it stays consistent
///
/// * **Watch first.** The recursive watch is registered before the first
///   read, so a change is either seen by a read or reported by an event.
/// * **Content comes from reads only.** An event (which carries a path and
///   a zxid, not data) asks for a read of its node — and, for a create or a
///   delete, a stat read of the parent, whose `pzxid`, `cversion` and
///   `num_children` it changed. A read sent after an event is answered from
///   a state at least as new as that event (same session, answers in
///   order). One read per path is in flight; more events for it meanwhile
///   cost one more read (coalesced).
/// * **No stale answer wins.** A cached stat is replaced only by a newer one
///   (`czxid`, then `mzxid`, `pzxid` and the versions, which only grow).
///   Deletes leave *graves* — "every incarnation of this path, and of the
///   nodes under it, created before zxid Z is gone" — from the delete's zxid,
///   from a read that found nothing (Z = the client's last zxid when it was
///   sent + 1), from a listing that lacks a child, and from a new
///   incarnation; a read the grave proves stale is dropped. Whole subtrees
///   go at once. Answers are applied in the order their reads were sent.
/// * **Always a tree.** Every cached node's parent is cached; a node read
///   before its parent is read again after it.
/// * **Reconnects.** The client registers the watch again, but the server
///   does not replay changes made below a recursive watch while the client
///   was away. On `Reconnected` the cache walks the subtree comparing stats:
///   one `get_children_with_stat` per cached or listed node with children,
///   a data read only where `czxid`/`mzxid` differ, the stat taken as is
///   where only `pzxid`/`cversion` moved, and graves for children that are
///   gone; each difference is a change on the stream. A watch that lagged
///   (a consumer this cache's own task could not keep up with) is
///   registered again and walked the same way.
/// * **Session expiry ends the cache** with
///   [`TreeCacheError::Client`]`(`[`Error::SessionExpired`]`)`: its client is
///   dead for good, and an application that makes a new client starts a new
///   cache on it (its first snapshot is then consistent, which swapping the
///   client under a live cache could not promise).
///
/// Not seen (no event exists for them): an ACL change (`aversion`), and a
/// child created and deleted by one multi (the parent's `pzxid`/`cversion`);
/// the next walk or change of that node corrects them.
///
/// Reads ([`get`](Self::get), [`children`](Self::children),
/// [`snapshot`](Self::snapshot)) never wait on the network: while the
/// client is disconnected they return what was cached, which is current
/// again soon after it reconnects. They fail once the cache has ended.
///
/// ```
/// use arbor_client::recipes::{TreeCache, TreeEvent};
/// use arbor_client::CreateMode;
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// client.create("/config", Vec::new(), CreateMode::Persistent).await?;
/// client.create("/config/db", b"10.0.0.1".to_vec(), CreateMode::Persistent).await?;
///
/// let cache = TreeCache::start(&client, "/config").await?;
/// cache.initialized().await?;
/// let db = cache.get("/config/db")?.expect("cached");
/// assert_eq!(&db.data[..], b"10.0.0.1");
///
/// let mut changes = cache.changes();
/// client.set_data("/config/db", b"10.0.0.2".to_vec(), None).await?;
/// match changes.next().await? {
///     TreeEvent::Updated { path, data, .. } => assert_eq!((&*path, &data[..]), ("/config/db", &b"10.0.0.2"[..])),
///     other => panic!("{other:?}"),
/// }
///
/// // One consistent copy of the whole subtree.
/// let snapshot = cache.snapshot()?;
/// assert_eq!(snapshot.children("/config"), vec!["db"]);
/// cache.close().await?;
/// # Ok(()) }
/// ```
pub struct TreeCache {
    root: String,
    shared: Arc<Shared>,
    commands: mpsc::Sender<Command>,
    cancel: CancellationToken,
    task: Option<JoinHandle<TreeCacheError>>,
}

impl std::fmt::Debug for TreeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeCache")
            .field("path", &self.root)
            .field("nodes", &self.shared.tree.read().nodes.len())
            .field("ended", &self.shared.ended())
            .finish()
    }
}

impl TreeCache {
    /// Starts caching the subtree at `path` (which need not exist yet) with
    /// the default limits. Returns once the watch is registered; the first
    /// load goes on in the background ([`initialized`](Self::initialized)).
    pub async fn start(client: &Client, path: &str) -> Result<TreeCache, TreeCacheError> {
        Self::start_with(client, path, TreeCacheOptions::default()).await
    }

    /// [`start`](Self::start) with other limits.
    pub async fn start_with(
        client: &Client,
        path: &str,
        options: TreeCacheOptions,
    ) -> Result<TreeCache, TreeCacheError> {
        options.validate()?;
        // Subscribed before the watch, so no reconnect after it is missed.
        let states = client.state_changes();
        let recursive = retrying(client, || {
            client.watch(path, AddWatchMode::PersistentRecursive)
        })
        .await?;
        let (changes, _) = broadcast::channel(options.changes_max);
        let shared = Arc::new(Shared {
            tree: RwLock::new(Published {
                nodes: Arc::new(Nodes::new()),
                changes: Some(changes),
            }),
            status: watch::Sender::new(Status::default()),
        });
        let (commands, commands_rx) = mpsc::channel(COMMANDS_MAX);
        let cancel = CancellationToken::new();
        let engine = Engine::new(Parts {
            client: client.clone(),
            root: path.to_owned(),
            nodes_max: options.nodes_max,
            shared: shared.clone(),
            watch: recursive,
            states,
            commands: commands_rx,
            cancel: cancel.clone(),
        });
        let task = tokio::spawn(engine.run());
        Ok(TreeCache {
            root: path.to_owned(),
            shared,
            commands,
            cancel,
            task: Some(task),
        })
    }

    /// The cached path.
    pub fn path(&self) -> &str {
        &self.root
    }

    /// Waits until the first full load is cached (every node that existed
    /// when the cache started, or a later state of it).
    pub async fn initialized(&self) -> Result<(), TreeCacheError> {
        let mut status = self.shared.status.subscribe();
        // The sender lives in `shared`, which this handle holds.
        let status = status
            .wait_for(|s| s.initialized || s.ended.is_some())
            .await
            .map_err(|_| TreeCacheError::Closed)?;
        match &status.ended {
            Some(error) => Err(error.clone()),
            None => Ok(()),
        }
    }

    /// Waits until every change the server had applied when this was called
    /// is in the cache (and on its change streams). Rides out reconnects.
    pub async fn sync(&self) -> Result<(), TreeCacheError> {
        self.alive()?;
        let (reply, answer) = oneshot::channel();
        if self.commands.send(Command::Sync(reply)).await.is_err() {
            return Err(self.end_error());
        }
        answer.await.unwrap_or_else(|_| Err(self.end_error()))
    }

    /// The cached node at `path`, if any.
    pub fn get(&self, path: &str) -> Result<Option<CachedNode>, TreeCacheError> {
        self.readable(path)?;
        Ok(self.shared.tree.read().nodes.get(path).cloned())
    }

    /// The names of the cached children of `path`, sorted; `None` if `path`
    /// is not cached.
    pub fn children(&self, path: &str) -> Result<Option<Vec<String>>, TreeCacheError> {
        self.readable(path)?;
        let published = self.shared.tree.read();
        if !published.nodes.contains_key(path) {
            return Ok(None);
        }
        Ok(Some(tree::children(&published.nodes, path)))
    }

    /// The whole cached subtree at one point: no change is half in it.
    /// Cheap to take (a reference count); the cache copies its map the next
    /// time it changes while a snapshot is held.
    pub fn snapshot(&self) -> Result<TreeSnapshot, TreeCacheError> {
        self.alive()?;
        Ok(self.snapshot_now())
    }

    fn snapshot_now(&self) -> TreeSnapshot {
        TreeSnapshot {
            root: Arc::from(self.root.as_str()),
            nodes: self.shared.tree.read().nodes.clone(),
        }
    }

    /// The changes applied from now on. Each stream buffers at most the
    /// `changes_max` of the options ([`TREE_CACHE_CHANGES_MAX`] by default);
    /// one that falls further behind ends with [`TreeCacheError::Lagged`]
    /// (the cache never waits for a stream).
    pub fn changes(&self) -> TreeChanges {
        let published = self.shared.tree.read();
        TreeChanges::new(&self.shared, &published)
    }

    /// A snapshot and the stream of every change after it, taken at one
    /// point: replaying the stream on the snapshot follows the cache.
    pub fn snapshot_and_changes(&self) -> Result<(TreeSnapshot, TreeChanges), TreeCacheError> {
        self.alive()?;
        let published = self.shared.tree.read();
        let snapshot = TreeSnapshot {
            root: Arc::from(self.root.as_str()),
            nodes: published.nodes.clone(),
        };
        Ok((snapshot, TreeChanges::new(&self.shared, &published)))
    }

    /// Why the cache ended, if it has.
    pub fn error(&self) -> Option<TreeCacheError> {
        self.shared.ended()
    }

    /// Stops the cache and removes its watch; returns why it had ended if
    /// it ended before (for example [`Error::SessionExpired`]).
    ///
    /// The watch removed is this session's recursive watch on the path:
    /// another recursive watch of the same path through the same client (a
    /// second cache, or the application's own) ends with it. Dropping the
    /// cache does the same in the background.
    pub async fn close(mut self) -> Result<(), TreeCacheError> {
        self.cancel.cancel();
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        match task.await {
            Ok(TreeCacheError::Closed) => Ok(()),
            Ok(error) => Err(error),
            Err(_) => Err(TreeCacheError::Closed),
        }
    }

    fn alive(&self) -> Result<(), TreeCacheError> {
        match self.shared.ended() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn readable(&self, path: &str) -> Result<(), TreeCacheError> {
        self.alive()?;
        if !tree::in_subtree(&self.root, path) {
            return Err(TreeCacheError::OutsideSubtree {
                path: path.to_owned(),
                root: self.root.clone(),
            });
        }
        Ok(())
    }

    fn end_error(&self) -> TreeCacheError {
        self.shared.ended().unwrap_or(TreeCacheError::Closed)
    }
}

impl Drop for TreeCache {
    fn drop(&mut self) {
        // The task removes the watch and ends.
        self.cancel.cancel();
    }
}

/// The cached subtree at one point in time; it does not change.
#[derive(Debug, Clone)]
pub struct TreeSnapshot {
    root: Arc<str>,
    nodes: Arc<Nodes>,
}

impl TreeSnapshot {
    /// The cached path.
    pub fn path(&self) -> &str {
        &self.root
    }

    /// The node at `path`, if it was cached.
    pub fn get(&self, path: &str) -> Option<&CachedNode> {
        self.nodes.get(path)
    }

    /// The names of `path`'s children, sorted (empty if it has none or is
    /// not cached).
    pub fn children(&self, path: &str) -> Vec<String> {
        tree::children(&self.nodes, path)
    }

    /// Every node, by path in byte order (a parent before its children).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &CachedNode)> {
        self.nodes.iter().map(|(path, node)| (&**path, node))
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether nothing was cached (the path did not exist).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// The changes a [`TreeCache`] applies, in order. It ends with exactly one
/// error saying why — [`TreeCacheError::Lagged`] if it fell behind, or why
/// the cache ended — and repeats it after.
pub struct TreeChanges {
    changes: Option<broadcast::Receiver<TreeEvent>>,
    shared: Arc<Shared>,
    end: Option<TreeCacheError>,
}

impl std::fmt::Debug for TreeChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeChanges")
            .field("end", &self.end)
            .finish()
    }
}

impl TreeChanges {
    fn new(shared: &Arc<Shared>, published: &Published) -> Self {
        TreeChanges {
            changes: published.changes.as_ref().map(broadcast::Sender::subscribe),
            shared: shared.clone(),
            end: None,
        }
    }

    /// The next change, or why the stream ended.
    pub async fn next(&mut self) -> Result<TreeEvent, TreeCacheError> {
        if let Some(end) = &self.end {
            return Err(end.clone());
        }
        let received = match &mut self.changes {
            Some(changes) => changes.recv().await,
            None => Err(broadcast::error::RecvError::Closed),
        };
        let end = match received {
            Ok(change) => return Ok(change),
            Err(broadcast::error::RecvError::Lagged(missed)) => TreeCacheError::Lagged { missed },
            Err(broadcast::error::RecvError::Closed) => {
                self.shared.ended().unwrap_or(TreeCacheError::Closed)
            }
        };
        self.changes = None;
        self.end = Some(end.clone());
        Err(end)
    }
}
