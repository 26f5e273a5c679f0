//! An `arbord` running as an ensemble member: its writes go through the
//! replicated log, it knows who leads, it keeps its clients' sessions alive
//! at the leader, and it answers `sync`.
//!
//! The write path of a member ([`run_replicator`]) takes proposals in the
//! order its connections made them. On the leader each goes straight into
//! the log; on a follower it is forwarded to the leader over one pipelined
//! peer connection, so a session's writes keep their order. Either way the
//! member answers only after its *own* apply of the entry, so the client
//! has seen the change's watch events first and its next read (served
//! locally) sees its write. A write whose fate is unknown (the leader
//! changed under it, or did not answer within [`FORWARD_ANSWER_TIMEOUT`])
//! is answered `OutcomeUnknown`, which clients report as a connection loss
//! (ZooKeeper's `ConnectionLoss` on its port); the connection itself, and
//! the pings and writes behind that write, go on. The answer waits until
//! the member has applied all the current leader holds, so a read that
//! looks for the write finds it if it ever takes effect (see
//! `net::connection::responder`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::{ClusterStatus, ErrorCode, MemberStatus};
use futures_util::future::BoxFuture;
use openraft::Raft;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, info};

use super::contact::{touch_interval_ms, Contact, Role, CONTACT_STALE_MS};
use super::peer::{ForwardRefused, PeerClient, PeerError, PeerReply, PeerRequest};
use super::peer_server::{change_member, read_index, Forwarded};
use super::peer_tls::PeerTls;
use super::records::{MemberAddr, MemberId};
use super::types::{Command, Outcome, TypeConfig, Write};
use crate::clock::Clock;
use crate::context::{Ensemble, Standing};
use crate::pipeline::commit::{Proposal, WriteResult};

/// How long `sync` or a follower's write may wait for the local apply of
/// what the leader committed.
pub const APPLY_WAIT_MAX: Duration = Duration::from_secs(10);
/// How long a write waits for an election to end before it is refused
/// with `NotLeader`: a few election timeouts.
const LEADER_WAIT_MAX: Duration = Duration::from_secs(3);
/// Times a write is sent to a leader that turned out unreachable.
const FORWARD_ATTEMPTS: usize = 3;
/// Entries the leader has proposed and not yet applied. openraft 0.9 syncs
/// the leader's log entry by entry, so entries in flight only queue up
/// there; one at a time, everything that arrives while it commits goes into
/// the next, and a sync carries more writes. Measured with 64 writes in
/// flight over 9 connections (release, three members and the load on two
/// cores): unbounded 12.5 k creates/s, 3 in flight 14 k/s, 2 in flight
/// 16.5 k/s, 1 in flight 19.5 k/s. Again at 000595a, each ensemble warmed
/// three times over: 2 in flight 25.7-28.0 k sets/s and 24.6-25.5 k
/// creates/s, 1 in flight 28.0-29.2 k and 25.4-26.6 k.
const ENTRIES_IN_FLIGHT_MAX: usize = 1;
/// Proposals taken from the queue at once.
const REPLICATE_BATCH_MAX: usize = 1024;
/// Most bytes of writes in one log entry (as
/// [`crate::txn::Txn::encoded_bytes_bound`]
/// counts them): a default client frame, so an append of
/// [`super::peer::RAFT_PAYLOAD_ENTRIES_MAX`] entries stays within a peer
/// frame.
const ENTRY_BYTES_MAX: usize = 1024 * 1024;
const NO_LEADER: u64 = u64::MAX;

/// Entries a follower may have received and not yet applied and still be
/// ready: more means its reads lag the leader's writes by more than a
/// moment.
const READY_APPLY_LAG_MAX: u64 = 1000;

/// This member, as the rest of the server sees it.
pub struct Member {
    id: MemberId,
    raft: Raft<TypeConfig>,
    /// Connections for forwarded writes, read indexes, touches and
    /// membership changes (raft's own messages have theirs, from the network
    /// factory); opened on first use, for any member of the membership in
    /// force, so members added later are reachable too.
    peers: parking_lot::Mutex<BTreeMap<MemberId, PeerClient>>,
    /// The leader this member knows of (`NO_LEADER`: none).
    leader: AtomicU64,
    /// Peer TLS, for connections opened later.
    tls: Option<Arc<PeerTls>>,
    /// Entries this member may have proposed and not yet seen committed
    /// while it leads ([`ENTRIES_IN_FLIGHT_MAX`]).
    entry_slots: Arc<Semaphore>,
    /// Its latest proofs of belonging to the working majority.
    pub(super) contact: Arc<Contact>,
    pub(super) clock: Clock,
    /// How often a follower touches its clients' sessions at the leader.
    pub(super) touch_interval_ms: u64,
}

