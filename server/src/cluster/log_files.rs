//! The replicated log on disk: segments of records, each record one raft
//! entry with its term and index. Synchronous; the log store's I/O thread
//! ([`super::log_store`]) is its only user once the server runs.
//!
//! # Format
//!
//! The record framing and the torn-tail rule are the write-ahead log's
//! ([`crate::storage::txnlog`]); what differs is the key (the raft index, not
//! the zxid) and that a suffix may be cut off (raft truncates a follower's
//! log where it conflicts with the leader's). Integers are big-endian.
//!
//! ```text
//! <data-dir>/raft/log/raft.<first index, 16 lowercase hex digits>
//!
//! segment = header record*
//! header  = magic:"ARBORRLG" (8 bytes)
//!           format_version:u32 (= 1)
//!           first_index:u64          ; = the index in the file name
//!           prev_index:u64           ; the last index before this segment
//!                                    ; when it was started (u64::MAX: none)
//!           header_crc:u32           ; crc32c of the 28 bytes before it
//! record  = length:u32               ; 1 ..= RECORD_BYTES_MAX
//!           crc:u32                  ; crc32c of the 4 length bytes, then the body
//!           body:length bytes        ; a LogRecord, bincode via arbor_protocol::codec:
//!                                    ;   position = term, leader member, index
//!                                    ;   payload  = Blank | Command | Membership
//! ```
//!
//! The last segment may end in zeros: space written ahead of the records
//! (zeros actually written, not a hole), so that syncing an append does not
//! also have to record a new file size and new blocks. A reader takes a zero
//! length followed only by zeros as the end of the log. A segment is trimmed
//! to its records before the next one is started, so no other segment has
//! zeros.
//!
//! The zeros come from a spare made ahead (`crate::storage::spare`), as
//! the write-ahead log's do: when a segment's zeros run out, the log rolls
//! into the spare, whose header is written over its first zeros before it
//! is renamed into place. Only when no spare is ready does a segment grow
//! itself, `preallocate_bytes` at a time, on the append path; that write of
//! fresh zeros held the next sync for milliseconds.
//!
//! Record k of a segment has index `first_index + k`. A segment names the
//! last index before it, so a segment file lost from the middle of the log
//! is always noticed. Raft itself never leaves a gap in the log; openraft's
//! conformance suite does, and a segment started after one says so in its
//! `prev_index`. Appending at an index the log already has replaces the log
//! from there (a truncation first). Entries up to the
//! purged position (kept in `raft/purged`, see [`super::meta_file`]) may
//! still sit in the oldest segment; they are skipped.
//!
//! # Torn tail versus corruption
//!
//! As in the write-ahead log: reading a segment stops at the first record
//! that is not whole and valid. In any segment but the last that is
//! corruption. In the last, every later offset is tried as the start of a
//! record; a valid record there with a higher index means damage in the
//! middle (corruption, named with both offsets), otherwise the rest is a
//! torn write, cut off when the log is opened: it was never acknowledged,
//! because an entry counts only once its batch was synced.
//!
//! # Truncation and purge
//!
//! Truncating from index i cuts the segment holding i at that record's
//! offset and deletes every later segment (newest first, so a crash leaves a
//! shorter log, never one with a hole). Purging through i deletes the
//! segments whose every entry is at most i (oldest first); the purged
//! position is made durable before any file goes.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use arbor_protocol::codec;
use bincode::Encode;

use super::records::{LogPosition, MembershipRecord};
use super::types::{Command, LogRecord, TypeConfig};
use crate::storage::spare::{Spare, Spares};
use crate::storage::txnlog::format::{
    parse_record_header, record_crc, RECORD_BYTES_MAX, RECORD_HEADER_BYTES,
};
use crate::storage::txnlog::FsyncPolicy;
use crate::storage::write_zeros;

pub const MAGIC: [u8; 8] = *b"ARBORRLG";
pub const FORMAT_VERSION: u32 = 1;
const HEADER_BYTES: usize = 32;
const HEADER_CRC_COVERED_BYTES: usize = 28;
/// `prev_index` of a segment with nothing before it.
const NO_PREV_INDEX: u64 = u64::MAX;
pub const SEGMENT_PREFIX: &str = "raft.";
const SEGMENT_INDEX_DIGITS: usize = 16;

