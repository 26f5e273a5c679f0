//! A distributed queue: FIFO within a priority, lower priorities first, each
//! item taken exactly once, its result written in the same transaction that
//! removes it.
//!
//! # The nodes
//!
//! ```text
//! <path>/items/p<priority:010>-_c_<32 hex>-item-<seq>   persistent sequential: one per put
//! <path>/claims/<item name>                            ephemeral: the claim's key (exclusive)
//! <path>/claims/grant-_c_<32 hex>-<item name>          ephemeral: the claim's grant (unique)
//! ```
//!
//! * **Put** creates one persistent sequential item. Its name carries a
//!   prefix unique to the attempt: after a lost reply the put lists the
//!   items and finds its own instead of making a second one (as
//!   [`Mutex`](super::Mutex) does for its nodes). The sequence counter is
//!   the `items` directory's, shared by all priorities, so `(priority,
//!   sequence)` orders the queue: takers parse both and sort by them,
//!   never by the raw name (the attempt prefix sits between the two).
//! * **Take** lists `items` and `claims` (two requests, sent together),
//!   sorts the unclaimed items and claims the first that it can: one multi
//!   creates the item's *key* (a fixed name, so a second claim fails with
//!   `NodeExists` and the taker moves to the next item) and a *grant* (a
//!   name unique to this claim). Both are ephemeral: if the taker's session
//!   dies both vanish and the item is available again, so nothing is lost.
//!   The taker then reads the item; an item already gone (completed between
//!   the listing and the claim) gives its claim up and the take goes on.
//! * **Complete** is one multi: `check(grant)`, the caller's own ops (its
//!   result), `delete(item)`, `delete(key)`, `delete(grant)`
//!   ([`Job::complete_with`], a [`Fenced`] transaction on the grant). The
//!   result is written if and only if the item is removed, and only by the
//!   live claim holder: an exactly-once effect.
//! * **Release** (or dropping a [`Job`]) deletes key and grant together;
//!   the item keeps its sequence number, so it is back at the front of its
//!   priority.
//!
//! Why two claim nodes: a fence must check a node that only *this* claim
//! ever had. The key's path is the same for every claim of an item: were
//! the fence on the key, a taker whose session expired (its key gone, then
//! re-created by the next taker) would pass the check through the new key
//! — through [`Fenced::via`] or an operator's hands. The grant's name is new
//! for every claim, so it existing means this claim and no later one. Key
//! and grant are created and deleted only together, in one multi (or by
//! the session's end), so an item has at most one grant at any time.
//!
//! # Lost replies
//!
//! A session's requests are applied and answered in order, also across a
//! reconnect of the same session (an old connection's request is applied
//! before the session moves, or refused), so a read sent after a write
//! whose reply was lost sees that write if it happened:
//!
//! * put: list the items, look for the attempt's prefix;
//! * claim: read the grant (unique to the attempt) and check it is owned by
//!   this session — not the key, which another take of the same client may
//!   hold;
//! * complete: read the grant and the item ([`completion_outcome`]). While
//!   the session lives, only this taker can remove its grant, and nobody
//!   else can remove the item: removing it needs the live grant of a claim,
//!   and this claim's key keeps every other claim out. So *grant gone and
//!   item gone* means this commit happened; *grant standing* means it did
//!   not (the same transaction is sent again); *grant gone, item still
//!   there* means the claim was removed from outside.
//!
//! If the session itself ends while an outcome is unknown, the answer is
//! [`QueueError::PutOutcomeUnknown`] (ask [`Queue::find_put`] through a new
//! client) or [`CompleteError::OutcomeUnknown`] (look for the result the
//! completion would have written: it exists if and only if the item was
//! completed by this job).
//!
//! # Waiting and its cost
//!
//! A take that finds nothing unclaimed watches the children of `items` and
//! of `claims` (one-shot watches, set by the listing itself) and looks
//! again when either changes: a put, or a claim released or lost. All idle
//! takers wake on every such change, as in every ZooKeeper queue recipe (a
//! queue has no single successor to hand an item to); a wake costs two
//! listings and at most [`ITEMS_EXAMINED_MAX`] claim attempts. The listing
//! of `items` is one reply, so the queue is bounded: a put is refused with
//! [`QueueError::Full`] at [`ITEMS_MAX`] items (claimed ones included; see
//! [`Queue::with_max_len`]), checked from the directory's child count just
//! before the create (so concurrent puts may overshoot it by a few).
//!
//! The layout is Arbor's own: it does not interoperate with kazoo's or
//! Curator's queues.

