//! Serves the peer protocol ([`super::peer`]): raft's messages go to the
//! local raft; forwarded writes enter the log in the order they arrive on
//! their connection; read indexes and session touches for `sync` and
//! liveness.

use std::sync::Arc;

use arbor_protocol::SessionId;
use futures_util::{SinkExt, StreamExt};
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::raft::AppendEntriesResponse;
use openraft::{ChangeMembers, Raft};
use std::collections::BTreeSet;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::campaign::{suspect_leader, vote};
use super::contact::Contact;
use super::peer::{
    codec, decode, encode, ForwardRefused, PeerReply, PeerRequest, PeerStream,
    PEER_REQUESTS_IN_FLIGHT_MAX,
};
use super::peer_tls::PeerTls;
use super::records::{MemberAddr, MemberId};
use super::types::{Outcome, TypeConfig, Write};
use crate::context::Shared;

/// Forwarded batches waiting for the replicator; a full queue holds up the
/// followers' forward connections (back-pressure).
pub const FORWARDS_QUEUED_MAX: usize = 1024;

/// Writes a follower forwarded to this member, waiting for its replicator
/// (`super::member::run_replicator`).
#[derive(Debug)]
pub struct Forwarded {
    pub writes: Vec<Write>,
    /// The index of the entry that holds them and their results, or why
    /// they were not written.
    pub reply: oneshot::Sender<Result<(u64, Outcome), ForwardRefused>>,
}

#[derive(serde::Deserialize)]
struct Frame<T> {
    id: u64,
    body: T,
}

#[derive(serde::Serialize)]
struct Answer<T> {
    id: u64,
    body: T,
}

/// Accepts peer connections until `stop`; with `tls`, only from members
/// whose certificate names them (see [`super::peer_tls`]).
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<PeerTls>>,
    raft: Raft<TypeConfig>,
    shared: Arc<Shared>,
    forwards: mpsc::Sender<Forwarded>,
    contact: Arc<Contact>,
    stop: CancellationToken,
) {
    info!(addr = ?listener.local_addr().ok(), tls = tls.is_some(), "serving peers");
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    warn!(error = %err, "peer accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        crate::net::idle_spin::watch(&stream);
        let (raft, shared, forwards, stop) =
            (raft.clone(), shared.clone(), forwards.clone(), stop.clone());
        let contact = contact.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let stream: Box<dyn PeerStream> = match tls {
                None => Box::new(stream),
                Some(tls) => {
                    let is_member = |id| is_member(&raft, &shared, id);
                    match tls.accept(stream, peer, is_member).await {
                        Some((stream, member)) => {
                            debug!(%peer, member, "member connected over TLS");
                            Box::new(stream)
                        }
                        None => return,
                    }
                }
            };
            debug!(%peer, "peer connected");
            let link = Link {
                raft,
                shared,
                forwards,
                contact,
            };
            serve_connection(stream, link, stop).await;
        });
    }
}

/// Whether `id` is a member of the ensemble as this member knows it: the
/// membership in its log, or before it has one (a new or joining member),
/// the members it was started with.
fn is_member(raft: &Raft<TypeConfig>, shared: &Shared, id: MemberId) -> bool {
    let metrics = raft.metrics();
    let metrics = metrics.borrow();
    let membership = metrics.membership_config.membership();
    if membership.nodes().next().is_some() {
        return membership.get_node(&id).is_some();
    }
    shared
        .config
        .ensemble
        .as_ref()
        .is_some_and(|ensemble| ensemble.members.contains_key(&id))
}

/// What a peer connection hands requests to.
struct Link {
    raft: Raft<TypeConfig>,
    shared: Arc<Shared>,
    forwards: mpsc::Sender<Forwarded>,
    contact: Arc<Contact>,
}

impl Link {
    /// Whether this member leads, as raft sees it now.
    fn leads(&self) -> bool {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        metrics.current_leader == Some(metrics.id)
    }

    /// Moves the deadlines of `sessions`, heard from by a follower, if
    /// this member leads (the deadlines that count are the leader's).
    fn touch(&self, sessions: impl IntoIterator<Item = SessionId>) -> bool {
        if !self.leads() {
            return false;
        }
        let now_ms = self.shared.clock.monotonic_ms();
        let mut tracker = self.shared.tracker.lock();
        for session_id in sessions {
            tracker.touch(session_id, now_ms);
        }
        true
    }
}