/// Why the replicated log could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("cannot {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is corrupt at byte {offset}: {problem}. Remove this member's data directory and let it catch up from the others")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        problem: String,
    },
    #[error("entry {index} cannot be encoded: {reason}")]
    Encode { index: u64, reason: String },
    #[error("entry {found} does not follow the log, which ends before {expected}")]
    OutOfOrder { expected: u64, found: u64 },
    #[error("the log failed earlier and takes no more writes")]
    Failed,
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> LogError + 'a {
    move |source| LogError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// Entries encoded for the disk, ready to be written as one piece.
#[derive(Debug, Default)]
pub struct EncodedBatch {
    pub first_index: u64,
    bytes: Vec<u8>,
    /// The end of each record, relative to the start of `bytes`.
    ends: Vec<u64>,
}

impl EncodedBatch {
    /// Encodes `entries`, which must have consecutive indexes.
    pub fn encode<'a>(
        entries: impl IntoIterator<Item = &'a openraft::Entry<TypeConfig>>,
    ) -> Result<Self, LogError> {
        let mut batch = EncodedBatch::default();
        for (k, entry) in entries.into_iter().enumerate() {
            let index = entry.log_id.index;
            if k == 0 {
                batch.first_index = index;
            } else if index != batch.first_index + k as u64 {
                return Err(LogError::OutOfOrder {
                    expected: batch.first_index + k as u64,
                    found: index,
                });
            }
            encode_record(&RecordRef::from(entry), &mut batch.bytes)
                .map_err(|reason| LogError::Encode { index, reason })?;
            batch.ends.push(batch.bytes.len() as u64);
        }
        Ok(batch)
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

/// A [`LogRecord`] borrowing the entry's command: the same bytes, no copy.
#[derive(Encode)]
struct RecordRef<'a> {
    position: LogPosition,
    payload: PayloadRef<'a>,
}

/// Same variants, same order as [`super::types::PayloadRecord`].
#[derive(Encode)]
enum PayloadRef<'a> {
    Blank,
    Command(&'a Command),
    Membership(MembershipRecord),
}

impl<'a> From<&'a openraft::Entry<TypeConfig>> for RecordRef<'a> {
    fn from(entry: &'a openraft::Entry<TypeConfig>) -> Self {
        let payload = match &entry.payload {
            openraft::EntryPayload::Blank => PayloadRef::Blank,
            openraft::EntryPayload::Normal(command) => PayloadRef::Command(command),
            openraft::EntryPayload::Membership(membership) => {
                PayloadRef::Membership(MembershipRecord::from(membership))
            }
        };
        Self {
            position: entry.log_id.into(),
            payload,
        }
    }
}

fn encode_record(record: &RecordRef<'_>, out: &mut Vec<u8>) -> Result<(), String> {
    let start = out.len();
    out.extend_from_slice(&[0u8; RECORD_HEADER_BYTES]);
    let body_start = out.len();
    if let Err(err) = codec::encode_into(record, out) {
        out.truncate(start);
        return Err(err.to_string());
    }
    let body_bytes = out.len() - body_start;
    let Some(length) = u32::try_from(body_bytes)
        .ok()
        .filter(|length| *length <= RECORD_BYTES_MAX)
    else {
        out.truncate(start);
        return Err(format!(
            "{body_bytes} bytes, over the record limit of {RECORD_BYTES_MAX}"
        ));
    };
    let crc = record_crc(length, &out[body_start..]);
    out[start..start + 4].copy_from_slice(&length.to_be_bytes());
    out[start + 4..body_start].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// `raft.<first index as 16 lowercase hex digits>`.
pub fn segment_file_name(first_index: u64) -> String {
    format!("{SEGMENT_PREFIX}{first_index:016x}")
}

fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(SEGMENT_PREFIX)?;
    let canonical = digits.len() == SEGMENT_INDEX_DIGITS
        && digits
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    canonical
        .then(|| u64::from_str_radix(digits, 16).ok())
        .flatten()
}

fn encode_header(first_index: u64, prev_index: Option<u64>) -> [u8; HEADER_BYTES] {
    let mut header = [0u8; HEADER_BYTES];
    header[..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&FORMAT_VERSION.to_be_bytes());
    header[12..20].copy_from_slice(&first_index.to_be_bytes());
    header[20..28].copy_from_slice(&prev_index.unwrap_or(NO_PREV_INDEX).to_be_bytes());
    let crc = crc32c::crc32c(&header[..HEADER_CRC_COVERED_BYTES]);
    header[28..32].copy_from_slice(&crc.to_be_bytes());
    header
}

