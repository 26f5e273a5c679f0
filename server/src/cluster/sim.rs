//! An in-process network for ensembles in tests: members call each other's
//! raft directly, through a router that can drop, delay and partition
//! messages and pause members, seeded so that a failing run can be replayed.

// openraft's RaftNetwork fixes the error type (RPCError, 128+ bytes);
// openraft's own examples allow the same lint.
#![allow(clippy::result_large_err)]

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::Raft;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::records::{MemberAddr, MemberId};
use super::types::TypeConfig;

/// What the network does to messages.
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    /// Chance that a message is lost (either way).
    pub drop_ratio: f64,
    /// Each message is delayed up to this long.
    pub delay_max: Duration,
}

impl Faults {
    pub const NONE: Faults = Faults {
        drop_ratio: 0.0,
        delay_max: Duration::ZERO,
    };
}

/// How often a held message checks whether its ends have resumed.
const PAUSE_POLL: Duration = Duration::from_millis(5);

struct RouterState {
    members: HashMap<MemberId, Raft<TypeConfig>>,
    /// Members cut off from everyone.
    isolated: HashSet<MemberId>,
    /// Members frozen as by SIGSTOP: what they send and what is sent to
    /// them waits, and arrives late (and stale) once they resume.
    paused: HashSet<MemberId>,
    faults: Faults,
    rng: StdRng,
}

/// Delivers messages between the members of one in-process ensemble.
#[derive(Clone)]
pub struct Router {
    state: Arc<Mutex<RouterState>>,
}

type RpcError<E = openraft::error::Infallible> =
    RPCError<MemberId, MemberAddr, RaftError<MemberId, E>>;

impl Router {
    pub fn new(seed: u64, faults: Faults) -> Self {
        Self {
            state: Arc::new(Mutex::new(RouterState {
                members: HashMap::new(),
                isolated: HashSet::new(),
                paused: HashSet::new(),
                faults,
                rng: StdRng::seed_from_u64(seed),
            })),
        }
    }

    pub fn add(&self, id: MemberId, raft: Raft<TypeConfig>) {
        self.state.lock().members.insert(id, raft);
    }

    /// Takes a member off the network (it was stopped).
    pub fn remove(&self, id: MemberId) -> Option<Raft<TypeConfig>> {
        self.state.lock().members.remove(&id)
    }

    pub fn isolate(&self, id: MemberId) {
        self.state.lock().isolated.insert(id);
    }

    pub fn heal(&self) {
        self.state.lock().isolated.clear();
    }

    pub fn pause(&self, id: MemberId) {
        self.state.lock().paused.insert(id);
    }

    pub fn resume(&self, id: MemberId) {
        self.state.lock().paused.remove(&id);
    }

    /// Waits while either end of a message is paused.
    async fn hold(&self, from: MemberId, to: MemberId) {
        loop {
            {
                let state = self.state.lock();
                if !state.paused.contains(&from) && !state.paused.contains(&to) {
                    return;
                }
            }
            tokio::time::sleep(PAUSE_POLL).await;
        }
    }

    /// The target's raft, if the message gets through; the delay to apply.
    fn route<E: std::error::Error>(
        &self,
        from: MemberId,
        to: MemberId,
    ) -> Result<(Raft<TypeConfig>, Duration), RPCError<MemberId, MemberAddr, E>> {
        let mut state = self.state.lock();
        let unreachable = || {
            RPCError::Unreachable(Unreachable::new(&std::io::Error::other(format!(
                "member {to} is not reachable from {from}"
            ))))
        };
        if state.isolated.contains(&from) || state.isolated.contains(&to) {
            return Err(unreachable());
        }
        let Some(raft) = state.members.get(&to).cloned() else {
            return Err(unreachable());
        };
        let faults = state.faults;
        if faults.drop_ratio > 0.0 && state.rng.gen_bool(faults.drop_ratio) {
            return Err(RPCError::Network(NetworkError::new(
                &std::io::Error::other("message dropped"),
            )));
        }
        let delay = if faults.delay_max.is_zero() {
            Duration::ZERO
        } else {
            state.rng.gen_range(Duration::ZERO..faults.delay_max)
        };
        Ok((raft, delay))
    }
}

impl Router {
    /// Asks `to` (the leader) for a read index on behalf of `from`: the
    /// log position a linearizable read on `from` must wait for. Goes
    /// through the same faults as raft's own messages.
    pub async fn read_index(&self, from: MemberId, to: MemberId) -> Option<u64> {
        self.hold(from, to).await;
        let (raft, delay) = self.route::<std::io::Error>(from, to).ok()?;
        tokio::time::sleep(delay).await;
        let (read_log_id, _) = raft.get_read_log_id().await.ok()?;
        self.hold(to, from).await;
        self.route::<std::io::Error>(to, from).ok()?;
        Some(read_log_id.map_or(0, |id| id.index))
    }
}

/// One member's way out.
pub struct Network {
    router: Router,
    from: MemberId,
}

impl Router {
    pub fn network_for(&self, from: MemberId) -> Network {
        Network {
            router: self.clone(),
            from,
        }
    }
}

pub struct Connection {
    router: Router,
    from: MemberId,
    to: MemberId,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: MemberId, _node: &MemberAddr) -> Connection {
        Connection {
            router: self.router.clone(),
            from: self.from,
            to: target,
        }
    }
}

impl Connection {
    /// The request's way there: held while an end is paused, then routed.
    async fn send<E: std::error::Error>(
        &self,
    ) -> Result<Raft<TypeConfig>, RPCError<MemberId, MemberAddr, E>> {
        self.router.hold(self.from, self.to).await;
        let (raft, delay) = self.router.route(self.from, self.to)?;
        tokio::time::sleep(delay).await;
        Ok(raft)
    }

    /// The reply is held and lost on the way back as the request on the way there.
    async fn reply_lost<E: std::error::Error>(
        &self,
    ) -> Result<(), RPCError<MemberId, MemberAddr, E>> {
        self.router.hold(self.to, self.from).await;
        self.router.route::<E>(self.to, self.from).map(|_| ())
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<MemberId>, RpcError> {
        let raft = self.send().await?;
        let reply = raft
            .append_entries(rpc)
            .await
            .map_err(|err| RPCError::RemoteError(RemoteError::new(self.to, err)))?;
        self.reply_lost().await?;
        Ok(reply)
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<MemberId>, RpcError<InstallSnapshotError>> {
        let raft = self.send().await?;
        let reply = raft
            .install_snapshot(rpc)
            .await
            .map_err(|err| RPCError::RemoteError(RemoteError::new(self.to, err)))?;
        self.reply_lost().await?;
        Ok(reply)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<MemberId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<MemberId>, RpcError> {
        let raft = self.send().await?;
        let reply = raft
            .vote(rpc)
            .await
            .map_err(|err| RPCError::RemoteError(RemoteError::new(self.to, err)))?;
        self.reply_lost().await?;
        Ok(reply)
    }
}
