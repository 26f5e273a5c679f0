//! A counting semaphore and a distributed queue for ZooKeeper, written over
//! `zookeeper-client` with the node protocols of the libraries a ZooKeeper
//! shop runs, so that Arbor's `Semaphore` and `Queue` are compared with
//! them request for request (their protocols were read, not their code):
//!
//! **Semaphore, [`SemaphoreRecipe::Curator`]** — Apache Curator's
//! `InterProcessSemaphoreV2`:
//! 1. take an `InterProcessMutex` on `<path>/locks` (`zk_lock.rs`: create,
//!    list, watch the predecessor);
//! 2. create a protected EPHEMERAL_SEQUENTIAL lease `<path>/leases/_c_…-lease-`;
//! 3. list `<path>/leases` with a children watch; granted when there are at
//!    most N children, else wait for the watch (every change of the leases)
//!    and list again;
//! 4. release the mutex. Releasing the lease deletes its node.
//!
//! Only the mutex holder waits on the leases, so a release wakes one
//! contender (plus the mutex's own handoff), but every grant costs a lock
//! cycle: five round trips uncontended against Arbor's one.
//!
//! **Semaphore, [`SemaphoreRecipe::Kazoo`]** — kazoo's `Semaphore`
//! (`recipe/lock.py`): leases are plain ephemeral nodes `<path>/<uuid>`, the
//! lock is a kazoo `Lock` on the sibling `<path>-__lock__`:
//! 1. `exists(<path>/<uuid>)` (do we hold a lease already?);
//! 2. take the lock (same steps as above);
//! 3. list `<path>` with a children watch; if fewer than N, create our lease;
//!    `exists` on it says whether we hold one; if not, wait for the watch and
//!    go back to 3;
//! 4. release the lock.
//!
//! Seven round trips uncontended; our own create fires our own children
//! watch (counted: the server sends it).
//!
//! **Queue** — kazoo's `LockingQueue` (`recipe/queue.py`), the ZooKeeper
//! queue closest to Arbor's claim protocol (Curator's `DistributedQueue`
//! hands items to a consumer callback, with a lock node only when asked):
//! * put: create PERSISTENT_SEQUENTIAL `<path>/entries/entry-100-`;
//! * take: list `entries` and `taken` (each with a children watch), sort the
//!   entries by name, drop the taken ones; claim the first by creating the
//!   ephemeral `<path>/taken/<entry>` holding the taker's id (`NodeExists`:
//!   someone else has it), then read the entry (gone: delete the claim).
//!   Nothing available (or the first one lost): wait for either watch;
//! * consume: `sync` and `get` the claim (kazoo's `holds_lock`: is its data
//!   still our id?), then one multi deletes the entry and the claim.
//!
//! kazoo lists the two directories one after the other (its client is
//! synchronous); here they go together, as Arbor's recipe sends them, so
//! the comparison is of protocols, not of client styles.
//!
//! Watch events are counted on the [`ZkSession`]. A session keeps at most
//! one children watch per directory registered, as the server does (a
//! second registration of the same path and session would be fanned out to
//! both watchers by the client library and counted twice).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, Result};
use tokio::sync::watch;
use zookeeper_client::{Error, OneshotWatcher};

use super::zk_lock::{self, protected_prefix};
use super::zookeeper::{ZkSession, CONTAINER, EPHEMERAL, EPHEMERAL_SEQUENTIAL, PERSISTENT};
use super::WatchOutcome;

/// Which library's semaphore protocol the ZooKeeper side runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SemaphoreRecipe {
    /// Curator's `InterProcessSemaphoreV2`.
    #[default]
    Curator,
    /// kazoo's `Semaphore`.
    Kazoo,
}

impl SemaphoreRecipe {
    /// The name printed in the JSON `zk_recipe` field.
    pub fn name(self) -> &'static str {
        match self {
            SemaphoreRecipe::Curator => "curator",
            SemaphoreRecipe::Kazoo => "kazoo",
        }
    }
}

/// The part of a Curator lease node's name after the protected prefix.
const LEASE_NAME: &str = "lease-";

/// How many times a create is retried when its directory vanished (the
/// lease and lock directories are containers, reaped once empty).
const DIR_RETRIES: usize = 5;

/// The priority kazoo's `put` gives an entry by default.
const KAZOO_DEFAULT_PRIORITY: u32 = 100;

/// A name unique to this process and call, as kazoo's `uuid4().hex`: the
/// 32 hex digits of a protected prefix.
fn kazoo_id() -> String {
    protected_prefix()
        .trim_start_matches("_c_")
        .trim_end_matches('-')
        .to_owned()
}

/// A granted semaphore lease; [`ZkLease::release`] deletes its node.
pub struct ZkLease {
    session: ZkSession,
    node: String,
}

