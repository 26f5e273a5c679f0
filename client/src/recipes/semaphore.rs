//! A fair counting semaphore: at most `permits` leases at a time, granted in
//! arrival order, each with a fencing token (Curator's
//! `InterProcessSemaphoreV2`, without its lock, and without its herd).
//!
//! # The protocol on the nodes
//!
//! Each contender creates an ephemeral sequential node
//! `<path>/_c_<hex>-lease-<seq>` (a protected create, as [`super::Mutex`]),
//! whose data is the permit count as decimal text, so an inspector (`arbor
//! get`) sees N. The queue is the sequence order. With N permits:
//!
//! * **Holding**: fewer than N nodes are ahead of mine. One look answers it:
//!   `children_below(path, my_seq + 1, N + 2)` returns my node and up to
//!   N + 1 nodes ahead of it, however long the queue. Every look also checks
//!   that my node is still there and owned by my session, as the lock does.
//! * **First waiter**: exactly N nodes are ahead. I am the only contender
//!   whom a release can grant next, so I (and nobody else) set a data watch
//!   on each of those N holders; any event, or a holder already gone when
//!   the watch is set, means: look again.
//! * **Further back**: more than N ahead. I watch only my immediate
//!   predecessor. The count ahead of me is the count ahead of it plus one,
//!   so it drops to N only when the predecessor goes or is granted. A
//!   contender granted after waiting therefore *touches* its node (a
//!   `set_data` with the same data), which bumps the node's version to 1 and
//!   wakes its successor, who looks again (and may now be the first waiter).
//!   The watch is set with `get_data_watch`, whose stat closes the race of a
//!   predecessor granted between my look and my watch: a version of 1 or
//!   more means it was already granted, so I look again at once.
//! * A grant decided by the look sent together with the create, in which my
//!   node was the highest child, needs no touch: nobody had queued behind me
//!   yet, and every later contender sees me among the holders. So an
//!   uncontended acquire costs one round trip.
//!
//! One release therefore wakes the first waiter (who is granted and touches)
//! and the next one in line (who becomes the first waiter): a bounded number
//! of watch events however many wait. Grants follow arrival order, because a
//! node is granted only once fewer than N nodes are ahead of it.
//!
//! The permit count is part of the protocol: contenders that disagree on N
//! would each count differently. A contender reads the data of the nodes it
//! relies on (the holders ahead when it is granted, the nodes it watches
//! while it waits) and refuses with [`SemaphoreError::PermitsMismatch`] when
//! one carries another N — or is not a lease node at all: the semaphore's
//! path must hold only this semaphore's nodes.
//!
//! # Limits and rules
//!
//! * N is at most [`PERMITS_MAX`] (one look returns at most
//!   [`CHILDREN_BELOW_MAX`](arbor_protocol::CHILDREN_BELOW_MAX) nodes).
//! * A lease is lost when its session ends ([`Lease::lost`] says when it may
//!   be). Write to Arbor under a lease with [`Lease::fenced`]: the server
//!   refuses the write once the lease node is gone. The fencing token (the
//!   node's czxid) identifies the lease; N leases are valid at once, so a
//!   resource that checks tokens must accept any of the N current ones (a
//!   [`super::Fence`], which accepts only increasing tokens, fits N = 1).
//! * A contender that is frozen (a GC pause) while entitled to a permit holds
//!   it until its session expires, as a frozen lock holder does; the
//!   contenders behind it also learn of their own grants only once it
//!   touches its node or its session ends.
//! * Cancelling an acquire (dropping the future, a timeout) removes the
//!   contender's node, from the moment its create is sent.

use std::time::Duration;

use arbor_protocol::{path, ChildEntry, CHILDREN_BELOW_MAX};
use futures_util::future::{join_all, select_all};

use crate::recipes::fence::FencingToken;
use crate::recipes::fenced::Fenced;
use crate::recipes::{
    create_protected, delete_node, retrying, unique_prefix, until_lost, NodeCleanup,
};
use crate::{Acl, Client, ConnectionState, Error, OneshotWatch, SessionId};

/// The part of a lease node's name after the attempt prefix.
pub(crate) const LEASE_NAME: &str = "lease-";

