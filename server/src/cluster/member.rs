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
//! changed under it) is not answered: its connection is closed, and the
//! client sees a connection loss, as it would with ZooKeeper.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::{ClusterStatus, ErrorCode, MemberStatus};
use futures_util::future::BoxFuture;
use openraft::Raft;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::peer::{ForwardRefused, PeerClient, PeerError, PeerReply, PeerRequest};
use super::peer_server::{change_member, read_index};
use super::records::{MemberAddr, MemberId};
use super::types::{Command, Origin, Outcome, TypeConfig};
use crate::context::{Ensemble, Shared};
use crate::pipeline::commit::{Proposal, WriteResult};

/// How long `sync` or a follower's write may wait for the local apply of
/// what the leader committed.
pub const APPLY_WAIT_MAX: Duration = Duration::from_secs(10);
/// How long a write waits for an election to end before it is refused
/// with `NotLeader`: a few election timeouts.
const LEADER_WAIT_MAX: Duration = Duration::from_secs(3);
/// Times a write is sent to a leader that turned out unreachable.
const FORWARD_ATTEMPTS: usize = 3;
/// Proposals taken from the queue at once.
const REPLICATE_BATCH_MAX: usize = 1024;
const NO_LEADER: u64 = u64::MAX;

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
}

impl Member {
    pub fn new(
        id: MemberId,
        raft: Raft<TypeConfig>,
        members: &BTreeMap<MemberId, MemberAddr>,
    ) -> Self {
        let peers = members
            .iter()
            .filter(|(other, _)| **other != id)
            .map(|(other, addr)| (*other, PeerClient::new(addr.peer.clone())))
            .collect();
        Self {
            id,
            raft,
            peers: parking_lot::Mutex::new(peers),
            leader: AtomicU64::new(NO_LEADER),
        }
    }

    /// The connection to member `id`, opened if needed from its address in
    /// the membership in force.
    fn peer(&self, id: MemberId) -> Option<PeerClient> {
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
        let peer = PeerClient::new(addr);
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

    fn sync(&self) -> BoxFuture<'static, Result<(), ErrorCode>> {
        let raft = self.raft.clone();
        let leader = self.leader();
        let asked = match leader {
            Some(leader) if leader == self.id => None,
            Some(leader) => match self
                .peer(leader)
                .map(|peer| peer.send(PeerRequest::ReadIndex))
            {
                Some(Ok(answer)) => Some(answer),
                _ => return Box::pin(async { Err(ErrorCode::Unavailable) }),
            },
            None => return Box::pin(async { Err(ErrorCode::Unavailable) }),
        };
        Box::pin(async move {
            let index = match asked {
                None => read_index(&raft).await,
                Some(answer) => match answer.await {
                    Ok(PeerReply::ReadIndex(index)) => index,
                    _ => Err(ForwardRefused::Unknown("no answer".into())),
                },
            }
            .map_err(|_| ErrorCode::Unavailable)?;
            Member::applied(&raft, index).await
        })
    }
}

/// The member's write path; see the module docs. Ends when the queue closes.
pub async fn run_replicator(mut proposals: mpsc::Receiver<Proposal>, member: Arc<Member>) {
    let mut batch = Vec::with_capacity(REPLICATE_BATCH_MAX);
    while proposals.recv_many(&mut batch, REPLICATE_BATCH_MAX).await > 0 {
        for proposal in batch.drain(..) {
            replicate(&member, proposal).await;
        }
    }
}