impl ZkLease {
    pub async fn release(self) -> Result<()> {
        self.session.client.delete(&self.node, None).await?;
        Ok(())
    }
}

/// Takes one of `permits` leases on `path` with `recipe`'s protocol.
pub async fn acquire_lease(
    session: &ZkSession,
    path: &str,
    permits: u32,
    recipe: SemaphoreRecipe,
) -> Result<ZkLease> {
    match recipe {
        SemaphoreRecipe::Curator => acquire_curator(session, path, permits).await,
        SemaphoreRecipe::Kazoo => acquire_kazoo(session, path, permits).await,
    }
}

async fn acquire_curator(session: &ZkSession, path: &str, permits: u32) -> Result<ZkLease> {
    let lock = zk_lock::acquire(session, &format!("{path}/locks"), false, None).await?;
    let leases = format!("{path}/leases");
    let prefix = format!("{leases}/{}{LEASE_NAME}", protected_prefix());
    let node = create_sequential_in_container(session, &leases, &prefix).await?;
    let name = super::node_name(&node)?;
    loop {
        let (children, watcher) = session.client.list_and_watch_children(&leases).await?;
        if !children.contains(&name) {
            return Err(anyhow!("lease node {node} vanished: session lost"));
        }
        if children.len() <= permits as usize {
            // The watch stays set on the server and fires at the next
            // change of the leases: count it, as Arbor's client counts
            // every event it receives.
            count_later(session, watcher);
            break;
        }
        wait(session, watcher).await?;
    }
    lock.release().await?;
    Ok(ZkLease {
        session: session.clone(),
        node,
    })
}

async fn acquire_kazoo(session: &ZkSession, path: &str, permits: u32) -> Result<ZkLease> {
    // kazoo names a lease by a uuid fixed per Semaphore object.
    let node = format!("{path}/{}", kazoo_id());
    if session.client.check_stat(&node).await?.is_some() {
        return Err(anyhow!("lease node {node} exists before its create"));
    }
    let lock = zk_lock::acquire(session, &format!("{path}-__lock__"), false, None).await?;
    loop {
        let (children, watcher) = match session.client.list_and_watch_children(path).await {
            Ok(found) => found,
            Err(Error::NoNode) => {
                // kazoo's ensure_path, done once per Semaphore object.
                session.client.mkdir(path, &PERSISTENT).await?;
                continue;
            }
            Err(err) => return Err(err.into()),
        };
        if children.len() < permits as usize {
            session.client.create(&node, &[], &EPHEMERAL).await?;
        }
        if session.client.check_stat(&node).await?.is_some() {
            count_later(session, watcher);
            break;
        }
        wait(session, watcher).await?;
    }
    lock.release().await?;
    Ok(ZkLease {
        session: session.clone(),
        node,
    })
}

/// Creates the EPHEMERAL_SEQUENTIAL node `prefix` in `dir`, creating `dir`
/// and its parents as containers when missing (Curator's
/// `creatingParentContainersIfNeeded`); returns its path.
async fn create_sequential_in_container(
    session: &ZkSession,
    dir: &str,
    prefix: &str,
) -> Result<String> {
    for _ in 0..DIR_RETRIES {
        match session
            .client
            .create(prefix, &[], &EPHEMERAL_SEQUENTIAL)
            .await
        {
            Ok((_, sequence)) => return Ok(format!("{prefix}{sequence}")),
            Err(Error::NoNode) => session.client.mkdir(dir, &CONTAINER).await?,
            Err(err) => return Err(err.into()),
        }
    }
    Err(anyhow!("directory {dir} keeps vanishing"))
}

/// Waits for a one-shot watch and counts its event.
async fn wait(session: &ZkSession, watcher: OneshotWatcher) -> Result<()> {
    let event = watcher.changed().await;
    session.count_event(&event);
    if super::zookeeper::outcome(&event) == WatchOutcome::SessionEvent {
        return Err(anyhow!("session event while waiting: {event:?}"));
    }
    Ok(())
}

/// Counts a watch's event whenever it fires (a watch nobody waits on).
fn count_later(session: &ZkSession, watcher: OneshotWatcher) {
    let counter = session.clone();
    tokio::spawn(async move { counter.count_event(&watcher.changed().await) });
}

/// A kazoo `LockingQueue` on one session: puts, and takes one at a time.
pub struct ZkQueue {
    session: ZkSession,
    entries: String,
    taken: String,
    /// The taker's id, the data of its claims (kazoo: a uuid per queue).
    id: Vec<u8>,
    /// Whether a children watch of `entries` / `taken` is registered and
    /// has not fired yet.
    entries_armed: Arc<AtomicBool>,
    taken_armed: Arc<AtomicBool>,
    /// Bumped by every watch event of this queue's directories.
    changes: watch::Sender<u64>,
}

