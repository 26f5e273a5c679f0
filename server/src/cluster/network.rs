//! openraft's network over the peer protocol ([`super::peer`]): one
//! pipelined connection per target member.

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};

use std::sync::Arc;

use super::peer::{PeerClient, PeerError, PeerReply, PeerRequest};
use super::peer_tls::PeerTls;
use super::records::{MemberAddr, MemberId};
use super::types::TypeConfig;

type RpcError<E = openraft::error::Infallible> =
    RPCError<MemberId, MemberAddr, RaftError<MemberId, E>>;

/// Makes connections to members by their peer address (over peer TLS if
/// `tls` is set).
#[derive(Clone, Default)]
pub struct PeerNetwork {
    pub tls: Option<Arc<PeerTls>>,
}

pub struct PeerConnection {
    target: MemberId,
    client: PeerClient,
}

impl RaftNetworkFactory<TypeConfig> for PeerNetwork {
    type Network = PeerConnection;

    async fn new_client(&mut self, target: MemberId, node: &MemberAddr) -> PeerConnection {
        PeerConnection {
            target,
            client: PeerClient::new(target, node.peer.clone(), self.tls.clone()),
        }
    }
}

fn transport<E: std::error::Error>(err: PeerError) -> RPCError<MemberId, MemberAddr, E> {
    match err {
        PeerError::Unreachable { .. } => RPCError::Unreachable(Unreachable::new(&err)),
        PeerError::Connection { .. } | PeerError::Busy { .. } => {
            RPCError::Network(NetworkError::new(&err))
        }
    }
}

fn unexpected<E: std::error::Error>(reply: &PeerReply) -> RPCError<MemberId, MemberAddr, E> {
    let err = std::io::Error::other(format!("unexpected reply {reply:?}"));
    RPCError::Network(NetworkError::new(&err))
}

impl RaftNetwork<TypeConfig> for PeerConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<MemberId>, RpcError> {
        match self
            .client
            .call(PeerRequest::Append(rpc))
            .await
            .map_err(transport)?
        {
            PeerReply::Append(reply) => {
                reply.map_err(|err| RPCError::RemoteError(RemoteError::new(self.target, err)))
            }
            other => Err(unexpected(&other)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<MemberId>, RpcError<InstallSnapshotError>> {
        match self
            .client
            .call(PeerRequest::Snapshot(rpc))
            .await
            .map_err(transport)?
        {
            PeerReply::Snapshot(reply) => {
                reply.map_err(|err| RPCError::RemoteError(RemoteError::new(self.target, err)))
            }
            other => Err(unexpected(&other)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<MemberId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<MemberId>, RpcError> {
        match self
            .client
            .call(PeerRequest::Vote(rpc))
            .await
            .map_err(transport)?
        {
            PeerReply::Vote(reply) => {
                reply.map_err(|err| RPCError::RemoteError(RemoteError::new(self.target, err)))
            }
            other => Err(unexpected(&other)),
        }
    }
}