impl Member {
    pub fn new(
        id: MemberId,
        raft: Raft<TypeConfig>,
        members: &BTreeMap<MemberId, MemberAddr>,
        tls: Option<Arc<PeerTls>>,
        contact: Arc<Contact>,
        clock: Clock,
        tick_ms: u32,
    ) -> Self {
        let peers = members
            .iter()
            .filter(|(other, _)| **other != id)
            .map(|(other, addr)| {
                let client = PeerClient::new(*other, addr.peer.clone(), tls.clone());
                (*other, client)
            })
            .collect();
        Self {
            id,
            raft,
            tls,
            peers: parking_lot::Mutex::new(peers),
            leader: AtomicU64::new(NO_LEADER),
            entry_slots: Arc::new(Semaphore::new(ENTRIES_IN_FLIGHT_MAX)),
            contact,
            clock,
            touch_interval_ms: touch_interval_ms(tick_ms),
        }
    }

    pub fn id(&self) -> MemberId {
        self.id
    }

    pub(super) fn raft(&self) -> &Raft<TypeConfig> {
        &self.raft
    }

    /// This member's place in the ensemble, as raft sees it now, and the
    /// term.
    pub(super) fn role(&self) -> (Role, u64) {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let role = match metrics.current_leader {
            Some(leader) if leader == self.id => Role::Leader,
            Some(_) => Role::Follower,
            None => Role::Leaderless,
        };
        (role, metrics.current_term)
    }

    /// Records who leads, as this member now knows; who it knew before.
    pub(super) fn set_leader(&self, leader: Option<MemberId>) -> Option<MemberId> {
        match self
            .leader
            .swap(leader.unwrap_or(NO_LEADER), Ordering::AcqRel)
        {
            NO_LEADER => None,
            previous => Some(previous),
        }
    }

    /// The connection to member `id`, opened if needed from its address in
    /// the membership in force.
    pub(super) fn peer(&self, id: MemberId) -> Option<PeerClient> {
        let mut peers = self.peers.lock();
        if let Some(peer) = peers.get(&id) {
            return Some(peer.clone());
        }
        let addr = self
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&id)?
            .peer
            .clone();
        let peer = PeerClient::new(id, addr, self.tls.clone());
        peers.insert(id, peer.clone());
        Some(peer)
    }

    pub fn leader(&self) -> Option<MemberId> {
        match self.leader.load(Ordering::Acquire) {
            NO_LEADER => None,
            leader => Some(leader),
        }
    }

    /// The leader, waiting for an election in progress to end (a write
    /// cannot go anywhere before; the queue behind it waits too, which
    /// keeps a session's writes in order).
    async fn leader_or_wait(&self) -> Option<MemberId> {
        // raft's own view, not `self.leader` (which follows it a moment
        // later): a write retried after an unreachable leader must see the
        // change that ended the wait.
        if let Some(leader) = self.raft.metrics().borrow().current_leader {
            return Some(leader);
        }
        self.raft
            .wait(Some(LEADER_WAIT_MAX))
            .metrics(|m| m.current_leader.is_some(), "a leader")
            .await
            .ok()
            .and_then(|m| m.current_leader)
    }

    /// Waits (a while) until this member no longer takes `leader` for the
    /// leader.
    async fn wait_for_another_leader(&self, leader: MemberId) {
        let _ = self
            .raft
            .wait(Some(LEADER_WAIT_MAX))
            .metrics(|m| m.current_leader != Some(leader), "another leader")
            .await;
    }

    /// Waits until the local state has applied `index`.
    async fn applied(raft: &Raft<TypeConfig>, index: u64) -> Result<(), ErrorCode> {
        raft.wait(Some(APPLY_WAIT_MAX))
            .applied_index_at_least(Some(index), "apply")
            .await
            .map(|_| ())
            .map_err(|_| ErrorCode::Unavailable)
    }
}