use std::collections::HashSet;
use std::time::Duration;

use arbor_protocol::{path, ErrorCode, OpResult};

use crate::recipes::fenced::{Fenced, FencedError};
use crate::recipes::{
    before_retry, ensure_path, is_transient, retrying, unique_prefix, until_lost, until_settled,
    RETRIES_MAX,
};
use crate::{multi, Acl, Client, ConnectionState, CreateMode, Error, SessionId};

/// An item's priority: lower numbers are taken first.
pub type Priority = u32;

/// The priority of [`Queue::put`]: in the middle of the small numbers, so
/// callers can put items both ahead of and behind the plain ones (as
/// kazoo's queues do).
pub const DEFAULT_PRIORITY: Priority = 100;

/// The most items a queue holds by default (claimed ones included). A
/// taker lists them all in one reply: 10 000 names of about 70 bytes stay
/// well inside the server's default 1 MiB frame.
pub const ITEMS_MAX: usize = 10_000;

/// The most unclaimed items one look tries to claim before listing again:
/// under contention the first ones are usually taken by someone else, and a
/// fresh listing is cheaper than a long run of failed claims.
pub const ITEMS_EXAMINED_MAX: usize = 16;

/// The pause before a completion found not applied is sent again.
const RESEND_PAUSE: Duration = Duration::from_millis(200);

/// The directory of the items.
const ITEMS_DIR: &str = "items";
/// The directory of the claims (keys and grants).
const CLAIMS_DIR: &str = "claims";
/// The part of an item's name after the attempt prefix.
const ITEM_NAME: &str = "item-";
/// How a grant's name starts (a key's name is the item's, starting `p`).
const GRANT_NAME: &str = "grant-";

/// Why a put or a take did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The queue holds its maximum number of items: nothing was put.
    #[error("the queue {path} is full ({max} items)")]
    Full { path: String, max: usize },
    /// The session ended while a put's create was in flight: the item may
    /// or may not be in the queue. [`Queue::find_put`] with `attempt`,
    /// through a new client, tells which.
    #[error("the put {attempt} may or may not have happened: the session ended meanwhile")]
    PutOutcomeUnknown { attempt: String },
    #[error(transparent)]
    Client(#[from] Error),
}

/// Why a job was not completed.
#[derive(Debug, thiserror::Error)]
pub enum CompleteError {
    /// The claim was lost (the session expired, or the grant was removed):
    /// nothing was written, and the item is back in the queue or with
    /// another taker.
    #[error("the claim on {item} is lost: nothing was written")]
    ClaimLost { item: String },
    /// One of the caller's ops failed (`index` counts the caller's ops from
    /// 0): nothing was written, and the job, still claimed, is given back.
    #[error("op {index} of the completion failed: {code:?}")]
    OpFailed {
        index: usize,
        code: ErrorCode,
        job: Box<Job>,
    },
    /// The item was removed from outside the queue while claimed: nothing
    /// was written (the claim is released).
    #[error("the item {item} was removed while claimed")]
    ItemGone { item: String },
    /// The session ended while the completion was in flight: it may or may
    /// not have been applied. The caller's result exists if and only if it
    /// was.
    #[error("the completion of {item} may or may not have happened: the session ended meanwhile")]
    OutcomeUnknown { item: String },
    /// The request failed before it was applied (for example the client it
    /// was sent through ended): nothing was written, and the claim is
    /// released, so the job goes back to the queue.
    #[error(transparent)]
    Client(#[from] Error),
}

/// A distributed priority queue on a path. Cheap to create and to clone.
///
/// ```
/// use arbor_client::recipes::Queue;
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// let queue = Queue::new(&client, "/queues/mail");
/// queue.put(b"plain".to_vec()).await?;
/// queue.put_with_priority(b"urgent".to_vec(), 0).await?;
///
/// let job = queue.take().await?;
/// assert_eq!(job.data(), b"urgent");
/// job.complete().await?; // removes the item: nobody else will get it
/// assert_eq!(queue.len().await?, 1);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Queue {
    client: Client,
    path: String,
    items: String,
    claims: String,
    max_len: usize,
}

