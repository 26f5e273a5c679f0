//! Linearizability under faults: concurrent clients write, compare-and-set
//! and sync-then-read a few znodes while members are cut off, paused and
//! restarted from their data directories, and the network drops and delays
//! messages; every key's history must linearize
//! ([`arbor_check::linearizable`]). A local read without sync, the broken path, is
//! caught by the same checker, so the check can fail.
//!
//! Reads take the path the ensemble's `sync` takes: the member asks the
//! leader for a read index (the leader confirms its leadership with a
//! quorum), waits until it has applied that far, then reads its own state.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arbor_check::linearizable::{violations, Input, Operation, Output, Register};
use arbor_protocol::{ErrorCode, MultiOp, OpResult};
use openraft::error::{ClientWriteError, RaftError};
use openraft::Raft;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::ensemble_tests::{
    create, last_index, raft_config, seed, start, start_three, stop, wait_applied, Member,
};
use super::records::MemberId;
use super::sim::{Faults, Router};
use super::tests::TempDir;
use super::types::{Command, Outcome, TypeConfig};
use crate::context::Shared;
use crate::txn::Txn;

const KEYS: u32 = 3;
const CLIENTS: u64 = 4;
const OPS_PER_CLIENT: usize = 120;
/// Pause between a client's operations, at most: spreads the run over
/// several partitions.
const THINK_TIME_MAX: Duration = Duration::from_millis(12);
/// A request not answered in this long is recorded as unknown.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(1500);

/// What clients see of the members: each slot is empty while its member
/// is down for a restart.
#[derive(Clone)]
struct Members(Arc<BTreeMap<MemberId, Mutex<Option<Handles>>>>);

type Handles = (Raft<TypeConfig>, Arc<Shared>);

impl Members {
    fn of(members: &BTreeMap<MemberId, Member>) -> Self {
        let slots = members
            .iter()
            .map(|(id, m)| (*id, Mutex::new(Some((m.raft.clone(), m.shared.clone())))))
            .collect();
        Self(Arc::new(slots))
    }

    fn get(&self, id: MemberId) -> Option<Handles> {
        self.0.get(&id)?.lock().clone()
    }

