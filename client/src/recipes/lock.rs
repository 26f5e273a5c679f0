//! A fair, fenced mutual-exclusion lock.
//!
//! Each contender creates an ephemeral sequential node under the lock's path
//! and holds the lock while its node is the lowest. A waiter watches only the
//! node just before its own, so a release wakes exactly one waiter (no herd),
//! and grants follow arrival order. A waiter never lists the queue: it asks
//! the server for its own node and the one just ahead
//! ([`Client::children_below`]), so a handoff costs the same with ten waiters
//! or a thousand. The lock's path must hold only this lock's nodes: any
//! sequential child there counts as a contender. The node's creation zxid is the lock's
//! fencing token: every grant's token is larger than every earlier grant's,
//! across releases, expiries and server restarts.
//!
//! Safety rules, from the source documents on locks and leases:
//! * A lost create reply does not leak a node: the name carries a unique
//!   per-attempt prefix (Curator's "protected mode"), so after a connection
//!   loss the attempt finds its node again instead of making a second one.
//! * Ownership is reported only after checking the node is owned by this
//!   session: by the create's reply when the lock is free, and by reading
//!   the node again when a wait ends.
//! * A holder learns when it may have lost the lock ([`Guard::lost`]): the
//!   connection is suspended or the session expired. It must stop writing,
//!   and the protected resource must check the fencing token anyway
//!   ([`super::Fence`]), because a paused process learns nothing in time.
//! * Cancelling [`Mutex::lock`] (dropping the future, a timeout) removes the
//!   waiter's node, so an abandoned waiter never blocks the queue; this holds
//!   from the moment the create is sent, before its reply is read.

use std::time::Duration;

use arbor_protocol::path;

use crate::recipes::fence::FencingToken;
use crate::recipes::fenced::Fenced;
use crate::recipes::{
    create_protected, owned_stat, retrying, unique_prefix, until_lost, LockError, NodeCleanup,
};
use crate::{Acl, Client, ConnectionState, Error};

/// The part of a lock node's name after the attempt prefix.
pub(crate) const LOCK_NAME: &str = "lock-";

/// A fair lock on a path. Cheap to create; clone the client, not the lock.
///
/// ```
/// use arbor_client::recipes::Mutex;
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// let lock = Mutex::new(&client, "/locks/job-42");
/// let guard = lock.lock().await?;
/// let token = guard.fencing_token(); // send it with every write
/// // ... the critical section ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Mutex {
    client: Client,
    path: String,
    /// The ACL of the nodes the lock creates (the open one by default).
    acl: Vec<Acl>,
}

/// Holding the lock. Dropping it releases the lock in the background;
/// [`Guard::release`] does it and waits.
pub struct Guard {
    node: NodeCleanup,
    token: FencingToken,
}

impl Mutex {
    /// A lock on `path` (created as a container if missing, with its parents).
    pub fn new(client: &Client, path: &str) -> Self {
        Self {
            client: client.clone(),
            path: path.to_owned(),
            acl: Acl::open(),
        }
    }

