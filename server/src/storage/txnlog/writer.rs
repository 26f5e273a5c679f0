//! Appending to the log: one write and (with [`FsyncPolicy::Always`]) one
//! fdatasync per batch.
//!
//! Invariants:
//! * every appended zxid continues the one before it ([`continues`]); a batch
//!   that does not is refused before anything is written;
//! * a batch lives in one segment; a segment is only rolled between batches;
//! * the writer never writes into a segment that existed when it was opened:
//!   the old last segment is cut to its valid end (dropping a torn tail or
//!   the zero fill) and the first append starts a new segment, so a byte
//!   range that once held garbage is never reused;
//! * after a failed write or fsync the writer refuses everything: what the
//!   file holds is unknown, and retrying an fsync can report success for
//!   data the kernel already dropped.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use arbor_protocol::Hex;
use arbor_protocol::Zxid;
use tracing::{debug, info, warn};

use super::format::{continues, encode_header, encode_record, segment_file_name, HEADER_BYTES};
use super::reader::LogTail;
use super::{list_segments, sync_dir};
use crate::storage::error::StorageError;
use crate::storage::spare::{Spare, Spares};
use crate::storage::write_zeros;
use crate::txn::TxnEntry;

/// Segment size past which the writer starts a new segment.
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;
/// The file grows in chunks of this much, so that most fdatasyncs do not
/// also have to record a new file size.
pub const PREALLOCATE_BYTES_DEFAULT: u64 = 4 * 1024 * 1024;
/// Larger chunks would only waste disk.
pub const PREALLOCATE_BYTES_MAX: u64 = 1024 * 1024 * 1024;
/// The encode buffer is kept between batches up to this size (a batch of
/// small writes at 64 in flight is ~10 KB); one made for a batch of big
/// multis is given back (it held ~1 MB of a 10 k-znode fill's RSS), which
/// costs those batches an allocation each, small beside their fsync.
const BUFFER_BYTES_RETAINED_MAX: usize = 256 * 1024;
/// Zeros up to this much are left at the end of a full segment (the reader
/// takes them as its end): cutting them would cost the roll a metadata sync,
/// and a segment rolled into a spare has less than a batch of them left.
const ZERO_FILL_KEPT_MAX: u64 = 64 * 1024;

/// When appended records are forced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// fdatasync every batch before [`TxnLogWriter::append`] returns; new
    /// segments and the directory are synced too. What a server that
    /// acknowledges writes must use.
    Always,
    /// Never sync anything: a power loss may lose any recent write, and
    /// may leave damage that the reader refuses (a segment that is not the
    /// last with a torn end). For tests and throwaway servers.
    Never,
}

#[derive(Debug, Clone)]
pub struct TxnLogOptions {
    /// A segment is rolled before a batch that would take it past this.
    pub segment_bytes_max: u64,
    pub fsync: FsyncPolicy,
    /// Growth chunk (0: grow with each write).
    pub preallocate_bytes: u64,
    /// Make the next segment ahead on a background thread (`crate::storage::spare`);
    /// only with [`FsyncPolicy::Always`] and preallocation.
    pub spares: bool,
}

impl Default for TxnLogOptions {
    fn default() -> Self {
        Self {
            segment_bytes_max: SEGMENT_BYTES_DEFAULT,
            fsync: FsyncPolicy::Always,
            preallocate_bytes: PREALLOCATE_BYTES_DEFAULT,
            spares: true,
        }
    }
}

impl TxnLogOptions {
    pub fn validate(&self) -> Result<(), StorageError> {
        if self.segment_bytes_max <= HEADER_BYTES as u64 {
            return Err(StorageError::InvalidOptions {
                detail: format!(
                    "segment_bytes_max ({}) must exceed the {HEADER_BYTES}-byte segment header",
                    self.segment_bytes_max
                ),
            });
        }
        if self.preallocate_bytes > PREALLOCATE_BYTES_MAX {
            return Err(StorageError::InvalidOptions {
                detail: format!(
                    "preallocate_bytes ({}) is over the limit of {PREALLOCATE_BYTES_MAX}",
                    self.preallocate_bytes
                ),
            });
        }
        Ok(())
    }

    fn sync(&self) -> bool {
        self.fsync == FsyncPolicy::Always
    }
}

/// The segment being appended to.
#[derive(Debug)]
struct OpenSegment {
    file: File,
    path: PathBuf,
    /// Where the next record goes: the end of the last whole record.
    write_pos: u64,
    /// The file's length (≥ `write_pos`; the rest is zeros).
    file_bytes: u64,
    records: u64,
}

