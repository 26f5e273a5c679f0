//! The two systems under test behind one small interface.
//!
//! A [`Session`] is one client session (one TCP connection) with either
//! Arbor or ZooKeeper. Workloads only call the methods here, so the same
//! workload code drives both targets; each method is a thin match onto
//! `arbor.rs` or `zookeeper.rs`. An enum (rather than a trait object) keeps
//! the hot loop free of boxed futures.
//!
//! Errors the workloads must tell apart (node exists, no node) are absorbed by
//! dedicated methods (`ensure`, `delete_if_exists`, `get_if_exists`), so
//! everything else can be a plain `anyhow::Error`.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

pub mod arbor;
pub mod jute_client;
pub mod zk_lock;
pub mod zk_recipes;
pub mod zookeeper;

/// Which system a run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Arbor,
    Zookeeper,
}

impl Kind {
    /// The name printed in the JSON `target` field.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Arbor => "arbor",
            Kind::Zookeeper => "zookeeper",
        }
    }

    /// Where the target listens unless `--server` says otherwise.
    pub fn default_server(self) -> &'static str {
        match self {
            Kind::Arbor => "127.0.0.1:7181",
            Kind::Zookeeper => "127.0.0.1:2181",
        }
    }
}

/// Which client a ZooKeeper session is opened with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ZkClient {
    /// This tool's pipelined jute client (`jute_client.rs`): costs about
    /// what arbor-client costs per request; sets no watches.
    Lean,
    /// The `zookeeper-client` crate: watches, and a second load generator.
    #[default]
    Crate,
}

impl ZkClient {
    /// The name printed in the JSON `zk_client` field.
    pub fn name(self) -> &'static str {
        match self {
            ZkClient::Lean => "lean",
            ZkClient::Crate => "crate",
        }
    }
}

/// How to open a session.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    pub session_timeout: Duration,
    /// How long establishing the session may take before it is an error.
    pub connect_timeout: Duration,
    /// Requests one session may have in flight (Arbor's client bounds it;
    /// ZooKeeper's client does not).
    pub max_in_flight: usize,
    /// The client of a ZooKeeper session (Arbor's is always arbor-client).
    pub zk_client: ZkClient,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_in_flight: arbor_client::DEFAULT_MAX_IN_FLIGHT,
            zk_client: ZkClient::Crate,
        }
    }
}

/// Session timeout of load sessions: long enough that a loaded machine never
/// expires one, and within both servers' default clamp ranges.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// How long opening one session may take.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The kinds of node the workloads create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeMode {
    Persistent,
    Ephemeral,
}

/// What a one-shot watch reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchOutcome {
    Deleted,
    /// Any other node event (created, data or children changed).
    OtherNodeEvent,
    /// The session ended or the watch was dropped by the client.
    SessionEvent,
}

/// One session with the target.
#[derive(Clone)]
pub enum Session {
    Arbor(arbor_client::Client),
    Zookeeper(zookeeper::ZkSession),
    /// ZooKeeper over the lean client.
    Jute(jute_client::JuteSession),
}

/// A one-shot watch set by [`Session::exists_watch`].
pub enum Watch {
    Arbor(arbor_client::OneshotWatch),
    Zookeeper(zookeeper_client::OneshotWatcher),
}

impl Watch {
    /// Waits for the watch to fire.
    pub async fn fired(self) -> Result<WatchOutcome> {
        match self {
            Watch::Arbor(watch) => arbor::watch_fired(watch).await,
            Watch::Zookeeper(watcher) => Ok(zookeeper::outcome(&watcher.changed().await)),
        }
    }
}

/// A granted lock, released by [`LockGuard::release`].
pub enum LockGuard {
    /// The real `arbor_client::recipes::Mutex`.
    ArborMutex(arbor_client::recipes::Guard),
    /// The herd variant (see `arbor::herd_lock`): the node to delete.
    ArborHerd(arbor_client::Client, String),
    Zookeeper(zk_lock::ZkGuard),
}