/// An item's place in the queue, parsed from its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ItemName {
    priority: Priority,
    sequence: u64,
    name: String,
}

impl ItemName {
    /// `p<priority:010>-<anything>item-<sequence>`; `None` for a name the
    /// queue did not make.
    fn parse(name: &str) -> Option<Self> {
        let rest = name.strip_prefix('p')?;
        let (priority, rest) = rest.split_once('-')?;
        if priority.len() != 10 || !rest.contains(ITEM_NAME) {
            return None;
        }
        Some(Self {
            priority: priority.parse().ok()?,
            sequence: path::parse_sequence(rest)?,
            name: name.to_owned(),
        })
    }
}

/// The unclaimed items of a listing, first to take first, at most `limit`.
fn unclaimed(items: &[String], claims: &[String], limit: usize) -> Vec<ItemName> {
    let claimed: HashSet<&str> = claims
        .iter()
        .map(String::as_str)
        .filter(|name| !name.starts_with(GRANT_NAME))
        .collect();
    let mut free: Vec<ItemName> = items
        .iter()
        .filter(|name| !claimed.contains(name.as_str()))
        .filter_map(|name| ItemName::parse(name))
        .collect();
    // (priority, sequence) first: the name breaks no tie, sequences are unique.
    free.sort_unstable();
    free.truncate(limit);
    free
}

/// What a look after a lost completion reply says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The grant and the item are gone: this completion was applied.
    Committed,
    /// The grant still stands: it was not applied; send it again.
    NotApplied,
    /// The grant is gone but the item is there: the claim was removed from
    /// outside (not by this taker, which is waiting for its answer).
    ClaimLost,
}

/// Decides a completion's outcome from what a read sent after it saw,
/// while the taker's session lives (see the module doc for why).
fn completion_outcome(grant_exists: bool, item_exists: bool) -> Outcome {
    match (grant_exists, item_exists) {
        // Only a commit with this grant removes the item while the grant's
        // key keeps every other claim out; a grant standing with its item
        // gone would mean the item was removed by hand: the commit will say.
        (true, _) => Outcome::NotApplied,
        (false, false) => Outcome::Committed,
        (false, true) => Outcome::ClaimLost,
    }
}

/// Whether a claim whose reply was lost was made: its grant, unique to the
/// attempt, exists and belongs to this session.
fn claim_was_made(grant_owner: Option<SessionId>, me: SessionId) -> bool {
    grant_owner == Some(me)
}

/// What one claim attempt came to.
enum Claim {
    Mine(Job),
    /// Someone else has it, it is gone, or the attempt did not happen:
    /// look at the next item.
    NotMine,
}

impl Queue {
    /// A queue on `path` (created, with `items` and `claims` under it, on
    /// first use).
    pub fn new(client: &Client, path: &str) -> Self {
        Self {
            client: client.clone(),
            path: path.to_owned(),
            items: path::join(path, ITEMS_DIR),
            claims: path::join(path, CLAIMS_DIR),
            max_len: ITEMS_MAX,
        }
    }

    /// Refuses puts at `max_len` items instead of [`ITEMS_MAX`]. Takers list
    /// every item in one reply, so keep the names inside the server's frame
    /// limit (about 70 bytes each).
    pub fn with_max_len(mut self, max_len: usize) -> Self {
        self.max_len = max_len;
        self
    }

    /// The queue's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Puts `data` at the back of the [`DEFAULT_PRIORITY`]; returns the
    /// item's path.
    pub async fn put(&self, data: Vec<u8>) -> Result<String, QueueError> {
        self.put_with_priority(data, DEFAULT_PRIORITY).await
    }

