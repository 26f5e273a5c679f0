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
//!
//! # Lock-delay (Chubby)
//!
//! [`Mutex::with_lock_delay`] is for a resource that cannot check fencing
//! tokens: after a holder's session *expires* — not after a clean release,
//! nor after a waiter gives up — the next grant waits the delay, so that
//! writes the dead holder sent before it died have time to land (or fail)
//! before anyone else writes. It needs no server support; the protocol on
//! the nodes:
//!
//! * The lock's directory counts every child delete by itself: each child
//!   create and each delete bumps its `cversion` once, and it starts at 0
//!   and empty, so its deletes so far are `X = (cversion − num_children) / 2`
//!   (kept modulo 2³¹, as `cversion` wraps).
//! * The directory's data is `K`, in decimal: the deletes accounted for.
//!   Every delete this lock makes on purpose is a multi that deletes the
//!   node and sets `K` at the data version it read, so the two are one
//!   step; a `BadVersion` (someone else accounted first) reads again. A
//!   waiter (a cancelled or refused attempt, a timeout, a lost create)
//!   sets `K + 1`: its own delete. The holder, releasing, sets `X + 1`:
//!   every delete while it held was a waiter's behind it (when it was
//!   granted, nothing was left unaccounted), so none of them was a holder
//!   dying.
//! * An expiry's delete is the server's, and nobody accounts for it. A
//!   contender that finds itself lowest reads the directory (data and stat
//!   in one reply, after the look that showed it lowest); if `X ≠ K`, a
//!   delete happened that nobody accounted for: it waits the delay,
//!   measured from then (so at least the delay after the delete), sets
//!   `K = X` (versioned, reading again on `BadVersion`), looks once more
//!   that its node is still there and its own, and holds the lock. While it
//!   waits it is the holder-to-be, so nodes behind it that expire never
//!   held the lock: accounting for them too is right.
//! * The directory must outlive an expiry with nobody waiting (a container
//!   would be reaped, and the record with it), so with lock-delay the
//!   directory itself is created persistent (its parents stay containers).
//!   It stays until deleted; delete it only when no contender uses it.
//!
//! Limits, stated plainly:
//! * A delay is a guess about how long a dead holder's writes can take to
//!   arrive. Anything slower (a long pause after the session ended, a
//!   congested network) still lands late. Fencing tokens ([`super::Fence`],
//!   [`Fenced`]) are the real fix; use lock-delay only where they cannot be.
//! * The delay is measured on the next holder's clock from when it saw the
//!   unaccounted delete, which is after the server's delete; it says nothing
//!   about the dead holder's clock, which may have been paused.
//! * Errors are on the safe side: any delete not counted (an operator's,
//!   a plain delete by a contender without lock-delay, a counted delete
//!   that gave up after `COUNT_RETRIES_MAX` version races, a waiter
//!   expiring while the lock changes hands) looks like an expiry and costs
//!   one delay too many, never one too few. All contenders on a path must
//!   use the same setting: without it, grants are not delayed at all, and
//!   its deletes delay those that use it.
//! * The directory's data belongs to the lock: anything else written there
//!   is read as 0 (and costs a delay) until the next count overwrites it.
//! * A [`Mutex::try_lock`] or [`Mutex::lock_timeout`] that comes to the
//!   lock during a delay waits the delay out (no holder can keep the lock
//!   longer than that); a timeout that runs out first leaves, and the next
//!   contender waits the whole delay again.

use std::time::Duration;

use arbor_protocol::path;

