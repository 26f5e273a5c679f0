//! Recovery: the newest snapshot that verifies, then the log after it.
//!
//! Start-up trusts nothing it cannot check. A snapshot that fails
//! verification is skipped (with a warning naming it) in favour of an older
//! one, which is safe because the log is kept from the oldest retained
//! snapshot on. The log must then continue that snapshot without a gap; a torn
//! tail on the last segment is the only damage repaired (by the writer, which
//! truncates it), because it can only hold writes that were never
//! acknowledged. Anything else — a corrupt record before the tail, a missing
//! segment, a log that does not reach back to any usable snapshot — stops the
//! start with a message that says which file, where, and what to do.

use std::path::{Path, PathBuf};

use arbor_protocol::Hex;
use arbor_protocol::Zxid;
use tracing::{info, warn};

use crate::pipeline::apply::StateMachine;
use crate::storage::error::StorageError;
use crate::storage::snapshot::{self, SnapshotError};
use crate::storage::txnlog::{self, LogTail};

/// The first zxid ever given out: epoch 1, counter 1.
pub const FIRST_ZXID: Zxid = (1 << 32) | 1;

/// Where things live inside the data directory.
#[derive(Debug, Clone)]
pub struct DataLayout {
    pub data_dir: PathBuf,
    pub log_dir: PathBuf,
    pub snapshot_dir: PathBuf,
    pub lock_file: PathBuf,
}

impl DataLayout {
    pub fn new(data_dir: &Path) -> Self {
        Self {
            data_dir: data_dir.to_owned(),
            log_dir: data_dir.join("log"),
            snapshot_dir: data_dir.join("snapshots"),
            lock_file: data_dir.join("LOCK"),
        }
    }
}

/// Why the server refuses to start from a data directory.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error(transparent)]
    Log(#[from] StorageError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(
        "{found}, and no snapshot that verifies covers the writes before it{skipped}. \
         Restore the missing log segments into {log_dir}, or start from a backup in a new directory \
         (`arbord restore BACKUP --data-dir NEW_DIR`, from `arbor backup`; see docs/operations.md); \
         starting anyway would silently lose acknowledged writes"
    )]
    NoBase {
        log_dir: PathBuf,
        snapshot_dir: PathBuf,
        /// What the log holds, in words.
        found: String,
        skipped: String,
    },
}

/// A snapshot passed over because it did not verify.
#[derive(Debug)]
pub struct SkippedSnapshot {
    pub path: PathBuf,
    pub reason: String,
}

/// The recovered state and what recovery found on the way.
#[derive(Debug)]
pub struct Recovery {
    pub state: StateMachine,
    /// The snapshot the state was built from, if any.
    pub snapshot: Option<snapshot::SnapshotFile>,
    pub skipped: Vec<SkippedSnapshot>,
    /// What the log reader found; the writer continues from it.
    pub tail: LogTail,
    /// Log records applied on top of the snapshot.
    pub replayed: u64,
    /// The epoch for zxids of this run: one past any epoch in the data.
    pub epoch: u64,
}

/// Rebuilds the state from `layout`. Read-only: the caller repairs a torn
/// tail when it opens the log for writing.
pub fn recover(layout: &DataLayout) -> Result<Recovery, RecoveryError> {
    let mut skipped = Vec::new();
    let mut base = None;
    for candidate in snapshot::list(&layout.snapshot_dir)? {
        match snapshot::load(&candidate.path) {
            Ok(loaded) => {
                info!(path = %candidate.path.display(), zxid = %Hex(candidate.zxid), nodes = loaded.nodes, sessions = loaded.sessions, "loaded snapshot");
                base = Some((candidate, loaded.state));
                break;
            }
            Err(err) => {
                warn!(path = %candidate.path.display(), error = %err, "snapshot does not verify; trying an older one");
                skipped.push(SkippedSnapshot {
                    path: candidate.path,
                    reason: err.to_string(),
                });
            }
        }
    }
    let (snapshot, mut state) = match base {
        Some((file, state)) => (Some(file), state),
        None => (None, StateMachine::new()),
    };
    let after = state.last_zxid();
    let mut first_replayed = None;
    let mut replayed = 0u64;
    let tail = txnlog::read_log(&layout.log_dir, after, |entry| {
        first_replayed.get_or_insert(entry.zxid);
        state.apply(&entry);
        replayed += 1;
        Ok(())
    })?;
    if snapshot.is_none() {
        // Without a snapshot the log must reach back to the very first write;
        // and snapshots that all failed mean there was state to recover.
        let found = match first_replayed {
            Some(first) if first != FIRST_ZXID => Some(format!(
                "the log in {} starts at zxid {first:#x}",
                layout.log_dir.display()
            )),
            None if !skipped.is_empty() => {
                Some(format!("the log in {} is empty", layout.log_dir.display()))
            }
            _ => None,
        };
        if let Some(found) = found {
            let skipped = if skipped.is_empty() {
                String::new()
            } else {
                let names: Vec<String> = skipped
                    .iter()
                    .map(|s| format!("{} ({})", s.path.display(), s.reason))
                    .collect();
                format!(
                    " (snapshots that failed verification: {})",
                    names.join("; ")
                )
            };
            return Err(RecoveryError::NoBase {
                log_dir: layout.log_dir.clone(),
                snapshot_dir: layout.snapshot_dir.clone(),
                found,
                skipped,
            });
        }
    }
    let newest = tail.last_zxid.unwrap_or(0).max(state.last_zxid());
    let epoch = (newest >> 32) + 1;
    Ok(Recovery {
        state,
        snapshot,
        skipped,
        tail,
        replayed,
        epoch,
    })
}

/// What `arbord --verify` found, for people.
#[derive(Debug)]
pub struct VerifyReport {
    pub recovery: Recovery,
}

impl std::fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.recovery;
        for skipped in &r.skipped {
            writeln!(
                f,
                "snapshot {}: DOES NOT VERIFY: {}",
                skipped.path.display(),
                skipped.reason
            )?;
        }
        match &r.snapshot {
            Some(s) => writeln!(f, "snapshot {}: ok, zxid {:#x}", s.path.display(), s.zxid)?,
            None => writeln!(
                f,
                "snapshot: none (the log is replayed from the first write)"
            )?,
        }
        for segment in &r.tail.segments {
            let range = match segment.last_zxid {
                Some(last) => format!("zxid {:#x}..={last:#x}", segment.first_zxid),
                None => format!("starts at zxid {:#x}, no whole record", segment.first_zxid),
            };
            writeln!(
                f,
                "log segment {}: {range}, valid to byte {}",
                segment.path.display(),
                segment.valid_end
            )?;
        }
        if let Some(torn) = &r.tail.torn {
            writeln!(
                f,
                "torn tail: {} bytes after byte {} of {} are not whole records; they were never acknowledged and will be truncated at start",
                torn.bytes, torn.offset, torn.path.display()
            )?;
        }
        writeln!(
            f,
            "log: {} records read, {} replayed after the snapshot; last zxid {:#x}",
            r.tail.records,
            r.replayed,
            r.state.last_zxid()
        )?;
        write!(
            f,
            "state: {} znodes, {} sessions; the next start uses epoch {}",
            r.state.tree.len(),
            r.state.session_count(),
            r.epoch
        )
    }
}

/// Checks a data directory without changing it: the same reading as a start.
pub fn verify(data_dir: &Path) -> Result<VerifyReport, RecoveryError> {
    let recovery = recover(&DataLayout::new(data_dir))?;
    Ok(VerifyReport { recovery })
}