/// A claimed entry; [`ZkJob::complete`] is kazoo's `consume`.
pub struct ZkJob {
    session: ZkSession,
    entry: String,
    claim: String,
    id: Vec<u8>,
    data: Vec<u8>,
}

impl ZkQueue {
    pub fn new(session: &ZkSession, path: &str) -> ZkQueue {
        ZkQueue {
            session: session.clone(),
            entries: format!("{path}/entries"),
            taken: format!("{path}/taken"),
            id: kazoo_id().into_bytes(),
            entries_armed: Arc::new(AtomicBool::new(false)),
            taken_armed: Arc::new(AtomicBool::new(false)),
            changes: watch::channel(0).0,
        }
    }

    /// kazoo's `_ensure_paths`, done once per queue object (untimed).
    pub async fn prepare(&self, path: &str) -> Result<()> {
        for dir in [path, &self.entries, &self.taken] {
            match self.session.client.create(dir, &[], &PERSISTENT).await {
                Ok(_) | Err(Error::NodeExists) => {}
                Err(err) => return Err(err.into()),
            }
        }
        Ok(())
    }

    pub async fn put(&self, data: &[u8]) -> Result<()> {
        let prefix = format!("{}/entry-{KAZOO_DEFAULT_PRIORITY:03}-", self.entries);
        self.session
            .client
            .create(&prefix, data, &PERSISTENT_SEQUENTIAL)
            .await?;
        Ok(())
    }

    /// Waits for an entry and claims it.
    pub async fn take(&self) -> Result<ZkJob> {
        let mut changes = self.changes.subscribe();
        loop {
            // Seen before the listings: an event during them is a change.
            changes.borrow_and_update();
            let (entries, taken) = tokio::join!(
                self.list(&self.entries, &self.entries_armed),
                self.list(&self.taken, &self.taken_armed),
            );
            let (mut entries, taken) = (entries?, taken?.into_iter().collect::<HashSet<_>>());
            entries.sort_unstable();
            if let Some(first) = entries.iter().find(|entry| !taken.contains(*entry)) {
                if let Some(job) = self.claim(first).await? {
                    return Ok(job);
                }
            }
            changes
                .changed()
                .await
                .map_err(|_| anyhow!("the queue's watch counter ended"))?;
        }
    }

    /// Lists `dir`, registering a children watch unless one is registered.
    async fn list(&self, dir: &str, armed: &Arc<AtomicBool>) -> Result<Vec<String>> {
        if armed.load(Ordering::SeqCst) {
            return Ok(self.session.client.list_children(dir).await?);
        }
        let (children, watcher) = self.session.client.list_and_watch_children(dir).await?;
        armed.store(true, Ordering::SeqCst);
        let (session, armed, changes) = (self.session.clone(), armed.clone(), self.changes.clone());
        tokio::spawn(async move {
            let event = watcher.changed().await;
            armed.store(false, Ordering::SeqCst);
            session.count_event(&event);
            changes.send_modify(|count| *count += 1);
        });
        Ok(children)
    }

    /// kazoo's `_take`: the claim node, then the entry's data.
    async fn claim(&self, entry: &str) -> Result<Option<ZkJob>> {
        let claim = format!("{}/{entry}", self.taken);
        match self
            .session
            .client
            .create(&claim, &self.id, &EPHEMERAL)
            .await
        {
            Ok(_) => {}
            Err(Error::NodeExists) => return Ok(None),
            Err(err) => return Err(err.into()),
        }
        let path = format!("{}/{entry}", self.entries);
        match self.session.client.get_data(&path).await {
            Ok((data, _)) => Ok(Some(ZkJob {
                session: self.session.clone(),
                entry: path,
                claim,
                id: self.id.clone(),
                data,
            })),
            Err(Error::NoNode) => {
                self.session.client.delete(&claim, None).await?;
                Ok(None)
            }
            Err(err) => Err(err.into()),
        }
    }
}

/// `PERSISTENT_SEQUENTIAL` with the open ACL.
const PERSISTENT_SEQUENTIAL: zookeeper_client::CreateOptions<'static> =
    zookeeper_client::CreateMode::PersistentSequential
        .with_acls(zookeeper_client::Acls::anyone_all());

impl ZkJob {
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// kazoo's `consume`: `holds_lock` (sync + get of the claim), then one
    /// multi deleting the entry and the claim.
    pub async fn complete(self) -> Result<()> {
        self.session.client.sync(&self.claim).await?;
        let (owner, _) = self.session.client.get_data(&self.claim).await?;
        if owner != self.id {
            return Err(anyhow!("claim {} is no longer ours", self.claim));
        }
        let mut writer = self.session.client.new_multi_writer();
        writer.add_delete(&self.entry, None)?;
        writer.add_delete(&self.claim, None)?;
        writer.commit().await?;
        Ok(())
    }
}