use crate::recipes::fence::FencingToken;
use crate::recipes::fenced::Fenced;
use crate::recipes::{
    before_retry, create_protected_with, delete_retrying, is_transient, owned_stat, retrying,
    unique_prefix, until_lost, LockError, NodeCleanup,
};
use crate::{multi, Acl, Client, ConnectionState, Error, ErrorCode, Stat};

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
    /// How long a grant waits after a holder's session expired (see the
    /// module doc), if at all.
    lock_delay: Option<Duration>,
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
            lock_delay: None,
        }
    }

    /// After a holder's session expires (not after a clean release or a
    /// waiter giving up), the next grant waits `delay` — Chubby's
    /// lock-delay, for a resource that cannot check fencing tokens: the
    /// dead holder's writes already on their way get time to land before
    /// the next holder writes. `Duration::ZERO` turns it off.
    ///
    /// How: the lock's directory counts its child deletes by itself (in its
    /// `cversion`), and every delete this lock makes on purpose — a release,
    /// a waiter leaving — also counts itself in the directory's data, in
    /// the same multi. A delete nobody counted is an expiry: the contender
    /// that finds itself first then waits `delay` (from when it saw it, so
    /// at least `delay` after the expiry), records the delete as seen, and
    /// holds the lock.
    ///
    /// What to know:
    /// * The delay is a guess at how long a dead holder's writes can take;
    ///   slower ones still land late. Fencing tokens ([`super::Fence`],
    ///   [`Guard::fenced`]) are the real fix where the resource allows.
    /// * Mistakes cost a delay too many, never one too few: an operator's
    ///   delete, or one by a contender without lock-delay, counts as an
    ///   expiry. Every contender on this path must use the same setting
    ///   (one without it is never delayed).
    /// * The directory is created persistent (its parents stay containers),
    ///   since a container would be reaped with the record of an expiry
    ///   nobody waited for. It stays until deleted; its data belongs to the
    ///   lock.
    /// * A [`Mutex::try_lock`] that comes during a delay waits it out.
    ///
    /// ```
    /// use std::time::Duration;
    /// use arbor_client::recipes::Mutex;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// // The old NFS filer cannot check tokens: give a dead holder's writes 10 s.
    /// let lock = Mutex::new(&client, "/locks/filer").with_lock_delay(Duration::from_secs(10));
    /// let guard = lock.lock().await?; // at once: nobody died holding it
    /// guard.release().await?;
    /// let again = lock.lock().await?; // at once too: that was a clean release
    /// # drop(again); Ok(()) }
    /// ```
    pub fn with_lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = (!delay.is_zero()).then_some(delay);
        self
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
        let counted = self.lock_delay.map(|_| Counted::Waiter);
        // With lock-delay, the directory's count rides along too: read after
        // the look, it is what the lowest contender must check.
        let (created, top, dir) = tokio::join!(
            create_protected_with(
                &self.client,
                &self.path,
                &prefix,
                LOCK_NAME,
                Vec::new(),
                &self.acl,
                counted,
            ),
            self.client.children_below(&self.path, u64::MAX, 2),
            async {
                match self.lock_delay {
                    Some(_) => self.client.get_data(&self.path).await.ok(),
                    None => None,
                }
            },
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
        // The count read with the look, good only while that look is.
        let mut dir = dir.filter(|_| seen.is_some());
        // Whether this contender already waited the lock-delay.
        let mut delayed = false;
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
                if let (Some(delay), false) = (self.lock_delay, delayed) {
                    let counted = match dir.take() {
                        Some(read) => read,
                        None => retrying(&self.client, || self.client.get_data(&self.path)).await?,
                    };
                    let unaccounted = unaccounted(&counted.0, &counted.1);
                    if unaccounted != 0 {
                        tracing::info!(
                            lock = %self.path,
                            unaccounted,
                            delay_ms = delay.as_millis() as u64,
                            "deletes nobody accounted for (a holder's session may have expired): waiting the lock-delay"
                        );
                        tokio::time::sleep(delay).await;
                        account_all(&self.client, &self.path).await?;
                        // Look once more that the node is still ours.
                        delayed = true;
                        continue;
                    }
                }
                let mut cleanup = cleanup;
                if self.lock_delay.is_some() {
                    cleanup.set_counted(Counted::Holder);
                }
                return Ok(Guard {
                    node: cleanup,
                    token,
                });
            };
            if wait == Wait::Never {
                return Err(LockError::Locked);
            }
            // Deleted, or a spurious wake: either way, look again.
            watch_until_gone(&self.client, &path::join(&self.path, &predecessor.name)).await?;
            dir = None;
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