async fn serve_connection(stream: Box<dyn PeerStream>, link: Link, stop: CancellationToken) {
    let Link {
        raft,
        forwards,
        contact,
        ..
    } = &link;
    let (mut sink, mut source) = Framed::new(stream, codec()).split();
    // The leader whose entries came over this connection, if any.
    let mut appended_by: Option<MemberId> = None;
    let (answers, mut outbound) = mpsc::channel::<bytes::Bytes>(PEER_REQUESTS_IN_FLIGHT_MAX);
    let writer = tokio::spawn(async move {
        while let Some(bytes) = outbound.recv().await {
            if sink.send(bytes).await.is_err() {
                return;
            }
        }
    });
    loop {
        let bytes = tokio::select! {
            () = stop.cancelled() => break,
            frame = source.next() => match frame {
                Some(Ok(bytes)) => bytes,
                _ => break,
            },
        };
        let frame: Frame<PeerRequest> = match decode(&bytes) {
            Ok(frame) => frame,
            Err(reason) => {
                warn!(%reason, "undecodable peer frame; closing the connection");
                break;
            }
        };
        let id = frame.id;
        let answers = answers.clone();
        let send = move |body: PeerReply| async move {
            if let Ok(bytes) = encode(&Answer { id, body }) {
                let _ = answers.send(bytes).await;
            }
        };
        match frame.body {
            // In arrival order: this only queues the writes for the
            // replicator, which puts them in the next entry with the rest.
            PeerRequest::Forward(command) => {
                // A forwarded write is heard from its session too.
                link.touch(command.writes.iter().filter_map(|w| w.txn.session_id()));
                let (reply, written) = oneshot::channel();
                let queued = forwards
                    .send(Forwarded {
                        writes: command.writes,
                        reply,
                    })
                    .await;
                tokio::spawn(async move {
                    let outcome = match queued {
                        Ok(()) => written.await.unwrap_or_else(|_| {
                            Err(ForwardRefused::Unknown("the replicator stopped".into()))
                        }),
                        Err(_) => Err(ForwardRefused::NotLeader { leader: None }),
                    };
                    send(PeerReply::Forwarded(outcome)).await;
                });
            }
            PeerRequest::Touch(sessions) => {
                let answer = match link.touch(sessions) {
                    true => PeerReply::Touched,
                    false => PeerReply::NotLeading,
                };
                send(answer).await;
            }
            other => {
                if let PeerRequest::Append(rpc) = &other {
                    appended_by = rpc.vote.leader_id().voted_for();
                }
                let (raft, contact) = (raft.clone(), contact.clone());
                let clock = link.shared.clock.clone();
                tokio::spawn(async move {
                    let reply = match other {
                        PeerRequest::Append(rpc) => {
                            let answer = raft.append_entries(rpc).await;
                            if heard_from_leader(&answer) {
                                contact.leader_heard(clock.monotonic_ms());
                            }
                            PeerReply::Append(answer)
                        }
                        PeerRequest::Vote(rpc) => {
                            PeerReply::Vote(vote(raft, contact, clock, rpc).await)
                        }
                        PeerRequest::Snapshot(rpc) => {
                            PeerReply::Snapshot(raft.install_snapshot(rpc).await)
                        }
                        PeerRequest::ReadIndex => PeerReply::ReadIndex(read_index(&raft).await),
                        PeerRequest::ChangeMember { id, addrs } => {
                            PeerReply::MemberChanged(change_member(&raft, id, addrs).await)
                        }
                        PeerRequest::Forward(_) | PeerRequest::Touch(_) => return,
                    };
                    send(reply).await;
                });
            }
        }
    }
    drop(answers);
    let _ = writer.await;
    if let Some(leader) = appended_by.filter(|_| !stop.is_cancelled()) {
        tokio::spawn(suspect_leader(raft.clone(), contact.clone(), leader));
    }
}

/// Whether raft took an append as one from the leader it follows (any
/// answer but a higher vote: a conflict too is the leader's).
fn heard_from_leader(
    answer: &Result<AppendEntriesResponse<MemberId>, RaftError<MemberId>>,
) -> bool {
    matches!(answer, Ok(response) if !matches!(response, AppendEntriesResponse::HigherVote(_)))
}

/// Adds a member (as a learner until it has caught up, then as a voter) or
/// removes one, if this member leads; each a joint change.
pub async fn change_member(
    raft: &Raft<TypeConfig>,
    id: MemberId,
    addrs: Option<(String, String)>,
) -> Result<(), ForwardRefused> {
    let refused = |err: RaftError<MemberId, ClientWriteError<MemberId, MemberAddr>>| match err {
        RaftError::APIError(ClientWriteError::ForwardToLeader(forward)) => {
            ForwardRefused::NotLeader {
                leader: forward.leader_id,
            }
        }
        RaftError::APIError(ClientWriteError::ChangeMembershipError(err)) => {
            ForwardRefused::Rejected(err.to_string())
        }
        RaftError::Fatal(fatal) => ForwardRefused::Unknown(fatal.to_string()),
    };
    let voters = BTreeSet::from([id]);
    match addrs {
        Some((client, peer)) => {
            info!(member = id, %client, %peer, "adding a member: first as a learner");
            raft.add_learner(id, MemberAddr { client, peer }, true)
                .await
                .map_err(refused)?;
            info!(member = id, "the learner caught up; making it a voter");
            raft.change_membership(ChangeMembers::AddVoterIds(voters), false)
                .await
                .map_err(refused)?;
        }
        None => {
            let known = raft
                .metrics()
                .borrow()
                .membership_config
                .membership()
                .get_node(&id)
                .is_some();
            if !known {
                return Err(ForwardRefused::Rejected(format!(
                    "member {id} is not in the ensemble"
                )));
            }
            info!(member = id, "removing a member");
            raft.change_membership(ChangeMembers::RemoveVoters(voters), false)
                .await
                .map_err(refused)?;
        }
    }
    Ok(())
}

/// The index a `sync` waits for, if this member leads (its leadership
/// confirmed by a quorum first): what it has committed, and also every
/// entry it holds, as ZooKeeper's sync waits for the leader's outstanding
/// proposals. A member that has applied this far knows the fate of every
/// write it handed the leader before asking: committed, or overwritten by
/// a later leader's log.
pub async fn read_index(raft: &Raft<TypeConfig>) -> Result<u64, ForwardRefused> {
    match raft.get_read_log_id().await {
        Ok((read, _)) => {
            let held = raft.metrics().borrow().last_log_index.unwrap_or(0);
            Ok(read.map_or(0, |id| id.index).max(held))
        }
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(forward))) => {
            Err(ForwardRefused::NotLeader {
                leader: forward.leader_id,
            })
        }
        Err(err) => Err(ForwardRefused::Unknown(err.to_string())),
    }
}