/// The most permits a semaphore may have: a look returns the contender's own
/// node and up to N + 1 ahead, within one `children_below` reply.
pub const PERMITS_MAX: u32 = CHILDREN_BELOW_MAX - 2;

/// Why a lease was not granted (or not released).
#[derive(Debug, thiserror::Error)]
pub enum SemaphoreError {
    /// `try_acquire`: all permits are taken (or others already wait).
    #[error("no permit is free")]
    NoPermit,
    /// `acquire_timeout` ran out; this contender left the queue.
    #[error("timed out waiting for a permit")]
    Timeout,
    /// The permit count is 0 or above [`PERMITS_MAX`].
    #[error("a semaphore needs 1 to {max} permits, not {permits}", max = PERMITS_MAX)]
    BadPermits { permits: u32 },
    /// A node in the queue carries another permit count (or is not a lease
    /// node): contenders that disagree on N cannot share a path.
    #[error("{node} asks for {found:?} permits, this semaphore has {permits}")]
    PermitsMismatch {
        node: String,
        permits: u32,
        found: String,
    },
    /// Our node is owned by another session: never report a grant.
    #[error("lease node {node} is owned by session {owner:#x}, not by this one")]
    NotOwner { node: String, owner: SessionId },
    #[error(transparent)]
    Client(#[from] Error),
}

/// A fair semaphore of `permits` leases on a path. Cheap to create; clone
/// the client, not the semaphore.
///
/// ```
/// use arbor_client::recipes::Semaphore;
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// // Three licences for the whole fleet.
/// let licences = Semaphore::new(&client, "/licences/solver", 3);
/// let lease = licences.acquire().await?;
/// println!("solving under lease {}", lease.fencing_token());
/// // ... the work that needs a licence ...
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    client: Client,
    path: String,
    permits: u32,
    /// The ACL of the nodes the semaphore creates (the open one by default).
    acl: Vec<Acl>,
}

/// One of the semaphore's permits. Dropping it releases the permit in the
/// background; [`Lease::release`] does it and waits.
pub struct Lease {
    node: NodeCleanup,
    token: FencingToken,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Forever,
    Never,
}

impl Semaphore {
    /// A semaphore of `permits` leases on `path` (created as a container if
    /// missing, with its parents). Every contender on the path must use the
    /// same `permits`.
    pub fn new(client: &Client, path: &str, permits: u32) -> Self {
        Self {
            client: client.clone(),
            path: path.to_owned(),
            permits,
            acl: Acl::open(),
        }
    }

    /// Gives the nodes this semaphore creates `acl` instead of the open one
    /// (see [`Mutex::with_acl`](crate::recipes::Mutex::with_acl)).
    ///
    /// ```
    /// # fn demo(client: arbor_client::Client) {
    /// use arbor_client::{recipes::Semaphore, Acl};
    /// let pool = Semaphore::new(&client, "/team-a/pool", 4).with_acl(Acl::creator_all());
    /// # }
    /// ```
    pub fn with_acl(mut self, acl: Vec<Acl>) -> Self {
        self.acl = acl;
        self
    }

    /// The path whose children form the queue.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The number of leases granted at once.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Waits until a permit is granted.
    pub async fn acquire(&self) -> Result<Lease, SemaphoreError> {
        self.acquire_with(Wait::Forever).await
    }

    /// Takes a permit only if one is free and nobody waits ahead;
    /// [`SemaphoreError::NoPermit`] otherwise, with this attempt's node
    /// removed.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// use arbor_client::recipes::{Semaphore, SemaphoreError};
    /// let pool = Semaphore::new(&client, "/doc/pool", 1);
    /// let lease = pool.try_acquire().await?;
    /// assert!(matches!(pool.try_acquire().await, Err(SemaphoreError::NoPermit)));
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Lease, SemaphoreError> {
        self.acquire_with(Wait::Never).await
    }

    /// Waits at most `timeout`; [`SemaphoreError::Timeout`] then, with the
    /// queue left as if this contender never came.
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Lease, SemaphoreError> {
        match tokio::time::timeout(timeout, self.acquire_with(Wait::Forever)).await {
            Ok(result) => result,
            // The acquire future was dropped: its node is being removed.
            Err(_) => Err(SemaphoreError::Timeout),
        }
    }

