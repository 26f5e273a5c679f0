//! Why the write-ahead log could not be read, repaired or written.
//!
//! Every variant carries the file, the byte offset and the zxids involved,
//! and its message says what an operator can do about it. Corruption is
//! never repaired silently: the only damage the log fixes by itself is a torn
//! tail (see [`crate::storage::txnlog`]), which holds no acknowledged write.

use std::path::{Path, PathBuf};

use arbor_protocol::codec::EncodeError;
use arbor_protocol::Zxid;

use crate::storage::txnlog::format::{RecordProblem, FORMAT_VERSION};

/// An error of the durable storage layer.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("cannot {op} {path}: {source}")]
    Io {
        /// What we were doing, as a verb phrase ("open", "fsync", ...).
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "segment {path} {problem}: the log is corrupt. {}",
        move_aside_advice(.path, *.last_good_zxid)
    )]
    CorruptHeader {
        path: PathBuf,
        /// What is wrong, and why it is not a torn (harmless) segment.
        problem: String,
        /// The last whole valid record before this segment (0: none).
        last_good_zxid: Zxid,
    },

    #[error(
        "segment {path} is in log format version {version}, but this arbord reads only version {}: \
         run the arbord release that wrote it",
        FORMAT_VERSION
    )]
    UnsupportedVersion { path: PathBuf, version: u32 },

    #[error(
        "segment {path} says in its header that it starts at zxid {header_zxid:#x}, but its name says \
         {name_zxid:#x}: it was renamed or copied in by hand. Give it back its own name, or restore the \
         data directory from a backup"
    )]
    NameMismatch {
        path: PathBuf,
        header_zxid: Zxid,
        name_zxid: Zxid,
    },

    #[error(
        "record at byte {offset} of {path} {problem}, {}: the log is corrupt{}. {}",
        corrupt_context(*.valid_record_at),
        corrupt_where(*.valid_record_at),
        truncate_advice(.path, *.offset, *.last_good_zxid)
    )]
    CorruptRecord {
        path: PathBuf,
        offset: u64,
        problem: RecordProblem,
        /// In the last segment: where a whole valid record was found after
        /// the bad one (which is why this is not a torn tail). `None`: the
        /// segment is not the last one, where nothing may be torn.
        valid_record_at: Option<u64>,
        /// The last whole valid record before the bad one (0: none).
        last_good_zxid: Zxid,
    },

    #[error(
        "the first record of {path} (byte {offset}) has zxid {zxid:#x}, but the segment header says the \
         segment starts at {first_zxid:#x}: the log is corrupt. {}",
        truncate_advice(.path, *.offset, *.last_good_zxid)
    )]
    FirstRecordMismatch {
        path: PathBuf,
        offset: u64,
        zxid: Zxid,
        first_zxid: Zxid,
        last_good_zxid: Zxid,
    },

    #[error(
        "record at byte {offset} of {path} has zxid {zxid:#x}, but the record before it (in {prev_path}) has \
         zxid {prev_zxid:#x}: the writes between them are missing (was a segment deleted or lost?). Restore the \
         missing segment or the data directory from a backup; or, to start from the last good state, move \
         {path} and every later segment aside (every write after zxid {prev_zxid:#x} would be lost)"
    )]
    Gap {
        path: PathBuf,
        offset: u64,
        zxid: Zxid,
        prev_path: PathBuf,
        prev_zxid: Zxid,
    },

    #[error(
        "record at byte {offset} of {path} has zxid {zxid:#x}, not above the zxid {prev_zxid:#x} of the record \
         before it (in {prev_path}): zxids must strictly increase, so the log is corrupt. {}",
        truncate_advice(.path, *.offset, *.prev_zxid)
    )]
    NotIncreasing {
        path: PathBuf,
        offset: u64,
        zxid: Zxid,
        prev_path: PathBuf,
        prev_zxid: Zxid,
    },

    #[error(
        "the log does not continue the snapshot at zxid {after_zxid:#x}: the first later record (byte {offset} \
         of {path}) has zxid {zxid:#x}, so the writes between them are missing. Restore the log segments that \
         held them, or a newer snapshot, from a backup"
    )]
    SnapshotGap {
        path: PathBuf,
        offset: u64,
        zxid: Zxid,
        after_zxid: Zxid,
    },

    #[error(
        "refusing to append zxid {zxid:#x} after zxid {last_zxid:#x}: it does not continue the log (the next \
         zxid must be {}). Nothing was written; this is a bug in the caller",
        expected_next(*.last_zxid)
    )]
    Discontinuous { zxid: Zxid, last_zxid: Zxid },

    #[error(
        "refusing to append zxid {zxid:#x}: its record body is {bytes} bytes, over the limit of {max} bytes. \
         Nothing was written"
    )]
    RecordTooLarge { zxid: Zxid, bytes: usize, max: u32 },

    #[error("cannot encode the record for zxid {zxid:#x}: {source}. Nothing was written")]
    Encode {
        zxid: Zxid,
        #[source]
        source: EncodeError,
    },

    #[error(
        "an earlier write or fsync of {path} failed, so what it holds on disk is unknown: the writer accepts \
         nothing more. Restart the server to recover from what is durable"
    )]
    WriterFailed { path: PathBuf },

    #[error(
        "the log in {dir} changed since it was read ({detail}): read it again before opening it for writing \
         (is another arbord using the same data directory?)"
    )]
    TailMismatch { dir: PathBuf, detail: String },

    #[error("invalid log options: {detail}")]
    InvalidOptions { detail: String },
}