    fn set(&self, id: MemberId, member: Option<&Member>) {
        if let Some(slot) = self.0.get(&id) {
            *slot.lock() = member.map(|m| (m.raft.clone(), m.shared.clone()));
        }
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

fn key_path(key: u32) -> String {
    format!("/k{key}")
}

fn register(shared: &Shared, key: u32) -> Register {
    let state = shared.state.read();
    let node = state.tree.node(&key_path(key)).expect("keys exist");
    let value = <[u8; 8]>::try_from(node.data()).map_or(0, u64::from_be_bytes);
    Register {
        value,
        version: node.version,
    }
}

/// Sets a key through the leader as `from` knows it, following redirects
/// (a refused write did not happen, so trying elsewhere is safe). `None` if
/// no member took it: the leader it was sent to is down for a restart, so
/// nothing was proposed and the history leaves it out.
async fn set(
    members: &Members,
    from: MemberId,
    key: u32,
    value: u64,
    expect: Option<i32>,
) -> Option<Output> {
    let txn = Txn::Write {
        session_id: 0,
        op: MultiOp::SetData {
            path: key_path(key),
            data: value.to_be_bytes().to_vec(),
            version: expect.unwrap_or(-1),
        },
    };
    let command = Command::one(1, txn, None);
    let (raft, _) = members.get(from)?;
    let mut target = raft.current_leader().await.unwrap_or(from);
    for _ in 0..3 {
        let (raft, _) = members.get(target)?;
        let sent = tokio::time::timeout(REQUEST_TIMEOUT, raft.client_write(command.clone())).await;
        match sent {
            Ok(Ok(response)) => {
                let Outcome::Writes(results) = response.data else {
                    panic!("set {key}: no writes");
                };
                return Some(match &results[..] {
                    [Ok(OpResult::SetData(stat))] => Output::Written {
                        version: stat.version,
                    },
                    [Err(ErrorCode::BadVersion)] => Output::BadVersion,
                    other => panic!("set {key}: {other:?}"),
                });
            }
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => {
                match forward.leader_id {
                    Some(leader) => target = leader,
                    None => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
            _ => return Some(Output::Unknown),
        }
    }
    // Refused every time (leaders changing under it): it did not happen.
    None
}

/// Sync, then read on `at`; `None` if the sync could not be done.
async fn sync_read(router: &Router, members: &Members, at: MemberId, key: u32) -> Option<Register> {
    let (raft, shared) = members.get(at)?;
    let leader = raft.current_leader().await?;
    let read_index = tokio::time::timeout(REQUEST_TIMEOUT, router.read_index(at, leader))
        .await
        .ok()??;
    raft.wait(Some(REQUEST_TIMEOUT))
        .applied_index_at_least(Some(read_index), "sync")
        .await
        .ok()?;
    Some(register(&shared, key))
}

fn elapsed_ns(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

async fn client(
    router: Router,
    members: Members,
    id: u64,
    seed: u64,
    start: Instant,
) -> Vec<Operation> {
    let mut rng = StdRng::seed_from_u64(seed ^ id);
    let at = 1 + id % members.len() as u64;
    let mut history = Vec::with_capacity(OPS_PER_CLIENT);
    let mut seen_version = [0i32; KEYS as usize];
    for n in 0..OPS_PER_CLIENT {
        tokio::time::sleep(rng.gen_range(Duration::ZERO..THINK_TIME_MAX)).await;
        if members.get(at).is_none() {
            // Its member is down for a restart; a real client would be
            // reconnecting elsewhere.
            continue;
        }
        let key = rng.gen_range(0..KEYS);
        let value = id * 1_000 + n as u64 + 1;
        let call = elapsed_ns(start);
        let (input, output) = match rng.gen_range(0..10) {
            0..=3 => match sync_read(&router, &members, at, key).await {
                Some(register) => {
                    seen_version[key as usize] = register.version;
                    (Input::Read, Output::Read(register))
                }
                None => continue,
            },
            4..=6 => match set(&members, at, key, value, None).await {
                Some(output) => (Input::Write { value }, output),
                None => continue,
            },
            _ => {
                let expect = seen_version[key as usize];
                match set(&members, at, key, value, Some(expect)).await {
                    Some(output) => (Input::Cas { expect, value }, output),
                    None => continue,
                }
            }
        };
        history.push(Operation {
            key,
            input,
            output,
            call,
            ret: elapsed_ns(start),
        });
    }
    history
}

/// The faults the nemesis takes turns at, one member at a time.
#[derive(Debug, Default)]
struct FaultCounts {
    partitions: u64,
    pauses: u64,
    restarts: u64,
}

/// Cuts off, pauses and restarts members in turn, a random one each time,
/// until `done`; then gives the members back, all running.
async fn nemesis(
    router: Router,
    view: Members,
    mut members: BTreeMap<MemberId, Member>,
    dirs: Arc<Vec<TempDir>>,
    seed: u64,
    done: tokio_util::sync::CancellationToken,
) -> (BTreeMap<MemberId, Member>, FaultCounts) {
    let config = raft_config(10_000);
    let mut rng = StdRng::seed_from_u64(seed.rotate_left(17));
    let mut counts = FaultCounts::default();
    for turn in 0.. {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(rng.gen_range(20..120))) => {}
            () = done.cancelled() => break,
        }
        let id = rng.gen_range(1..=3);
        let outage = Duration::from_millis(rng.gen_range(60..300));
        match turn % 3 {
            0 => {
                router.isolate(id);
                counts.partitions += 1;
                tokio::time::sleep(outage).await;
                router.heal();
            }
            1 => {
                router.pause(id);
                counts.pauses += 1;
                tokio::time::sleep(outage).await;
                router.resume(id);
            }
            _ => {
                let member = members
                    .remove(&id)
                    .expect("every member runs between faults");
                view.set(id, None);
                stop(&router, id, member).await;
                counts.restarts += 1;
                tokio::time::sleep(outage).await;
                let member = start(&router, id, &dirs[id as usize - 1].0, &config).await;
                view.set(id, Some(&member));
                members.insert(id, member);
            }
        }
    }
    (members, counts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_cas_and_synced_reads_linearize_under_partitions_pauses_restarts_and_lost_messages()
{
    let seed = seed();
    let router = Router::new(
        seed,
        Faults {
            drop_ratio: 0.03,
            delay_max: Duration::from_millis(3),
        },
    );
    let dirs: Arc<Vec<TempDir>> = Arc::new((0..3).map(|_| TempDir::new("history")).collect());
    let members = start_three(&router, &dirs, &raft_config(10_000)).await;
    for key in 0..KEYS {
        create(&members, &key_path(key)).await;
    }
    let view = Members::of(&members);

    let start = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| tokio::spawn(client(router.clone(), view.clone(), id, seed, start)))
        .collect();
    let done = tokio_util::sync::CancellationToken::new();
    let nemesis = tokio::spawn(nemesis(
        router.clone(),
        view.clone(),
        members,
        dirs.clone(),
        seed,
        done.clone(),
    ));
    let mut history = Vec::new();
    for client in clients {
        history.extend(client.await.expect("client runs"));
    }
    done.cancel();
    let (members, faults) = nemesis.await.expect("nemesis runs");
    drop(view);
    for (id, member) in members {
        stop(&router, id, member).await;
    }

    let reads = history.iter().filter(|op| op.input == Input::Read).count();
    let written = history
        .iter()
        .filter(|op| matches!(op.output, Output::Written { .. }))
        .count();
    let unknown = history
        .iter()
        .filter(|op| op.output == Output::Unknown)
        .count();
    println!(
        "{} operations: {reads} reads, {written} writes acknowledged, {unknown} unknown; faults: {faults:?}",
        history.len()
    );
    assert!(
        reads >= 30 && written >= 30,
        "too little got through to mean anything"
    );
    assert!(
        faults.partitions >= 2 && faults.pauses >= 2 && faults.restarts >= 2,
        "the run outlasted at least two faults of each kind: {faults:?}"
    );
    assert_eq!(
        violations(&history, Register::default()),
        Vec::<u32>::new(),
        "seed {seed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_read_without_sync_is_caught_by_the_checker() {
    // The broken read path: a member cut off from the leader answers from
    // its own stale state. The checker must call that a violation, and the
    // real path must refuse to answer instead.
    let router = Router::new(seed(), Faults::NONE);
    let dirs: Vec<TempDir> = (0..3).map(|_| TempDir::new("stale")).collect();
    let members = start_three(&router, &dirs, &raft_config(10_000)).await;
    create(&members, &key_path(0)).await;
    let leader = members[&1].raft.current_leader().await.expect("a leader");
    let follower = members
        .keys()
        .copied()
        .find(|id| *id != leader)
        .expect("a follower");
    wait_applied(&members[&follower], last_index(&members).await).await;
    let view = Members::of(&members);
    router.isolate(follower);

    let start = Instant::now();
    let call = elapsed_ns(start);
    let output = set(&view, leader, 0, 42, None).await.expect("a leader");
    assert_eq!(output, Output::Written { version: 1 });
    let write = Operation {
        key: 0,
        input: Input::Write { value: 42 },
        output,
        call,
        ret: elapsed_ns(start),
    };
    let call = elapsed_ns(start);
    let local = register(&members[&follower].shared, 0);
    let stale = Operation {
        key: 0,
        input: Input::Read,
        output: Output::Read(local),
        call,
        ret: elapsed_ns(start),
    };
    assert_eq!(violations(&[write, stale], Register::default()), vec![0]);
    assert_eq!(sync_read(&router, &view, follower, 0).await, None);

    router.heal();
    let synced = sync_read(&router, &view, follower, 0).await;
    assert_eq!(
        synced,
        Some(Register {
            value: 42,
            version: 1
        })
    );
    drop(view);
    for (id, member) in members {
        stop(&router, id, member).await;
    }
}
