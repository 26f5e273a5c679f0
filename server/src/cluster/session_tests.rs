//! Sessions across a leader change, in-process over the simulated network
//! ([`super::sim`]), seeded and in seconds: the regression test of the
//! real-process fault suite's worst finding (a paused or cut-off leader,
//! back, expired sessions that were alive at the new leader, their lock
//! nodes gone while their holders worked).
//!
//! Each member runs its raft, its state machine, its session tracker and
//! [`super::liveness::watch_leadership`], on a manual clock the test moves
//! to make deadlines pass. The promise checked: a session the ensemble
//! keeps alive is not expired by a leader of a past term, neither by a
//! decision it makes now (it has no fresh quorum) nor by one it made
//! before (no later term applies it); the leader in contact still expires
//! a session whose deadline passed. The old form of a decision (no term),
//! as a deposed leader used to hand it to the next, does expire the live
//! session: the hazard the term removes.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::{CreateMode, MultiOp, SessionId};
use openraft::Raft;
use tokio_util::sync::CancellationToken;

use super::contact::{Contact, CONTACT_STALE_MS};
use super::ensemble_tests::{raft_config, seed};
use super::liveness::watch_leadership;
use super::log_store::{LogIoThread, LogStore};
use super::member::Member;
use super::records::{MemberAddr, MemberId};
use super::sim::{Faults, Router};
use super::tests::{options, state_machine_with, TempDir};
use super::types::{Command, Outcome, TypeConfig};
use crate::clock::{Clock, ClockDriver};
use crate::context::{Decider, Shared};
use crate::pipeline::prep;
use crate::txn::{CloseReason, Decision, Txn};

/// How long any one wait may take.
const WAIT: Duration = Duration::from_secs(20);
const SESSION: SessionId = 0x5e55;
const SESSION_TIMEOUT_MS: u32 = 6_000;
/// The session's ephemeral: its lock node, say.
const EPHEMERAL: &str = "/lock-0000000001";
/// Past every deadline the test sets up.
const LONG_PAUSE: Duration = Duration::from_secs(20);

struct Node {
    raft: Raft<TypeConfig>,
    shared: Arc<Shared>,
    clock: ClockDriver,
    io: LogIoThread,
    stop: CancellationToken,
}

fn addr(id: MemberId) -> MemberAddr {
    MemberAddr {
        client: format!("sim:{id}:client"),
        peer: format!("sim:{id}:peer"),
    }
}

async fn start(router: &Router, id: MemberId, dir: &Path) -> Node {
    let (clock, driver) = Clock::manual(1_700_000_000_000);
    let (store, io) = LogStore::open(&dir.join("raft"), options()).expect("log opens");
    let state_machine = state_machine_with(dir, clock.clone());
    let shared = state_machine.shared();
    let raft = Raft::new(
        id,
        raft_config(10_000),
        router.network_for(id),
        store,
        state_machine,
    )
    .await
    .expect("raft starts");
    router.add(id, raft.clone());
    let members: BTreeMap<MemberId, MemberAddr> = (1..=3).map(|m| (m, addr(m))).collect();
    let member = Member::new(
        id,
        raft.clone(),
        &members,
        None,
        Arc::new(Contact::default()),
        clock,
        shared.config.tick_ms,
    );
    let member = Arc::new(member);
    shared.join_ensemble(member.clone());
    let stop = CancellationToken::new();
    tokio::spawn(watch_leadership(member, shared.clone(), stop.clone()));
    Node {
        raft,
        shared,
        clock: driver,
        io,
        stop,
    }
}

async fn start_three(router: &Router, dirs: &[TempDir]) -> BTreeMap<MemberId, Node> {
    let mut nodes = BTreeMap::new();
    for (k, dir) in dirs.iter().enumerate() {
        let id = k as MemberId + 1;
        nodes.insert(id, start(router, id, &dir.0).await);
    }
    let all = (1..=3).map(|m| (m, addr(m))).collect::<BTreeMap<_, _>>();
    nodes[&1].raft.initialize(all).await.expect("initializes");
    nodes
}