    /// Puts `data` at the back of `priority` (lower is taken first); returns
    /// the item's path. A lost reply never leaves two items: the put looks
    /// for its own before trying again. Dropping the future while the
    /// create is in flight leaves the item put or not.
    pub async fn put_with_priority(
        &self,
        data: Vec<u8>,
        priority: Priority,
    ) -> Result<String, QueueError> {
        let attempt = unique_prefix();
        let base = path::join(
            &self.items,
            &format!("p{priority:010}-{attempt}{ITEM_NAME}"),
        );
        let client = &self.client;
        match retrying(client, || client.exists(&self.items)).await? {
            Some(stat) if stat.num_children as usize >= self.max_len => {
                return Err(QueueError::Full {
                    path: self.path.clone(),
                    max: self.max_len,
                })
            }
            Some(_) => {}
            None => self.ensure_dirs().await?,
        }
        // Whether a create was sent whose outcome no listing has settled.
        let mut unsure = false;
        let unknown = |unsure: bool, err: Error| {
            if unsure {
                QueueError::PutOutcomeUnknown {
                    attempt: attempt.clone(),
                }
            } else {
                QueueError::Client(err)
            }
        };
        for _ in 0..RETRIES_MAX {
            if unsure {
                match client.get_children(&self.items).await {
                    Ok(names) => {
                        if let Some(found) = names.iter().find(|n| n.contains(&attempt)) {
                            tracing::debug!(item = %found, "put found after a lost reply");
                            return Ok(path::join(&self.items, found));
                        }
                        unsure = false;
                    }
                    Err(err) if is_transient(&err) => {
                        before_retry(client, &err)
                            .await
                            .map_err(|e| unknown(true, e))?;
                        continue;
                    }
                    Err(err) => return Err(unknown(true, err)),
                }
            }
            match client
                .create(&base, data.clone(), CreateMode::PersistentSequential)
                .await
            {
                Ok(item) => return Ok(item),
                Err(Error::NoNode { .. }) => self.ensure_dirs().await?,
                Err(err) if is_transient(&err) => {
                    unsure = true;
                    before_retry(client, &err)
                        .await
                        .map_err(|e| unknown(true, e))?;
                }
                Err(err) => return Err(QueueError::Client(err)),
            }
        }
        Err(unknown(unsure, Error::ConnectionLoss))
    }

    /// The item a put `attempt` made (the prefix in
    /// [`QueueError::PutOutcomeUnknown`]), if it made one and it was not
    /// taken and completed since.
    pub async fn find_put(&self, attempt: &str) -> Result<Option<String>, QueueError> {
        let names = match retrying(&self.client, || self.client.get_children(&self.items)).await {
            Ok(names) => names,
            Err(Error::NoNode { .. }) => return Ok(None),
            Err(err) => return Err(err.into()),
        };
        Ok(names
            .iter()
            .find(|name| name.contains(attempt))
            .map(|name| path::join(&self.items, name)))
    }

    /// Waits for an item and claims it.
    pub async fn take(&self) -> Result<Job, QueueError> {
        loop {
            if let Some(job) = self.take_inner(true).await? {
                return Ok(job);
            }
        }
    }

    /// Claims the first unclaimed item, or gives `None` at once if there is
    /// none.
    pub async fn try_take(&self) -> Result<Option<Job>, QueueError> {
        self.take_inner(false).await
    }

    /// Waits at most `timeout` for an item; `None` then. A claim in flight
    /// when the time runs out is given up, so the item stays in the queue.
    pub async fn take_timeout(&self, timeout: Duration) -> Result<Option<Job>, QueueError> {
        match tokio::time::timeout(timeout, self.take()).await {
            Ok(taken) => taken.map(Some),
            Err(_) => Ok(None),
        }
    }

    /// The number of items not yet completed, claimed or not (one read).
    pub async fn len(&self) -> Result<usize, QueueError> {
        let stat = retrying(&self.client, || self.client.exists(&self.items)).await?;
        Ok(stat.map_or(0, |stat| stat.num_children as usize))
    }

    /// Whether no item is left, claimed or not.
    pub async fn is_empty(&self) -> Result<bool, QueueError> {
        Ok(self.len().await? == 0)
    }

    /// The item a take would claim now and its data, without claiming it.
    pub async fn peek(&self) -> Result<Option<(String, Vec<u8>)>, QueueError> {
        let (items, claims) = self.listing().await?;
        for item in unclaimed(&items, &claims, ITEMS_EXAMINED_MAX) {
            let node = path::join(&self.items, &item.name);
            match retrying(&self.client, || self.client.get_data(&node)).await {
                Ok((data, _)) => return Ok(Some((node, data))),
                Err(Error::NoNode { .. }) => continue,
                Err(err) => return Err(err.into()),
            }
        }
        Ok(None)
    }

