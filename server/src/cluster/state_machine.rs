//! openraft's state machine: the same state machine and apply loop as a
//! standalone server ([`crate::pipeline::applier`]), fed by the replicated
//! log, with snapshots in the standalone snapshot format plus the replica
//! position ([`crate::storage::snapshot`]).
//!
//! Apply is not made durable by itself: after a restart the state is the
//! newest snapshot, and openraft applies the committed log after it again.
//! A snapshot is written from the copy-on-write view, off the apply path,
//! and is exact as of the log position recorded inside it. A snapshot
//! received from the leader is copied to a file of our own, verified by
//! loading it, and only then renamed into place and made the state.

use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    Entry, EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta, StorageError, StorageIOError,
    StoredMembership,
};
use parking_lot::Mutex;
use tokio::io::{AsyncSeekExt, AsyncWriteExt};
use tracing::info;

use super::records::{LogPosition, MemberAddr, MemberId, MembershipRecord};
use super::types::{Outcome, TypeConfig, Write};
use crate::context::Shared;
use crate::pipeline::applier::apply_committed;
use crate::pipeline::apply::StateMachine;
use crate::storage::snapshot;
use crate::txn::{CloseReason, Decision, Txn, TxnEntry};
use arbor_protocol::ErrorCode;

type Meta = SnapshotMeta<MemberId, MemberAddr>;

/// What apply does with one write.
enum Step {
    Apply(TxnEntry),
    /// Refused, without a zxid: a write of a session that now belongs to
    /// another member, or a decision of another term.
    Refused(ErrorCode),
}

/// What apply does with one entry: nothing (a blank or membership entry),
/// or one step per write of its command.
enum EntryPlan {
    Nothing,
    Writes(Vec<Step>),
}

/// A session's new owner (`None`: the session ends) after a batch.
type OwnerChanges = std::collections::BTreeMap<u64, Option<MemberId>>;

/// The snapshot openraft would send a lagging follower now.
#[derive(Debug, Clone)]
struct CurrentSnapshot {
    meta: Meta,
    path: PathBuf,
}

/// The replicated state machine of one member.
pub struct ClusterStateMachine {
    /// This member's id (owner of the sessions its clients use).
    member: MemberId,
    shared: Arc<Shared>,
    snapshot_dir: PathBuf,
    current: Arc<Mutex<Option<CurrentSnapshot>>>,
    /// Numbers the temporary files of snapshots being received.
    received: Arc<AtomicU64>,
}

/// Builds snapshots from the state as it is when asked.
pub struct SnapshotBuilder {
    shared: Arc<Shared>,
    snapshot_dir: PathBuf,
    current: Arc<Mutex<Option<CurrentSnapshot>>>,
}

fn meta_of(state: &StateMachine) -> Meta {
    let replica = &state.replica;
    let snapshot_id = match replica.last_applied {
        Some(LogPosition {
            term,
            leader,
            index,
        }) => format!("{term}-{leader}-{index}"),
        None => "empty".to_owned(),
    };
    SnapshotMeta {
        last_log_id: replica.last_applied_log_id(),
        last_membership: replica.stored_membership(),
        snapshot_id,
    }
}

fn read_error(err: impl std::error::Error + 'static) -> StorageError<MemberId> {
    StorageIOError::read_snapshot(None, &err).into()
}

fn write_error(err: impl std::error::Error + 'static) -> StorageError<MemberId> {
    StorageIOError::write_snapshot(None, &err).into()
}

impl ClusterStateMachine {
    /// The state machine over `shared`'s state, with snapshots in
    /// `snapshot_dir`. `shared`'s state is what [`load_newest`] found, and
    /// `loaded_from` the snapshot it came from.
    pub fn new(
        member: MemberId,
        shared: Arc<Shared>,
        snapshot_dir: &Path,
        loaded_from: Option<PathBuf>,
    ) -> Self {
        let current = loaded_from.map(|path| CurrentSnapshot {
            meta: meta_of(&shared.state.read()),
            path,
        });
        Self {
            member,
            shared,
            snapshot_dir: snapshot_dir.to_owned(),
            current: Arc::new(Mutex::new(current)),
            received: Arc::new(AtomicU64::new(0)),
        }
    }
}