impl LockGuard {
    pub async fn release(self) -> Result<()> {
        match self {
            LockGuard::ArborMutex(guard) => Ok(guard.release().await?),
            LockGuard::ArborHerd(client, node) => Ok(client.delete(&node, None).await?),
            LockGuard::Zookeeper(guard) => guard.release().await,
        }
    }
}

/// A granted semaphore lease, released by [`SemaphoreLease::release`].
pub enum SemaphoreLease {
    /// The real `arbor_client::recipes::Semaphore`'s.
    Arbor(arbor_client::recipes::Lease),
    /// Curator's or kazoo's protocol (`zk_recipes.rs`).
    Zookeeper(zk_recipes::ZkLease),
}

impl SemaphoreLease {
    pub async fn release(self) -> Result<()> {
        match self {
            SemaphoreLease::Arbor(lease) => Ok(lease.release().await?),
            SemaphoreLease::Zookeeper(lease) => lease.release().await,
        }
    }
}

/// A distributed queue used through one session: the real
/// `arbor_client::recipes::Queue`, or kazoo's `LockingQueue` protocol.
pub enum QueueHandle {
    Arbor(arbor_client::recipes::Queue),
    Zookeeper(zk_recipes::ZkQueue),
}

/// A taken queue item, removed by [`QueueJob::complete`].
pub enum QueueJob {
    Arbor(arbor_client::recipes::Job),
    Zookeeper(zk_recipes::ZkJob),
}

impl QueueHandle {
    /// Creates the queue's directories (untimed setup): Arbor's recipe makes
    /// them on first use, kazoo's once per queue object.
    pub async fn prepare(&self, session: &Session, path: &str) -> Result<()> {
        match self {
            QueueHandle::Arbor(_) => {
                // The persistent `items` and `claims` of the queue's layout.
                for dir in [
                    path.to_owned(),
                    format!("{path}/items"),
                    format!("{path}/claims"),
                ] {
                    session.ensure(&dir, &[]).await?;
                }
                Ok(())
            }
            QueueHandle::Zookeeper(queue) => queue.prepare(path).await,
        }
    }

    pub async fn put(&self, data: &[u8]) -> Result<()> {
        match self {
            QueueHandle::Arbor(queue) => {
                queue.put(data.to_vec()).await?;
                Ok(())
            }
            QueueHandle::Zookeeper(queue) => queue.put(data).await,
        }
    }

    /// Waits for an item and claims it.
    pub async fn take(&self) -> Result<QueueJob> {
        match self {
            QueueHandle::Arbor(queue) => Ok(QueueJob::Arbor(queue.take().await?)),
            QueueHandle::Zookeeper(queue) => Ok(QueueJob::Zookeeper(queue.take().await?)),
        }
    }
}

impl QueueJob {
    pub fn data(&self) -> &[u8] {
        match self {
            QueueJob::Arbor(job) => job.data(),
            QueueJob::Zookeeper(job) => job.data(),
        }
    }

    /// Removes the item (Arbor: the fenced completion; kazoo: `consume`).
    pub async fn complete(self) -> Result<()> {
        match self {
            QueueJob::Arbor(job) => {
                job.complete().await?;
                Ok(())
            }
            QueueJob::Zookeeper(job) => job.complete().await,
        }
    }
}

impl Session {
    pub async fn connect(kind: Kind, addr: &str, options: &ConnectOptions) -> Result<Session> {
        match kind {
            Kind::Arbor => Ok(Session::Arbor(arbor::connect(addr, options).await?)),
            Kind::Zookeeper => match options.zk_client {
                ZkClient::Crate => Ok(Session::Zookeeper(zookeeper::connect(addr, options).await?)),
                ZkClient::Lean => Ok(Session::Jute(jute_client::connect(addr, options).await?)),
            },
        }
    }