    /// Creates the queue's path and its two directories, as far as missing.
    async fn ensure_dirs(&self) -> Result<(), Error> {
        let open = Acl::open();
        retrying(&self.client, || {
            ensure_path(&self.client, &self.path, &open)
        })
        .await?;
        for dir in [&self.items, &self.claims] {
            // Persistent, not containers: the items' sequence counter must
            // not restart while a queue is in use.
            let created = retrying(&self.client, || async {
                match self
                    .client
                    .create(dir, Vec::new(), CreateMode::Persistent)
                    .await
                {
                    Ok(_) | Err(Error::NodeExists { .. }) => Ok(()),
                    Err(err) => Err(err),
                }
            });
            created.await?;
        }
        Ok(())
    }

    /// Both listings, the directories made if missing.
    async fn listing(&self) -> Result<(Vec<String>, Vec<String>), Error> {
        for _ in 0..RETRIES_MAX {
            let client = &self.client;
            let (items, claims) = tokio::join!(
                retrying(client, || client.get_children(&self.items)),
                retrying(client, || client.get_children(&self.claims)),
            );
            match (items, claims) {
                (Ok(items), Ok(claims)) => return Ok((items, claims)),
                (Err(Error::NoNode { .. }), _) | (_, Err(Error::NoNode { .. })) => {
                    self.ensure_dirs().await?
                }
                (Err(err), _) | (_, Err(err)) => return Err(err),
            }
        }
        Err(Error::ConnectionLoss)
    }

    /// One look, and a wait for a change if it found nothing and `wait`.
    /// `None`: look again.
    async fn take_inner(&self, wait: bool) -> Result<Option<Job>, QueueError> {
        let client = &self.client;
        let (items, claims, watches) = if wait {
            let (items, claims) = tokio::join!(
                retrying(client, || client.get_children_watch(&self.items)),
                retrying(client, || client.get_children_watch(&self.claims)),
            );
            match (items, claims) {
                (Ok((items, a)), Ok((claims, b))) => (items, claims, Some((a, b))),
                (Err(Error::NoNode { .. }), _) | (_, Err(Error::NoNode { .. })) => {
                    self.ensure_dirs().await?;
                    return Ok(None);
                }
                (Err(err), _) | (_, Err(err)) => return Err(err.into()),
            }
        } else {
            let (items, claims) = self.listing().await?;
            (items, claims, None)
        };
        let candidates = unclaimed(&items, &claims, ITEMS_EXAMINED_MAX);
        if candidates.is_empty() {
            let Some((items_changed, claims_changed)) = watches else {
                return Ok(None);
            };
            tracing::trace!(queue = %self.path, "nothing unclaimed; waiting");
            // A put, or a claim released or lost. An error (the session
            // ended) shows on the next look.
            tokio::select! {
                _ = items_changed => {}
                _ = claims_changed => {}
            }
            return Ok(None);
        }
        for item in candidates {
            if let Claim::Mine(job) = self.claim(item).await? {
                return Ok(Some(job));
            }
        }
        // Everything examined went to others meanwhile: look again now.
        Ok(None)
    }