/// The state in the newest snapshot in `dir` that verifies, and that
/// snapshot's path; or an empty state.
pub fn load_newest(dir: &Path) -> Result<(StateMachine, Option<PathBuf>), snapshot::SnapshotError> {
    for candidate in snapshot::list(dir)? {
        match snapshot::load(&candidate.path) {
            Ok(loaded) => return Ok((loaded.state, Some(candidate.path))),
            Err(err) => {
                tracing::warn!(path = %candidate.path.display(), error = %err, "snapshot does not verify; trying an older one")
            }
        }
    }
    Ok((StateMachine::new(), None))
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<MemberId>> {
        let (view, meta) = {
            let state = self.shared.state.read();
            (state.view(), meta_of(&state))
        };
        let dir = self.snapshot_dir.clone();
        let path = tokio::task::spawn_blocking(move || {
            let path = snapshot::write(&dir, &view)?;
            snapshot::retain(&dir, 1)?;
            Ok::<_, snapshot::SnapshotError>(path)
        })
        .await
        .map_err(write_error)?
        .map_err(write_error)?;
        info!(path = %path.display(), snapshot_id = %meta.snapshot_id, "snapshot built");
        let file = tokio::fs::File::open(&path).await.map_err(read_error)?;
        *self.current.lock() = Some(CurrentSnapshot {
            meta: meta.clone(),
            path,
        });
        Ok(Snapshot {
            meta,
            snapshot: Box::new(file),
        })
    }
}