    async fn acquire_with(&self, wait: Wait) -> Result<Lease, SemaphoreError> {
        if self.permits == 0 || self.permits > PERMITS_MAX {
            return Err(SemaphoreError::BadPermits {
                permits: self.permits,
            });
        }
        let prefix = unique_prefix();
        let look = self.permits + 2;
        // The create and a look at the top of the queue go out together (the
        // server answers in order): when nothing else arrived meanwhile, the
        // look shows our node on top, and a free permit costs one round trip.
        let (created, top) = tokio::join!(
            create_protected(
                &self.client,
                &self.path,
                &prefix,
                LEASE_NAME,
                self.data(),
                &self.acl
            ),
            self.client.children_below(&self.path, u64::MAX, look),
        );
        // From here, dropping this future deletes the node.
        let (cleanup, stat) = created?;
        let node = cleanup.path().to_owned();
        let name = path::name(&node).to_owned();
        let sequence = path::parse_sequence(&name).ok_or_else(|| {
            SemaphoreError::Client(Error::Protocol(format!("{node} has no sequence number")))
        })?;
        let mut seen = top
            .ok()
            .filter(|top| top.first().is_some_and(|entry| entry.name == name));
        // A grant from that first look needs no touch (see the module doc).
        let mut waited = seen.is_none();
        loop {
            let nearest = match seen.take() {
                Some(nearest) => nearest,
                None => {
                    retrying(&self.client, || {
                        self.client.children_below(&self.path, sequence + 1, look)
                    })
                    .await?
                }
            };
            self.check_mine(&node, &name, &nearest)?;
            // Highest first: ahead[0] is the immediate predecessor.
            let ahead = &nearest[1..];
            let ahead_count = u32::try_from(ahead.len()).unwrap_or(u32::MAX);
            if ahead_count < self.permits {
                self.check_holders(ahead).await?;
                if waited {
                    self.touch(&node).await?;
                }
                tracing::debug!(path = %self.path, node = %node, token = stat.czxid, "lease granted");
                return Ok(Lease {
                    node: cleanup,
                    token: stat.czxid,
                });
            }
            if wait == Wait::Never {
                delete_node(cleanup).await?;
                return Err(SemaphoreError::NoPermit);
            }
            waited = true;
            if ahead_count == self.permits {
                // The first waiter: only a holder's departure can grant us.
                self.wait_for_any(ahead, false).await?;
            } else {
                // Further back: only the predecessor's departure or grant.
                self.wait_for_any(&ahead[..1], true).await?;
            }
        }
    }

    /// The data of every lease node: the permit count, as decimal text.
    fn data(&self) -> Vec<u8> {
        self.permits.to_string().into_bytes()
    }

    /// Our node must head the look and be ours; if it is gone, the session
    /// expired (its ephemerals went with it).
    fn check_mine(
        &self,
        node: &str,
        name: &str,
        nearest: &[ChildEntry],
    ) -> Result<(), SemaphoreError> {
        match nearest.first() {
            Some(mine) if mine.name == name => {
                if mine.stat.ephemeral_owner != self.client.session_id() {
                    return Err(SemaphoreError::NotOwner {
                        node: node.to_owned(),
                        owner: mine.stat.ephemeral_owner,
                    });
                }
                Ok(())
            }
            _ => Err(SemaphoreError::Client(Error::SessionExpired)),
        }
    }

    /// Refuses a node whose data is not this semaphore's permit count.
    fn check_data(&self, node: &str, data: &[u8]) -> Result<(), SemaphoreError> {
        if data == self.data().as_slice() {
            return Ok(());
        }
        Err(SemaphoreError::PermitsMismatch {
            node: node.to_owned(),
            permits: self.permits,
            found: String::from_utf8_lossy(data).into_owned(),
        })
    }

    /// Reads the holders ahead of a grant (all at once) and checks they
    /// count the same N; one already gone counts for nothing.
    async fn check_holders(&self, ahead: &[ChildEntry]) -> Result<(), SemaphoreError> {
        let reads = ahead.iter().map(|entry| {
            let node = path::join(&self.path, &entry.name);
            async move {
                let read = retrying(&self.client, || async {
                    match self.client.get_data(&node).await {
                        Ok((data, _)) => Ok(Some(data)),
                        Err(Error::NoNode { .. }) => Ok(None),
                        Err(err) => Err(err),
                    }
                })
                .await;
                (node, read)
            }
        });
        for (node, read) in join_all(reads).await {
            if let Some(data) = read? {
                self.check_data(&node, &data)?;
            }
        }
        Ok(())
    }