    /// Opens `count` sessions, a few at a time (1000 sessions one after the
    /// other would take long; all at once would flood the accept queue).
    /// With several servers (`a,b,c`), session `i` goes to server `i % n`
    /// alone, so load spreads evenly and the same way for both targets
    /// (each client's own choice is random, and differs between them).
    pub async fn connect_many(
        kind: Kind,
        addr: &str,
        options: &ConnectOptions,
        count: usize,
    ) -> Result<Vec<Session>> {
        let servers = servers(addr);
        let mut sessions = Vec::with_capacity(count);
        while sessions.len() < count {
            let batch = (count - sessions.len()).min(CONNECTS_IN_PARALLEL);
            let mut pending = Vec::with_capacity(batch);
            for k in 0..batch {
                let addr = servers[(sessions.len() + k) % servers.len()].clone();
                let options = options.clone();
                pending.push(tokio::spawn(async move {
                    Session::connect(kind, &addr, &options).await
                }));
            }
            for handle in pending {
                sessions.push(handle.await??);
            }
        }
        Ok(sessions)
    }

    /// Whether the server at `addr` (one member) leads its ensemble: Arbor's
    /// cluster status, ZooKeeper's `srvr` four-letter word. A standalone
    /// server is never a leader.
    pub async fn is_leader(kind: Kind, addr: &str) -> Result<bool> {
        match kind {
            Kind::Arbor => arbor::is_leader(addr).await,
            Kind::Zookeeper => zookeeper::is_leader(addr).await,
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Session::Arbor(_) => Kind::Arbor,
            Session::Zookeeper(_) | Session::Jute(_) => Kind::Zookeeper,
        }
    }

    /// Creates a node; returns its path (with the sequence suffix if any).
    pub async fn create(&self, path: &str, data: &[u8], mode: NodeMode) -> Result<String> {
        match self {
            Session::Arbor(client) => arbor::create(client, path, data, mode).await,
            Session::Jute(jute) => jute.create(path, data, mode).await,
            Session::Zookeeper(zk) => zookeeper::create(zk, path, data, mode).await,
        }
    }

    /// Creates a persistent node unless it exists already.
    pub async fn ensure(&self, path: &str, data: &[u8]) -> Result<()> {
        match self {
            Session::Arbor(client) => arbor::ensure(client, path, data).await,
            Session::Jute(jute) => jute.ensure(path, data).await,
            Session::Zookeeper(zk) => zookeeper::ensure(zk, path, data).await,
        }
    }

    /// Creates all `paths` (persistent, same data) in one transaction.
    pub async fn create_batch(&self, paths: &[String], data: &[u8]) -> Result<()> {
        match self {
            Session::Arbor(client) => arbor::create_batch(client, paths, data).await,
            Session::Jute(jute) => jute.create_batch(paths, data).await,
            Session::Zookeeper(zk) => zookeeper::create_batch(zk, paths, data).await,
        }
    }

    /// Deletes all `paths` in one transaction.
    pub async fn delete_batch(&self, paths: &[String]) -> Result<()> {
        match self {
            Session::Arbor(client) => arbor::delete_batch(client, paths).await,
            Session::Jute(jute) => jute.delete_batch(paths).await,
            Session::Zookeeper(zk) => zookeeper::delete_batch(zk, paths).await,
        }
    }

    /// Reads a node; returns the data length.
    pub async fn get(&self, path: &str) -> Result<usize> {
        match self {
            Session::Arbor(client) => Ok(client.get_data(path).await?.0.len()),
            Session::Jute(jute) => jute.get(path).await,
            Session::Zookeeper(zk) => Ok(zk.client.get_data(path).await?.0.len()),
        }
    }

    /// Whether a node exists (no watch set).
    pub async fn exists(&self, path: &str) -> Result<bool> {
        match self {
            Session::Arbor(client) => Ok(client.exists(path).await?.is_some()),
            Session::Jute(jute) => jute.exists(path).await,
            Session::Zookeeper(zk) => Ok(zk.client.check_stat(path).await?.is_some()),
        }
    }

    /// A node's data, or `None` if it does not exist.
    pub async fn get_if_exists(&self, path: &str) -> Result<Option<Vec<u8>>> {
        match self {
            Session::Arbor(client) => arbor::get_if_exists(client, path).await,
            Session::Jute(jute) => jute.get_if_exists(path).await,
            Session::Zookeeper(zk) => zookeeper::get_if_exists(zk, path).await,
        }
    }

