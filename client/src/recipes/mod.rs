//! Recipes built on the client: the things people come to a coordination
//! service for.
//!
//! * [`Mutex`] — a fair lock whose waiters watch only their predecessor, and
//!   whose grants carry fencing tokens.
//! * [`Fence`] — the check a protected resource makes on those tokens.
//! * [`Fenced`] — a write to Arbor itself that commits only while the grant
//!   guarding it (a lock, a lease, a claim) still stands.
//! * [`RwLock`] — a fair read-write lock: readers share, writers exclude,
//!   grants follow arrival order, and a reader waits only for the nearest
//!   writer ahead of it.
//! * [`Election`] — leader election (etcd's `Campaign`/`Resign`/`Leader`/
//!   `Observe`): candidates queue, each watching only its predecessor.
//! * [`LeaderLatch`] — a long-running election participant that tells at
//!   any moment whether it leads, and keeps its place across a resumed
//!   session.
//! * [`Semaphore`] — N leases at once, granted in arrival order; only the
//!   first waiter watches the holders, the rest their predecessor.
//! * [`DoubleBarrier`] — enter together once `count` members are present
//!   (all of them or none), leave together.
//! * [`Counter`] — a shared integer: add, compare-and-set, set; an add whose
//!   reply was lost is applied exactly once or reported as unknown.
//! * [`Queue`] — a distributed priority queue (FIFO within a priority):
//!   each item taken exactly once, its result written in the same fenced
//!   transaction that removes it.
//! * [`TreeCache`] — a local, consistent copy of a subtree (data and stat
//!   of every node) kept from one recursive watch, with snapshots and a
//!   stream of changes; it rides out reconnects by re-reading what changed.
//! * [`inspect`] — reading any of those queues from outside: holders,
//!   fencing tokens, waiters in order.

mod barrier;
mod counter;
mod election;
mod fence;
mod fenced;
pub mod inspect;
mod latch;
mod lock;
mod queue;
mod rwlock;
mod semaphore;
mod tree_cache;

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

pub use barrier::{BarrierError, DoubleBarrier, Entered, MEMBERS_MAX};
pub use counter::{Counter, CounterError, COUNTER_ATTEMPTS_MAX, COUNTER_TAGS_MAX};
pub use election::{Election, ElectionError, LeaderInfo, Leadership, Observer};
pub use fence::{Fence, FencingToken, StaleToken};
pub use fenced::{Fenced, FencedError};
pub use latch::{LatchState, LeaderLatch, CAMPAIGN_RETRY_PAUSE};
pub use lock::{Guard, Mutex};
pub use queue::{
    CompleteError, Completion, Job, Priority, Queue, QueueError, DEFAULT_PRIORITY,
    ITEMS_EXAMINED_MAX, ITEMS_MAX,
};
pub use rwlock::{ReadGuard, RwLock, WriteGuard};
pub use semaphore::{Lease, Semaphore, SemaphoreError, PERMITS_MAX};
pub use tree_cache::{
    CachedNode, TreeCache, TreeCacheError, TreeCacheOptions, TreeChanges, TreeEvent, TreeSnapshot,
    TREE_CACHE_CHANGES_MAX, TREE_CACHE_GRAVES_MAX, TREE_CACHE_NODES_MAX,
    TREE_CACHE_PENDING_PATHS_MAX, TREE_CACHE_READS_IN_FLIGHT_MAX,
};

use crate::{Acl, Client, ConnectionState, CreateMode, Error, SessionId};

/// Why a lock was not granted (or not released).
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// `try_lock`: someone holds the lock or waits for it.
    #[error("the lock is held")]
    Locked,
    /// `lock_timeout` ran out; this contender left the queue.
    #[error("timed out waiting for the lock")]
    Timeout,
    /// The lowest node is not owned by this session: never report ownership.
    #[error("lock node {node} is owned by session {owner:#x}, not by this one")]
    NotOwner { node: String, owner: SessionId },
    #[error(transparent)]
    Client(#[from] Error),
}

/// Creates `path` and its missing ancestors as containers with `acl`, so
/// that lock directories disappear by themselves once unused.
pub(crate) async fn ensure_path(client: &Client, target: &str, acl: &[Acl]) -> Result<(), Error> {
    ensure_path_with(client, target, acl, CreateMode::Container).await
}

