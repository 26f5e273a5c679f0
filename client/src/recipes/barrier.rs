//! A double barrier: members enter together once `count` of them are
//! present, and leave together once all have finished (ZooKeeper's "double
//! barrier" recipe, Curator's `DistributedDoubleBarrier`), with a stronger
//! entry rule: the barrier releases all the members it counted, or none.
//!
//! # The protocol on the nodes
//!
//! Under the barrier's path each member creates an ephemeral sequential node
//! `_c_<hex>-member-<seq>` (a protected create, as [`super::Mutex`]).
//!
//! **Enter.** A member sets an exists watch on `<path>/ready`, then:
//! * if `ready` exists and lists its node, it is released;
//! * if `ready` exists without it, that `ready` belongs to a round this
//!   member came too late for: it waits for that round to leave (`ready`
//!   to go), then counts again, as a member of the next round. Meanwhile it
//!   also watches that round's lowest member still present (the last to go
//!   when a round ends cleanly); once none is left, the round is over even
//!   if nobody removed its `ready` (their sessions ended), and the arrival
//!   removes it, by the round's identity;
//! * otherwise it lists the members. Fewer than `count`: it waits on the
//!   watch. At least `count`: it opens the barrier with one multi that
//!   `check`s every member node it listed and creates `ready` (listing
//!   those members) and `ready/round-<hex>` (the round's identity, below).
//!   If a member died since the listing, its check fails and nothing is
//!   created: `ready` exists only if every member it lists was alive at
//!   the zxid that made it. That member counts again (and waits for a
//!   replacement), and every later arrival counts after its own create, so
//!   the member that completes the set is always the one that opens it;
//!   waiters need no watch on the member list.
//!
//! `ready`'s data, one name per line:
//!
//! ```text
//! round-<32 hex digits>        ; the name of ready's one child
//! _c_<hex>-member-0000000003   ; every member released by this ready
//! ...
//! ```
//!
//! **Leave** (only the members `ready` lists take part): a member deletes
//! its node and waits until none of them is left, without a herd where it
//! can. Among the listed members still present, the lowest waits for the
//! highest to go; every other member deletes its own node and waits for the
//! lowest. The lowest, once alone, deletes its node, `ready/round-…` and
//! `ready` in one multi: the round ends at one zxid, and the path is ready
//! for the next round. If the lowest dies instead, the first member to find
//! no listed member left deletes `ready` with the same multi; the round's
//! child makes that delete fail on a newer round's `ready`, so a slow member
//! of an old round can never remove the next round's.
//!
//! # Rules for reuse
//!
//! * Every member of a path uses the same `count`.
//! * Rounds follow each other on one path: a member arriving while a round
//!   is inside (or leaving) waits for that round to end, then belongs to the
//!   next one. A member of a round that never calls [`Entered::leave`] (and
//!   whose session lives on) keeps that round, and so the path, from ending.
//! * A member whose session ends while inside counts as having left.
//! * [`DoubleBarrier::enter_timeout`] never races the opening: a timeout
//!   means the member was not (and will not be) released. Dropping an
//!   [`DoubleBarrier::enter`] future instead removes the node in the
//!   background; if the barrier opened at that moment, the member counts as
//!   having entered and left at once.

use std::time::Duration;

use arbor_protocol::{path, CreateMode, ErrorCode};
use futures_util::FutureExt;

use crate::recipes::{
    before_retry, create_protected, is_transient, retrying, unique_prefix, NodeCleanup, RETRIES_MAX,
};
use crate::{multi, Acl, Client, Error, OneshotWatch};

/// The part of a member node's name after the attempt prefix.
pub(crate) const MEMBER_NAME: &str = "member-";

/// The node whose existence opens the barrier.
const READY: &str = "ready";

/// The prefix of the name of `ready`'s one child: the round's identity.
const ROUND_NAME: &str = "round-";

/// The most members a barrier may wait for: `ready` lists them all (about
/// 50 bytes each) and the multi that creates it checks each one.
pub const MEMBERS_MAX: usize = 1000;