    pub async fn set(&self, path: &str, data: &[u8]) -> Result<()> {
        match self {
            Session::Arbor(client) => {
                client.set_data(path, data, None).await?;
                Ok(())
            }
            Session::Jute(jute) => jute.set(path, data).await,
            Session::Zookeeper(zk) => {
                zk.client.set_data(path, data, None).await?;
                Ok(())
            }
        }
    }

    pub async fn delete(&self, path: &str) -> Result<()> {
        match self {
            Session::Arbor(client) => Ok(client.delete(path, None).await?),
            Session::Jute(jute) => jute.delete(path).await,
            Session::Zookeeper(zk) => Ok(zk.client.delete(path, None).await?),
        }
    }

    pub async fn delete_if_exists(&self, path: &str) -> Result<()> {
        match self {
            Session::Arbor(client) => arbor::delete_if_exists(client, path).await,
            Session::Jute(jute) => jute.delete_if_exists(path).await,
            Session::Zookeeper(zk) => zookeeper::delete_if_exists(zk, path).await,
        }
    }

    pub async fn children(&self, path: &str) -> Result<Vec<String>> {
        match self {
            Session::Arbor(client) => Ok(client.get_children(path).await?),
            Session::Jute(jute) => jute.children(path).await,
            Session::Zookeeper(zk) => Ok(zk.client.list_children(path).await?),
        }
    }

    /// Sets a one-shot exists watch; `None` (and no usable watch) if the node
    /// does not exist.
    pub async fn exists_watch(&self, path: &str) -> Result<Option<Watch>> {
        match self {
            Session::Arbor(client) => match client.exists_watch(path).await? {
                (Some(_), watch) => Ok(Some(Watch::Arbor(watch))),
                (None, _) => Ok(None),
            },
            Session::Jute(_) => Err(no_watches()),
            Session::Zookeeper(zk) => match zk.client.check_and_watch_stat(path).await? {
                (Some(_), watcher) => Ok(Some(Watch::Zookeeper(watcher))),
                (None, _) => Ok(None),
            },
        }
    }

    /// Waits until the member this session talks to has applied every write
    /// committed before the call: another session's writes are then visible
    /// to this one's reads (an ensemble's followers may lag the leader).
    pub async fn sync(&self, path: &str) -> Result<()> {
        match self {
            Session::Arbor(client) => Ok(client.sync(path).await?),
            Session::Jute(jute) => jute.sync(path).await,
            Session::Zookeeper(zk) => Ok(zk.client.sync(path).await?),
        }
    }

    /// A round trip. Both servers answer a session's requests in order and
    /// send a watch event before the reply to any later request, so after
    /// this returns every event triggered before the call has arrived.
    pub async fn barrier(&self) -> Result<()> {
        match self {
            Session::Arbor(client) => {
                client.ping().await?;
                Ok(())
            }
            Session::Jute(jute) => jute.exists("/").await.map(|_| ()),
            Session::Zookeeper(zk) => {
                zk.client.check_stat("/").await?;
                Ok(())
            }
        }
    }

    /// Watch events received so far. Arbor: the client's per-session count
    /// of events from the server. ZooKeeper: node events counted by this
    /// tool's lock recipe watchers on this session (the client library keeps
    /// no count).
    pub fn watch_events(&self) -> u64 {
        match self {
            Session::Arbor(client) => client.watch_events_received(),
            Session::Jute(_) => 0,
            Session::Zookeeper(zk) => zk.events(),
        }
    }

    /// The session timeout the server granted.
    pub fn negotiated_timeout(&self) -> Duration {
        match self {
            Session::Arbor(client) => client.session_timeout(),
            Session::Jute(jute) => jute.session_timeout(),
            Session::Zookeeper(zk) => zk.client.session_timeout(),
        }
    }