/// One segment file and where each of its records ends.
#[derive(Debug)]
struct Segment {
    first_index: u64,
    prev_index: Option<u64>,
    path: PathBuf,
    /// Byte offset of the end of record k (the header ends at HEADER_BYTES).
    ends: Vec<u64>,
    /// The file's length: the records, then preallocated zeros.
    file_bytes: u64,
}

impl Segment {
    fn end(&self) -> u64 {
        self.ends.last().copied().unwrap_or(HEADER_BYTES as u64)
    }

    /// One past the last index in this segment.
    fn next_index(&self) -> u64 {
        self.first_index + self.ends.len() as u64
    }

    /// The last index in this segment, or the one before it if empty.
    fn last_index(&self) -> Option<u64> {
        match self.ends.len() {
            0 => self.prev_index,
            n => Some(self.first_index + n as u64 - 1),
        }
    }
}

/// How the log is written.
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// A new segment is started once the current one is this large.
    pub segment_bytes_max: u64,
    pub fsync: FsyncPolicy,
    /// Zeros written ahead of the records at a time (0: none).
    pub preallocate_bytes: u64,
    /// Make the next segment ahead on a background thread
    /// (`crate::storage::spare`); only with [`FsyncPolicy::Always`] and
    /// preallocation.
    pub spares: bool,
}

/// The log's segment files, open for appending to the last.
#[derive(Debug)]
pub struct LogFiles {
    dir: PathBuf,
    options: LogOptions,
    segments: Vec<Segment>,
    /// The last segment, open for writing; `None` until the next append
    /// creates one.
    active: Option<File>,
    /// Written since the last sync.
    dirty: bool,
    /// The next segment, being made ahead (`None`: segments grow as they fill).
    spares: Option<Spares>,
    /// Appends that had to grow their segment themselves.
    grown_inline: u64,
}

impl LogFiles {
    /// Opens the log in `dir` (created if missing), repairs a torn tail, and
    /// passes every record after `purged_index` to `each`, in index order.
    pub fn open(
        dir: &Path,
        options: LogOptions,
        purged_index: Option<u64>,
        mut each: impl FnMut(LogRecord),
    ) -> Result<Self, LogError> {
        fs::create_dir_all(dir).map_err(io("create", dir))?;
        let mut names = Vec::new();
        for entry in fs::read_dir(dir).map_err(io("list", dir))? {
            let entry = entry.map_err(io("list", dir))?;
            if let Some(first) = entry.file_name().to_str().and_then(parse_segment_file_name) {
                names.push((first, entry.path()));
            }
        }
        names.sort_unstable_by_key(|(first, _)| *first);
        let mut segments: Vec<Segment> = Vec::with_capacity(names.len());
        let count = names.len();
        for (k, (first_index, path)) in names.into_iter().enumerate() {
            let last = k + 1 == count;
            let Some(segment) = read_segment(&path, first_index, last, options.fsync, |record| {
                if purged_index.is_none_or(|purged| record.position.index > purged) {
                    each(record);
                }
            })?
            else {
                continue;
            };
            if let Some(before) = segments.last() {
                if segment.prev_index != before.last_index() {
                    return Err(LogError::Corrupt {
                        path,
                        offset: 20,
                        problem: format!(
                            "the segment follows index {:?}, but the segment before it ends at {:?}: a segment is missing",
                            segment.prev_index,
                            before.last_index()
                        ),
                    });
                }
            }
            segments.push(segment);
        }
        let active = match segments.last() {
            Some(segment) => Some(open_write(&segment.path)?),
            None => None,
        };
        let spares = if options.spares
            && options.fsync == FsyncPolicy::Always
            && options.preallocate_bytes > 0
        {
            let (prealloc, max) = (options.preallocate_bytes, options.segment_bytes_max);
            let spares = Spares::start(dir, HEADER_BYTES as u64, prealloc, max, "arbor-raft-spare");
            Some(spares.map_err(io("start making a spare segment in", dir))?)
        } else {
            None
        };
        let mut files = Self {
            dir: dir.to_owned(),
            options,
            segments,
            active,
            dirty: false,
            spares,
            grown_inline: 0,
        };
        if let Some(purged) = purged_index {
            // A crash between recording a purge and deleting its segments.
            files.purge_through(purged)?;
        }
        Ok(files)
    }

