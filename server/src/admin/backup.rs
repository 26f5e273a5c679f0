//! Backups of a live server (`arbor backup FILE`): a snapshot of the whole
//! state, exact as of one zxid, written from the same copy-on-write view a
//! periodic snapshot uses (writes wait only for the copy of the node
//! pointers), then read by the client in chunks over its own connection.
//!
//! The file is a snapshot file like those in the data directory: its header
//! and every record carry a crc32c, and `arbord restore` loads it whole,
//! checking them, before it installs it. The backup's own crc32c (of the
//! whole file) lets the client check what it received before it keeps it.
//!
//! Prepared backups live in `DATA_DIR/backups/`, at most
//! [`BACKUPS_PREPARED_MAX`] at a time; one is removed once it has been read
//! to its end, or [`BACKUP_IDLE_TIMEOUT`] after it was last read, and all
//! of them when the server starts.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use arbor_protocol::{BackupInfo, ErrorCode};
use parking_lot::Mutex;
use tracing::{info, warn};

use crate::context::Shared;
use crate::storage::snapshot;

/// Backups prepared and not yet read to their end, at most: each is a
/// whole snapshot on disk.
pub const BACKUPS_PREPARED_MAX: usize = 2;

/// A prepared backup nobody has read for this long is removed.
pub const BACKUP_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The directory of prepared backups, under the data directory.
pub const BACKUP_DIR: &str = "backups";

/// The prepared backups of a running server.
#[derive(Debug, Default)]
pub struct Backups {
    prepared: Mutex<Vec<Prepared>>,
    next_id: std::sync::atomic::AtomicU64,
}

#[derive(Debug)]
struct Prepared {
    info: BackupInfo,
    path: PathBuf,
    last_read: Instant,
}

/// Removes what an earlier run left in `data_dir`'s backup directory.
pub fn clear(data_dir: &Path) -> std::io::Result<()> {
    let dir = data_dir.join(BACKUP_DIR);
    match std::fs::remove_dir_all(&dir) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

impl Backups {
    /// Writes a backup of the state as it is now. Blocking: call it off the
    /// async workers.
    pub fn start(&self, shared: &Shared) -> Result<BackupInfo, ErrorCode> {
        self.remove_idle();
        if self.prepared.lock().len() >= BACKUPS_PREPARED_MAX {
            return Err(ErrorCode::LimitExceeded);
        }
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let dir = shared.config.data_dir.join(BACKUP_DIR).join(id.to_string());
        let started = Instant::now();
        let view = shared.state.read().view();
        let (zxid, nodes, sessions) = (
            view.last_zxid,
            view.tree.len() as u64,
            view.sessions.len() as u64,
        );
        let path = snapshot::write(&dir, &view).map_err(|err| {
            warn!(error = %err, "backup could not be written");
            ErrorCode::Internal
        })?;
        drop(view);
        let (bytes, crc32c) = checksum(&path).map_err(|err| {
            warn!(path = %path.display(), error = %err, "backup could not be read back");
            ErrorCode::Internal
        })?;
        let info = BackupInfo {
            id,
            zxid,
            bytes,
            crc32c,
            nodes,
            sessions,
        };
        info!(
            id,
            zxid = %arbor_protocol::Hex(zxid),
            nodes,
            bytes,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "backup prepared"
        );
        self.prepared.lock().push(Prepared {
            info: info.clone(),
            path,
            last_read: Instant::now(),
        });
        Ok(info)
    }

    /// Up to `max` bytes of backup `id` from `offset`; the backup is
    /// removed once its last byte has been read. Blocking.
    pub fn read(&self, id: u64, offset: u64, max: usize) -> Result<Vec<u8>, ErrorCode> {
        let (path, bytes) = {
            let mut prepared = self.prepared.lock();
            let backup = prepared
                .iter_mut()
                .find(|p| p.info.id == id)
                .ok_or(ErrorCode::NoNode)?;
            backup.last_read = Instant::now();
            (backup.path.clone(), backup.info.bytes)
        };
        if offset > bytes {
            return Err(ErrorCode::BadArguments);
        }
        let len = (bytes - offset).min(max as u64) as usize;
        let mut chunk = vec![0; len];
        let read = File::open(&path).and_then(|mut file| {
            file.seek(SeekFrom::Start(offset))?;
            file.read_exact(&mut chunk)
        });
        if let Err(err) = read {
            warn!(path = %path.display(), error = %err, "backup could not be read");
            return Err(ErrorCode::Internal);
        }
        if offset + len as u64 == bytes {
            self.remove(id);
        }
        Ok(chunk)
    }

    fn remove(&self, id: u64) {
        let removed = {
            let mut prepared = self.prepared.lock();
            let at = prepared.iter().position(|p| p.info.id == id);
            at.map(|at| prepared.remove(at))
        };
        if let Some(backup) = removed {
            remove_files(&backup.path);
        }
    }

    fn remove_idle(&self) {
        let idle: Vec<Prepared> = {
            let mut prepared = self.prepared.lock();
            let (idle, kept) = prepared
                .drain(..)
                .partition(|p| p.last_read.elapsed() >= BACKUP_IDLE_TIMEOUT);
            *prepared = kept;
            idle
        };
        for backup in idle {
            info!(id = backup.info.id, "backup not read for a minute; removed");
            remove_files(&backup.path);
        }
    }
}

/// Removes a backup's file and its directory.
fn remove_files(path: &Path) {
    let dir = path.parent().unwrap_or(path);
    if let Err(err) = std::fs::remove_dir_all(dir) {
        warn!(path = %dir.display(), error = %err, "cannot remove a backup");
    }
}

/// The size and crc32c of a file.
pub fn checksum(path: &Path) -> std::io::Result<(u64, u32)> {
    let mut file = File::open(path)?;
    let mut buffer = vec![0; 1024 * 1024];
    let (mut bytes, mut crc) = (0u64, 0u32);
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            return Ok((bytes, crc));
        }
        crc = crc32c::crc32c_append(crc, &buffer[..read]);
        bytes += read as u64;
    }
}
