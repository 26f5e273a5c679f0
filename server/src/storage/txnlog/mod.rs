//! The transaction log (write-ahead log): every txn, in zxid order, made
//! durable before it is applied or acknowledged.
//!
//! The log is a directory of segment files. [`TxnLogWriter`] appends batches
//! (one write and one fdatasync per batch: group commit); [`read_log`] reads
//! everything back at start-up and reports where the log ends
//! ([`LogTail`]); [`purge`] deletes segments a snapshot has made redundant.
//!
//! # Format
//!
//! Segment files are named `log.<first zxid as 16 lowercase hex digits>`, so
//! name order is zxid order. All integers are big-endian.
//!
//! ```text
//! segment = header record* [zero-fill]
//! header  = magic:"ARBORWAL" (8 bytes)
//!           format_version:u32 (= 1)
//!           first_zxid:u64          ; = the zxid in the file name
//!           header_crc:u32          ; crc32c of the 20 bytes before it
//! record  = length:u32              ; 1 ..= RECORD_BYTES_MAX; 0 = end of log
//!           crc:u32                 ; crc32c of the 4 length bytes, then the body
//!           body:length bytes       ; a TxnEntry, bincode via arbor_protocol::codec
//! zero-fill = 0x00*                 ; preallocated space not yet written
//! ```
//!
//! Beside the segments, `spare.wal` is the next segment being zero-filled
//! ahead (`crate::storage::spare`); it is not a segment name, so readers skip it.
//!
//! The first record of a segment has zxid `first_zxid`. Zxids are
//! `(epoch << 32) | counter`; the epoch is bumped at each start and its first
//! zxid has counter 1. A record's zxid therefore either is the previous one
//! plus 1, or has a higher epoch and counter 1 ([`format::continues`]);
//! anything else is a gap. This holds within and across segments.
//!
//! # What the reader accepts: torn tail versus corruption
//!
//! A crash can cut only the last write, so damage is acceptable only at the
//! end of the last segment, and only if it cannot hide an acknowledged
//! record. Reading a segment stops at the first record that is not whole and
//! valid: a length over the limit or past the end of the file, fewer than 8
//! bytes left, a failed checksum, a body that does not decode, or a zero
//! length with non-zero bytes after it. (A zero length followed only by zeros
//! to the end of the file is the clean end of the log, in any segment.) Then:
//!
//! * not the last segment → [`StorageError::CorruptRecord`];
//! * the last segment → every later byte offset is tried as the start of a
//!   record. If a whole valid record is found there (length fits, checksum
//!   holds, it decodes, its zxid is above the last good one) the damage is
//!   in the middle → [`StorageError::CorruptRecord`], naming both offsets.
//!   Otherwise the bytes from the bad record on are a torn tail, reported in
//!   [`LogTail::torn`]; the writer truncates them.
//!
//! A header that is short, lacks the magic or fails its checksum is likewise
//! a torn (empty) segment if it is the last one and only zeros follow it;
//! otherwise it is corruption. A wrong format version or a first zxid that
//! does not match the file name is always an error. Records with valid
//! checksums whose zxids break the ordering rule are always errors, as is a
//! first record after `after_zxid` (when it is not 0) that does not continue
//! it. Every error names the file and byte offset and says what to do.
//!
//! A consequence: damage to the very last record(s) of the log, with nothing
//! valid after it, is indistinguishable from a torn write and is dropped
//! (with a warning). A checksum cannot tell the two apart.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use arbor_protocol::Hex;
use arbor_protocol::Zxid;
use tracing::{debug, info};

use crate::storage::error::StorageError;

pub mod format;
mod reader;
mod writer;

#[cfg(test)]
mod tests;

pub use format::{RECORD_BYTES_MAX, SEGMENT_PREFIX};
pub use reader::{read_log, read_segments, LogTail, SegmentInfo, TornTail};
pub use writer::{
    FsyncPolicy, TxnLogOptions, TxnLogWriter, PREALLOCATE_BYTES_DEFAULT, PREALLOCATE_BYTES_MAX,
    SEGMENT_BYTES_DEFAULT,
};

/// The segments in `dir`, in zxid order. Files whose names are not segment
/// names are ignored; a missing directory holds no segments.
pub fn list_segments(dir: &Path) -> Result<Vec<(Zxid, PathBuf)>, StorageError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(StorageError::io("list", dir)(err)),
    };
    let mut segments = Vec::new();
    for entry in entries {
        let entry = entry.map_err(StorageError::io("list", dir))?;
        let name = entry.file_name();
        match name.to_str().and_then(format::parse_segment_file_name) {
            Some(zxid) => segments.push((zxid, entry.path())),
            None => {
                debug!(dir = %dir.display(), name = %name.to_string_lossy(), "ignoring a file that is not a log segment")
            }
        }
    }
    segments.sort_unstable_by_key(|(zxid, _)| *zxid);
    Ok(segments)
}

/// Deletes the segments every record of which is ≤ `keep_after_zxid`:
/// segment i goes iff segment i+1 exists and starts at or before
/// `keep_after_zxid + 1`. The last segment is never deleted. Returns the
/// paths deleted, oldest first.
///
/// Deletes oldest first and syncs the directory after each one, so that a
/// crash in the middle leaves a shorter log, never one with a hole (which
/// the reader would rightly call a gap).
///
/// A segment leaves the log by a rename (to `<name>.purging`, which no
/// reader lists) and is then freed in steps
/// (`storage::delete_gradually`), so the log's
/// own fdatasync never waits behind one long unlink. Leftovers of a crash
/// in the middle are removed by the next purge.
pub fn purge(dir: &Path, keep_after_zxid: Zxid) -> Result<Vec<PathBuf>, StorageError> {
    remove_leftovers(dir)?;
    let segments = list_segments(dir)?;
    let mut deleted = Vec::new();
    for pair in segments.windows(2) {
        let ((first_zxid, path), (next_first_zxid, _)) = (&pair[0], &pair[1]);
        if *next_first_zxid > keep_after_zxid.saturating_add(1) {
            break;
        }
        let mut purging = path.clone().into_os_string();
        purging.push(PURGING_SUFFIX);
        let purging = PathBuf::from(purging);
        fs::rename(path, &purging).map_err(StorageError::io("rename", path))?;
        sync_dir(dir)?;
        crate::storage::delete_gradually(&purging).map_err(StorageError::io("delete", &purging))?;
        info!(path = %path.display(), first_zxid = %Hex(*first_zxid), keep_after_zxid = %Hex(keep_after_zxid), "purged log segment");
        deleted.push(path.clone());
    }
    Ok(deleted)
}

/// What a segment being purged is renamed to end with.
const PURGING_SUFFIX: &str = ".purging";

/// Deletes segments a crash left half-purged.
fn remove_leftovers(dir: &Path) -> Result<(), StorageError> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .ends_with(PURGING_SUFFIX)
        {
            let path = entry.path();
            crate::storage::delete_gradually(&path).map_err(StorageError::io("delete", &path))?;
        }
    }
    Ok(())
}

/// Makes the directory's entries (files created, deleted) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(StorageError::io("fsync the directory", dir))
}