/// [`ensure_path`], but `target` itself is made with `mode` (a lock-delay
/// lock's directory is persistent: it must outlive its last contender).
pub(crate) async fn ensure_path_with(
    client: &Client,
    target: &str,
    acl: &[Acl],
    mode: CreateMode,
) -> Result<(), Error> {
    if client.exists(target).await?.is_some() {
        return Ok(());
    }
    let mut prefix = String::new();
    for segment in target.split('/').filter(|s| !s.is_empty()) {
        prefix.push('/');
        prefix.push_str(segment);
        let mode = if prefix.len() == target.trim_end_matches('/').len() {
            mode
        } else {
            CreateMode::Container
        };
        match create_node(client, &prefix, Vec::new(), mode, acl).await {
            Ok(_) | Err(Error::NodeExists { .. }) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// A create with `acl`; the open one (the default) costs no copy.
async fn create_node(
    client: &Client,
    path: &str,
    data: Vec<u8>,
    mode: CreateMode,
    acl: &[Acl],
) -> Result<(String, crate::Stat), Error> {
    if Acl::is_open(acl) {
        client.create_with_stat(path, data, mode).await
    } else {
        client.create_with_acl(path, data, mode, acl.to_vec()).await
    }
}

/// A name prefix unique to one attempt, so a create whose reply was lost can
/// be found again (`_c_` + 32 hex digits + `-`, as Curator's protected mode).
pub(crate) fn unique_prefix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = RandomState::new();
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let high = seed.hash_one((nanos, count, std::process::id()));
    let low = seed.hash_one((count, nanos, high));
    format!("_c_{high:016x}{low:016x}-")
}

/// Deletes a node when dropped, unless it was deleted on purpose first: the
/// node of a cancelled waiter or a dropped guard must not block the queue.
pub(crate) struct NodeCleanup {
    client: Client,
    path: String,
    armed: bool,
    /// Set for a lock-delay lock's node: its delete is counted in the
    /// lock's directory, so it is not taken for an expiry (see `lock`).
    counted: Option<lock::Counted>,
}

impl NodeCleanup {
    pub(crate) fn new(client: &Client, path: String) -> Self {
        Self {
            client: client.clone(),
            path,
            armed: true,
            counted: None,
        }
    }

    /// Counts this node's delete, by `role`, in its lock's directory.
    pub(crate) fn set_counted(&mut self, role: lock::Counted) {
        self.counted = Some(role);
    }

    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Deletes the node now, riding out a reconnect; a node already gone is fine.
    pub(crate) async fn delete_now(mut self) -> Result<(), Error> {
        self.armed = false;
        delete_queue_node(&self.client, &self.path, self.counted).await
    }
}

/// Runs a background clean-up step until it gives a lasting answer: a
/// node left behind would block its queue for as long as the session
/// lives, so transient failures are outlasted, however many. It ends once
/// the session does (waiting for a connection then fails for good).
async fn until_settled<T, F, Fut>(mut step: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    loop {
        match step().await {
            Err(err) if is_transient(&err) => tokio::time::sleep(NOT_LEADER_PAUSE).await,
            other => return other,
        }
    }
}

/// Deletes a queue node, counted in its directory if `counted` (a
/// lock-delay lock's node), else plainly; a node already gone is fine.
async fn delete_queue_node(
    client: &Client,
    path: &str,
    counted: Option<lock::Counted>,
) -> Result<(), Error> {
    match counted {
        Some(role) => lock::delete_counted(client, path, role).await,
        None => delete_retrying(client, path).await,
    }
}

/// Deletes `path`, retrying after a reconnect; a node already gone is fine.
async fn delete_retrying(client: &Client, path: &str) -> Result<(), Error> {
    retrying(client, || async {
        match client.delete(path, None).await {
            Ok(()) | Err(Error::NoNode { .. }) => Ok(()),
            Err(err) => Err(err),
        }
    })
    .await
}

impl Drop for NodeCleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Without a runtime the session's end removes the ephemeral instead.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (client, path) = (self.client.clone(), std::mem::take(&mut self.path));
            let counted = self.counted;
            // Retried across a reconnect: a cancelled waiter's node left
            // behind would block the queue until its session ended.
            runtime.spawn(async move {
                let _ = until_settled(|| delete_queue_node(&client, &path, counted)).await;
            });
        }
    }
}

/// How many times a recipe retries a read after a connection loss or a
/// request timeout before giving up (each retry first waits for the session
/// to be resumed, which is itself bounded by the session timeout).
pub(crate) const RETRIES_MAX: usize = 32;

