//! The log store and state machine against openraft's conformance suite,
//! and what the suite cannot build: entries with commands, restarts, torn
//! tails, and a snapshot of a real tree installed on another member.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arbor_protocol::{CreateMode, MultiOp, OpResult};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::{log_id, StoreBuilder, Suite};
use openraft::{Entry, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder, StorageError};
use tokio::sync::mpsc;

use super::log_files::{EncodedBatch, LogFiles, LogOptions};
use super::log_store::{LogIoThread, LogStore};
use super::meta_file;
use super::records::{LogPosition, MemberId};
use super::state_machine::{load_newest, ClusterStateMachine};
use super::types::{Command, Outcome, TypeConfig, Write};
use crate::clock::Clock;
use crate::config::Config;
use crate::context::Shared;
use crate::pipeline::commit::{Committer, MemoryLog};
use crate::storage::txnlog::FsyncPolicy;
use crate::txn::Txn;

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// A directory removed when the test is done with it.
pub(super) struct TempDir(pub(super) PathBuf);

impl TempDir {
    pub(super) fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "arbor-cluster-{name}-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn options() -> LogOptions {
    LogOptions {
        segment_bytes_max: 512,
        fsync: FsyncPolicy::Always,
        preallocate_bytes: 256,
        spares: false,
    }
}

/// A state machine over a server's shared state, as a member has it.
pub(super) fn state_machine(dir: &Path) -> ClusterStateMachine {
    state_machine_with(dir, Clock::system())
}

/// [`state_machine`], with time from `clock`.
pub(super) fn state_machine_with(dir: &Path, clock: Clock) -> ClusterStateMachine {
    let snapshots = dir.join("snapshots");
    std::fs::create_dir_all(&snapshots).expect("snapshot dir");
    let (state, loaded_from) = load_newest(&snapshots).expect("loads");
    let (queue, _) = mpsc::channel(1);
    let committer = Committer::new(MemoryLog::default(), 0, None, queue);
    let shared = Arc::new(Shared::new(Config::default(), clock, state, committer));
    ClusterStateMachine::new(1, shared, &snapshots, loaded_from)
}

fn open(dir: &Path) -> (LogStore, LogIoThread) {
    LogStore::open(&dir.join("raft"), options()).expect("opens")
}

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, ClusterStateMachine, (TempDir, LogIoThread)> for Builder {
    async fn build(
        &self,
    ) -> Result<((TempDir, LogIoThread), LogStore, ClusterStateMachine), StorageError<MemberId>>
    {
        let dir = TempDir::new("suite");
        let (store, thread) = open(&dir.0);
        let sm = state_machine(&dir.0);
        Ok(((dir, thread), store, sm))
    }
}

#[test]
fn openraft_conformance_suite_passes() {
    // openraft's own checks of log storage and state machine semantics.
    Suite::test_all(Builder).expect("the suite passes");
}

/// A command creating a persistent `path` holding its own name.
pub(super) fn create_command(path: &str, time_ms: u64) -> Command {
    Command::one(time_ms, create_txn(path), None)
}

fn create_txn(path: &str) -> Txn {
    Txn::Write {
        session_id: 0,
        op: MultiOp::Create {
            path: path.into(),
            data: path.as_bytes().to_vec(),
            mode: CreateMode::Persistent,
        },
    }
}

fn command(index: u64, term: u64, path: &str) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(term, 1, index),
        payload: EntryPayload::Normal(create_command(path, 1_000 + index)),
    }
}

async fn append(store: &mut LogStore, entries: Vec<Entry<TypeConfig>>) {
    store
        .blocking_append(entries)
        .await
        .expect("appends and syncs");
}

async fn indexes(store: &mut LogStore) -> Vec<(u64, u64)> {
    store
        .try_get_log_entries(0..)
        .await
        .expect("reads")
        .iter()
        .map(|entry| (entry.log_id.leader_id.term, entry.log_id.index))
        .collect()
}