async fn replicate(member: &Arc<Member>, proposal: Proposal) {
    let command = Command {
        time_ms: proposal.time_ms,
        txn: proposal.txn,
        // The proposer: a session's writes count only from the member that
        // owns it (see `Txn::MoveSession`).
        origin: Some(Origin {
            member: member.id,
            request: 0,
        }),
    };
    let reply = proposal.reply;
    let answer = |result: Option<WriteResult>| {
        if let (Some(reply), Some(result)) = (reply, result) {
            let _ = reply.send(result);
        }
        // No result: the reply is dropped, and the connection closes.
    };
    let raft = member.raft.clone();
    // A forward that never left (the leader is unreachable) is sent again
    // once another member leads; this loop is the only sender, so the
    // order of a session's writes holds.
    for _ in 0..FORWARD_ATTEMPTS {
        let Some(leader) = member.leader_or_wait().await else {
            // Not written: the client may try again (or another member).
            return answer(Some(Err(ErrorCode::NotLeader)));
        };
        if leader == member.id {
            let Ok(written) = raft.client_write_ff(command).await else {
                return answer(Some(Err(ErrorCode::Unavailable)));
            };
            tokio::spawn(async move {
                let result = match written.await {
                    Ok(Ok(response)) => outcome(response.data),
                    // Not written, but the writes queued behind it may be,
                    // through the new leader: unanswered, so the connection
                    // closes and the client sees the whole run as unknown
                    // rather than a gap in its order.
                    _ => None,
                };
                answer(result);
            });
            return;
        }
        let Some(peer) = member.peer(leader) else {
            return answer(Some(Err(ErrorCode::NotLeader)));
        };
        let Ok((sent, forwarded)) = peer.send_tracked(PeerRequest::Forward(command.clone())) else {
            return answer(Some(Err(ErrorCode::NotLeader)));
        };
        match sent.await {
            Ok(()) => {}
            Err(PeerError::Unreachable { .. }) => {
                member.wait_for_another_leader(leader).await;
                continue;
            }
            Err(_) => return answer(None),
        }
        tokio::spawn(async move {
            let result = match forwarded.await {
                Ok(PeerReply::Forwarded(Ok((index, data)))) => {
                    match Member::applied(&raft, index).await {
                        Ok(()) => outcome(data),
                        Err(_) => None,
                    }
                }
                _ => None,
            };
            answer(result);
        });
        return;
    }
    answer(Some(Err(ErrorCode::NotLeader)));
}

fn outcome(data: Outcome) -> Option<WriteResult> {
    match data {
        Outcome::Write(result) => Some(result),
        Outcome::Nothing => None,
    }
}

/// Follows who leads. On any change of this member's role every session gets
/// a full timeout again: a new leader must not expire a session whose
/// touches went to the old one.
pub async fn watch_leadership(member: Arc<Member>, shared: Arc<Shared>, stop: CancellationToken) {
    let mut metrics = member.raft.metrics();
    let mut was_leader = false;
    loop {
        let (leader, term) = {
            let now = metrics.borrow_and_update();
            (now.current_leader, now.current_term)
        };
        let previous = member
            .leader
            .swap(leader.unwrap_or(NO_LEADER), Ordering::AcqRel);
        if previous != leader.unwrap_or(NO_LEADER) {
            info!(member = member.id, leader = ?leader, term, "leader changed");
        }
        let is_leader = leader == Some(member.id);
        if is_leader != was_leader {
            shared.tracker.lock().renew_all(shared.clock.monotonic_ms());
            was_leader = is_leader;
        }
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            () = stop.cancelled() => return,
        }
    }
}

/// Once per tick, a follower tells the leader which of its clients'
/// sessions are alive (ZooKeeper's batched session touches).
pub async fn send_touches(member: Arc<Member>, shared: Arc<Shared>, stop: CancellationToken) {
    let tick = Duration::from_millis(u64::from(shared.config.tick_ms));
    loop {
        tokio::select! {
            () = tokio::time::sleep(tick / 2) => {}
            () = stop.cancelled() => return,
        }
        let Some(leader) = member.leader().filter(|leader| *leader != member.id) else {
            continue;
        };
        let alive = {
            let connections = shared.connections.lock();
            let tracker = shared.tracker.lock();
            tracker.alive_among(connections.sessions(), shared.clock.monotonic_ms())
        };
        if alive.is_empty() {
            continue;
        }
        if let Some(peer) = member.peer(leader) {
            debug!(
                leader,
                sessions = alive.len(),
                "touching sessions at the leader"
            );
            // Not awaited: the next tick sends them again anyway.
            drop(peer.send(PeerRequest::Touch(alive)));
        }
    }
}