/// Whether `err` leaves the session alive and the outcome merely unknown.
pub(crate) fn is_transient(err: &Error) -> bool {
    // NotLeader: an ensemble member found no leader in time (an election
    // outlasted its wait); Unavailable: it could not take the request now
    // (cut off from the majority, say). Nothing was written either way, so
    // asking again is safe; giving up would leave a node in a queue.
    matches!(
        err,
        Error::ConnectionLoss | Error::Timeout | Error::NotLeader | Error::Unavailable
    )
}

/// Waits until the client can send requests again. A recipe that gave up on
/// the first `ConnectionLoss` would leave its ephemeral node behind for the
/// rest of the session, blocking everyone queued after it.
pub(crate) async fn wait_connected(client: &Client) -> Result<(), Error> {
    // Subscribe before looking, so no change slips between the two.
    let mut changes = client.state_changes();
    loop {
        match client.state() {
            ConnectionState::Expired => return Err(Error::SessionExpired),
            ConnectionState::Closed => return Err(Error::Closed),
            state if state.is_connected() => return Ok(()),
            _ => {}
        }
        if changes.next().await.is_none() {
            return Err(match client.state() {
                ConnectionState::Expired => Error::SessionExpired,
                _ => Error::Closed,
            });
        }
    }
}

/// Runs an idempotent `call`, retrying after transient failures once the
/// client is connected again.
pub(crate) async fn retrying<T, F, Fut>(client: &Client, mut call: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    for _ in 0..RETRIES_MAX {
        match call().await {
            Err(err) if is_transient(&err) => before_retry(client, &err).await?,
            other => return other,
        }
    }
    call().await
}

/// Waits until asking again makes sense: the client is connected again,
/// or, when it is connected but the ensemble is between leaders, the
/// election had time (rather than spend every try at once).
pub(crate) async fn before_retry(client: &Client, err: &Error) -> Result<(), Error> {
    if matches!(err, Error::NotLeader | Error::Unavailable) {
        tokio::time::sleep(NOT_LEADER_PAUSE).await;
    }
    wait_connected(client).await
}

/// The pause before asking again after `NotLeader` or `Unavailable`.
const NOT_LEADER_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// Creates the ephemeral sequential node `<dir>/<prefix><name><seq>` and
/// returns it, armed for clean-up, with its stat (its `czxid` is the fencing
/// token, its `ephemeral_owner` the session the server gave it to). When the
/// outcome of a create is unknown, it looks for `prefix` before trying
/// again, so one attempt never leaves two nodes. A missing `dir` is created
/// (as containers) on the first `NoNode`, so the common case costs one
/// request.
///
/// The clean-up is armed before the first create is sent: if this future is
/// dropped or fails while a create may have happened (its reply lost or not
/// yet read), the node is looked up by its prefix and deleted, so a
/// cancelled attempt never leaves a node in a queue.
pub(crate) async fn create_protected(
    client: &Client,
    dir: &str,
    prefix: &str,
    name: &str,
    data: Vec<u8>,
    acl: &[Acl],
) -> Result<(NodeCleanup, crate::Stat), Error> {
    create_protected_with(client, dir, prefix, name, data, acl, None).await
}

/// [`create_protected`] for a lock-delay lock when `counted` is set: a
/// missing directory is made persistent, and every clean-up delete is
/// counted in it as a waiter's.
pub(crate) async fn create_protected_with(
    client: &Client,
    dir: &str,
    prefix: &str,
    name: &str,
    data: Vec<u8>,
    acl: &[Acl],
    counted: Option<lock::Counted>,
) -> Result<(NodeCleanup, crate::Stat), Error> {
    let mut pending = PrefixCleanup {
        client: client.clone(),
        dir: dir.to_owned(),
        prefix: prefix.to_owned(),
        armed: true,
        counted,
    };
    let dir_mode = match counted {
        Some(_) => CreateMode::Persistent,
        None => CreateMode::Container,
    };
    let (node, stat) = create_by_prefix(client, dir, prefix, name, data, acl, dir_mode).await?;
    // Exactly one node was made: from here its own clean-up takes over.
    pending.armed = false;
    let mut cleanup = NodeCleanup::new(client, node);
    cleanup.counted = counted;
    Ok((cleanup, stat))
}