#[tokio::test]
async fn a_reopened_log_has_every_synced_entry_its_vote_and_its_truncations() {
    // What was synced comes back after a restart, across segment rolls,
    // minus what was truncated and purged.
    let dir = TempDir::new("reopen");
    let (mut store, thread) = open(&dir.0);
    append(
        &mut store,
        (1..=40).map(|i| command(i, 1, &format!("/n{i}"))).collect(),
    )
    .await;
    store.truncate(log_id(1, 1, 31)).await.expect("truncates");
    append(
        &mut store,
        (31..=35)
            .map(|i| command(i, 2, &format!("/m{i}")))
            .collect(),
    )
    .await;
    store.purge(log_id(1, 1, 10)).await.expect("purges");
    store
        .save_vote(&openraft::Vote::new(2, 3))
        .await
        .expect("votes");
    drop(store);
    thread.join();
    let segments = std::fs::read_dir(dir.0.join("raft/log"))
        .expect("lists")
        .count();
    assert!(segments >= 2, "512-byte segments roll: {segments}");

    let (mut store, _thread) = open(&dir.0);
    let expected: Vec<(u64, u64)> = (11..=30)
        .map(|i| (1, i))
        .chain((31..=35).map(|i| (2, i)))
        .collect();
    assert_eq!(indexes(&mut store).await, expected);
    let state = store.get_log_state().await.expect("state");
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 10)));
    assert_eq!(state.last_log_id, Some(log_id(2, 1, 35)));
    assert_eq!(
        store.read_vote().await.expect("vote"),
        Some(openraft::Vote::new(2, 3))
    );
}

#[test]
fn segments_roll_into_spares_made_ahead_and_read_back_whole() {
    // A segment whose zeros run out rolls into a spare made ahead, so no
    // append grows a file on the write path; every entry reads back across
    // the rolls, and the spare is never taken for a segment.
    let dir = TempDir::new("spares");
    let log_dir = dir.0.join("log");
    let options = LogOptions {
        segment_bytes_max: 64 * 1024,
        fsync: FsyncPolicy::Always,
        preallocate_bytes: 4096,
        spares: true,
    };
    let mut files = LogFiles::open(&log_dir, options.clone(), None, |_| {}).expect("opens");
    let entries: Vec<_> = (1..=1200)
        .map(|i| command(i, 1, &format!("/spare/{i}")))
        .collect();
    for batch in entries.chunks(10) {
        assert!(files.wait_for_spare(), "a spare is made");
        files
            .write(&EncodedBatch::encode(batch).expect("encodes"))
            .expect("writes");
        files.sync().expect("syncs");
    }
    assert_eq!(files.grown_inline(), 0, "every segment came from a spare");
    let names: Vec<String> = std::fs::read_dir(&log_dir)
        .expect("lists")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let segments = names
        .iter()
        .filter(|name| name.starts_with("raft."))
        .count();
    assert!(
        segments >= 4,
        "spares double from 4 KiB to 64 KiB: {names:?}"
    );
    assert!(names.iter().any(|name| name == "spare.wal"), "{names:?}");
    drop(files);
    assert!(
        !log_dir.join("spare.wal").exists(),
        "a spare nobody took is deleted"
    );
    // A spare left by a crash is no segment: deleted, never read.
    std::fs::write(log_dir.join("spare.wal"), b"half a spare").expect("writes");

    let mut read = Vec::new();
    let reopened = LogFiles::open(&log_dir, options, None, |record| {
        read.push(record.position.index)
    })
    .expect("reopens");
    assert_eq!(read, (1..=1200).collect::<Vec<u64>>());
    assert_eq!(reopened.last_index(), Some(1200));
}