    /// Claims `item` and reads it.
    async fn claim(&self, item: ItemName) -> Result<Claim, Error> {
        let client = &self.client;
        let attempt = unique_prefix();
        let key = path::join(&self.claims, &item.name);
        let grant = path::join(&self.claims, &format!("{GRANT_NAME}{attempt}{}", item.name));
        // Armed before the multi is sent: a take dropped now gives the
        // claim up, whether or not it was made.
        let mut cleanup = ClaimCleanup {
            client: client.clone(),
            key,
            grant,
            armed: true,
        };
        let ops = vec![
            multi::create(cleanup.key.clone(), Vec::new(), CreateMode::Ephemeral),
            multi::create(cleanup.grant.clone(), Vec::new(), CreateMode::Ephemeral),
        ];
        match client.multi(ops).await {
            Ok(_) => {}
            Err(Error::MultiFailed {
                code: ErrorCode::NodeExists | ErrorCode::NoNode,
                ..
            }) => {
                // Claimed by someone else (or the claims directory went):
                // nothing was made.
                cleanup.armed = false;
                return Ok(Claim::NotMine);
            }
            Err(err) if is_transient(&err) => {
                before_retry(client, &err).await?;
                let owner = retrying(client, || client.exists(&cleanup.grant))
                    .await?
                    .map(|stat| stat.ephemeral_owner);
                if !claim_was_made(owner, client.session_id()) {
                    cleanup.armed = false;
                    return Ok(Claim::NotMine);
                }
                tracing::debug!(item = %item.name, "claim found after a lost reply");
            }
            Err(err) => return Err(err),
        }
        let node = path::join(&self.items, &item.name);
        match retrying(client, || client.get_data(&node)).await {
            Ok((data, _)) => {
                tracing::debug!(item = %item.name, priority = item.priority, "claimed");
                Ok(Claim::Mine(Job {
                    data,
                    item: node,
                    priority: item.priority,
                    claim: cleanup,
                }))
            }
            // Completed between the listing and the claim: give it up.
            Err(Error::NoNode { .. }) => {
                cleanup.release().await?;
                Ok(Claim::NotMine)
            }
            Err(err) => Err(err),
        }
    }
}

/// The claim's two nodes, given up when dropped armed.
struct ClaimCleanup {
    client: Client,
    key: String,
    grant: String,
    armed: bool,
}

impl ClaimCleanup {
    /// Gives the claim up now (both nodes, or neither if the grant is gone
    /// already: the key is then someone else's).
    async fn release(&mut self) -> Result<(), Error> {
        self.armed = false;
        release_claim(&self.client, &self.key, &self.grant).await
    }
}

/// Deletes a claim's key and grant in one step, if the grant still stands.
async fn release_claim(client: &Client, key: &str, grant: &str) -> Result<(), Error> {
    let ops = || {
        vec![
            multi::check(grant, None),
            multi::delete(key, None),
            multi::delete(grant, None),
        ]
    };
    retrying(client, || async {
        match client.multi(ops()).await {
            Ok(_) => Ok(()),
            // The grant is gone: the session ended, or an earlier try did it.
            Err(Error::MultiFailed { index: 0, .. }) => Ok(()),
            Err(err) => Err(err),
        }
    })
    .await
}

impl Drop for ClaimCleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Without a runtime the session's end removes the ephemerals instead.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.client.clone();
        let (key, grant) = (
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.grant),
        );
        // Sent after any claim of this attempt (a session's requests are
        // applied in order), and retried until the session ends: a claim
        // left behind hides its item for as long as the session lives.
        runtime.spawn(async move {
            let _ = until_settled(|| release_claim(&client, &key, &grant)).await;
        });
    }
}

/// A claimed item. Complete it ([`Job::complete`], [`Job::complete_with`])
/// to remove it from the queue; release it ([`Job::release`], or drop it)
/// to give it back.
///
/// ```
/// use arbor_client::{recipes::Queue, CreateMode};
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// # client.create("/results", Vec::new(), CreateMode::Persistent).await?;
/// let queue = Queue::new(&client, "/queues/render");
/// queue.put(b"frame-7".to_vec()).await?;
///
/// let job = queue.take().await?;
/// let result = format!("/results/{}", String::from_utf8_lossy(job.data()));
/// // The result is written if and only if the item is removed, and only
/// // while this claim stands: a worker paused past its session writes nothing.
/// job.complete_with(|fenced| fenced.create(result, b"ok".to_vec(), CreateMode::Persistent))
///     .await?;
/// assert_eq!(client.get_data("/results/frame-7").await?.0, b"ok");
/// assert!(queue.try_take().await?.is_none());
/// # Ok(()) }
/// ```
pub struct Job {
    data: Vec<u8>,
    item: String,
    priority: Priority,
    claim: ClaimCleanup,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("item", &self.item)
            .field("priority", &self.priority)
            .field("grant", &self.claim.grant)
            .field("data_len", &self.data.len())
            .finish()
    }
}

/// A completed job: the results of the caller's ops, when known.
#[derive(Debug, Clone)]
pub struct Completion {
    results: Option<Vec<OpResult>>,
}