    /// Gives the nodes this lock creates (its queue's directory, if
    /// missing, and each contender's node) `acl` instead of the open one.
    /// Contenders need CREATE and READ on the directory; `auth` entries
    /// stand for the ids the session proved.
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// use arbor_client::{recipes::Mutex, Acl};
    ///
    /// // Only sessions that proved the team's credentials can queue or see the queue.
    /// let lock = Mutex::new(&client, "/team-a/locks/job-42").with_acl(Acl::creator_all());
    /// let guard = lock.lock().await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub fn with_acl(mut self, acl: Vec<Acl>) -> Self {
        self.acl = acl;
        self
    }

    /// The path whose children form the queue.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Waits until the lock is granted.
    pub async fn lock(&self) -> Result<Guard, LockError> {
        self.acquire(Wait::Forever).await
    }

    /// Takes the lock only if nobody holds it or waits for it;
    /// [`LockError::Locked`] otherwise.
    pub async fn try_lock(&self) -> Result<Guard, LockError> {
        self.acquire(Wait::Never).await
    }

    /// Waits at most `timeout`; [`LockError::Timeout`] then, with the queue
    /// left as if this contender never came.
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<Guard, LockError> {
        match tokio::time::timeout(timeout, self.acquire(Wait::Forever)).await {
            Ok(result) => result,
            // The acquire future was dropped: its node is being removed.
            Err(_) => Err(LockError::Timeout),
        }
    }

    async fn acquire(&self, wait: Wait) -> Result<Guard, LockError> {
        let prefix = unique_prefix();
        // The create and a look at the top of the queue go out together. The
        // server answers a session's requests in order, so the look usually
        // sees the new node on top and the one just ahead of it: a free lock
        // costs one round trip. If anything else happened in between, the
        // look is simply asked again below.
        let (created, top) = tokio::join!(
            create_protected(
                &self.client,
                &self.path,
                &prefix,
                LOCK_NAME,
                Vec::new(),
                &self.acl
            ),
            self.client.children_below(&self.path, u64::MAX, 2),
        );
        // Dropping this future at any point deletes the node, even while
        // the create was in flight (see `create_protected`).
        let (cleanup, stat) = created?;
        let node = cleanup.path().to_owned();
        let token = stat.czxid;
        let name = path::name(&node).to_owned();
        let sequence = path::parse_sequence(&name).ok_or_else(|| {
            LockError::Client(Error::Protocol(format!("{node} has no sequence number")))
        })?;
        let mut seen = top
            .ok()
            .filter(|top| top.first().is_some_and(|entry| entry.name == name));
        loop {
            // Our node and the one just ahead of it: a reply of two entries
            // however long the queue, so a handoff costs the same with ten
            // waiters or a thousand.
            let nearest = match seen.take() {
                Some(nearest) => nearest,
                None => {
                    retrying(&self.client, || {
                        self.client.children_below(&self.path, sequence + 1, 2)
                    })
                    .await?
                }
            };
            match nearest.first() {
                // Ownership is checked on every look, not once: the lock is
                // only ever reported held right after the server said so.
                Some(mine) if mine.name == name => {
                    if mine.stat.ephemeral_owner != self.client.session_id() {
                        return Err(LockError::NotOwner {
                            node,
                            owner: mine.stat.ephemeral_owner,
                        });
                    }
                }
                // Our node is gone: the session expired (its ephemerals went).
                _ => return Err(LockError::Client(Error::SessionExpired)),
            }
            let Some(predecessor) = nearest.get(1) else {
                return Ok(Guard {
                    node: cleanup,
                    token,
                });
            };
            if wait == Wait::Never {
                return Err(LockError::Locked);
            }
            // A data watch, not an exists watch: on a node already gone it
            // fails with NoNode and leaves no watch behind on the server.
            let predecessor = path::join(&self.path, &predecessor.name);
            let watched = retrying(&self.client, || async {
                match self.client.get_data_watch(&predecessor).await {
                    Ok((_, _, watch)) => Ok(Some(watch)),
                    Err(Error::NoNode { .. }) => Ok(None),
                    Err(err) => Err(err),
                }
            })
            .await?;
            if let Some(watch) = watched {
                // Deleted, or a spurious wake: either way, look again.
                watch.await?;
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Forever,
    Never,
}

impl Guard {
    /// The fencing token of this grant: the zxid that created the lock node.
    /// Strictly larger than the token of every earlier grant of this lock.
    pub fn fencing_token(&self) -> FencingToken {
        self.token
    }

    /// The lock node's path.
    pub fn node(&self) -> &str {
        self.node.path()
    }

    /// A transaction that commits only while this lock is held: the server
    /// checks the lock node in the same step (see [`Fenced`]), so a holder
    /// that lost the lock — paused past its session, or evicted — cannot
    /// write. [`Fenced::via`] sends it through another client.
    ///
    /// ```
    /// use arbor_client::{recipes::{FencedError, Mutex}, CreateMode};
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # client.create("/config", b"v1".to_vec(), CreateMode::Persistent).await?;
    /// let guard = Mutex::new(&client, "/locks/config").lock().await?;
    /// guard.fenced().set_data("/config", b"v2".to_vec(), None).commit().await?;
    ///
    /// // Once the lock node is gone, the same write is refused whole.
    /// let fenced = guard.fenced().set_data("/config", b"v3".to_vec(), None);
    /// client.delete(guard.node(), None).await?;
    /// assert!(matches!(fenced.commit().await, Err(FencedError::GrantLost { .. })));
    /// assert_eq!(client.get_data("/config").await?.0, b"v2");
    /// # Ok(()) }
    /// ```
    pub fn fenced(&self) -> Fenced {
        Fenced::new(self.node.client(), self.node.path())
    }

    /// Resolves when this holder may have lost the lock: the connection is
    /// suspended (the session may expire before it comes back), the session
    /// expired, or the client closed. Returns that state. Stop writing to the
    /// protected resource when it fires; the resource's [`super::Fence`]
    /// catches the writes that were already on their way.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let guard = arbor_client::recipes::Mutex::new(&client, "/doc/lock").lock().await?;
    /// tokio::select! {
    ///     state = guard.lost() => eprintln!("stop writing: connection {state:?}"),
    ///     () = do_the_work(guard.fencing_token()) => {}
    /// }
    /// # Ok(()) }
    /// # async fn do_the_work(_token: u64) {}
    /// ```
    pub async fn lost(&self) -> ConnectionState {
        until_lost(self.node.client()).await
    }

    /// Releases the lock and waits until the node is gone.
    pub async fn release(self) -> Result<(), LockError> {
        self.node.delete_now().await.map_err(LockError::from)
    }
}

/// How many nodes a reader asks for per look while it searches for the
/// nearest writer ahead of it (the server's cap on one look).
pub(crate) const SCAN_PAGE: u32 = arbor_protocol::CHILDREN_BELOW_MAX;

/// How a contender other than the mutex (a reader, a writer, a candidate)
/// waits in its queue, looking only at the nodes that matter to it.
pub(crate) struct Turn<'a, B> {
    pub(crate) client: &'a Client,
    /// The queue's directory.
    pub(crate) dir: &'a str,
    /// Our node's name and sequence number.
    pub(crate) name: &'a str,
    pub(crate) sequence: u64,
    /// Whether a node (by name) ahead of ours keeps us waiting.
    pub(crate) blocks: B,
    /// Nodes per look: 2 (ours and the one just ahead) when only the
    /// nearest contender matters, [`SCAN_PAGE`] when the search may have
    /// to pass many nodes that do not block (a reader passing readers).
    pub(crate) limit: u32,
    /// After a wake, look again below the node we waited for rather than
    /// below our own: the nodes between were found not to block, and no
    /// node is ever inserted there (sequence numbers only grow).
    pub(crate) resume_below_blocker: bool,
}

/// Why [`Turn::wait`] ended without our turn.
pub(crate) enum TurnError {
    /// `Wait::Never` and something blocks us.
    Busy,
    /// Our node is owned by another session: never report a grant.
    NotOwner(crate::SessionId),
    Client(Error),
}

impl From<Error> for TurnError {
    fn from(err: Error) -> Self {
        TurnError::Client(err)
    }
}

impl<B: Fn(&str) -> bool> Turn<'_, B> {
    /// Waits until no node ahead of ours blocks it. `first` is a look at
    /// the queue's top made together with the create (used if our node is
    /// on top of it). Each wait is a data watch on the one node that
    /// blocks us, so a release wakes only those it unblocks, and no look
    /// lists the queue.
    pub(crate) async fn wait(
        &self,
        wait: bool,
        first: Option<Vec<arbor_protocol::ChildEntry>>,
    ) -> Result<(), TurnError> {
        let mut seen = first.filter(|top| top.first().is_some_and(|e| e.name == self.name));
        // Every node at or above `cursor` (other than ours) is known not to
        // block us; a look starting above our own node also sees ours.
        let mut cursor = self.sequence + 1;
        loop {
            let look = match seen.take() {
                Some(look) => look,
                None => {
                    retrying(self.client, || {
                        self.client.children_below(self.dir, cursor, self.limit)
                    })
                    .await?
                }
            };
            let full = look.len() >= self.limit as usize;
            let mut ahead = look.as_slice();
            let sees_ours = cursor > self.sequence;
            if sees_ours {
                match ahead.split_first() {
                    // Ownership is checked on every look that shows our node.
                    Some((mine, rest)) if mine.name == self.name => {
                        if mine.stat.ephemeral_owner != self.client.session_id() {
                            return Err(TurnError::NotOwner(mine.stat.ephemeral_owner));
                        }
                        ahead = rest;
                    }
                    // Our node is gone: the session expired (its ephemerals went).
                    _ => return Err(Error::SessionExpired.into()),
                }
            }
            let blocker = ahead.iter().find(|entry| (self.blocks)(&entry.name));
            let Some(blocker) = blocker else {
                if full {
                    // Nothing blocks in this page, but more lies below it.
                    match ahead.last().and_then(|e| path::parse_sequence(&e.name)) {
                        Some(lowest) => {
                            cursor = lowest;
                            continue;
                        }
                        None => return Err(Error::Protocol("unsequenced child".into()).into()),
                    }
                }
                if !sees_ours {
                    // The last look did not show our node: read it once more.
                    let node = path::join(self.dir, self.name);
                    if let Err(owner) = owned_stat(self.client, &node).await? {
                        return Err(TurnError::NotOwner(owner));
                    }
                }
                return Ok(());
            };
            if !wait {
                return Err(TurnError::Busy);
            }
            let blocker_sequence = path::parse_sequence(&blocker.name)
                .ok_or_else(|| Error::Protocol(format!("{} has no sequence", blocker.name)))?;
            watch_until_gone(self.client, &path::join(self.dir, &blocker.name)).await?;
            // Look again at the blocker too: a wake may be spurious.
            cursor = if self.resume_below_blocker {
                blocker_sequence + 1
            } else {
                self.sequence + 1
            };
        }
    }
}

/// Waits for one event on `node` (its deletion, or a spurious wake): a data
/// watch, not an exists watch, so a node already gone leaves no watch
/// behind on the server.
async fn watch_until_gone(client: &Client, node: &str) -> Result<(), Error> {
    let watched = retrying(client, || async {
        match client.get_data_watch(node).await {
            Ok((_, _, watch)) => Ok(Some(watch)),
            Err(Error::NoNode { .. }) => Ok(None),
            Err(err) => Err(err),
        }
    })
    .await?;
    if let Some(watch) = watched {
        watch.await?;
    }
    Ok(())
}
