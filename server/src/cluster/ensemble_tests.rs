//! Whole ensembles in one process, over the simulated network
//! ([`super::sim`]): members agree on every znode and its zxid, survive the
//! loss of the leader, come back from their data directories, and a member
//! that missed purged entries catches up by snapshot.
//!
//! Each run prints its seed; `ARBOR_SIM_SEED=<seed>` replays it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::{OpResult, Zxid};
use openraft::{Raft, SnapshotPolicy};

use super::log_store::{LogIoThread, LogStore};
use super::records::{MemberAddr, MemberId};
use super::sim::{Faults, Router};
use super::tests::{create_command, options, state_machine, TempDir};
use super::types::{Outcome, TypeConfig};
use crate::context::Shared;

/// How long any one wait in these tests may take before it fails.
const WAIT: Duration = Duration::from_secs(20);

pub(super) struct Member {
    pub(super) raft: Raft<TypeConfig>,
    pub(super) shared: Arc<Shared>,
    io: LogIoThread,
}

pub(super) fn raft_config(snapshot_every: u64) -> Arc<openraft::Config> {
    let config = openraft::Config {
        heartbeat_interval: 50,
        election_timeout_min: 150,
        election_timeout_max: 300,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshot_every),
        max_in_snapshot_log_to_keep: 0,
        ..Default::default()
    };
    Arc::new(config.validate().expect("valid raft config"))
}

pub(super) async fn start(
    router: &Router,
    id: MemberId,
    dir: &Path,
    config: &Arc<openraft::Config>,
) -> Member {
    let (store, io) = LogStore::open(&dir.join("raft"), options()).expect("log opens");
    let sm = state_machine(dir);
    let shared = sm.shared();
    let raft = Raft::new(id, config.clone(), router.network_for(id), store, sm)
        .await
        .expect("raft starts");
    router.add(id, raft.clone());
    Member { raft, shared, io }
}

pub(super) async fn stop(router: &Router, id: MemberId, member: Member) {
    router.remove(id);
    member.raft.shutdown().await.expect("raft stops");
    drop(member.raft);
    tokio::task::spawn_blocking(move || member.io.join())
        .await
        .expect("log thread joins");
}