impl Completion {
    /// The results of the ops the caller added, in order; `None` when the
    /// commit's reply was lost and its success was learned by looking (the
    /// ops' effects are there; their results were not seen).
    pub fn results(&self) -> Option<&[OpResult]> {
        self.results.as_deref()
    }
}

impl Job {
    /// The item's data.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The item's path.
    pub fn item(&self) -> &str {
        &self.item
    }

    /// The item's priority.
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// The claim's grant node, the one a fenced transaction checks.
    pub fn grant(&self) -> &str {
        &self.claim.grant
    }

    /// A transaction that commits only while this claim stands, and leaves
    /// the job claimed (for progress written while working); to write the
    /// result and complete the job in one step, use [`Job::complete_with`].
    pub fn fenced(&self) -> Fenced {
        Fenced::new(&self.claim.client, &self.claim.grant)
    }

    /// Resolves when the claim may have been lost: the connection is
    /// suspended, the session expired, or the client closed.
    pub async fn lost(&self) -> ConnectionState {
        until_lost(&self.claim.client).await
    }

    /// Removes the item from the queue.
    pub async fn complete(self) -> Result<Completion, CompleteError> {
        self.complete_with(|fenced| fenced).await
    }

    /// Runs the ops `build` adds (the job's result) and removes the item,
    /// in one transaction fenced by the claim: all of it happens, once, or
    /// none of it. After a lost reply the outcome is learned by looking
    /// (see the module doc), and the transaction is sent again only if it
    /// was not applied.
    pub async fn complete_with(
        mut self,
        build: impl FnOnce(Fenced) -> Fenced,
    ) -> Result<Completion, CompleteError> {
        let fenced = build(self.fenced());
        let caller_ops = fenced.ops().len() - 1;
        let fenced = fenced
            .delete(self.item.clone(), None)
            .delete(self.claim.key.clone(), None)
            .delete(self.claim.grant.clone(), None);
        let client = self.claim.client.clone();
        // Whether a commit was sent whose outcome is not known yet. The
        // claim stays armed on every failure: its release checks the grant
        // first, so it is harmless once the grant is gone, and it must run
        // if the claim still stands (the job then goes back to the queue).
        let mut unsure = false;
        for _ in 0..RETRIES_MAX {
            let err = match fenced.clone().commit().await {
                Ok(mut results) => {
                    results.truncate(caller_ops);
                    self.claim.armed = false;
                    return Ok(Completion {
                        results: Some(results),
                    });
                }
                Err(FencedError::OpFailed { index, code }) if index < caller_ops => {
                    // The fence passed, so nothing earlier was applied.
                    return Err(CompleteError::OpFailed {
                        index,
                        code,
                        job: Box::new(self),
                    });
                }
                Err(FencedError::OpFailed { .. }) => {
                    // Our delete of the item failed while the grant stood.
                    self.claim.release().await?;
                    return Err(CompleteError::ItemGone {
                        item: self.item.clone(),
                    });
                }
                Err(FencedError::GrantLost { .. }) if !unsure => {
                    return Err(CompleteError::ClaimLost {
                        item: self.item.clone(),
                    });
                }
                // Gone: by an earlier try of ours, or not; look.
                Err(FencedError::GrantLost { .. }) => Error::ConnectionLoss,
                Err(FencedError::Client(err)) if is_transient(&err) => {
                    unsure = true;
                    err
                }
                // Refused before it was applied (the client it went through
                // ended, say): nothing of this try happened.
                Err(FencedError::Client(err)) if !unsure => return Err(self.ended(false, err)),
                Err(FencedError::Client(err)) => err,
            };
            // Look through the claim's own session: its liveness backs the rule.
            if let Err(ended) = before_retry(&client, &err).await {
                return Err(self.ended(unsure, ended));
            }
            match self.outcome().await {
                // Sending it again through a client that ended is no use.
                Ok(Outcome::NotApplied) if !is_transient(&err) => {
                    return Err(CompleteError::Client(err))
                }
                Ok(Outcome::NotApplied) => {
                    // Known now: no try so far was applied. The client the
                    // commit goes through may be another one, still
                    // reconnecting: give it a moment before sending again.
                    unsure = false;
                    tokio::time::sleep(RESEND_PAUSE).await;
                }
                Ok(Outcome::Committed) => {
                    tracing::debug!(item = %self.item, "completion found applied after a lost reply");
                    self.claim.armed = false;
                    return Ok(Completion { results: None });
                }
                Ok(Outcome::ClaimLost) => {
                    return Err(CompleteError::ClaimLost {
                        item: self.item.clone(),
                    })
                }
                Err(err) => return Err(self.ended(unsure, err)),
            }
        }
        Err(self.ended(unsure, Error::ConnectionLoss))
    }