    /// Bumps our node's version, waking the successor that waits on it.
    async fn touch(&self, node: &str) -> Result<(), SemaphoreError> {
        let data = self.data();
        match retrying(&self.client, || {
            self.client.set_data(node, data.clone(), None)
        })
        .await
        {
            Ok(_) => Ok(()),
            Err(Error::NoNode { .. }) => Err(SemaphoreError::Client(Error::SessionExpired)),
            Err(err) => Err(err.into()),
        }
    }

    /// Sets a data watch on each of `targets` (at once) and waits for the
    /// first event. Returns at once, to look again, if one is already gone
    /// or, with `granted_wakes`, already granted (its version moved).
    async fn wait_for_any(
        &self,
        targets: &[ChildEntry],
        granted_wakes: bool,
    ) -> Result<(), SemaphoreError> {
        let watches = targets.iter().map(|entry| {
            let node = path::join(&self.path, &entry.name);
            async move {
                // A data watch, not an exists watch: on a node already gone
                // it fails with NoNode and leaves no watch on the server.
                let set = retrying(&self.client, || async {
                    match self.client.get_data_watch(&node).await {
                        Ok(found) => Ok(Some(found)),
                        Err(Error::NoNode { .. }) => Ok(None),
                        Err(err) => Err(err),
                    }
                })
                .await;
                (node, set)
            }
        });
        let mut armed: Vec<OneshotWatch> = Vec::with_capacity(targets.len());
        let mut look_again = false;
        for (node, set) in join_all(watches).await {
            match set? {
                None => look_again = true,
                Some((data, stat, watch)) => {
                    self.check_data(&node, &data)?;
                    if granted_wakes && stat.version >= 1 {
                        look_again = true;
                    }
                    armed.push(watch);
                }
            }
        }
        if look_again || armed.is_empty() {
            return Ok(());
        }
        // Deleted, touched, or a spurious wake: either way, look again. An
        // ended session fails the watch, and so this acquire.
        let (event, _, _) = select_all(armed).await;
        event?;
        Ok(())
    }
}

impl Lease {
    /// The fencing token of this lease: the zxid that created its node,
    /// larger than the token of every lease granted before it was created.
    pub fn fencing_token(&self) -> FencingToken {
        self.token
    }

    /// The lease node's path.
    pub fn node(&self) -> &str {
        self.node.path()
    }

    /// A transaction that commits only while this lease is held: the server
    /// checks the lease node in the same step (see [`Fenced`]).
    ///
    /// ```
    /// use arbor_client::{recipes::Semaphore, CreateMode};
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # client.create("/results", Vec::new(), CreateMode::Persistent).await?;
    /// let lease = Semaphore::new(&client, "/doc/solvers", 2).acquire().await?;
    /// lease
    ///     .fenced()
    ///     .create("/results/7", b"42".to_vec(), CreateMode::Persistent)
    ///     .commit()
    ///     .await?; // refused with `FencedError::GrantLost` once the lease is lost
    /// # Ok(()) }
    /// ```
    pub fn fenced(&self) -> Fenced {
        Fenced::new(self.node.client(), self.node.path())
    }

    /// Resolves when this holder may have lost the lease: the connection is
    /// suspended, the session expired, or the client closed. Returns that
    /// state; stop using the permit when it fires.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let lease = arbor_client::recipes::Semaphore::new(&client, "/doc/sem", 2).acquire().await?;
    /// tokio::select! {
    ///     state = lease.lost() => eprintln!("stop: connection {state:?}"),
    ///     () = solve() => {}
    /// }
    /// # Ok(()) }
    /// # async fn solve() {}
    /// ```
    pub async fn lost(&self) -> ConnectionState {
        until_lost(self.node.client()).await
    }

    /// Releases the permit and waits until the node is gone.
    pub async fn release(self) -> Result<(), SemaphoreError> {
        self.node.delete_now().await.map_err(SemaphoreError::from)
    }
}