impl StorageError {
    /// Wraps an `io::Error` with what we were doing and to which file.
    pub fn io<'a>(
        op: &'static str,
        path: &'a Path,
    ) -> impl FnOnce(std::io::Error) -> StorageError + 'a {
        move |source| StorageError::Io {
            op,
            path: path.to_owned(),
            source,
        }
    }
}

fn expected_next(last_zxid: Zxid) -> String {
    match last_zxid {
        // An empty log: the caller knows where its history starts.
        0 => "above 0".to_owned(),
        _ => format!(
            "{:#x}, or counter 1 of a later epoch",
            last_zxid.wrapping_add(1)
        ),
    }
}

fn corrupt_context(valid_record_at: Option<u64>) -> String {
    match valid_record_at {
        Some(at) => format!("yet a whole valid record follows it at byte {at}"),
        None => "and it is not in the last segment".to_owned(),
    }
}

fn corrupt_where(valid_record_at: Option<u64>) -> &'static str {
    match valid_record_at {
        // A torn write only ever damages the very end of the log.
        Some(_) => " in the middle, not torn at its end",
        None => "",
    }
}

/// How to start from a backup instead, in the words of every corruption
/// message.
const RESTORE_ADVICE: &str = "Start from a backup in a new directory (`arbord restore BACKUP \
    --data-dir NEW_DIR`, with the file `arbor backup` wrote; see docs/operations.md)";

fn truncate_advice(path: &Path, offset: u64, last_good_zxid: Zxid) -> String {
    format!(
        "{RESTORE_ADVICE}; or, to start from the last good state, truncate {} to {offset} bytes and move \
         any later segments aside ({})",
        path.display(),
        writes_lost(last_good_zxid)
    )
}

fn move_aside_advice(path: &Path, last_good_zxid: Zxid) -> String {
    format!(
        "{RESTORE_ADVICE}; or, to start from the last good state, move {} and every later segment aside \
         ({})",
        path.display(),
        writes_lost(last_good_zxid)
    )
}

fn writes_lost(last_good_zxid: Zxid) -> String {
    match last_good_zxid {
        0 => "every write in the log would be lost".to_owned(),
        _ => format!("every write after zxid {last_good_zxid:#x} would be lost"),
    }
}