impl Ensemble for Member {
    fn is_leader(&self) -> bool {
        self.leader() == Some(self.id)
    }

    fn leading_term(&self) -> Option<u64> {
        match self.role() {
            (Role::Leader, term) if self.vouches() => Some(term),
            _ => None,
        }
    }

    fn standing(&self) -> Standing {
        let (role, _) = self.role();
        let now_ms = self.clock.monotonic_ms();
        match self.contact.vouches(role, now_ms, self.touch_interval_ms) {
            true => Standing::Serving,
            false if self.contact.ever_vouched() => Standing::CutOff,
            false => Standing::Joining,
        }
    }

    fn change_member(
        &self,
        id: MemberId,
        addrs: Option<(String, String)>,
    ) -> BoxFuture<'static, Result<(), ErrorCode>> {
        let raft = self.raft.clone();
        let leader = self.leader();
        let forwarded = match leader {
            Some(leader) if leader != self.id => self.peer(leader).map(|peer| {
                peer.send(PeerRequest::ChangeMember {
                    id,
                    addrs: addrs.clone(),
                })
            }),
            _ => None,
        };
        let here = leader == Some(self.id);
        // Made elsewhere: answered once applied here too, so the status
        // returned shows it; except on a member being removed, which is
        // sent no more of the log.
        let leader_peer = leader
            .filter(|_| !here && id != self.id)
            .and_then(|leader| self.peer(leader));
        Box::pin(async move {
            let result = if here {
                change_member(&raft, id, addrs).await
            } else {
                match forwarded {
                    Some(Ok(answer)) => match answer.await {
                        Ok(PeerReply::MemberChanged(result)) => result,
                        _ => Err(ForwardRefused::Unknown("no answer from the leader".into())),
                    },
                    _ => Err(ForwardRefused::NotLeader { leader }),
                }
            };
            if let (Ok(()), Some(peer)) = (&result, leader_peer) {
                // A read index taken now is at or past the change.
                let index = match peer.call(PeerRequest::ReadIndex).await {
                    Ok(PeerReply::ReadIndex(Ok(index))) => index,
                    _ => return Err(ErrorCode::Unavailable),
                };
                Member::applied(&raft, index).await?;
            }
            result.map_err(|refused| match refused {
                ForwardRefused::NotLeader { .. } => ErrorCode::NotLeader,
                ForwardRefused::Rejected(reason) => {
                    info!(member = id, %reason, "membership change refused");
                    ErrorCode::BadRequest
                }
                ForwardRefused::Unknown(_) => ErrorCode::Unavailable,
            })
        })
    }

    fn status(&self) -> ClusterStatus {
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let voters: Vec<MemberId> = membership.voter_ids().collect();
        let matched = metrics.replication.as_ref();
        let members = membership
            .nodes()
            .map(|(id, addr)| MemberStatus {
                id: *id,
                client_addr: addr.client.clone(),
                peer_addr: addr.peer.clone(),
                voter: voters.contains(id),
                matched_index: match matched {
                    Some(_) if *id == self.id => metrics.last_log_index,
                    Some(replication) => replication
                        .get(id)
                        .and_then(|log_id| log_id.map(|log_id| log_id.index)),
                    None => None,
                },
            })
            .collect();
        ClusterStatus {
            member_id: self.id,
            leader: metrics.current_leader,
            term: metrics.current_term,
            last_log_index: metrics.last_log_index,
            applied_index: metrics.last_applied.map(|log_id| log_id.index),
            members,
        }
    }

    fn readiness(&self) -> Result<(), String> {
        let metrics = self.raft.metrics().borrow().clone();
        match metrics.current_leader {
            None => Err(format!(
                "no leader: member {} is in an election (term {})",
                self.id, metrics.current_term
            )),
            Some(leader) if leader == self.id => match metrics.millis_since_quorum_ack {
                // Past this, it stops serving its clients too.
                Some(ms) if ms <= CONTACT_STALE_MS => Ok(()),
                Some(ms) => Err(format!(
                    "member {} leads but no quorum has answered it for {ms} ms",
                    self.id
                )),
                None => Err(format!(
                    "member {} leads but no quorum has answered it yet",
                    self.id
                )),
            },
            Some(leader) => {
                let received = metrics.last_log_index.unwrap_or(0);
                let applied = metrics.last_applied.map_or(0, |log_id| log_id.index);
                let behind = received.saturating_sub(applied);
                if behind > READY_APPLY_LAG_MAX {
                    return Err(format!(
                        "member {} follows {leader} but has {behind} entries to apply",
                        self.id
                    ));
                }
                Ok(())
            }
        }
    }

    fn sync(&self) -> BoxFuture<'static, Result<(), ErrorCode>> {
        let raft = self.raft.clone();
        let leader = self.leader();
        let asked = match leader {
            Some(leader) if leader == self.id => None,
            Some(leader) => match self
                .peer(leader)
                .map(|peer| peer.send(PeerRequest::ReadIndex))
            {
                Some(Ok(answer)) => Some((leader, answer)),
                _ => return Box::pin(async { Err(ErrorCode::Unavailable) }),
            },
            None => return Box::pin(async { Err(ErrorCode::Unavailable) }),
        };
        Box::pin(async move {
            let index = match asked {
                None => read_index(&raft).await,
                // A leader that changed or went silent gives no index: the
                // sync fails (it changed nothing) rather than hold up the
                // replies behind it.
                Some((leader, answer)) => {
                    let deadline = tokio::time::Instant::now() + FORWARD_ANSWER_TIMEOUT;
                    match answered_in_time(&raft, leader, deadline, answer).await {
                        Ok(Ok(PeerReply::ReadIndex(index))) => index,
                        _ => Err(ForwardRefused::Unknown("no answer".into())),
                    }
                }
            }
            .map_err(|_| ErrorCode::Unavailable)?;
            Member::applied(&raft, index).await
        })
    }
}

