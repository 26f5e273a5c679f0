//! `arbord restore BACKUP --data-dir DIR`: a data directory made from a
//! backup (`arbor backup`), from which `arbord --data-dir DIR` starts with
//! the tree and sessions as of the backup's zxid.
//!
//! The backup is loaded whole first, every checksum checked, so a damaged
//! file is refused before anything is written. Only an empty (or missing)
//! directory is restored into: restoring over a server's data would mix
//! two histories. The state is written again as the directory's only
//! snapshot, with an empty log; the next start numbers its writes in a new
//! epoch, above every zxid of the backup. A member's backup carries its
//! place in the replicated log; a restore drops it: the directory is a
//! standalone server's.

use std::fs;
use std::path::{Path, PathBuf};

use arbor_protocol::Zxid;

use crate::cluster::records::AppliedPosition;
use crate::storage::recovery::DataLayout;
use crate::storage::snapshot::{self, SnapshotError};

/// What was restored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    pub zxid: Zxid,
    pub nodes: u64,
    pub sessions: u64,
    /// Where the snapshot now is.
    pub path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("{path} is not empty: restore into a new, empty directory (restoring over a server's data would mix two histories)")]
    NotEmpty { path: PathBuf },
    #[error("the backup cannot be restored: {0}")]
    Backup(#[source] SnapshotError),
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub fn restore(backup: &Path, data_dir: &Path) -> Result<Restored, RestoreError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| RestoreError::Io { path, source }
    };
    match fs::read_dir(data_dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(RestoreError::NotEmpty {
                    path: data_dir.to_owned(),
                });
            }
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(io(data_dir)(err)),
    }
    let loaded = snapshot::load(backup).map_err(RestoreError::Backup)?;
    let mut state = loaded.state;
    state.replica = AppliedPosition::default();
    let zxid = state.last_zxid();
    let layout = DataLayout::new(data_dir);
    for dir in [&layout.data_dir, &layout.log_dir, &layout.snapshot_dir] {
        fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let path =
        snapshot::write(&layout.snapshot_dir, &state.view()).map_err(RestoreError::Backup)?;
    Ok(Restored {
        zxid,
        nodes: loaded.nodes,
        sessions: loaded.sessions,
        path,
    })
}