/// How many times a counted delete or an accounting write reads the count
/// again after another contender changed it first. Past this, a delete is
/// made plainly and an accounting is skipped: both cost at most a delay
/// too many (see the module doc).
pub(crate) const COUNT_RETRIES_MAX: usize = 64;

/// Counts are kept modulo 2³¹: the directory's `cversion` is an `i32`
/// that wraps, and `2 × deletes` is known only modulo 2³².
const COUNT_MASK: u32 = (1 << 31) - 1;

/// Which lock-delay count a deleted node makes (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    /// A node that never held the lock: it accounts for its own delete.
    Waiter,
    /// The holder's node: it accounts for every delete so far, its own
    /// included, since any other delete while it held was a waiter's.
    Holder,
}

/// The directory's child deletes so far (mod 2³¹), from its stat: every
/// child create and every delete bumped `cversion` once.
fn deletes(stat: &Stat) -> u32 {
    ((stat.cversion as u32).wrapping_sub(stat.num_children) / 2) & COUNT_MASK
}

/// The deletes accounted for, as the directory's data says (anything that
/// is not a count reads as 0: on the safe side).
fn accounted(data: &[u8]) -> u32 {
    std::str::from_utf8(data)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .unwrap_or(0)
        & COUNT_MASK
}

/// Deletes nobody accounted for: expiries (or other uncounted deletes).
fn unaccounted(data: &[u8], stat: &Stat) -> u32 {
    deletes(stat).wrapping_sub(accounted(data)) & COUNT_MASK
}

/// Deletes a lock-delay lock's `node` and counts the delete in its
/// directory in the same multi (see the module doc). A node already gone
/// is fine: it was not ours to count any more.
pub(crate) async fn delete_counted(
    client: &Client,
    node: &str,
    role: Counted,
) -> Result<(), Error> {
    let Some(dir) = path::parent(node) else {
        return delete_retrying(client, node).await;
    };
    for _ in 0..COUNT_RETRIES_MAX {
        let (data, stat) = match retrying(client, || client.get_data(dir)).await {
            Ok(read) => read,
            // No directory, so no node in it either.
            Err(Error::NoNode { .. }) => return Ok(()),
            Err(err) => return Err(err),
        };
        let count = match role {
            Counted::Waiter => accounted(&data),
            Counted::Holder => deletes(&stat),
        }
        .wrapping_add(1)
            & COUNT_MASK;
        let ops = vec![
            multi::delete(node, None),
            multi::set_data(dir, count.to_string(), Some(stat.version)),
        ];
        match client.multi(ops).await {
            Ok(_) => return Ok(()),
            Err(Error::MultiFailed {
                index: 0,
                code: ErrorCode::NoNode,
                ..
            }) => return Ok(()),
            // Someone counted first: read the count again.
            Err(Error::MultiFailed {
                index: 1,
                code: ErrorCode::BadVersion,
                ..
            }) => {}
            // Outcome unknown: the next try finds the node gone if it went.
            Err(err) if is_transient(&err) => before_retry(client, &err).await?,
            Err(err) => return Err(err),
        }
    }
    tracing::warn!(
        node,
        "lock-delay count kept changing: deleting uncounted (one delay too many)"
    );
    delete_retrying(client, node).await
}

/// After waiting the lock-delay: every delete so far is accounted for
/// (`K = X`), so the next holder is not delayed for the same expiry.
async fn account_all(client: &Client, dir: &str) -> Result<(), Error> {
    for _ in 0..COUNT_RETRIES_MAX {
        let (data, stat) = retrying(client, || client.get_data(dir)).await?;
        let count = deletes(&stat);
        if accounted(&data) == count {
            return Ok(());
        }
        match client
            .set_data(dir, count.to_string(), Some(stat.version))
            .await
        {
            Ok(_) => return Ok(()),
            // Someone counted first (a waiter behind us left): read again.
            Err(Error::BadVersion { .. }) => {}
            // Outcome unknown: the next read tells.
            Err(err) if is_transient(&err) => before_retry(client, &err).await?,
            Err(err) => return Err(err),
        }
    }
    tracing::warn!(
        lock = dir,
        "lock-delay count kept changing: left unaccounted (one delay too many)"
    );
    Ok(())
}