/// Appends batches of entries to the log in a directory. Synchronous: it
/// blocks in write and fsync, so it belongs on its own thread.
pub struct TxnLogWriter {
    dir: PathBuf,
    options: TxnLogOptions,
    /// `None` until the first append after opening, and after a roll.
    segment: Option<OpenSegment>,
    /// 0: the log is empty.
    last_zxid: Zxid,
    buffer: Vec<u8>,
    /// Set by a failed write or fsync; names the file.
    failed: Option<PathBuf>,
    /// The next segment, being made ahead (`None`: segments grow as they fill).
    spares: Option<Spares>,
    /// Appends that had to grow their segment themselves.
    grown_inline: u64,
}

impl std::fmt::Debug for TxnLogWriter {
    // Not derived: the encode buffer can be megabytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnLogWriter")
            .field("dir", &self.dir)
            .field("options", &self.options)
            .field("segment", &self.segment.as_ref().map(|s| &s.path))
            .field("last_zxid", &self.last_zxid)
            .field("failed", &self.failed)
            .finish()
    }
}

impl TxnLogWriter {
    /// Opens the log in `dir` (creating it, and fsyncing its parent) for
    /// appending after what [`read_log`](super::read_log) reported in `tail`.
    ///
    /// Repairs the end of the log first: trailing segments without records
    /// (a crash while creating one) are deleted, and the last segment with
    /// records is cut to its valid end (set_len + fsync), which drops a torn
    /// tail and the preallocated zeros. Appends then go to a new segment;
    /// the cut is durable before that segment exists, so a crash can never
    /// leave torn bytes in a segment that is not the last.
    /// Fails if the directory no longer matches `tail`.
    pub fn open(dir: &Path, tail: &LogTail, options: TxnLogOptions) -> Result<Self, StorageError> {
        options.validate()?;
        fs::create_dir_all(dir).map_err(StorageError::io("create", dir))?;
        if options.sync() {
            let parent = match dir.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent,
                _ => Path::new("."),
            };
            sync_dir(parent)?;
        }
        check_tail_matches(dir, tail)?;

        let mut dir_changed = false;
        let mut segments = tail.segments.as_slice();
        while let Some((last, rest)) = segments.split_last() {
            if last.last_zxid.is_some() {
                break;
            }
            fs::remove_file(&last.path).map_err(StorageError::io("delete", &last.path))?;
            warn!(path = %last.path.display(), file_bytes = last.file_bytes, "deleted a last segment that holds no records (crash while creating it)");
            dir_changed = true;
            segments = rest;
        }
        if let Some(last) = segments.last() {
            cut_to_valid_end(dir, last, tail, &options)?;
        }
        if dir_changed && options.sync() {
            sync_dir(dir)?;
        }