impl RaftStateMachine<TypeConfig> for ClusterStateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<
        (
            Option<LogId<MemberId>>,
            StoredMembership<MemberId, MemberAddr>,
        ),
        StorageError<MemberId>,
    > {
        let state = self.shared.state.read();
        Ok((
            state.replica.last_applied_log_id(),
            state.replica.stored_membership(),
        ))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Outcome>, StorageError<MemberId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let Some(last) = entries.last().map(|entry| LogPosition::from(entry.log_id)) else {
            return Ok(Vec::new());
        };
        let (plan, owners) = self.plan(&entries);
        let membership = entries.iter().rev().find_map(|entry| match &entry.payload {
            EntryPayload::Membership(membership) => Some((
                LogPosition::from(entry.log_id),
                MembershipRecord::from(membership),
            )),
            _ => None,
        });
        let committed = plan
            .iter()
            .filter_map(|entry| match entry {
                EntryPlan::Writes(steps) => Some(steps),
                EntryPlan::Nothing => None,
            })
            .flatten()
            .filter_map(|step| match step {
                Step::Apply(txn) => Some(txn),
                Step::Refused(_) => None,
            });
        let mut moved_away = Vec::new();
        let mut results = apply_committed(&self.shared, committed, |state| {
            state.replica.last_applied = Some(last);
            if let Some((at, membership)) = membership {
                state.replica.membership_at = Some(at);
                state.replica.membership = membership;
            }
            for (session_id, owner) in owners {
                match owner {
                    Some(owner) if state.session(session_id).is_some() => {
                        let previous = state.replica.session_owners.insert(session_id, owner);
                        if previous == Some(self.member) && owner != self.member {
                            moved_away.push(session_id);
                        }
                    }
                    _ => {
                        state.replica.session_owners.remove(&session_id);
                    }
                }
            }
        })
        .into_iter();
        if !moved_away.is_empty() {
            let mut connections = self.shared.connections.lock();
            for session_id in moved_away {
                connections.moved_away(session_id);
            }
        }
        let outcomes = plan
            .iter()
            .map(|entry| match entry {
                EntryPlan::Nothing => Outcome::Nothing,
                EntryPlan::Writes(steps) => Outcome::Writes(
                    steps
                        .iter()
                        .map(|step| match step {
                            Step::Apply(_) => results.next().unwrap_or(Err(ErrorCode::Internal)),
                            Step::Refused(code) => Err(*code),
                        })
                        .collect(),
                ),
            })
            .collect();
        Ok(outcomes)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            shared: self.shared.clone(),
            snapshot_dir: self.snapshot_dir.clone(),
            current: self.current.clone(),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<tokio::fs::File>, StorageError<MemberId>> {
        let path = self.temporary("receiving");
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .await
            .map_err(write_error)?;
        Ok(Box::new(file))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        mut received: Box<tokio::fs::File>,
    ) -> Result<(), StorageError<MemberId>> {
        // Our own copy, whatever file the data arrived in.
        let temp = self.temporary("installing");
        let mut copy = tokio::fs::File::create(&temp).await.map_err(write_error)?;
        received.flush().await.map_err(read_error)?;
        received
            .seek(SeekFrom::Start(0))
            .await
            .map_err(read_error)?;
        tokio::io::copy(&mut *received, &mut copy)
            .await
            .map_err(write_error)?;
        copy.sync_all().await.map_err(write_error)?;
        drop((copy, received));
        let dir = self.snapshot_dir.clone();
        let expected = meta.last_log_id.map(LogPosition::from);
        let (state, path) =
            tokio::task::spawn_blocking(move || install_file(&dir, &temp, expected))
                .await
                .map_err(write_error)?
                .map_err(write_error)?;
        info!(path = %path.display(), snapshot_id = %meta.snapshot_id, nodes = state.tree.len(), "installed a snapshot from the leader");
        replace_state(&self.shared, state);
        *self.current.lock() = Some(CurrentSnapshot {
            meta: meta.clone(),
            path,
        });
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<MemberId>> {
        let Some(current) = self.current.lock().clone() else {
            return Ok(None);
        };
        let file = tokio::fs::File::open(&current.path)
            .await
            .map_err(read_error)?;
        Ok(Some(Snapshot {
            meta: current.meta,
            snapshot: Box::new(file),
        }))
    }
}

impl ClusterStateMachine {
    /// Decides each write's fate, in order, and the session owners after
    /// them: a write proposed by a member that no longer owns its session
    /// is refused; opening or resuming a session makes the proposer its
    /// owner; a session's end forgets it; a leader's decision applies only
    /// from an entry of the term it was decided in. Every write applied
    /// takes the next zxid, so zxids are dense, the same on every member
    /// (all apply the same entries from the same state) and keep increasing
    /// across leader changes and restarts.
    fn plan(&self, entries: &[Entry<TypeConfig>]) -> (Vec<EntryPlan>, OwnerChanges) {
        let state = self.shared.state.read();
        let mut zxid = state.last_zxid();
        let mut changes = OwnerChanges::new();
        let plan = entries
            .iter()
            .map(|entry| {
                let EntryPayload::Normal(command) = &entry.payload else {
                    return EntryPlan::Nothing;
                };
                let term = entry.log_id.leader_id.term;
                let steps = command
                    .writes
                    .iter()
                    .map(|write| {
                        let Some(txn) = admitted(write, term, &state, &mut changes) else {
                            return Step::Refused(refusal(write));
                        };
                        zxid += 1;
                        Step::Apply(TxnEntry {
                            zxid,
                            time_ms: write.time_ms,
                            txn,
                        })
                    })
                    .collect();
                EntryPlan::Writes(steps)
            })
            .collect();
        (plan, changes)
    }

    /// The server state this state machine applies to.
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// A fresh temporary name in the snapshot directory, removed at start
    /// if a crash leaves it ([`snapshot::remove_temporaries`]).
    fn temporary(&self, what: &str) -> PathBuf {
        let n = self.received.fetch_add(1, Ordering::Relaxed);
        self.snapshot_dir
            .join(format!("snapshot.{what}-{}-{n}.tmp", std::process::id()))
    }
}

/// The txn `write` applies as, in an entry of `term`, noting the session
/// owners it changes; `None` if it is refused: a write of a session that
/// now belongs to another member, or a decision of another term.
fn admitted(
    write: &Write,
    term: u64,
    state: &StateMachine,
    changes: &mut OwnerChanges,
) -> Option<Txn> {
    if let Txn::Decided {
        term: decided_in,
        decision,
    } = &write.txn
    {
        if *decided_in != term {
            info!(
                decided_in,
                entry_term = term,
                ?decision,
                "a decision of another term is not applied"
            );
            return None;
        }
        if let Decision::Expire { session_id } = decision {
            changes.insert(*session_id, None);
        }
        return Some(decision.txn());
    }
    let Some(session_id) = write.txn.session_id() else {
        return Some(write.txn.clone());
    };
    let proposer = write.proposer;
    let owner = match changes.get(&session_id) {
        Some(owner) => *owner,
        None => state.replica.session_owners.get(&session_id).copied(),
    };
    match &write.txn {
        Txn::CreateSession { .. }
        | Txn::OpenSession { .. }
        | Txn::MoveSession { .. }
        | Txn::ClaimSession { .. }
        | Txn::OpenSessionFrom { .. }
        | Txn::ClaimSessionFrom { .. } => {
            changes.insert(session_id, proposer.or(owner));
        }
        // A leader's decision written before decisions carried their term.
        Txn::CloseSession {
            reason: CloseReason::Expired,
            ..
        } => {
            changes.insert(session_id, None);
        }
        _ if proposer.is_some() && owner.is_some() && proposer != owner => return None,
        Txn::CloseSession { .. } => {
            changes.insert(session_id, None);
        }
        _ => {}
    }
    Some(write.txn.clone())
}

/// What a refused write answers: its session moved, or (a decision, which
/// nobody waits on) it was not this leader's to make.
fn refusal(write: &Write) -> ErrorCode {
    match write.txn {
        Txn::Decided { .. } => ErrorCode::NotLeader,
        _ => ErrorCode::SessionMoved,
    }
}

/// Why a received snapshot was not installed.
#[derive(Debug, thiserror::Error)]
enum InstallError {
    #[error(transparent)]
    Snapshot(#[from] snapshot::SnapshotError),
    #[error(
        "the snapshot holds the state as of {found:?}, but the leader sent it as {expected:?}"
    )]
    WrongPosition {
        expected: Option<LogPosition>,
        found: Option<LogPosition>,
    },
    #[error("cannot put the snapshot in place: {0}")]
    Io(#[from] std::io::Error),
}

/// Verifies the copy by loading it, then makes it the only snapshot.
fn install_file(
    dir: &Path,
    temp: &Path,
    expected: Option<LogPosition>,
) -> Result<(StateMachine, PathBuf), InstallError> {
    let loaded = snapshot::load(temp);
    let state = match loaded {
        Ok(loaded) => loaded.state,
        Err(err) => {
            let _ = std::fs::remove_file(temp);
            return Err(err.into());
        }
    };
    if state.replica.last_applied != expected {
        let _ = std::fs::remove_file(temp);
        return Err(InstallError::WrongPosition {
            expected,
            found: state.replica.last_applied,
        });
    }
    let path = dir.join(snapshot::file_name(state.last_zxid()));
    std::fs::rename(temp, &path)?;
    snapshot::sync_dir(dir)?;
    snapshot::retain(dir, 1)?;
    Ok((state, path))
}

/// Makes `state` the member's state: the tracker re-tracks its sessions
/// with full timeouts, and the published zxid moves to it.
fn replace_state(shared: &Shared, state: StateMachine) {
    let now_ms = shared.clock.monotonic_ms();
    let mut current = shared.state.write();
    let mut tracker = shared.tracker.lock();
    for (session_id, _) in current.sessions() {
        tracker.remove(session_id);
    }
    for (session_id, record) in state.sessions() {
        tracker.add(session_id, record.timeout_ms, now_ms);
    }
    shared.publish_zxid(state.last_zxid());
    *current = state;
}
