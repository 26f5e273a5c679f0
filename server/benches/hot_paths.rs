//! The server's in-process hot paths, without sockets or disk: applying
//! writes to the tree and firing watches. `cargo bench -p arbor-server`.

use arbor_protocol::{CreateMode, MultiOp, SESSION_PASSWORD_BYTES};
use arbor_server::pipeline::apply::StateMachine;
use arbor_server::tree::Change;
use arbor_server::txn::{Txn, TxnEntry};
use arbor_server::watch::{WatchKind, WatchManager};
use divan::{black_box, Bencher};

fn main() {
    divan::main();
}

const SESSION: u64 = 0x77;

/// A state machine with one session and `/bench` holding `nodes` children.
fn state_with(nodes: usize) -> (StateMachine, u64) {
    let mut state = StateMachine::new();
    let mut zxid = 1;
    let mut apply = |state: &mut StateMachine, txn: Txn| {
        let applied = state.apply(&entry(zxid, txn));
        zxid += 1;
        assert!(applied.result.is_ok());
    };
    apply(
        &mut state,
        Txn::CreateSession {
            session_id: SESSION,
            password: [0; SESSION_PASSWORD_BYTES],
            timeout_ms: 10_000,
        },
    );
    apply(
        &mut state,
        create("/bench".to_owned(), CreateMode::Persistent),
    );
    for i in 0..nodes {
        apply(
            &mut state,
            create(format!("/bench/n{i}"), CreateMode::Persistent),
        );
    }
    (state, zxid)
}

/// A txn at `zxid`, at one fixed time.
fn entry(zxid: u64, txn: Txn) -> TxnEntry {
    TxnEntry {
        zxid,
        time_ms: 1_700_000_000_000,
        txn,
    }
}

fn create(path: String, mode: CreateMode) -> Txn {
    Txn::Write {
        session_id: SESSION,
        op: MultiOp::Create {
            path,
            data: vec![7; 100],
            mode,
        },
    }
}

/// Applying a create of a 100-byte node under a parent with `nodes` children.
#[divan::bench(args = [1_000, 100_000])]
fn apply_create(bencher: Bencher, nodes: usize) {
    let (mut state, mut zxid) = state_with(nodes);
    bencher.bench_local(|| {
        let created = entry(
            zxid,
            create(format!("/bench/x{zxid}"), CreateMode::Persistent),
        );
        zxid += 1;
        black_box(state.apply(&created))
    });
}

/// Applying a create and then its delete under a parent with `nodes`
/// children: the tree stays at its size, as in the scale part's create runs.
#[divan::bench(args = [1_000, 100_000])]
fn apply_create_then_delete(bencher: Bencher, nodes: usize) {
    let (mut state, mut zxid) = state_with(nodes);
    bencher.bench_local(|| {
        let path = format!("/bench/x{zxid}");
        let created = entry(zxid, create(path.clone(), CreateMode::Persistent));
        let deleted = entry(
            zxid + 1,
            Txn::Write {
                session_id: SESSION,
                op: MultiOp::Delete { path, version: -1 },
            },
        );
        zxid += 2;
        black_box(state.apply(&created));
        black_box(state.apply(&deleted))
    });
}

/// Applying a sequential ephemeral create: what every lock acquire does.
#[divan::bench]
fn apply_create_ephemeral_sequential(bencher: Bencher) {
    let (mut state, mut zxid) = state_with(0);
    bencher.bench_local(|| {
        let created = entry(
            zxid,
            create("/bench/lock-".to_owned(), CreateMode::EphemeralSequential),
        );
        zxid += 1;
        black_box(state.apply(&created))
    });
}

/// Applying a set-data of 100 bytes in a tree of `nodes` nodes.
#[divan::bench(args = [1_000, 100_000])]
fn apply_set_data(bencher: Bencher, nodes: usize) {
    let (mut state, mut zxid) = state_with(nodes);
    bencher.bench_local(|| {
        let set = entry(
            zxid,
            Txn::Write {
                session_id: SESSION,
                op: MultiOp::SetData {
                    path: format!("/bench/n{}", zxid as usize % nodes),
                    data: vec![9; 100],
                    version: -1,
                },
            },
        );
        zxid += 1;
        black_box(state.apply(&set))
    });
}

/// Firing a node-deleted change watched by one session (a lock waiter's
/// predecessor watch), re-arming it each time as the waiter would.
#[divan::bench]
fn fire_predecessor_watch(bencher: Bencher) {
    let mut watches = WatchManager::new(1_000_000);
    let change = Change::Deleted("/locks/job/lock-0000000041".to_owned(), None);
    bencher.bench_local(|| {
        watches
            .add(2, WatchKind::Data, "/locks/job/lock-0000000041")
            .expect("under the limit");
        black_box(watches.trigger(&change, 42, |_| true))
    });
}

/// A change that no watch matches, with `watched` other paths watched and a
/// recursive watch higher up: the cost every write pays.
#[divan::bench(args = [1_000, 100_000])]
fn fire_unwatched_change(bencher: Bencher, watched: usize) {
    let mut watches = WatchManager::new(1_000_000);
    for i in 0..watched {
        watches
            .add(1 + (i as u64 % 64), WatchKind::Data, &format!("/app/n{i}"))
            .expect("under the limit");
    }
    watches
        .add(99, WatchKind::PersistentRecursive, "/elsewhere")
        .expect("under the limit");
    let change = Change::DataChanged("/app/deep/below/node".to_owned());
    bencher.bench_local(|| black_box(watches.trigger(&change, 7, |_| true)));
}