    /// Reads the grant, then the item, through the claim's own session (in
    /// order, after the commit) and decides. A read answered means the
    /// session was alive when it was served, so the grant it shows gone was
    /// not removed by the session's end.
    async fn outcome(&self) -> Result<Outcome, Error> {
        let client = &self.claim.client;
        let grant = retrying(client, || client.exists(&self.claim.grant)).await?;
        let item = retrying(client, || client.exists(&self.item)).await?;
        Ok(completion_outcome(grant.is_some(), item.is_some()))
    }

    /// The error once looking is no longer possible (the claim's session
    /// ended) or was given up; `unsure`: a commit's outcome is unknown.
    fn ended(&self, unsure: bool, err: Error) -> CompleteError {
        let item = self.item.clone();
        if unsure {
            CompleteError::OutcomeUnknown { item }
        } else if self.claim.client.state() == ConnectionState::Expired {
            // The claim went with the session, and nothing was applied.
            CompleteError::ClaimLost { item }
        } else {
            CompleteError::Client(err)
        }
    }

    /// Gives the item back to the queue (at the front of its priority) and
    /// waits until the claim is gone.
    pub async fn release(mut self) -> Result<(), QueueError> {
        self.claim.release().await.map_err(QueueError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn item_names_parse_to_priority_and_sequence() {
        // The attempt prefix between the two never changes the parse.
        let item =
            ItemName::parse("p0000000007-_c_0123456789abcdef0123456789abcdef-item-0000000042")
                .expect("an item");
        assert_eq!((item.priority, item.sequence), (7, 42));
        for foreign in [
            "grant-_c_00-p0000000007-_c_01-item-0000000042",
            "p7-_c_01-item-0000000042",
            "p0000000007-_c_01-item-42",
            "p0000000007-_c_01-lock-0000000042",
            "x",
        ] {
            assert_eq!(ItemName::parse(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn unclaimed_items_come_in_priority_then_sequence_order() {
        // Raw name order would put the random prefix before the sequence.
        let items = names(&[
            "p0000000100-_c_ff-item-0000000001",
            "p0000000100-_c_00-item-0000000004",
            "p0000000005-_c_aa-item-0000000003",
            "p0000000100-_c_11-item-0000000002",
            "p0000000005-_c_bb-item-0000000009",
            "stray",
        ]);
        let claims = names(&[
            "p0000000100-_c_11-item-0000000002",
            "grant-_c_99-p0000000100-_c_11-item-0000000002",
            // A grant alone claims nothing: only keys do.
            "grant-_c_98-p0000000100-_c_ff-item-0000000001",
        ]);
        let order: Vec<(u32, u64)> = unclaimed(&items, &claims, 10)
            .iter()
            .map(|i| (i.priority, i.sequence))
            .collect();
        assert_eq!(order, [(5, 3), (5, 9), (100, 1), (100, 4)]);
        assert_eq!(unclaimed(&items, &claims, 2).len(), 2);
    }

    #[test]
    fn a_lost_completion_is_judged_by_the_grant_then_the_item() {
        // The rule of the module doc, case by case.
        assert_eq!(completion_outcome(true, true), Outcome::NotApplied);
        assert_eq!(completion_outcome(true, false), Outcome::NotApplied);
        assert_eq!(completion_outcome(false, false), Outcome::Committed);
        assert_eq!(completion_outcome(false, true), Outcome::ClaimLost);
    }

    #[test]
    fn a_lost_claim_counts_only_if_its_grant_is_this_sessions() {
        // A grant of another session (impossible with unique names) or none: not ours.
        assert!(claim_was_made(Some(7), 7));
        assert!(!claim_was_made(Some(8), 7));
        assert!(!claim_was_made(None, 7));
    }
}