/// Why a member did not enter (or leave).
#[derive(Debug, thiserror::Error)]
pub enum BarrierError {
    /// The member count is 0 or above [`MEMBERS_MAX`].
    #[error("a barrier needs 1 to {max} members, not {count}", max = MEMBERS_MAX)]
    BadCount { count: usize },
    /// `enter_timeout` ran out; this member left the barrier.
    #[error("timed out waiting for the barrier")]
    Timeout,
    /// `ready` holds something this recipe did not write.
    #[error("{path} is not a barrier's ready node: {data:?}")]
    Malformed { path: String, data: String },
    #[error(transparent)]
    Client(#[from] Error),
}

/// A double barrier for `count` members on a path. Cheap to create; clone
/// the client, not the barrier.
///
/// ```
/// use arbor_client::recipes::DoubleBarrier;
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// # let other = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// let barrier = DoubleBarrier::new(&client, "/barriers/stage-1", 2);
/// let partner = DoubleBarrier::new(&other, "/barriers/stage-1", 2);
/// // Each member enters; nobody starts until both are in.
/// let (a, b) = tokio::try_join!(barrier.enter(), partner.enter())?;
/// // ... both work ...
/// // Each leaves; nobody goes on until both are done.
/// tokio::try_join!(a.leave(), b.leave())?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct DoubleBarrier {
    client: Client,
    path: String,
    count: usize,
    /// The ACL of the nodes the barrier creates (the open one by default).
    acl: Vec<Acl>,
}

/// A member inside the barrier. [`Entered::leave`] waits for the others;
/// dropping it removes the member's node in the background (it counts as
/// having left).
pub struct Entered {
    node: NodeCleanup,
    path: String,
    round: Round,
}

/// What `ready` says: the round's identity and its members.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Round {
    /// The name of `ready`'s child.
    id: String,
    members: Vec<String>,
}

impl Round {
    fn encode(&self) -> Vec<u8> {
        let mut text = self.id.clone();
        for member in &self.members {
            text.push('\n');
            text.push_str(member);
        }
        text.into_bytes()
    }

    fn decode(data: &[u8]) -> Option<Round> {
        let text = std::str::from_utf8(data).ok()?;
        let mut lines = text.lines();
        let id = lines.next()?.to_owned();
        if !id.starts_with(ROUND_NAME) {
            return None;
        }
        let members = lines.map(str::to_owned).collect();
        Some(Round { id, members })
    }
}

impl DoubleBarrier {
    /// A barrier on `path` that opens once `count` members are present
    /// (the path is created as a container if missing, with its parents).
    pub fn new(client: &Client, path: &str, count: usize) -> Self {
        Self {
            client: client.clone(),
            path: path.to_owned(),
            count,
            acl: Acl::open(),
        }
    }

    /// Gives the nodes this barrier creates `acl` instead of the open one
    /// (see [`Mutex::with_acl`](crate::recipes::Mutex::with_acl)).
    ///
    /// ```
    /// # fn demo(client: arbor_client::Client) {
    /// use arbor_client::{recipes::DoubleBarrier, Acl};
    /// let barrier = DoubleBarrier::new(&client, "/team-a/stage", 4).with_acl(Acl::creator_all());
    /// # }
    /// ```
    pub fn with_acl(mut self, acl: Vec<Acl>) -> Self {
        self.acl = acl;
        self
    }

    /// The barrier's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// How many members open the barrier.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Joins the barrier and waits until it opens with this member in it.
    pub async fn enter(&self) -> Result<Entered, BarrierError> {
        let node = self.join().await?;
        // From here, dropping this future deletes the member's node.
        let round = self.wait_inside(path::name(node.path())).await?;
        Ok(self.entered(node, round))
    }

    /// Creates this member's node.
    async fn join(&self) -> Result<NodeCleanup, BarrierError> {
        if self.count == 0 || self.count > MEMBERS_MAX {
            return Err(BarrierError::BadCount { count: self.count });
        }
        let prefix = unique_prefix();
        let (node, _) = create_protected(
            &self.client,
            &self.path,
            &prefix,
            MEMBER_NAME,
            Vec::new(),
            &self.acl,
        )
        .await?;
        Ok(node)
    }

    fn entered(&self, node: NodeCleanup, round: Round) -> Entered {
        tracing::debug!(path = %self.path, member = %path::name(node.path()), round = %round.id, "barrier entered");
        Entered {
            node,
            path: self.path.clone(),
            round,
        }
    }