#[tokio::test]
async fn a_suffix_cut_inside_the_open_segment_is_overwritten_in_place() {
    // Raft's usual truncation: a follower's last few entries conflict with
    // the new leader's. The next append must go where the cut was, not past
    // the old end of the file (that left a hole of zeros, found by killing
    // the leader of a real ensemble).
    let dir = TempDir::new("cut");
    let big = LogOptions {
        segment_bytes_max: 1 << 20,
        fsync: FsyncPolicy::Always,
        preallocate_bytes: 64 * 1024,
        spares: false,
    };
    let (mut store, thread) = LogStore::open(&dir.0.join("raft"), big.clone()).expect("opens");
    append(
        &mut store,
        (1..=10).map(|i| command(i, 1, &format!("/n{i}"))).collect(),
    )
    .await;
    store.truncate(log_id(1, 1, 6)).await.expect("truncates");
    append(
        &mut store,
        (6..=8).map(|i| command(i, 2, &format!("/m{i}"))).collect(),
    )
    .await;
    drop(store);
    thread.join();
    let (mut store, _thread) = LogStore::open(&dir.0.join("raft"), big).expect("reopens");
    let expected: Vec<(u64, u64)> = (1..=5)
        .map(|i| (1, i))
        .chain((6..=8).map(|i| (2, i)))
        .collect();
    assert_eq!(indexes(&mut store).await, expected);
}

#[tokio::test]
async fn a_torn_tail_is_cut_and_damage_before_a_whole_record_is_refused() {
    // A crash mid-write loses only the unsynced tail; a flipped byte in the
    // middle stops the start instead of silently dropping entries.
    let dir = TempDir::new("torn");
    // Written without zeros ahead, so the file ends where the records do.
    let unpadded = LogOptions {
        preallocate_bytes: 0,
        ..options()
    };
    let (mut store, thread) = LogStore::open(&dir.0.join("raft"), unpadded).expect("opens");
    append(
        &mut store,
        (1..=3).map(|i| command(i, 1, &format!("/n{i}"))).collect(),
    )
    .await;
    drop(store);
    thread.join();
    let segment = std::fs::read_dir(dir.0.join("raft/log"))
        .expect("lists")
        .map(|entry| entry.expect("entry").path())
        .next()
        .expect("one segment");
    let whole = std::fs::read(&segment).expect("reads");

    std::fs::write(&segment, &whole[..whole.len() - 5]).expect("tears");
    let (mut store, thread) = open(&dir.0);
    assert_eq!(indexes(&mut store).await, vec![(1, 1), (1, 2)]);
    append(&mut store, vec![command(3, 1, "/again")]).await;
    drop(store);
    thread.join();
    // Zeros written ahead of the records are not a torn tail.
    let padded = std::fs::read(&segment).expect("reads");
    assert!(padded.len() > whole.len() && padded.ends_with(&[0; 16]));
    let (mut store, thread) = open(&dir.0);
    assert_eq!(indexes(&mut store).await, vec![(1, 1), (1, 2), (1, 3)]);
    drop(store);
    thread.join();
    assert_eq!(
        std::fs::read(&segment).expect("reads"),
        padded,
        "left as it was"
    );

    let mut damaged = std::fs::read(&segment).expect("reads");
    damaged[40] ^= 0xff; // inside the first record (the header is 32 bytes)
    std::fs::write(&segment, &damaged).expect("damages");
    let err = LogStore::open(&dir.0.join("raft"), options())
        .err()
        .expect("refused");
    assert!(err.to_string().contains("a whole record follows"), "{err}");
}

#[tokio::test]
async fn a_committed_hint_left_empty_torn_or_stale_by_a_power_cut_is_ignored() {
    // The hint is replaced without a sync: after a power cut it may be
    // empty, hold part of a value, or name entries that never reached the
    // disk. The member must start all the same (every cut member refused
    // to, found with LazyFS), keeping the hint only when its log holds it.
    let dir = TempDir::new("hint");
    let raft = dir.0.join("raft");
    let (mut store, thread) = open(&dir.0);
    append(
        &mut store,
        (1..=3).map(|i| command(i, 2, &format!("/n{i}"))).collect(),
    )
    .await;
    store
        .save_committed(Some(log_id(2, 1, 3)))
        .await
        .expect("saves");
    drop(store);
    thread.join();
    let committed_after_open = |bytes: Option<&[u8]>| {
        if let Some(bytes) = bytes {
            std::fs::write(raft.join(meta_file::COMMITTED_FILE), bytes).expect("writes");
        }
        let (mut store, thread) = LogStore::open(&raft, options()).expect("starts");
        let committed = futures_util::FutureExt::now_or_never(store.read_committed())
            .expect("ready")
            .expect("reads");
        drop(store);
        thread.join();
        committed
    };
    assert_eq!(
        committed_after_open(None),
        Some(log_id(2, 1, 3)),
        "a good hint is kept"
    );
    let whole = std::fs::read(raft.join(meta_file::COMMITTED_FILE)).expect("reads");
    assert_eq!(committed_after_open(Some(b"")), None, "empty");
    assert_eq!(
        committed_after_open(Some(&whole[..whole.len() - 3])),
        None,
        "torn"
    );
    // Entries past the log's end, or of another term, were never synced here.
    for stale in [log_id(2, 1, 9), log_id(3, 1, 2)] {
        let position = Some(LogPosition::from(stale));
        meta_file::write(
            &raft,
            meta_file::COMMITTED_FILE,
            meta_file::COMMITTED_MAGIC,
            &position,
            false,
        )
        .expect("writes");
        assert_eq!(committed_after_open(None), None, "{stale:?}");
    }
}