async fn stop_all(router: &Router, nodes: BTreeMap<MemberId, Node>) {
    for (id, node) in nodes {
        node.stop.cancel();
        router.remove(id);
        node.raft.shutdown().await.expect("raft stops");
        drop(node.raft);
        tokio::task::spawn_blocking(move || node.io.join())
            .await
            .expect("log thread joins");
    }
}

/// The member that leads according to `by`, once it knows one other than
/// `not`, and its term.
async fn leader_seen_by(node: &Node, not: Option<MemberId>) -> (MemberId, u64) {
    let metrics = node
        .raft
        .wait(Some(WAIT))
        .metrics(
            |m| m.current_leader.is_some() && m.current_leader != not,
            "a leader",
        )
        .await
        .expect("a leader is elected");
    (
        metrics.current_leader.expect("waited for"),
        metrics.current_term,
    )
}

/// Writes `txn` through `node`'s raft (which must lead); what it answered.
async fn write(node: &Node, txn: Txn, proposer: Option<MemberId>) -> Outcome {
    let command = Command::one(node.shared.clock.wall_ms(), txn, proposer);
    let written = tokio::time::timeout(WAIT, node.raft.client_write(command)).await;
    written
        .expect("answered in time")
        .expect("the leader takes it")
        .data
}

/// Opens the session and its ephemeral through `leader`.
async fn open_session(leader: &Node, leader_id: MemberId) {
    let open = Txn::OpenSession {
        session_id: SESSION,
        password: [7; arbor_protocol::SESSION_PASSWORD_BYTES],
        timeout_ms: SESSION_TIMEOUT_MS,
        ip: None,
    };
    write(leader, open, Some(leader_id)).await;
    let ephemeral = Txn::Write {
        session_id: SESSION,
        op: MultiOp::Create {
            path: EPHEMERAL.into(),
            data: Vec::new(),
            mode: CreateMode::Ephemeral,
        },
    };
    let outcome = write(leader, ephemeral, Some(leader_id)).await;
    assert!(
        matches!(&outcome, Outcome::Writes(results) if results[0].is_ok()),
        "{outcome:?}"
    );
}

/// Whether the session and its ephemeral are there on `node`.
fn alive_on(node: &Node) -> (bool, bool) {
    let state = node.shared.state.read();
    (
        state.session(SESSION).is_some(),
        state.tree.node(EPHEMERAL).is_some(),
    )
}

/// Waits until every node but `cut_off` has applied what `leader` has.
async fn caught_up(nodes: &BTreeMap<MemberId, Node>, leader: MemberId, cut_off: Option<MemberId>) {
    let index = nodes[&leader].raft.metrics().borrow().last_log_index;
    let reached = nodes.iter().filter(|(id, _)| Some(**id) != cut_off);
    for (_, node) in reached {
        node.raft
            .wait(Some(WAIT))
            .applied_index_at_least(index, "catch up")
            .await
            .expect("catches up");
    }
}

fn assert_alive(nodes: &BTreeMap<MemberId, Node>, what: &str) {
    for (id, node) in nodes {
        assert_eq!(alive_on(node), (true, true), "member {id}: {what}");
    }
}

