//! A fair, fenced read-write lock (Curator's `InterProcessReadWriteLock`).
//!
//! Readers and writers queue together: each creates an ephemeral sequential
//! node, `<prefix>read-<seq>` or `<prefix>write-<seq>`, under the lock's path,
//! and the sequence number orders the one queue. The invariants:
//!
//! * A writer holds the lock when its node is the lowest: no one else holds
//!   it then, readers included.
//! * A reader holds the lock when no writer's node is below its own: any
//!   number of readers hold it together.
//! * Grants follow arrival order. A reader that arrives after a waiting
//!   writer waits for that writer, so a stream of readers cannot starve
//!   writers.
//! * No herd: a reader watches only the nearest writer ahead of it (readers
//!   ahead of it do not block it), and a writer watches only the node just
//!   ahead of it (of either kind). One release wakes only those it unblocks.
//! * No listing: a contender finds the node it waits for with
//!   [`Client::children_below`] (a writer asks for its own node and the one
//!   just ahead; a reader pages down, [`SCAN_PAGE`] nodes at a time, to the
//!   nearest writer, and after that writer goes looks only below it), so a
//!   handoff costs the same however long the queue.
//! * Each guard's fencing token is the creation zxid of its node, so a write
//!   grant's token is larger than that of every grant before it.
//!
//! The safety rules are the fair lock's (see [`super::Mutex`]): a lost create
//! reply is found again by its per-attempt prefix; ownership is reported only
//! after checking the node belongs to this session; guards say when they may
//! have been lost; cancelling an acquisition removes its node. On top of that,
//! a connection loss while waiting is ridden out: the waiter resumes once the
//! session is back instead of failing and leaving its node in the queue.

use std::time::Duration;

use arbor_protocol::path;

use crate::recipes::fence::FencingToken;
use crate::recipes::fenced::Fenced;
use crate::recipes::lock::{Turn, TurnError, SCAN_PAGE};
use crate::recipes::{
    create_protected, delete_node, unique_prefix, until_lost, LockError, NodeCleanup,
};
use crate::{Acl, Client, ConnectionState, Error};

/// The part of a reader's node name after the attempt prefix.
pub(crate) const READ_NAME: &str = "read-";
/// The part of a writer's node name after the attempt prefix.
pub(crate) const WRITE_NAME: &str = "write-";

/// A fair read-write lock on a path. Cheap to create; clone the client, not
/// the lock.
///
/// ```
/// use arbor_client::recipes::{LockError, RwLock};
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// let lock = RwLock::new(&client, "/locks/config");
/// {
///     let reading = lock.read().await?; // shared with other readers
///     // ... read the configuration ...
///     reading.release().await?;
/// }
/// let writing = lock.write().await?; // alone
/// let token = writing.fencing_token(); // send it with every write
/// // ... rewrite the configuration ...
/// writing.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    client: Client,
    path: String,
    /// The ACL of the nodes the lock creates (the open one by default).
    acl: Vec<Acl>,
}

/// Holding the lock for reading, possibly with other readers. Dropping it
/// releases in the background; [`ReadGuard::release`] does it and waits.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// # let lock = arbor_client::recipes::RwLock::new(&client, "/doc/rwlock");
/// let guard = lock.read().await?;
/// println!("reading under token {}", guard.fencing_token());
/// drop(guard); // released in the background
/// # Ok(()) }
/// ```
pub struct ReadGuard {
    held: Held,
}

/// Holding the lock for writing, alone. Dropping it releases in the
/// background; [`WriteGuard::release`] does it and waits.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// # let lock = arbor_client::recipes::RwLock::new(&client, "/doc/rwlock");
/// let guard = lock.write().await?;
/// println!("writing under token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub struct WriteGuard {
    held: Held,
}

/// What both guards hold: the node (deleted on drop) and its token.
struct Held {
    node: NodeCleanup,
    token: FencingToken,
}