#[tokio::test]
async fn each_write_applied_takes_the_next_zxid_whatever_the_entries() {
    // Blank entries take no zxid; each write of a batched entry takes the
    // next one, in order, with one result per write.
    let dir = TempDir::new("apply");
    let mut sm = state_machine(&dir.0);
    let blank = Entry {
        log_id: log_id(1, 1, 1),
        payload: EntryPayload::Blank,
    };
    let batch = Entry {
        log_id: log_id(2, 1, 4),
        payload: EntryPayload::Normal(Command {
            writes: ["/c", "/a", "/d"]
                .iter()
                .map(|path| Write {
                    time_ms: 5,
                    txn: create_txn(path),
                    proposer: None,
                })
                .collect(),
        }),
    };
    let outcomes = sm
        .apply(vec![blank, command(2, 1, "/a"), command(3, 2, "/b"), batch])
        .await
        .expect("applies");
    assert_eq!(outcomes[0], Outcome::Nothing);
    assert!(matches!(
        &outcomes[1],
        Outcome::Writes(results) if matches!(results[..], [Ok(OpResult::Created { .. })])
    ));
    let Outcome::Writes(results) = &outcomes[3] else {
        panic!("{outcomes:?}");
    };
    assert!(matches!(
        results[..],
        [
            Ok(OpResult::Created { .. }),
            Err(arbor_protocol::ErrorCode::NodeExists),
            Ok(OpResult::Created { .. })
        ]
    ));
    let (applied, _) = sm.applied_state().await.expect("state");
    assert_eq!(applied, Some(log_id(2, 1, 4)));
    let shared = sm.shared();
    let state = shared.state.read();
    let czxid = |path: &str| state.tree.node(path).map(|n| n.czxid);
    assert_eq!(
        [czxid("/a"), czxid("/b"), czxid("/c"), czxid("/d")],
        [Some(1), Some(2), Some(3), Some(5)],
        "a failed write takes its zxid too, as in a standalone server"
    );
    assert_eq!(state.last_zxid(), 5);
}