pub(super) fn seed() -> u64 {
    let seed = std::env::var("ARBOR_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("ARBOR_SIM_SEED={seed}");
    seed
}

fn addr(id: MemberId) -> MemberAddr {
    MemberAddr {
        client: format!("sim:{id}:client"),
        peer: format!("sim:{id}:peer"),
    }
}

/// Creates `path` through whichever member leads, retrying through
/// elections and lost messages; returns its czxid.
pub(super) async fn create(members: &BTreeMap<MemberId, Member>, path: &str) -> Zxid {
    let command = create_command(path, 1);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader took {path}"
        );
        for member in members.values() {
            match member.raft.client_write(command.clone()).await {
                Ok(response) => match response.data {
                    Outcome::Writes(results) => match &results[..] {
                        [Ok(OpResult::Created { stat, .. })] => return stat.czxid,
                        // A retry of a write that went through before its reply was lost.
                        [Err(arbor_protocol::ErrorCode::NodeExists)] => {
                            return czxid(&member.shared, path).expect("exists")
                        }
                        other => panic!("{path}: {other:?}"),
                    },
                    other => panic!("{path}: {other:?}"),
                },
                Err(_) => continue,
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn czxid(shared: &Shared, path: &str) -> Option<Zxid> {
    shared.state.read().tree.node(path).map(|node| node.czxid)
}

/// Every znode with its czxid, mzxid and data.
fn contents(shared: &Shared) -> BTreeMap<String, (Zxid, Zxid, Vec<u8>)> {
    let view = shared.state.read().view();
    view.tree
        .iter()
        .map(|entry| {
            let node = entry.node;
            (entry.path, (node.czxid, node.mzxid, node.data().to_vec()))
        })
        .collect()
}

pub(super) async fn wait_applied(member: &Member, index: u64) {
    member
        .raft
        .wait(Some(WAIT))
        .applied_index_at_least(Some(index), "catch up")
        .await
        .expect("applies in time");
}

/// The furthest any member has applied. Read from the state machines, not
/// raft's metrics, which are published after a write is answered.
pub(super) async fn last_index(members: &BTreeMap<MemberId, Member>) -> u64 {
    members
        .values()
        .map(|member| {
            let state = member.shared.state.read();
            state.replica.last_applied.map_or(0, |id| id.index)
        })
        .max()
        .unwrap_or(0)
}

pub(super) async fn start_three(
    router: &Router,
    dirs: &[TempDir],
    config: &Arc<openraft::Config>,
) -> BTreeMap<MemberId, Member> {
    let mut members = BTreeMap::new();
    for (k, dir) in dirs.iter().enumerate() {
        let id = k as MemberId + 1;
        members.insert(id, start(router, id, &dir.0, config).await);
    }
    let all: BTreeMap<MemberId, MemberAddr> = members.keys().map(|id| (*id, addr(*id))).collect();
    members[&1].raft.initialize(all).await.expect("initializes");
    members
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_agree_lose_their_leader_and_bring_it_back() {
    // Same znodes with the same zxids everywhere; zxids (fencing tokens)
    // keep increasing through a failover; a restarted member catches up.
    let router = Router::new(
        seed(),
        Faults {
            drop_ratio: 0.05,
            delay_max: Duration::from_millis(2),
        },
    );
    let dirs: Vec<TempDir> = (0..3).map(|_| TempDir::new("ensemble")).collect();
    let config = raft_config(10_000);
    let mut members = start_three(&router, &dirs, &config).await;

    let mut before = Vec::new();
    for i in 0..30 {
        before.push(create(&members, &format!("/a{i}")).await);
    }
    assert!(before.windows(2).all(|w| w[0] < w[1]), "{before:?}");

    let leader = members[&1].raft.current_leader().await.expect("a leader");
    let old = members.remove(&leader).expect("the leader is a member");
    stop(&router, leader, old).await;

    let mut after = Vec::new();
    for i in 0..30 {
        after.push(create(&members, &format!("/b{i}")).await);
    }
    let newest_before = *before.last().expect("30 writes");
    assert!(
        after[0] > newest_before,
        "{} after {newest_before}",
        after[0]
    );
    assert!(after.windows(2).all(|w| w[0] < w[1]), "{after:?}");

    let back = start(&router, leader, &dirs[leader as usize - 1].0, &config).await;
    members.insert(leader, back);
    let index = last_index(&members).await;
    for member in members.values() {
        wait_applied(member, index).await;
    }
    let reference = contents(&members[&leader].shared);
    assert_eq!(reference.len(), 61, "the root and 60 nodes");
    for (id, member) in &members {
        assert_eq!(contents(&member.shared), reference, "member {id} differs");
    }
    for (id, member) in members {
        stop(&router, id, member).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_missed_purged_entries_catches_up_by_snapshot() {
    // The leader has purged what the lagging member lacks, so only a
    // snapshot can bring it back; after that it has every node.
    let router = Router::new(seed(), Faults::NONE);
    let dirs: Vec<TempDir> = (0..3).map(|_| TempDir::new("snapshot")).collect();
    let config = raft_config(20);
    let members = start_three(&router, &dirs, &config).await;
    create(&members, "/first").await;
    let leader = members[&1].raft.current_leader().await.expect("a leader");
    let lagging = members
        .keys()
        .copied()
        .find(|id| *id != leader)
        .expect("a follower");
    router.isolate(lagging);

    for i in 0..100 {
        create(&members, &format!("/n{i}")).await;
    }
    // Snapshots are built and the log purged in the background.
    members[&leader]
        .raft
        .wait(Some(WAIT))
        .metrics(
            |m| m.purged.is_some_and(|id| id.index > 20),
            "the leader purges",
        )
        .await
        .expect("the leader purged its log");

    router.heal();
    let index = last_index(&members).await;
    wait_applied(&members[&lagging], index).await;
    let snapshot = members[&lagging].raft.metrics().borrow().snapshot;
    assert!(snapshot.is_some(), "caught up by a snapshot");
    assert_eq!(
        contents(&members[&lagging].shared),
        contents(&members[&leader].shared)
    );
    for (id, member) in members {
        stop(&router, id, member).await;
    }
}