    /// Acquires the fair lock on `dir`. Without `herd` each waiter watches
    /// only its predecessor; with it every waiter watches the directory's
    /// children. `ready` (if given) is incremented once, when the waiter
    /// first starts waiting with its watch set — when the recipe can tell
    /// (see [`Session::signals_ready`]).
    pub async fn lock(
        &self,
        dir: &str,
        herd: bool,
        ready: Option<&Arc<AtomicUsize>>,
    ) -> Result<LockGuard> {
        match self {
            Session::Arbor(client) if herd => {
                let node = arbor::herd_lock(client, dir, ready).await?;
                Ok(LockGuard::ArborHerd(client.clone(), node))
            }
            Session::Arbor(client) => {
                let guard = arbor_client::recipes::Mutex::new(client, dir)
                    .lock()
                    .await?;
                Ok(LockGuard::ArborMutex(guard))
            }
            Session::Jute(_) => Err(no_watches()),
            Session::Zookeeper(zk) => Ok(LockGuard::Zookeeper(
                zk_lock::acquire(zk, dir, herd, ready).await?,
            )),
        }
    }

    /// Takes one of `permits` leases of the semaphore on `path`: Arbor's
    /// library `Semaphore`, or on ZooKeeper `recipe`'s protocol.
    pub async fn acquire_lease(
        &self,
        path: &str,
        permits: u32,
        recipe: zk_recipes::SemaphoreRecipe,
    ) -> Result<SemaphoreLease> {
        match self {
            Session::Arbor(client) => Ok(SemaphoreLease::Arbor(
                arbor_client::recipes::Semaphore::new(client, path, permits)
                    .acquire()
                    .await?,
            )),
            Session::Jute(_) => Err(no_watches()),
            Session::Zookeeper(zk) => Ok(SemaphoreLease::Zookeeper(
                zk_recipes::acquire_lease(zk, path, permits, recipe).await?,
            )),
        }
    }

    /// The queue on `path` through this session.
    pub fn queue(&self, path: &str) -> Result<QueueHandle> {
        match self {
            Session::Arbor(client) => Ok(QueueHandle::Arbor(arbor_client::recipes::Queue::new(
                client, path,
            ))),
            Session::Jute(_) => Err(no_watches()),
            Session::Zookeeper(zk) => {
                Ok(QueueHandle::Zookeeper(zk_recipes::ZkQueue::new(zk, path)))
            }
        }
    }

    /// Whether [`Session::lock`] reports readiness: every recipe but Arbor's
    /// library `Mutex`, whose internals are not observable.
    pub fn signals_ready(&self, herd: bool) -> bool {
        herd || self.kind() == Kind::Zookeeper
    }

    /// Closes the session (ephemeral nodes go at once).
    pub async fn close(self) -> Result<()> {
        match self {
            Session::Arbor(client) => Ok(client.close().await?),
            Session::Jute(jute) => jute.close().await,
            Session::Zookeeper(zk) => {
                // zookeeper-client sends CloseSession when the last clone of
                // the client is dropped; `main` lingers briefly before exit so
                // the request gets out.
                drop(zk);
                Ok(())
            }
        }
    }
}

/// What a workload that needs watches gets from a lean session.
fn no_watches() -> anyhow::Error {
    anyhow::anyhow!(
        "the lean ZooKeeper client sets no watches; open this session with zookeeper-client"
    )
}

/// Sessions opened concurrently by [`Session::connect_many`].
pub const CONNECTS_IN_PARALLEL: usize = 32;

/// The sequence number a sequential node's name ends with (`u64::MAX` when
/// it has none, sorting such names last).
/// The last segment of a created node's path: its name in the listing.
pub fn node_name(node: &str) -> anyhow::Result<String> {
    node.rsplit('/')
        .next()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("created node {node} has no name"))
}

pub fn sequence(name: &str) -> u64 {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    name[name.len() - digits..].parse().unwrap_or(u64::MAX)
}

/// The most requests one Arbor session may have in flight (the client's own
/// limit).
pub const MAX_IN_FLIGHT_PER_SESSION: usize = arbor_client::MAX_IN_FLIGHT_LIMIT;

/// The servers of a connect string (`a,b,c`), at least one.
pub fn servers(connect_string: &str) -> Vec<String> {
    let servers: Vec<String> = connect_string
        .split(',')
        .map(str::trim)
        .filter(|addr| !addr.is_empty())
        .map(str::to_owned)
        .collect();
    if servers.is_empty() {
        vec![connect_string.to_owned()]
    } else {
        servers
    }
}