        let spares = if options.spares && options.sync() && options.preallocate_bytes > 0 {
            let (prealloc, max) = (options.preallocate_bytes, options.segment_bytes_max);
            let spares = Spares::start(dir, HEADER_BYTES as u64, prealloc, max, "arbor-wal-spare");
            Some(spares.map_err(StorageError::io("start making a spare segment in", dir))?)
        } else {
            None
        };
        let last_zxid = tail.last_zxid.unwrap_or(0);
        info!(dir = %dir.display(), last_zxid = %Hex(last_zxid), segments = segments.len(), "opened the log for appending");
        Ok(Self {
            dir: dir.to_owned(),
            options,
            segment: None,
            last_zxid,
            buffer: Vec::new(),
            failed: None,
            spares,
            grown_inline: 0,
        })
    }

    /// How many appends had to grow their segment themselves (the spare was
    /// not ready, or a batch outgrew it).
    pub fn grown_inline(&self) -> u64 {
        self.grown_inline
    }

    /// Waits until the spare segment is ready; false if none is being made.
    #[cfg(test)]
    pub(super) fn wait_for_spare(&self) -> bool {
        self.spares.as_ref().is_some_and(Spares::wait_ready)
    }

    /// The last zxid in the log (0: empty).
    pub fn last_zxid(&self) -> Zxid {
        self.last_zxid
    }

    /// Appends `entries`, which must continue the log, with one write; with
    /// [`FsyncPolicy::Always`] they are durable when this returns. Rolls to a
    /// new segment, named by the batch's first zxid, before a batch that
    /// would take the current one past `segment_bytes_max`.
    pub fn append(&mut self, entries: &[TxnEntry]) -> Result<(), StorageError> {
        if let Some(path) = &self.failed {
            return Err(StorageError::WriterFailed { path: path.clone() });
        }
        let Some(first) = entries.first() else {
            return Ok(());
        };
        let mut prev = self.last_zxid;
        for entry in entries {
            // An empty log may start anywhere; the caller knows its base.
            let follows = if prev == 0 {
                entry.zxid > 0
            } else {
                continues(prev, entry.zxid)
            };
            if !follows {
                return Err(StorageError::Discontinuous {
                    zxid: entry.zxid,
                    last_zxid: prev,
                });
            }
            prev = entry.zxid;
        }

        self.buffer.clear();
        for entry in entries {
            encode_record(entry, &mut self.buffer)?;
        }
        let batch_bytes = self.buffer.len() as u64;

        // A segment whose preallocated space is used up rolls early if a
        // spare is ready (no growth on the commit path); a full one rolls
        // with or without it.
        let roll = match &self.segment {
            None => Roll::Now,
            Some(segment) if segment.records == 0 => Roll::No,
            Some(segment) if segment.write_pos + batch_bytes > self.options.segment_bytes_max => {
                Roll::Now
            }
            Some(segment) if segment.write_pos + batch_bytes > segment.file_bytes => Roll::IfSpare,
            Some(_) => Roll::No,
        };
        let spare = match roll {
            Roll::No => None,
            Roll::Now | Roll::IfSpare => self
                .spares
                .as_mut()
                .and_then(|spares| spares.take(HEADER_BYTES as u64 + batch_bytes)),
        };
        if roll == Roll::Now || spare.is_some() {
            let rolling = std::time::Instant::now();
            if let Some(old) = self.segment.take() {
                self.close_segment(old)?;
            }
            self.segment = Some(self.create_segment(first.zxid, spare, rolling)?);
        }
        let segment = self.segment.as_mut().expect("a segment was just ensured");
        if segment.write_pos + batch_bytes > segment.file_bytes {
            self.grown_inline += 1;
        }
        let result = write_batch(segment, &self.buffer, &self.options);
        if result.is_err() {
            self.failed = Some(segment.path.clone());
        }
        result?;
        if let Some(spares) = &self.spares {
            spares.appended(batch_bytes);
        }
        segment.records += entries.len() as u64;
        self.last_zxid = prev;

        if self.buffer.capacity() > BUFFER_BYTES_RETAINED_MAX {
            self.buffer = Vec::new();
        }
        Ok(())
    }

    /// Creates `log.<first_zxid>`: header, sync, then the directory entry.
    /// From `spare` if given: its header is written over its zeros and it is
    /// renamed into place, already the spare's size.
    fn create_segment(
        &mut self,
        first_zxid: Zxid,
        spare: Option<Spare>,
        rolling: std::time::Instant,
    ) -> Result<OpenSegment, StorageError> {
        let path = self.dir.join(segment_file_name(first_zxid));
        let from_spare = spare.is_some();
        let result = match spare {
            Some(spare) => {
                let spare_path = spare.path.clone();
                spare
                    .into_segment(&encode_header(first_zxid), &path)
                    .map_err(StorageError::io("turn a spare into a segment", &spare_path))
            }
            None => create_segment_file(&path, first_zxid, &self.options)
                .map(|file| (file, HEADER_BYTES as u64)),
        };
        if result.is_err() {
            self.failed = Some(path.clone());
        }
        let (file, file_bytes) = result?;
        if from_spare {
            if let Some(spares) = self.spares.as_mut() {
                spares.make_next();
            }
        }
        if self.options.sync() {
            sync_dir(&self.dir).inspect_err(|_| self.failed = Some(path.clone()))?;
        }
        info!(path = %path.display(), first_zxid = %Hex(first_zxid), file_bytes, from_spare, roll_us = rolling.elapsed().as_micros() as u64, "started a new log segment");
        Ok(OpenSegment {
            file,
            path,
            write_pos: HEADER_BYTES as u64,
            file_bytes,
            records: 0,
        })
    }

    /// Drops the preallocated zeros of a segment that is full, unless they
    /// are few ([`ZERO_FILL_KEPT_MAX`]).
    fn close_segment(&mut self, segment: OpenSegment) -> Result<(), StorageError> {
        if segment.file_bytes > segment.write_pos + ZERO_FILL_KEPT_MAX {
            let result = truncate(
                &segment.file,
                &segment.path,
                segment.write_pos,
                &self.options,
            );
            if result.is_err() {
                self.failed = Some(segment.path.clone());
            }
            result?;
        }
        debug!(path = %segment.path.display(), bytes = segment.write_pos, records = segment.records, "closed a full log segment");
        Ok(())
    }
}