/// Where the results of one entry's writes go, in the entry's order.
enum Part {
    /// A write of this member's own clients; `None`: nobody waits on it.
    Local(Option<oneshot::Sender<WriteResult>>),
    /// The next `count` writes came forwarded from a follower.
    Forwarded {
        reply: oneshot::Sender<Result<(u64, Outcome), ForwardRefused>>,
        count: usize,
    },
}

/// The member's write path; see the module docs. Ends when the committer's
/// queue closes. Everything waiting, its own proposals and the writes its
/// followers forwarded, goes into as few entries as `ENTRY_BYTES_MAX`
/// allows.
pub async fn run_replicator(
    mut proposals: mpsc::Receiver<Proposal>,
    mut forwards: mpsc::Receiver<Forwarded>,
    member: Arc<Member>,
) {
    let mut batch = Vec::with_capacity(REPLICATE_BATCH_MAX);
    let mut forwarded = Vec::new();
    loop {
        tokio::select! {
            taken = proposals.recv_many(&mut batch, REPLICATE_BATCH_MAX) => {
                if taken == 0 {
                    return;
                }
            }
            Some(first) = forwards.recv() => forwarded.push(first),
        }
        // On the leader, wait while ENTRIES_IN_FLIGHT_MAX entries are not
        // yet committed: what arrives meanwhile joins the next entry, which
        // costs one sync however many writes it holds.
        let mut slot = match member.leader() == Some(member.id) {
            true => member.entry_slots.clone().acquire_owned().await.ok(),
            false => None,
        };
        while forwarded.len() < REPLICATE_BATCH_MAX {
            match forwards.try_recv() {
                Ok(next) => forwarded.push(next),
                Err(_) => break,
            }
        }
        while batch.len() < REPLICATE_BATCH_MAX {
            match proposals.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let mut units = forwarded
            .drain(..)
            .map(|f| {
                let count = f.writes.len();
                let part = Part::Forwarded {
                    reply: f.reply,
                    count,
                };
                let bytes = f.writes.iter().map(|w| w.txn.encoded_bytes_bound()).sum();
                (f.writes, part, bytes)
            })
            .chain(batch.drain(..).map(|proposal| {
                let bytes = proposal.txn.encoded_bytes_bound();
                let write = Write {
                    time_ms: proposal.time_ms,
                    txn: proposal.txn,
                    proposer: Some(member.id),
                };
                (vec![write], Part::Local(proposal.reply), bytes)
            }))
            .peekable();
        while units.peek().is_some() {
            // One entry: everything waiting up to ENTRY_BYTES_MAX (a unit
            // larger than that goes alone; a forwarded batch stays whole).
            let (mut entry, mut bytes) = (Vec::new(), 0);
            while let Some((writes, part, size)) =
                units.next_if(|(_, _, size)| entry.is_empty() || bytes + size <= ENTRY_BYTES_MAX)
            {
                bytes += size;
                entry.push((writes, part));
            }
            replicate(&member, entry, slot.take()).await;
        }
    }
}

/// Writes and where their results go.
type Unit = (Vec<Write>, Part);

/// How long a follower waits for the leader to take and answer a forwarded
/// write. Past it, or once another member leads, the write's outcome is
/// unknown to its client (its connection closes), so a leader that is cut
/// off or paused never holds up the connections of its followers' clients
/// (replies go out in request order) beyond this; an answer takes
/// milliseconds otherwise.
const FORWARD_ANSWER_TIMEOUT: Duration = Duration::from_millis(1000);

/// `answer`, unless `deadline` passes or a member other than `leader`
/// leads first; then why not.
async fn answered_in_time<T>(
    raft: &Raft<TypeConfig>,
    leader: MemberId,
    deadline: tokio::time::Instant,
    answer: impl std::future::Future<Output = T>,
) -> Result<T, &'static str> {
    let mut metrics = raft.metrics();
    tokio::select! {
        answer = answer => Ok(answer),
        () = tokio::time::sleep_until(deadline) => Err("the leader did not answer in time"),
        _ = metrics.wait_for(|now| now.current_leader != Some(leader)) => Err("the leader changed"),
    }
}