    /// How many appends had to grow their segment themselves (no spare was
    /// ready, or a batch outgrew it).
    pub fn grown_inline(&self) -> u64 {
        self.grown_inline
    }

    /// Waits until the spare segment is ready; false if none is being made.
    #[cfg(test)]
    pub(super) fn wait_for_spare(&self) -> bool {
        self.spares.as_ref().is_some_and(Spares::wait_ready)
    }

    /// The last index on disk.
    pub fn last_index(&self) -> Option<u64> {
        self.segments.last().and_then(Segment::last_index)
    }

    /// Writes `batch` after the last record, without syncing ([`Self::sync`]).
    /// A batch that starts past the end starts a new segment; one that
    /// starts inside the log is refused (truncate first).
    pub fn write(&mut self, batch: &EncodedBatch) -> Result<(), LogError> {
        if batch.is_empty() {
            return Ok(());
        }
        let next = self.segments.last().map(Segment::next_index);
        if next.is_some_and(|next| batch.first_index < next) {
            return Err(LogError::OutOfOrder {
                expected: next.unwrap_or_default(),
                found: batch.first_index,
            });
        }
        let batch_bytes = batch.bytes.len() as u64;
        let last = self.segments.last();
        let roll = last.is_none_or(|segment| {
            segment.end() >= self.options.segment_bytes_max
                || segment.next_index() != batch.first_index
        });
        // A segment whose zeros are used up rolls early into a ready spare
        // rather than grow on the append path (one with no records yet
        // would only be replaced by another of the same name).
        let out_of_zeros = last.is_some_and(|segment| {
            !segment.ends.is_empty() && segment.end() + batch_bytes > segment.file_bytes
        });
        let spare = match &mut self.spares {
            Some(spares) if roll || out_of_zeros => spares.take(HEADER_BYTES as u64 + batch_bytes),
            _ => None,
        };
        if roll || spare.is_some() {
            self.start_segment(batch.first_index, spare)?;
        }
        let segment = self
            .segments
            .last_mut()
            .expect("a segment was just ensured");
        let file = self.active.as_mut().expect("the last segment is open");
        let base = segment.end();
        let end = base + batch_bytes;
        if end > segment.file_bytes {
            self.grown_inline += 1;
        }
        if end > segment.file_bytes && self.options.preallocate_bytes > 0 {
            // Whole chunks, but not far past the roll point.
            let chunk = self.options.preallocate_bytes;
            let grown = (end.div_ceil(chunk) * chunk).min(self.options.segment_bytes_max.max(end));
            write_zeros(file, segment.file_bytes..grown).map_err(io("grow", &segment.path))?;
            segment.file_bytes = grown;
        }
        file.write_all_at(&batch.bytes, base)
            .map_err(io("write", &segment.path))?;
        segment.file_bytes = segment.file_bytes.max(end);
        segment.ends.extend(batch.ends.iter().map(|end| base + end));
        self.dirty = true;
        if let Some(spares) = &self.spares {
            spares.appended(batch_bytes);
        }
        Ok(())
    }

    /// Makes everything written so far durable.
    pub fn sync(&mut self) -> Result<(), LogError> {
        if !self.dirty {
            return Ok(());
        }
        if self.options.fsync == FsyncPolicy::Always {
            if let (Some(file), Some(segment)) = (&self.active, self.segments.last()) {
                file.sync_data().map_err(io("fsync", &segment.path))?;
            }
        }
        self.dirty = false;
        Ok(())
    }