/// Waits until `node` has tracked every session from a term it leads in.
async fn leading_tracked(node: &Node) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while node.shared.tracker.lock().leading_term().is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never tracked as leader"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A leader cut off (`paused`: frozen, else partitioned) long enough for
/// the others to elect; then its clock jumps past every deadline.
async fn depose(
    router: &Router,
    nodes: &BTreeMap<MemberId, Node>,
    paused: bool,
) -> (MemberId, u64, MemberId, u64) {
    let (old, old_term) = leader_seen_by(&nodes[&1], None).await;
    leading_tracked(&nodes[&old]).await;
    open_session(&nodes[&old], old).await;
    caught_up(nodes, old, None).await;
    match paused {
        true => router.pause(old),
        false => router.isolate(old),
    }
    let other = *nodes.keys().find(|id| **id != old).expect("three members");
    let (new, new_term) = leader_seen_by(&nodes[&other], Some(old)).await;
    assert!(new_term > old_term);
    // Past the window in which a leader's last quorum counts, in real
    // time (raft's own clock), and past the session's deadline on the old
    // leader's clock.
    tokio::time::sleep(Duration::from_millis(2 * CONTACT_STALE_MS)).await;
    nodes[&old].clock.advance(LONG_PAUSE);
    (old, old_term, new, new_term)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_expires_nothing_the_ensemble_keeps_alive() {
    for paused in [true, false] {
        let router = Router::new(seed(), Faults::NONE);
        let dirs: Vec<TempDir> = (0..3).map(|_| TempDir::new("sessions")).collect();
        let nodes = start_three(&router, &dirs).await;
        let (old, old_term, new, new_term) = depose(&router, &nodes, paused).await;

        // Its deadlines say expire, but it has no fresh quorum: it decides
        // nothing.
        let decided = prep::expired_sessions(&nodes[&old].shared);
        assert!(
            decided.is_empty(),
            "paused {paused}: {} decided",
            decided.len()
        );

        // What it decided before (in its term), handed to the new leader
        // as the old forward path did: committed, and not applied.
        let stale = Decider::Leader { term: old_term }.txn(Decision::Expire {
            session_id: SESSION,
        });
        let outcome = write(&nodes[&new], stale.clone(), None).await;
        assert!(
            matches!(&outcome, Outcome::Writes(results) if results[0] == Err(arbor_protocol::ErrorCode::NotLeader)),
            "{outcome:?}"
        );
        caught_up(&nodes, new, Some(old)).await;
        assert_alive(
            &nodes,
            "after a decision of a past term reached the new leader",
        );

        // Back, it proposes its decision in its own log: never committed.
        let proposed = {
            let raft = nodes[&old].raft.clone();
            let command = Command::one(0, stale, None);
            tokio::spawn(async move { raft.client_write(command).await })
        };
        match paused {
            true => router.resume(old),
            false => router.heal(),
        }
        let _ = tokio::time::timeout(WAIT, proposed).await;
        leader_seen_by(&nodes[&old], Some(old)).await;
        caught_up(&nodes, new, None).await;
        assert_alive(&nodes, "after the deposed leader came back");

        // The leader in contact expires the session once its deadline
        // passes in its own term.
        leading_tracked(&nodes[&new]).await;
        nodes[&new].clock.advance(LONG_PAUSE);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let decided = prep::expired_sessions(&nodes[&new].shared);
        assert_eq!(decided.len(), 1, "the new leader decides the expiry");
        let expected = Decider::Leader { term: new_term }.txn(Decision::Expire {
            session_id: SESSION,
        });
        assert_eq!(decided[0].txn, expected);
        let outcome = write(&nodes[&new], decided[0].txn.clone(), None).await;
        assert!(
            matches!(&outcome, Outcome::Writes(results) if results[0].is_ok()),
            "{outcome:?}"
        );
        caught_up(&nodes, new, None).await;
        for (id, node) in &nodes {
            assert_eq!(
                alive_on(node),
                (false, false),
                "member {id}: expired in term"
            );
        }
        stop_all(&router, nodes).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_form_of_an_expiry_from_a_deposed_leader_killed_a_live_session() {
    // Before decisions carried their term, a deposed leader's expiry was a
    // plain close, and the next leader applied it: the bug the fault suite
    // found. Such records still apply (logs written before hold them),
    // which is why a leader's decisions are now stamped.
    let router = Router::new(seed(), Faults::NONE);
    let dirs: Vec<TempDir> = (0..3).map(|_| TempDir::new("sessions-old")).collect();
    let nodes = start_three(&router, &dirs).await;
    let (old, _, new, _) = depose(&router, &nodes, true).await;
    let old_form = Txn::CloseSession {
        session_id: SESSION,
        reason: CloseReason::Expired,
    };
    write(&nodes[&new], old_form, None).await;
    caught_up(&nodes, new, Some(old)).await;
    assert_eq!(
        alive_on(&nodes[&new]),
        (false, false),
        "the live session was expired"
    );
    router.heal();
    for id in 1..=3 {
        router.resume(id);
    }
    stop_all(&router, nodes).await;
}