/// Which side of the lock a node asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Read => READ_NAME,
            Kind::Write => WRITE_NAME,
        }
    }

    /// Whether a contender of this kind waits for a node of `ahead`'s kind
    /// ahead of it: a reader waits only for writers, a writer for everyone.
    fn waits_for(self, ahead: Kind) -> bool {
        self == Kind::Write || ahead == Kind::Write
    }

    /// Nodes per look: a writer needs only its own node and the one just
    /// ahead; a reader may have to pass many readers to find a writer.
    fn look_limit(self) -> u32 {
        match self {
            Kind::Read => SCAN_PAGE,
            Kind::Write => 2,
        }
    }

    /// The kind of a child of the lock path, `None` for a stranger.
    fn of(name: &str) -> Option<Kind> {
        // The prefix is hex and ends with '-', so neither name can hide in it.
        if name.contains(WRITE_NAME) {
            Some(Kind::Write)
        } else if name.contains(READ_NAME) {
            Some(Kind::Read)
        } else {
            None
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Forever,
    Never,
}

impl RwLock {
    /// A read-write lock on `path` (created as a container if missing, with
    /// its parents).
    ///
    /// ```
    /// # fn demo(client: arbor_client::Client) {
    /// let lock = arbor_client::recipes::RwLock::new(&client, "/locks/config");
    /// assert_eq!(lock.path(), "/locks/config");
    /// # }
    /// ```
    pub fn new(client: &Client, path: &str) -> Self {
        Self {
            client: client.clone(),
            path: path.to_owned(),
            acl: Acl::open(),
        }
    }

    /// Gives the nodes this lock creates (its directory, if missing, and
    /// each reader's and writer's node) `acl` instead of the open one (see
    /// [`Mutex::with_acl`](crate::recipes::Mutex::with_acl)).
    ///
    /// ```
    /// # fn demo(client: arbor_client::Client) {
    /// use arbor_client::{recipes::RwLock, Acl};
    /// let lock = RwLock::new(&client, "/team-a/config-lock").with_acl(Acl::creator_all());
    /// # }
    /// ```
    pub fn with_acl(mut self, acl: Vec<Acl>) -> Self {
        self.acl = acl;
        self
    }

    /// The path whose children form the queue.
    ///
    /// ```
    /// # fn demo(lock: arbor_client::recipes::RwLock) {
    /// println!("queue under {}", lock.path());
    /// # }
    /// ```
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Waits until no writer is ahead of this reader.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let lock = arbor_client::recipes::RwLock::new(&client, "/doc/rwlock");
    /// let guard = lock.read().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn read(&self) -> Result<ReadGuard, LockError> {
        let held = self.acquire(Kind::Read, Wait::Forever).await?;
        Ok(ReadGuard { held })
    }

    /// Waits until nobody is ahead of this writer.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let lock = arbor_client::recipes::RwLock::new(&client, "/doc/rwlock");
    /// let guard = lock.write().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn write(&self) -> Result<WriteGuard, LockError> {
        let held = self.acquire(Kind::Write, Wait::Forever).await?;
        Ok(WriteGuard { held })
    }

    /// Reads only if no writer holds the lock or waits for it;
    /// [`LockError::Locked`] otherwise, with this attempt's node removed.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let lock = arbor_client::recipes::RwLock::new(&client, "/doc/rwlock");
    /// use arbor_client::recipes::LockError;
    /// match lock.try_read().await {
    ///     Ok(guard) => guard.release().await?,
    ///     Err(LockError::Locked) => println!("a writer is at work or waiting"),
    ///     Err(err) => return Err(err.into()),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_read(&self) -> Result<ReadGuard, LockError> {
        let held = self.acquire(Kind::Read, Wait::Never).await?;
        Ok(ReadGuard { held })
    }

    /// Writes only if nobody holds the lock or waits for it;
    /// [`LockError::Locked`] otherwise, with this attempt's node removed.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let lock = arbor_client::recipes::RwLock::new(&client, "/doc/rwlock");
    /// use arbor_client::recipes::LockError;
    /// match lock.try_write().await {
    ///     Ok(guard) => guard.release().await?,
    ///     Err(LockError::Locked) => println!("busy"),
    ///     Err(err) => return Err(err.into()),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_write(&self) -> Result<WriteGuard, LockError> {
        let held = self.acquire(Kind::Write, Wait::Never).await?;
        Ok(WriteGuard { held })
    }

    /// [`RwLock::read`] for at most `timeout`; [`LockError::Timeout`] then,
    /// with the queue left as if this reader never came.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let lock = arbor_client::recipes::RwLock::new(&client, "/doc/rwlock");
    /// use std::time::Duration;
    /// let guard = lock.read_timeout(Duration::from_secs(5)).await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn read_timeout(&self, timeout: Duration) -> Result<ReadGuard, LockError> {
        match tokio::time::timeout(timeout, self.read()).await {
            Ok(result) => result,
            // The acquire future was dropped: its node is being removed.
            Err(_) => Err(LockError::Timeout),
        }
    }

    /// [`RwLock::write`] for at most `timeout`; [`LockError::Timeout`] then,
    /// with the queue left as if this writer never came.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let lock = arbor_client::recipes::RwLock::new(&client, "/doc/rwlock");
    /// use std::time::Duration;
    /// let guard = lock.write_timeout(Duration::from_secs(5)).await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn write_timeout(&self, timeout: Duration) -> Result<WriteGuard, LockError> {
        match tokio::time::timeout(timeout, self.write()).await {
            Ok(result) => result,
            // The acquire future was dropped: its node is being removed.
            Err(_) => Err(LockError::Timeout),
        }
    }

    async fn acquire(&self, kind: Kind, wait: Wait) -> Result<Held, LockError> {
        let prefix = unique_prefix();
        let limit = kind.look_limit();
        // The create and a look at the top of the queue go out together (as
        // the mutex does): a free lock costs one round trip.
        let (created, top) = tokio::join!(
            create_protected(
                &self.client,
                &self.path,
                &prefix,
                kind.name(),
                Vec::new(),
                &self.acl,
            ),
            self.client.children_below(&self.path, u64::MAX, limit),
        );
        // Dropping this future deletes the node, even mid-create.
        let (cleanup, stat) = created?;
        let node = cleanup.path().to_owned();
        let name = path::name(&node).to_owned();
        let sequence = path::parse_sequence(&name).ok_or_else(|| {
            LockError::Client(Error::Protocol(format!("{node} has no sequence number")))
        })?;
        let turn = Turn {
            client: &self.client,
            dir: &self.path,
            name: &name,
            sequence,
            blocks: |other: &str| Kind::of(other).is_some_and(|other| kind.waits_for(other)),
            limit,
            // A reader passes readers once: after its writer goes, it
            // looks only below that writer.
            resume_below_blocker: kind == Kind::Read,
        };
        match turn.wait(wait == Wait::Forever, top.ok()).await {
            Ok(()) => Ok(Held {
                node: cleanup,
                token: stat.czxid,
            }),
            Err(TurnError::Busy) => {
                delete_node(cleanup).await?;
                Err(LockError::Locked)
            }
            Err(TurnError::NotOwner(owner)) => Err(LockError::NotOwner { node, owner }),
            Err(TurnError::Client(err)) => Err(err.into()),
        }
    }
}

