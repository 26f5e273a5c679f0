//! Serves the peer protocol ([`super::peer`]): raft's messages go to the
//! local raft; forwarded writes enter the log in the order they arrive on
//! their connection; read indexes and session touches for `sync` and
//! liveness.

use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::{ChangeMembers, Raft};
use std::collections::BTreeSet;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::peer::{
    codec, decode, encode, ForwardRefused, PeerReply, PeerRequest, PEER_REQUESTS_IN_FLIGHT_MAX,
};
use super::records::{MemberAddr, MemberId};
use super::types::TypeConfig;
use crate::context::Shared;

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

/// Accepts peer connections until `stop`.
pub async fn serve(
    listener: TcpListener,
    raft: Raft<TypeConfig>,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    info!(addr = ?listener.local_addr().ok(), "serving peers");
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
        debug!(%peer, "peer connected");
        tokio::spawn(serve_connection(
            stream,
            raft.clone(),
            shared.clone(),
            stop.clone(),
        ));
    }
}

async fn serve_connection(
    stream: TcpStream,
    raft: Raft<TypeConfig>,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    let (mut sink, mut source) = Framed::new(stream, codec()).split();
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
            // In arrival order: this call only puts the write in the log's queue.
            PeerRequest::Forward(command) => match raft.client_write_ff(command).await {
                Ok(written) => {
                    tokio::spawn(async move {
                        let outcome = match written.await {
                            Ok(Ok(response)) => Ok((response.log_id.index, response.data)),
                            Ok(Err(ClientWriteError::ForwardToLeader(forward))) => {
                                Err(ForwardRefused::NotLeader {
                                    leader: forward.leader_id,
                                })
                            }
                            Ok(Err(err)) => Err(ForwardRefused::Unknown(err.to_string())),
                            Err(err) => Err(ForwardRefused::Unknown(err.to_string())),
                        };
                        send(PeerReply::Forwarded(outcome)).await;
                    });
                }
                Err(fatal) => {
                    send(PeerReply::Forwarded(Err(ForwardRefused::Unknown(
                        fatal.to_string(),
                    ))))
                    .await
                }
            },
            PeerRequest::Touch(sessions) => {
                let now_ms = shared.clock.monotonic_ms();
                {
                    let mut tracker = shared.tracker.lock();
                    for session_id in sessions {
                        tracker.touch(session_id, now_ms);
                    }
                }
                send(PeerReply::Touched).await;
            }
            other => {
                let raft = raft.clone();
                tokio::spawn(async move {
                    let reply = match other {
                        PeerRequest::Append(rpc) => {
                            PeerReply::Append(raft.append_entries(rpc).await)
                        }
                        PeerRequest::Vote(rpc) => PeerReply::Vote(raft.vote(rpc).await),
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

/// The index a linearizable read must wait for, if this member leads: its
/// leadership confirmed by a quorum first.
pub async fn read_index(raft: &Raft<TypeConfig>) -> Result<u64, ForwardRefused> {
    match raft.get_read_log_id().await {
        Ok((read, _)) => Ok(read.map_or(0, |id| id.index)),
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(forward))) => {
            Err(ForwardRefused::NotLeader {
                leader: forward.leader_id,
            })
        }
        Err(err) => Err(ForwardRefused::Unknown(err.to_string())),
    }
}