/// `units` less the leader's own decisions: a member that does not lead
/// may not make them, and a leader that lost its place must not hand them
/// to the next (its term would refuse them at apply anyway).
fn without_decisions(units: Vec<Unit>) -> Vec<Unit> {
    units
        .into_iter()
        .filter(|(writes, _)| {
            let decided = writes
                .iter()
                .any(|write| matches!(write.txn, crate::txn::Txn::Decided { .. }));
            if decided {
                debug!("a decision of a former leader is dropped, not forwarded");
            }
            !decided
        })
        .collect()
}

/// Hands each part its results: `Ok((index, results))` with one result per
/// write; `Err(refused)` when the entry was not written (`NotLeader`) or its
/// outcome is unknown. A local write whose outcome is unknown is answered
/// `OutcomeUnknown` (a connection loss to the client), and its connection
/// goes on: if the write did take effect, it did so before any later write
/// of the session, which the next leader orders after it, and before the
/// answer (which waits until the member knows).
fn distribute(parts: Vec<Part>, outcome: Result<(u64, Vec<WriteResult>), ForwardRefused>) {
    match outcome {
        Ok((index, results)) => {
            let mut results = results.into_iter();
            for part in parts {
                match part {
                    Part::Local(reply) => {
                        if let (Some(reply), Some(result)) = (reply, results.next()) {
                            let _ = reply.send(result);
                        }
                    }
                    Part::Forwarded { reply, count } => {
                        let mine: Vec<WriteResult> = results.by_ref().take(count).collect();
                        let _ = reply.send(Ok((index, Outcome::Writes(mine))));
                    }
                }
            }
        }
        Err(refused) => {
            let local = match &refused {
                ForwardRefused::NotLeader { .. } => ErrorCode::NotLeader,
                ForwardRefused::Rejected(_) => ErrorCode::Unavailable,
                ForwardRefused::Unknown(_) => ErrorCode::OutcomeUnknown,
            };
            for part in parts {
                match part {
                    Part::Local(reply) => {
                        if let Some(reply) = reply {
                            let _ = reply.send(Err(local));
                        }
                    }
                    Part::Forwarded { reply, .. } => {
                        let _ = reply.send(Err(refused.clone()));
                    }
                }
            }
        }
    }
}

fn split(entry: Vec<Unit>) -> (Vec<Write>, Vec<Part>) {
    let (writes, parts): (Vec<Vec<Write>>, Vec<Part>) = entry.into_iter().unzip();
    (writes.concat(), parts)
}