impl ReadGuard {
    /// The fencing token of this grant: the zxid that created the reader's
    /// node. Larger than the token of every write grant before it.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let guard = arbor_client::recipes::RwLock::new(&client, "/doc/rwlock").read().await?;
    /// let token: u64 = guard.fencing_token();
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> FencingToken {
        self.held.token
    }

    /// The reader's node path.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let guard = arbor_client::recipes::RwLock::new(&client, "/doc/rwlock").read().await?;
    /// assert!(guard.node().contains("read-"));
    /// # Ok(()) }
    /// ```
    pub fn node(&self) -> &str {
        self.held.node.path()
    }

    /// A transaction that commits only while this read grant stands (see
    /// [`Fenced`]): the server checks the reader's node in the same step.
    /// Other readers may hold the lock too, so this fences against losing
    /// the grant, not against other readers' writes.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let guard = arbor_client::recipes::RwLock::new(&client, "/doc/rwlock").read().await?;
    /// use arbor_client::CreateMode;
    /// // Record what this reader saw, only while its grant stands.
    /// let mode = CreateMode::PersistentSequential;
    /// guard.fenced().create("/read-log-", b"v1".to_vec(), mode).commit().await?;
    /// # Ok(()) }
    /// ```
    pub fn fenced(&self) -> Fenced {
        Fenced::new(self.held.node.client(), self.held.node.path())
    }