    /// Waits until a `ready` lists the member `name`, and returns its round.
    async fn wait_inside(&self, name: &str) -> Result<Round, BarrierError> {
        let name = name.to_owned();
        let ready = self.ready_path();
        loop {
            // The watch first, so a `ready` made after our count wakes us.
            let (stat, watch) = retrying(&self.client, || self.client.exists_watch(&ready)).await?;
            if stat.is_some() {
                match self.read_round().await? {
                    Some(round) if round.members.contains(&name) => return Ok(round),
                    // Another round is inside: wait for it to go.
                    Some(round) => self.wait_for_round(&round, watch).await?,
                    None => {} // gone meanwhile: look again
                }
                continue;
            }
            let members = self.members().await?;
            if !members.contains(&name) {
                // Our node is gone: the session expired with its ephemerals.
                return Err(Error::SessionExpired.into());
            }
            if members.len() < self.count {
                // Every later arrival counts for itself; only `ready` wakes us.
                watch.await?;
                continue;
            }
            self.open(members).await?;
            // Opened by us or by a concurrent arrival, or refused because a
            // member died: the next look at `ready` tells.
        }
    }

    /// Leaves after a timeout, deciding atomically against a barrier that
    /// opens at the same moment: either this member's node goes in a step
    /// that shows no `ready` could list it (then: timeout), or a `ready`
    /// lists it (then it entered after all).
    async fn give_up(&self, node: NodeCleanup) -> Result<Entered, BarrierError> {
        let name = path::name(node.path()).to_owned();
        let ready = self.ready_path();
        for _ in 0..=RETRIES_MAX {
            let ops = match self.read_round().await? {
                Some(round) if round.members.contains(&name) => {
                    return Ok(self.entered(node, round));
                }
                // Another round is inside: while its `ready` stands, no new
                // one can list us.
                Some(round) => vec![
                    multi::check(path::join(&ready, &round.id), None),
                    multi::delete(node.path(), None),
                ],
                // A create and delete of `ready` in one step proves it was
                // absent when our node went.
                None => vec![
                    multi::create(&ready, Vec::new(), CreateMode::Persistent),
                    multi::delete(&ready, None),
                    multi::delete(node.path(), None),
                ],
            };
            let ours = ops.len() - 1;
            match self.client.multi(ops).await {
                Ok(_) => break,
                Err(Error::MultiFailed {
                    index,
                    code: ErrorCode::NoNode,
                    ..
                }) if index == ours => return Err(Error::SessionExpired.into()),
                // `ready` appeared, or the round we saw went: decide again.
                Err(Error::MultiFailed { .. }) => {}
                Err(err) if is_transient(&err) => {
                    before_retry(&self.client, &err).await?;
                    // Our node gone means that step applied (an ended
                    // session fails this read instead).
                    if self.client.exists(node.path()).await?.is_none() {
                        break;
                    }
                }
                Err(err) => return Err(err.into()),
            }
        }
        // Gone (deleted by the step above), so this only disarms the clean-up.
        node.delete_now().await?;
        Err(BarrierError::Timeout)
    }

    /// [`DoubleBarrier::enter`], waiting at most `timeout` once this
    /// member's node exists. [`BarrierError::Timeout`] then means this member
    /// was not released and never will be: its node goes in one step with a
    /// proof that no `ready` lists it (`ready` created and deleted in the
    /// same multi, or another round's `ready` checked). A barrier that opens
    /// with it at that very moment returns [`Entered`] instead, so the
    /// others released with it can count on it.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// use std::time::Duration;
    /// use arbor_client::recipes::{BarrierError, DoubleBarrier};
    /// let barrier = DoubleBarrier::new(&client, "/doc/barrier", 3);
    /// let alone = barrier.enter_timeout(Duration::from_millis(100)).await;
    /// assert!(matches!(alone, Err(BarrierError::Timeout)));
    /// # Ok(()) }
    /// ```
    pub async fn enter_timeout(&self, timeout: Duration) -> Result<Entered, BarrierError> {
        let node = self.join().await?;
        let name = path::name(node.path()).to_owned();
        match tokio::time::timeout(timeout, self.wait_inside(&name)).await {
            Ok(Ok(round)) => Ok(self.entered(node, round)),
            Ok(Err(err)) => Err(err),
            // Not inside yet: leave, unless the barrier opens with us right now.
            Err(_) => self.give_up(node).await,
        }
    }

    fn ready_path(&self) -> String {
        path::join(&self.path, READY)
    }

    /// The member nodes' names, in arrival order.
    async fn members(&self) -> Result<Vec<String>, Error> {
        let children = retrying(&self.client, || self.client.get_children(&self.path)).await?;
        Ok(members_in_order(children))
    }