    /// Syncs the segment being closed and trims its zeros, then creates the
    /// next one durably: from `spare` if given (already its full size),
    /// else as a file holding only the header.
    fn start_segment(&mut self, first_index: u64, spare: Option<Spare>) -> Result<(), LogError> {
        self.sync()?;
        if let (Some(file), Some(segment)) = (&self.active, self.segments.last_mut()) {
            if segment.file_bytes > segment.end() {
                file.set_len(segment.end())
                    .map_err(io("trim", &segment.path))?;
                if self.options.fsync == FsyncPolicy::Always {
                    file.sync_all().map_err(io("fsync", &segment.path))?;
                }
                segment.file_bytes = segment.end();
            }
        }
        let prev_index = self.last_index();
        let path = self.dir.join(segment_file_name(first_index));
        let header = encode_header(first_index, prev_index);
        let from_spare = spare.is_some();
        let (file, file_bytes) = match spare {
            // Spares are made only when every write is synced.
            Some(spare) => {
                let spare_path = spare.path.clone();
                spare
                    .into_segment(&header, &path)
                    .map_err(io("turn a spare into a segment", &spare_path))?
            }
            None => {
                let mut file = OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .write(true)
                    .open(&path)
                    .map_err(io("create", &path))?;
                file.write_all(&header).map_err(io("write", &path))?;
                if self.options.fsync == FsyncPolicy::Always {
                    file.sync_all().map_err(io("fsync", &path))?;
                }
                (file, HEADER_BYTES as u64)
            }
        };
        if self.options.fsync == FsyncPolicy::Always {
            sync_dir(&self.dir)?;
        }
        if from_spare {
            if let Some(spares) = self.spares.as_mut() {
                spares.make_next();
            }
        }
        tracing::debug!(path = %path.display(), first_index, file_bytes, from_spare, "started a replicated log segment");
        self.segments.push(Segment {
            first_index,
            prev_index,
            path,
            ends: Vec::new(),
            file_bytes,
        });
        self.active = Some(file);
        Ok(())
    }

    /// Removes every entry from `index` on, durably.
    pub fn truncate_from(&mut self, index: u64) -> Result<(), LogError> {
        self.sync()?;
        while let Some(segment) = self.segments.last() {
            if segment.first_index < index {
                break;
            }
            let path = segment.path.clone();
            self.active = None;
            fs::remove_file(&path).map_err(io("delete", &path))?;
            self.segments.pop();
        }
        if self.options.fsync == FsyncPolicy::Always {
            sync_dir(&self.dir)?;
        }
        let Some(segment) = self.segments.last_mut() else {
            return Ok(());
        };
        let keep = index.saturating_sub(segment.first_index) as usize;
        if keep < segment.ends.len() {
            self.active = None;
            segment.ends.truncate(keep);
            let len = segment.end();
            let file = OpenOptions::new()
                .write(true)
                .open(&segment.path)
                .map_err(io("open", &segment.path))?;
            file.set_len(len).map_err(io("truncate", &segment.path))?;
            if self.options.fsync == FsyncPolicy::Always {
                file.sync_all().map_err(io("fsync", &segment.path))?;
            }
            segment.file_bytes = len;
        }
        if self.active.is_none() {
            self.active = Some(open_write(&segment.path)?);
        }
        Ok(())
    }

    /// Deletes the segments that hold nothing after `index`, oldest first.
    /// The caller has made the purge durable first.
    pub fn purge_through(&mut self, index: u64) -> Result<(), LogError> {
        let mut deleted = 0;
        for segment in &self.segments {
            if segment.next_index() > index.saturating_add(1) {
                break;
            }
            fs::remove_file(&segment.path).map_err(io("delete", &segment.path))?;
            deleted += 1;
        }
        if deleted == 0 {
            return Ok(());
        }
        if deleted == self.segments.len() {
            self.active = None;
        }
        self.segments.drain(..deleted);
        if self.options.fsync == FsyncPolicy::Always {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }
}

/// Records are written at their offsets (the file may be longer: zeros).
fn open_write(path: &Path) -> Result<File, LogError> {
    OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io("open", path))
}

pub(super) fn sync_dir(dir: &Path) -> Result<(), LogError> {
    File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(io("fsync the directory", dir))
}

/// A record that decoded, with where it ends.
struct Parsed {
    record: LogRecord,
    end: usize,
}