#[tokio::test]
async fn a_snapshot_of_a_tree_installs_on_another_member_and_survives_its_restart() {
    // A lagging member gets the whole tree and its log position from the
    // leader's snapshot, and still has it after a restart.
    let leader_dir = TempDir::new("leader");
    let follower_dir = TempDir::new("follower");
    let mut leader = state_machine(&leader_dir.0);
    let entries: Vec<_> = (1..=50).map(|i| command(i, 1, &format!("/n{i}"))).collect();
    leader.apply(entries).await.expect("applies");
    let built = leader
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .expect("builds");
    assert_eq!(built.meta.last_log_id, Some(log_id(1, 1, 50)));

    let mut follower = state_machine(&follower_dir.0);
    let mut receiving = follower.begin_receiving_snapshot().await.expect("begins");
    let current = leader
        .get_current_snapshot()
        .await
        .expect("reads")
        .expect("there is one");
    let mut source = current.snapshot;
    tokio::io::copy(&mut *source, &mut *receiving)
        .await
        .expect("transfers");
    follower
        .install_snapshot(&current.meta, receiving)
        .await
        .expect("installs");
    let check = |sm: &ClusterStateMachine| {
        let shared = sm.shared();
        let state = shared.state.read();
        assert_eq!(
            state.tree.node("/n50").map(|n| n.data().to_vec()),
            Some(b"/n50".to_vec())
        );
        assert_eq!(state.last_zxid(), 50, "one zxid per write");
    };
    check(&follower);
    let (applied, _) = follower.applied_state().await.expect("state");
    assert_eq!(applied, Some(log_id(1, 1, 50)));

    drop(follower);
    let mut restarted = state_machine(&follower_dir.0);
    check(&restarted);
    let current = restarted.get_current_snapshot().await.expect("reads");
    assert_eq!(
        current.map(|s| s.meta.last_log_id),
        Some(Some(log_id(1, 1, 50)))
    );

    // A snapshot whose content is not what its meta says is refused.
    let mut wrong = restarted.begin_receiving_snapshot().await.expect("begins");
    let mut source = leader
        .get_current_snapshot()
        .await
        .expect("reads")
        .expect("one")
        .snapshot;
    tokio::io::copy(&mut *source, &mut *wrong)
        .await
        .expect("transfers");
    let mut meta = built.meta.clone();
    meta.last_log_id = Some(LogId::new(openraft::CommittedLeaderId::new(9, 9), 99));
    assert!(restarted.install_snapshot(&meta, wrong).await.is_err());
    check(&restarted);
}

#[tokio::test]
async fn a_session_moved_to_another_member_cannot_write_from_the_old_one() {
    // A client resumed its session on member 2: a write member 1 proposes
    // for it afterwards is refused with SessionMoved and changes nothing,
    // while member 2's writes land; the session's expiry (the leader's
    // decision) still applies.
    let dir = TempDir::new("moved");
    let mut sm = state_machine(&dir.0);
    let from = |member: MemberId, txn: Txn, index: u64| Entry {
        log_id: log_id(1, 1, index),
        payload: EntryPayload::Normal(Command::one(1, txn, Some(member))),
    };
    let create = |path: &str| Txn::Write {
        session_id: 7,
        op: MultiOp::Create {
            path: path.into(),
            data: Vec::new(),
            mode: CreateMode::Ephemeral,
        },
    };
    let outcomes = sm
        .apply(vec![
            from(
                1,
                Txn::CreateSession {
                    session_id: 7,
                    password: [0; 16],
                    timeout_ms: 4000,
                },
                1,
            ),
            from(1, create("/before"), 2),
            from(2, Txn::MoveSession { session_id: 7 }, 3),
            from(1, create("/stale"), 4),
            from(2, create("/after"), 5),
        ])
        .await
        .expect("applies");
    let only = |k: usize| match &outcomes[k] {
        Outcome::Writes(results) if results.len() == 1 => results[0].clone(),
        other => panic!("{other:?}"),
    };
    assert!(only(1).is_ok(), "{outcomes:?}");
    assert_eq!(only(3), Err(arbor_protocol::ErrorCode::SessionMoved));
    assert!(only(4).is_ok(), "{outcomes:?}");
    {
        let shared = sm.shared();
        let state = shared.state.read();
        assert!(state.tree.node("/before").is_some());
        assert!(
            state.tree.node("/stale").is_none(),
            "the stale write changed nothing"
        );
        assert!(state.tree.node("/after").is_some());
        assert_eq!(state.replica.session_owners.get(&7), Some(&2));
        assert_eq!(
            state.last_zxid(),
            4,
            "a write refused as moved takes no zxid"
        );
    }
    let expire = from(
        1,
        Txn::CloseSession {
            session_id: 7,
            reason: crate::txn::CloseReason::Expired,
        },
        6,
    );
    sm.apply(vec![expire]).await.expect("applies");
    let shared = sm.shared();
    let state = shared.state.read();
    assert!(
        state.tree.node("/after").is_none(),
        "expiry removed the ephemerals"
    );
    assert!(state.replica.session_owners.is_empty());
}