    /// `ready`'s round, or `None` if it is gone.
    async fn read_round(&self) -> Result<Option<Round>, BarrierError> {
        let ready = self.ready_path();
        let read = retrying(&self.client, || async {
            match self.client.get_data(&ready).await {
                Ok((data, _)) => Ok(Some(data)),
                Err(Error::NoNode { .. }) => Ok(None),
                Err(err) => Err(err),
            }
        })
        .await?;
        let Some(data) = read else { return Ok(None) };
        Round::decode(&data)
            .map(Some)
            .ok_or_else(|| BarrierError::Malformed {
                path: ready,
                data: String::from_utf8_lossy(&data).into_owned(),
            })
    }

    /// Waits until another round's `ready` goes, or one of its members
    /// does. A round whose members are all gone without removing `ready`
    /// (their sessions ended) is over: its `ready` is removed here, so the
    /// path is never blocked by a round nobody is left to end.
    async fn wait_for_round(&self, round: &Round, ready: OneshotWatch) -> Result<(), BarrierError> {
        let present: Vec<String> = self
            .members()
            .await?
            .into_iter()
            .filter(|member| round.members.contains(member))
            .collect();
        let Some(lowest) = present.first() else {
            let ready = self.ready_path();
            remove_ready(&self.client, &ready, &path::join(&ready, &round.id)).await?;
            return Ok(());
        };
        // The lowest is the round's last to go when it ends cleanly; if it
        // dies instead, its node's deletion wakes us to look again.
        let lowest = path::join(&self.path, lowest);
        let watched = retrying(&self.client, || async {
            match self.client.get_data_watch(&lowest).await {
                Ok((_, _, watch)) => Ok(Some(watch)),
                Err(Error::NoNode { .. }) => Ok(None),
                Err(err) => Err(err),
            }
        })
        .await?;
        let Some(member) = watched else {
            return Ok(());
        };
        let (event, _) = futures_util::future::select(ready, member)
            .await
            .factor_first();
        event?;
        Ok(())
    }

    /// Creates `ready` for `members` if every one of them is still alive.
    /// Any answer but a lasting error sends the caller back to look.
    async fn open(&self, members: Vec<String>) -> Result<(), BarrierError> {
        let ready = self.ready_path();
        let id = format!("{ROUND_NAME}{}", round_hex(&unique_prefix()));
        let marker = path::join(&ready, &id);
        let round = Round { id, members };
        let mut ops: Vec<_> = round
            .members
            .iter()
            .map(|member| multi::check(path::join(&self.path, member), None))
            .collect();
        ops.push(multi::create(
            &ready,
            round.encode(),
            CreateMode::Persistent,
        ));
        ops.push(multi::create(marker, Vec::new(), CreateMode::Persistent));
        match self.client.multi(ops).await {
            Ok(_) => {
                tracing::debug!(path = %self.path, members = round.members.len(), round = %round.id, "barrier opened");
                Ok(())
            }
            // A member died since the listing (NoNode on its check), or
            // another arrival opened it first (NodeExists on `ready`).
            Err(Error::MultiFailed {
                code: ErrorCode::NoNode | ErrorCode::NodeExists,
                ..
            }) => Ok(()),
            // Applied or not, `ready` says which.
            Err(err) if is_transient(&err) => Ok(before_retry(&self.client, &err).await?),
            Err(err) => Err(err.into()),
        }
    }
}

impl Entered {
    /// This member's node.
    pub fn node(&self) -> &str {
        self.node.path()
    }

    /// The members the barrier released together (node names, arrival order).
    pub fn members(&self) -> &[String] {
        &self.round.members
    }