    /// Resolves when this reader may have lost the lock (the connection is
    /// suspended, the session expired, or the client closed), with that
    /// state. Stop trusting what was read under the lock when it fires.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let guard = arbor_client::recipes::RwLock::new(&client, "/doc/rwlock").read().await?;
    /// tokio::select! {
    ///     state = guard.lost() => eprintln!("stop: connection {state:?}"),
    ///     () = read_config() => {}
    /// }
    /// # Ok(()) }
    /// # async fn read_config() {}
    /// ```
    pub async fn lost(&self) -> ConnectionState {
        until_lost(self.held.node.client()).await
    }

    /// Releases the lock and waits until the node is gone (riding out a
    /// connection loss on the way).
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let guard = arbor_client::recipes::RwLock::new(&client, "/doc/rwlock").read().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<(), LockError> {
        delete_node(self.held.node).await.map_err(LockError::from)
    }
}

impl WriteGuard {
    /// The fencing token of this grant: the zxid that created the writer's
    /// node. Strictly larger than the token of every grant before it.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let guard = arbor_client::recipes::RwLock::new(&client, "/doc/rwlock").write().await?;
    /// let token: u64 = guard.fencing_token();
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> FencingToken {
        self.held.token
    }

    /// The writer's node path.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let guard = arbor_client::recipes::RwLock::new(&client, "/doc/rwlock").write().await?;
    /// assert!(guard.node().contains("write-"));
    /// # Ok(()) }
    /// ```
    pub fn node(&self) -> &str {
        self.held.node.path()
    }

    /// A transaction that commits only while this writer holds the lock:
    /// the server checks the writer's node in the same step (see
    /// [`Fenced`]), so a writer that lost the lock — paused past its
    /// session, or evicted — cannot write. [`Fenced::via`] sends it through
    /// another client.
    ///
    /// ```
    /// use arbor_client::{recipes::{FencedError, RwLock}, CreateMode};
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # client.create("/config", b"v1".to_vec(), CreateMode::Persistent).await?;
    /// let guard = RwLock::new(&client, "/locks/config").write().await?;
    /// guard.fenced().set_data("/config", b"v2".to_vec(), None).commit().await?;
    ///
    /// // Once the writer's node is gone, the same write is refused whole.
    /// let fenced = guard.fenced().set_data("/config", b"v3".to_vec(), None);
    /// client.delete(guard.node(), None).await?;
    /// assert!(matches!(fenced.commit().await, Err(FencedError::GrantLost { .. })));
    /// assert_eq!(client.get_data("/config").await?.0, b"v2");
    /// # Ok(()) }
    /// ```
    pub fn fenced(&self) -> Fenced {
        Fenced::new(self.held.node.client(), self.held.node.path())
    }

    /// Resolves when this writer may have lost the lock (the connection is
    /// suspended, the session expired, or the client closed), with that
    /// state. Stop writing when it fires; the resource's [`super::Fence`]
    /// catches the writes already on their way.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let guard = arbor_client::recipes::RwLock::new(&client, "/doc/rwlock").write().await?;
    /// tokio::select! {
    ///     state = guard.lost() => eprintln!("stop writing: connection {state:?}"),
    ///     () = write_config(guard.fencing_token()) => {}
    /// }
    /// # Ok(()) }
    /// # async fn write_config(_token: u64) {}
    /// ```
    pub async fn lost(&self) -> ConnectionState {
        until_lost(self.held.node.client()).await
    }

    /// Releases the lock and waits until the node is gone (riding out a
    /// connection loss on the way).
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let guard = arbor_client::recipes::RwLock::new(&client, "/doc/rwlock").write().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<(), LockError> {
        delete_node(self.held.node).await.map_err(LockError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Kind::{Read as R, Write as W};

    #[test]
    fn readers_wait_only_for_writers_and_writers_for_everyone() {
        // Readers ahead never block a reader; any writer ahead does, and a
        // writer waits for whoever is ahead of it.
        assert!(!R.waits_for(R));
        assert!(R.waits_for(W));
        assert!(W.waits_for(R));
        assert!(W.waits_for(W));
    }

    #[test]
    fn node_names_tell_their_kind() {
        // The hex attempt prefix cannot be mistaken for a kind.
        let prefix = crate::recipes::unique_prefix();
        assert_eq!(
            Kind::of(&format!("{prefix}read-0000000001")),
            Some(Kind::Read)
        );
        assert_eq!(
            Kind::of(&format!("{prefix}write-0000000002")),
            Some(Kind::Write)
        );
        assert_eq!(Kind::of("something-else"), None);
    }
}