/// Fails unless `dir` holds exactly the segments `tail` describes, none of
/// them shorter than its valid end.
fn check_tail_matches(dir: &Path, tail: &LogTail) -> Result<(), StorageError> {
    let listed = list_segments(dir)?;
    let mismatch = |detail: String| StorageError::TailMismatch {
        dir: dir.to_owned(),
        detail,
    };
    let same = listed.len() == tail.segments.len()
        && listed
            .iter()
            .zip(&tail.segments)
            .all(|((_, path), info)| *path == info.path);
    if !same {
        return Err(mismatch(format!(
            "it holds {} segments where {} were read",
            listed.len(),
            tail.segments.len()
        )));
    }
    if let Some(last) = tail.segments.last() {
        let file_bytes = fs::metadata(&last.path)
            .map_err(StorageError::io("stat", &last.path))?
            .len();
        if file_bytes < last.valid_end {
            return Err(mismatch(format!(
                "{} is {file_bytes} bytes, shorter than its valid end at byte {}",
                last.path.display(),
                last.valid_end
            )));
        }
    }
    Ok(())
}

/// Cuts the last segment with records to the end of its last whole record.
fn cut_to_valid_end(
    dir: &Path,
    last: &super::reader::SegmentInfo,
    tail: &LogTail,
    options: &TxnLogOptions,
) -> Result<(), StorageError> {
    let file = OpenOptions::new()
        .write(true)
        .open(&last.path)
        .map_err(StorageError::io("open", &last.path))?;
    let file_bytes = file
        .metadata()
        .map_err(StorageError::io("stat", &last.path))?
        .len();
    if file_bytes == last.valid_end {
        return Ok(());
    }
    truncate(&file, &last.path, last.valid_end, options)?;
    let dropped = file_bytes - last.valid_end;
    match &tail.torn {
        Some(torn) if torn.path == last.path => {
            warn!(path = %last.path.display(), offset = last.valid_end, bytes = dropped, last_zxid = ?last.last_zxid.map(Hex), "truncated the torn tail of the log");
        }
        _ => {
            debug!(dir = %dir.display(), path = %last.path.display(), offset = last.valid_end, bytes = dropped, "dropped the zero fill at the end of the log");
        }
    }
    Ok(())
}

/// When a batch starts a new segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Roll {
    No,
    /// Only into a ready spare: the segment could grow instead.
    IfSpare,
    Now,
}

fn create_segment_file(
    path: &Path,
    first_zxid: Zxid,
    options: &TxnLogOptions,
) -> Result<File, StorageError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(StorageError::io("create", path))?;
    file.write_all(&encode_header(first_zxid))
        .map_err(StorageError::io("write the header of", path))?;
    if options.sync() {
        file.sync_all().map_err(StorageError::io("fsync", path))?;
    }
    Ok(file)
}

/// Grows the file if needed, writes the batch, and syncs it.
fn write_batch(
    segment: &mut OpenSegment,
    batch: &[u8],
    options: &TxnLogOptions,
) -> Result<(), StorageError> {
    let end = segment.write_pos + batch.len() as u64;
    if end > segment.file_bytes && options.preallocate_bytes > 0 {
        // Whole chunks, but not far past the roll point: a segment ends
        // near segment_bytes_max unless one batch is larger.
        let chunked = end.div_ceil(options.preallocate_bytes) * options.preallocate_bytes;
        let grown = chunked.min(options.segment_bytes_max.max(end));
        write_zeros(&segment.file, segment.file_bytes..grown)
            .map_err(StorageError::io("grow", &segment.path))?;
        segment.file_bytes = grown;
    }
    segment
        .file
        .write_all_at(batch, segment.write_pos)
        .map_err(StorageError::io("write", &segment.path))?;
    segment.write_pos = end;
    segment.file_bytes = segment.file_bytes.max(end);
    if options.sync() {
        // fdatasync also records a changed file size: the data must be
        // readable after a crash.
        segment
            .file
            .sync_data()
            .map_err(StorageError::io("fsync", &segment.path))?;
    }
    Ok(())
}

fn truncate(
    file: &File,
    path: &Path,
    len: u64,
    options: &TxnLogOptions,
) -> Result<(), StorageError> {
    file.set_len(len)
        .map_err(StorageError::io("truncate", path))?;
    if options.sync() {
        file.sync_all().map_err(StorageError::io("fsync", path))?;
    }
    Ok(())
}