/// Writes one entry through the leader: as its `client_write` if this
/// member leads, else forwarded to it (what was forwarded here is refused:
/// a follower does not forward it further).
async fn replicate(member: &Arc<Member>, entry: Vec<Unit>, slot: Option<OwnedSemaphorePermit>) {
    let raft = member.raft.clone();
    let not_leader = |leader| ForwardRefused::NotLeader { leader };
    let mut entry = entry;
    // A forward that never left (the leader is unreachable) is sent again
    // once another member leads; this loop is the only sender, so the
    // order of a session's writes holds.
    for _ in 0..FORWARD_ATTEMPTS {
        let Some(leader) = member.leader_or_wait().await else {
            // Not written: the client may try again (or another member).
            return distribute(split(entry).1, Err(not_leader(None)));
        };
        if leader == member.id {
            let slot = match slot {
                Some(slot) => Some(slot),
                None => member.entry_slots.clone().acquire_owned().await.ok(),
            };
            let (writes, parts) = split(entry);
            let written = match raft.client_write_ff(Command { writes }).await {
                Ok(written) => written,
                Err(fatal) => {
                    return distribute(parts, Err(ForwardRefused::Unknown(fatal.to_string())))
                }
            };
            tokio::spawn(async move {
                let outcome = match written.await {
                    Ok(Ok(response)) => match response.data {
                        Outcome::Writes(results) => Ok((response.log_id.index, results)),
                        Outcome::Nothing => Err(ForwardRefused::Unknown("no results".into())),
                    },
                    // This member stopped leading under it: it may yet be
                    // committed by the next leader (ahead of anything the
                    // session writes after), or not.
                    Ok(Err(err)) => Err(ForwardRefused::Unknown(err.to_string())),
                    Err(err) => Err(ForwardRefused::Unknown(err.to_string())),
                };
                drop(slot);
                distribute(parts, outcome);
            });
            return;
        }
        let (local, stale): (Vec<Unit>, Vec<Unit>) = entry
            .into_iter()
            .partition(|(_, part)| matches!(part, Part::Local(_)));
        distribute(split(stale).1, Err(not_leader(Some(leader))));
        let local = without_decisions(local);
        if local.is_empty() {
            return;
        }
        let Some(peer) = member.peer(leader) else {
            return distribute(split(local).1, Err(not_leader(None)));
        };
        let command = Command {
            writes: local
                .iter()
                .flat_map(|(writes, _)| writes.iter().cloned())
                .collect(),
        };
        let Ok((sent, forwarded)) = peer.send_tracked(PeerRequest::Forward(command)) else {
            return distribute(split(local).1, Err(not_leader(None)));
        };
        let deadline = tokio::time::Instant::now() + FORWARD_ANSWER_TIMEOUT;
        match answered_in_time(&raft, leader, deadline, sent).await {
            Ok(Ok(())) => {}
            Ok(Err(PeerError::Unreachable { .. })) => {
                member.wait_for_another_leader(leader).await;
                entry = local;
                continue;
            }
            Ok(Err(err)) => {
                return distribute(
                    split(local).1,
                    Err(ForwardRefused::Unknown(err.to_string())),
                )
            }
            Err(why) => {
                peer.reset();
                return distribute(split(local).1, Err(ForwardRefused::Unknown(why.into())));
            }
        }
        let parts = split(local).1;
        tokio::spawn(async move {
            let answered = answered_in_time(&raft, leader, deadline, forwarded).await;
            if answered.is_err() {
                // Whatever still sits in the link to a silent or former
                // leader must never arrive late.
                peer.reset();
            }
            let outcome = match answered {
                Ok(Ok(PeerReply::Forwarded(Ok((index, Outcome::Writes(results)))))) => {
                    match Member::applied(&raft, index).await {
                        Ok(()) => Ok((index, results)),
                        Err(_) => Err(ForwardRefused::Unknown("not applied here".into())),
                    }
                }
                Err(why) => Err(ForwardRefused::Unknown(why.into())),
                // Refused by a member that no longer leads, or lost: unknown
                // here (writes behind it may have gone through).
                Ok(_) => Err(ForwardRefused::Unknown("the forward failed".into())),
            };
            distribute(parts, outcome);
        });
        return;
    }
    distribute(split(entry).1, Err(not_leader(None)));
}