/// Parses the record at `offset`, or says what is wrong with it.
fn parse_record(bytes: &[u8], offset: usize) -> Result<Parsed, String> {
    let Some(head) = bytes.get(offset..offset + RECORD_HEADER_BYTES) else {
        return Err(format!(
            "only {} bytes are left, fewer than a record header",
            bytes.len() - offset
        ));
    };
    let (length, crc) = parse_record_header(head.try_into().expect("8 bytes"));
    if length == 0 || length > RECORD_BYTES_MAX {
        return Err(format!("the record length {length} is out of range"));
    }
    let body_start = offset + RECORD_HEADER_BYTES;
    let Some(body) = bytes.get(body_start..body_start + length as usize) else {
        return Err(format!(
            "the record of {length} bytes runs past the end of the file"
        ));
    };
    let computed = record_crc(length, body);
    if computed != crc {
        return Err(format!(
            "the record fails its checksum (stored {crc:#010x}, computed {computed:#010x})"
        ));
    }
    let record: LogRecord =
        codec::decode(body).map_err(|err| format!("the record does not decode: {err}"))?;
    Ok(Parsed {
        record,
        end: body_start + length as usize,
    })
}

/// Reads one segment; in the last segment a torn tail is cut off.
fn read_segment(
    path: &Path,
    first_index: u64,
    last: bool,
    fsync: FsyncPolicy,
    mut each: impl FnMut(LogRecord),
) -> Result<Option<Segment>, LogError> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut file| file.read_to_end(&mut bytes))
        .map_err(io("read", path))?;
    let corrupt = |offset: usize, problem: String| LogError::Corrupt {
        path: path.to_owned(),
        offset: offset as u64,
        problem,
    };
    let header_ok = bytes.len() >= HEADER_BYTES
        && bytes[..8] == MAGIC
        && crc32c::crc32c(&bytes[..HEADER_CRC_COVERED_BYTES])
            == u32::from_be_bytes(bytes[28..32].try_into().expect("4 bytes"));
    if !header_ok {
        // A crash while creating the last segment leaves a short header.
        if last && bytes.len() < HEADER_BYTES {
            // Nothing was ever in it: it goes, and the next append starts
            // the segment again with the right predecessor.
            fs::remove_file(path).map_err(io("delete", path))?;
            return Ok(None);
        }
        return Err(corrupt(0, "the segment header is damaged".into()));
    }
    let version = u32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes"));
    let header_index = u64::from_be_bytes(bytes[12..20].try_into().expect("8 bytes"));
    let prev_index = match u64::from_be_bytes(bytes[20..28].try_into().expect("8 bytes")) {
        NO_PREV_INDEX => None,
        prev => Some(prev),
    };
    if version != FORMAT_VERSION {
        return Err(corrupt(
            8,
            format!("log format version {version}; this arbord reads version {FORMAT_VERSION}"),
        ));
    }
    if header_index != first_index {
        return Err(corrupt(
            12,
            format!("the header says index {header_index}, the file name {first_index}"),
        ));
    }
    let mut segment = Segment {
        first_index,
        prev_index,
        path: path.to_owned(),
        ends: Vec::new(),
        file_bytes: bytes.len() as u64,
    };
    let mut offset = HEADER_BYTES;
    while offset < bytes.len() {
        if last && bytes[offset..].iter().all(|b| *b == 0) {
            // Preallocated space: the end of the log.
            break;
        }
        let expected = segment.next_index();
        let problem = match parse_record(&bytes, offset) {
            Ok(parsed) if parsed.record.position.index == expected => {
                offset = parsed.end;
                segment.ends.push(offset as u64);
                each(parsed.record);
                continue;
            }
            Ok(parsed) => format!(
                "the record holds index {}, where index {expected} belongs",
                parsed.record.position.index
            ),
            Err(problem) => problem,
        };
        if !last {
            return Err(corrupt(offset, problem));
        }
        // Damage in the last segment: a torn write, unless a whole record
        // follows it.
        let later = (offset + 1..bytes.len()).find(|at| {
            parse_record(&bytes, *at).is_ok_and(|parsed| parsed.record.position.index >= expected)
        });
        if let Some(at) = later {
            return Err(corrupt(
                offset,
                format!("{problem}, yet a whole record follows at byte {at}"),
            ));
        }
        tracing::warn!(path = %path.display(), offset, bytes = bytes.len() - offset, %problem, "cutting the torn tail of the replicated log");
        cut(path, offset as u64, fsync)?;
        segment.file_bytes = offset as u64;
        break;
    }
    Ok(Some(segment))
}

fn cut(path: &Path, len: u64, fsync: FsyncPolicy) -> Result<(), LogError> {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io("open", path))?;
    file.set_len(len).map_err(io("truncate", path))?;
    if fsync == FsyncPolicy::Always {
        file.sync_all().map_err(io("fsync", path))?;
    }
    Ok(())
}