/// Deletes whatever node of one protected attempt exists, when dropped
/// armed: the attempt was cancelled or failed with its outcome unknown.
struct PrefixCleanup {
    client: Client,
    dir: String,
    prefix: String,
    armed: bool,
    counted: Option<lock::Counted>,
}

impl Drop for PrefixCleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // the session's end removes the ephemeral instead
        };
        let (client, dir, prefix) = (
            self.client.clone(),
            std::mem::take(&mut self.dir),
            std::mem::take(&mut self.prefix),
        );
        let counted = self.counted;
        // A session answers in request order, so this listing is read
        // after any create of the attempt that was already sent.
        runtime.spawn(async move {
            let listed = until_settled(|| retrying(&client, || client.get_children(&dir))).await;
            for child in listed.into_iter().flatten() {
                if child.starts_with(&prefix) {
                    let node = arbor_protocol::path::join(&dir, &child);
                    let _ = until_settled(|| delete_queue_node(&client, &node, counted)).await;
                }
            }
        });
    }
}

async fn create_by_prefix(
    client: &Client,
    dir: &str,
    prefix: &str,
    name: &str,
    data: Vec<u8>,
    acl: &[Acl],
    dir_mode: CreateMode,
) -> Result<(String, crate::Stat), Error> {
    let base = arbor_protocol::path::join(dir, &format!("{prefix}{name}"));
    let mut unsure = false;
    let mut last_error = Error::ConnectionLoss;
    for _ in 0..RETRIES_MAX {
        if unsure {
            wait_connected(client).await?;
            match client.get_children_with_stat(dir).await {
                Ok((children, _)) => {
                    if let Some(found) = children.iter().find(|c| c.name.starts_with(prefix)) {
                        return Ok((arbor_protocol::path::join(dir, &found.name), found.stat));
                    }
                    unsure = false;
                }
                // An ephemeral child would have kept the container alive.
                Err(Error::NoNode { .. }) => unsure = false,
                Err(err) if is_transient(&err) => {
                    before_retry(client, &err).await?;
                    last_error = err;
                    continue;
                }
                Err(err) => return Err(err),
            }
        }
        match create_node(
            client,
            &base,
            data.clone(),
            CreateMode::EphemeralSequential,
            acl,
        )
        .await
        {
            Ok(created) => return Ok(created),
            // Never made, or a container reaped after its last child went.
            Err(Error::NoNode { .. }) => match ensure_path_with(client, dir, acl, dir_mode).await {
                Ok(()) => {}
                Err(err) if is_transient(&err) => before_retry(client, &err).await?,
                Err(err) => return Err(err),
            },
            Err(err) if is_transient(&err) => {
                before_retry(client, &err).await?;
                unsure = true;
                last_error = err;
            }
            Err(err) => return Err(err),
        }
    }
    Err(last_error)
}

/// Deletes a held node, retrying through connection losses, then disarms
/// its cleanup.
pub(crate) async fn delete_node(node: NodeCleanup) -> Result<(), Error> {
    node.delete_now().await
}

/// Resolves when a holder of an ephemeral node may have lost it: the
/// connection is suspended, the session expired, or the client closed.
pub(crate) async fn until_lost(client: &Client) -> ConnectionState {
    // Subscribe before looking, so no change slips between the two.
    let mut changes = client.state_changes();
    let now = client.state();
    if !now.is_connected() {
        return now;
    }
    while let Some(state) = changes.next().await {
        if !state.is_connected() {
            return state;
        }
    }
    ConnectionState::Closed
}

/// The stat of `node` if this session owns it; `Ok(Err(owner))` if another
/// session does. A missing node means our session expired.
pub(crate) async fn owned_stat(
    client: &Client,
    node: &str,
) -> Result<Result<crate::Stat, SessionId>, Error> {
    let stat = retrying(client, || client.exists(node))
        .await?
        .ok_or(Error::SessionExpired)?;
    if stat.ephemeral_owner != client.session_id() {
        return Ok(Err(stat.ephemeral_owner));
    }
    Ok(Ok(stat))
}

#[cfg(test)]
mod tests {
    #[test]
    fn prefixes_are_unique_and_well_formed() {
        let a = super::unique_prefix();
        let b = super::unique_prefix();
        assert_ne!(a, b);
        assert_eq!(a.len(), 3 + 32 + 1);
        assert!(a.starts_with("_c_") && a.ends_with('-'));
        assert!(arbor_protocol::path::validate(&format!("/x/{a}lock-0000000001")).is_ok());
    }
}