    /// Leaves the barrier: removes this member's node and waits until every
    /// member released with it has left too (or its session ended).
    pub async fn leave(self) -> Result<(), BarrierError> {
        let Entered { node, path, round } = self;
        let client = node.client().clone();
        let name = path::name(node.path()).to_owned();
        let ready = path::join(&path, READY);
        let marker = path::join(&ready, &round.id);
        // Ours until we delete it; `None` once deleted (or maybe deleted,
        // by a last multi whose reply was lost).
        let mut mine = Some(node);
        // A last multi was sent whose reply was lost: our node may be gone.
        let mut last_sent = false;
        loop {
            let children = retrying(&client, || async {
                match client.get_children(&path).await {
                    Err(Error::NoNode { .. }) => Ok(Vec::new()),
                    other => other,
                }
            })
            .await?;
            let present: Vec<String> = members_in_order(children)
                .into_iter()
                .filter(|member| round.members.contains(member))
                .collect();
            let here = present.contains(&name);
            if mine.is_some() && !here && !last_sent {
                // Gone without us: the session expired with its ephemerals.
                return Err(Error::SessionExpired.into());
            }
            if present.is_empty() {
                // Everyone left; if the last one could not take `ready` with
                // it (it died), take it now. Only this round's goes.
                remove_ready(&client, &ready, &marker).await?;
                if let Some(node) = mine.take() {
                    node.delete_now().await?; // gone already: disarms it
                }
                return Ok(());
            }
            if present.len() == 1 && here {
                let ops = vec![
                    multi::delete(path::join(&path, &name), None),
                    multi::delete(&marker, None),
                    multi::delete(&ready, None),
                ];
                match client.multi(ops).await {
                    Ok(_) => {}
                    // `ready` was removed already: just go.
                    Err(Error::MultiFailed {
                        index: 1..,
                        code: ErrorCode::NoNode,
                        ..
                    }) => {}
                    Err(err) if is_transient(&err) => {
                        // Applied or not: the next look tells.
                        last_sent = true;
                        before_retry(&client, &err).await?;
                        continue;
                    }
                    Err(err) => return Err(err.into()),
                }
                if let Some(node) = mine.take() {
                    // Gone already (or deleted here if the multi did not).
                    node.delete_now().await?;
                }
                tracing::debug!(path = %path, round = %round.id, "barrier round ended");
                return Ok(());
            }
            let lowest = &present[0];
            let awaited = if *lowest == name {
                // The lowest waits for the others, highest first.
                present.last().expect("present has two or more members")
            } else {
                if let Some(node) = mine.take() {
                    node.delete_now().await?;
                }
                lowest
            };
            let awaited = path::join(&path, awaited);
            let watched = retrying(&client, || async {
                match client.get_data_watch(&awaited).await {
                    Ok((_, _, watch)) => Ok(Some(watch)),
                    Err(Error::NoNode { .. }) => Ok(None),
                    Err(err) => Err(err),
                }
            })
            .await?;
            if let Some(watch) = watched {
                watch.await?;
            }
        }
    }
}

/// Deletes `ready` if it is still the round whose child is `marker`.
async fn remove_ready(client: &Client, ready: &str, marker: &str) -> Result<(), Error> {
    let ops = || vec![multi::delete(marker, None), multi::delete(ready, None)];
    match retrying(client, || client.multi(ops()).map(|r| r.map(|_| ()))).await {
        // Removed already (or another round's): not ours to remove.
        Ok(()) | Err(Error::MultiFailed { .. }) => Ok(()),
        Err(err) => Err(err),
    }
}

/// The member nodes among `children`, in arrival (sequence) order.
fn members_in_order(children: Vec<String>) -> Vec<String> {
    let mut members: Vec<(u64, String)> = children
        .into_iter()
        .filter(|name| name.contains(MEMBER_NAME))
        .filter_map(|name| path::parse_sequence(&name).map(|seq| (seq, name)))
        .collect();
    members.sort_unstable();
    members.into_iter().map(|(_, name)| name).collect()
}

/// The hex digits of an attempt prefix (`_c_<hex>-`).
fn round_hex(prefix: &str) -> &str {
    prefix.trim_start_matches("_c_").trim_end_matches('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_data_round_trips() {
        // The round's identity first, then each released member.
        let round = Round {
            id: format!("{ROUND_NAME}{}", round_hex(&unique_prefix())),
            members: vec![
                "_c_ab-member-0000000001".into(),
                "_c_cd-member-0000000002".into(),
            ],
        };
        assert_eq!(Round::decode(&round.encode()), Some(round.clone()));
        assert!(arbor_protocol::path::validate(&format!("/b/ready/{}", round.id)).is_ok());
        assert_eq!(Round::decode(b"something else"), None);
    }

    #[test]
    fn members_sort_by_sequence_and_skip_strangers() {
        let names = vec![
            "_c_ff-member-0000000010".to_owned(),
            "ready".to_owned(),
            "_c_aa-member-0000000002".to_owned(),
        ];
        assert_eq!(
            members_in_order(names),
            vec!["_c_aa-member-0000000002", "_c_ff-member-0000000010"]
        );
    }

    #[test]
    fn the_largest_ready_fits_a_frame() {
        // MEMBERS_MAX names of the longest kind stay far below the 1 MiB limit.
        let round = Round {
            id: format!("{ROUND_NAME}{}", "0".repeat(32)),
            members: vec![format!("_c_{}-member-0000000000", "0".repeat(32)); MEMBERS_MAX],
        };
        assert!(round.encode().len() < 128 * 1024);
    }
}
