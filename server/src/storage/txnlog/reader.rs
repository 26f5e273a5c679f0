//! Reading the log back. Every record of every segment is read, checksummed
//! and decoded (the ordering checks need every zxid); only those after the
//! caller's zxid are handed to it.
//!
//! Invariants enforced (see the parent module for the torn-tail rule):
//! * every record of every segment passes its checksum and decodes;
//! * zxids strictly increase and continue each other ([`continues`]), within
//!   and across segments, and the first record after `after_zxid` continues
//!   it;
//! * only the last segment may end in something other than whole records
//!   and zeros, and only if no whole valid record follows the damage.
//!
//! The reader never modifies a file.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use arbor_protocol::codec::decode;
use arbor_protocol::Hex;
use arbor_protocol::Zxid;
use tracing::{debug, warn};

use super::format::{
    continues, parse_header, parse_record_header, record_crc, RecordProblem, FORMAT_VERSION,
    HEADER_BYTES, RECORD_BYTES_MAX, RECORD_HEADER_BYTES,
};
use super::list_segments;
use crate::storage::error::StorageError;
use crate::txn::TxnEntry;

/// Read-ahead for sequential reading of a segment.
const READ_BUFFER_BYTES: usize = 1024 * 1024;
/// Window for the search for a valid record after a bad one.
const SCAN_WINDOW_BYTES: usize = 1024 * 1024;

/// What [`read_log`] found: where the log ends, and how the writer must
/// continue it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogTail {
    /// The last whole valid record in the log (`None`: no records).
    pub last_zxid: Option<Zxid>,
    /// Every segment found, in zxid order.
    pub segments: Vec<SegmentInfo>,
    /// The damaged end of the last segment, if it has one.
    pub torn: Option<TornTail>,
    /// Whole valid records read and checked, in all segments.
    pub records: u64,
    /// Records handed to the visitor (those after `after_zxid`).
    pub visited: u64,
}

/// One segment as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    pub path: PathBuf,
    /// From the file name (and equal to the header's, when it has one).
    pub first_zxid: Zxid,
    /// The last whole valid record (`None`: no records).
    pub last_zxid: Option<Zxid>,
    /// The end of the last whole valid record (or of the header; 0 if the
    /// header itself is torn). Past it: zeros, or the torn tail.
    pub valid_end: u64,
    /// The file's length when it was read.
    pub file_bytes: u64,
}

/// Bytes at the end of the last segment that are not whole records and not
/// a clean zero fill: what a crash in the middle of a write leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    pub path: PathBuf,
    /// Where the whole records end, and the torn bytes begin (0: the header
    /// itself is torn).
    pub offset: u64,
    /// Bytes from `offset` to the end of the file.
    pub bytes: u64,
}

/// Reads every record with zxid > `after_zxid` in order, calling `visit`
/// for each. Read-only. A missing directory is an empty log.
pub fn read_log(
    dir: &Path,
    after_zxid: Zxid,
    visit: impl FnMut(TxnEntry) -> Result<(), StorageError>,
) -> Result<LogTail, StorageError> {
    read_segments(&list_segments(dir)?, open_segment, after_zxid, visit)
}

fn open_segment(path: &Path) -> Result<(File, u64), StorageError> {
    let file = File::open(path).map_err(StorageError::io("open", path))?;
    let file_bytes = file
        .metadata()
        .map_err(StorageError::io("stat", path))?
        .len();
    Ok((file, file_bytes))
}

/// [`read_log`] over `listed` segments (first zxid from the name, path) in
/// that order, whose bytes `open` gives with their length: `read_log` with
/// files, the fuzz target with slices, so it tests the code recovery runs.
pub fn read_segments<R: Read + Seek>(
    listed: &[(Zxid, PathBuf)],
    mut open: impl FnMut(&Path) -> Result<(R, u64), StorageError>,
    after_zxid: Zxid,
    mut visit: impl FnMut(TxnEntry) -> Result<(), StorageError>,
) -> Result<LogTail, StorageError> {
    let mut chain = Chain {
        after_zxid,
        last: None,
        last_path: PathBuf::new(),
        records: 0,
        visited: 0,
    };
    let mut tail = LogTail::default();
    let mut body = Vec::new();
    for (index, (name_zxid, path)) in listed.iter().enumerate() {
        let is_last = index + 1 == listed.len();
        let (bytes, file_bytes) = open(path)?;
        let segment = SegmentReader::new(path, bytes, file_bytes);
        let (info, torn) = read_segment(
            segment, *name_zxid, is_last, &mut chain, &mut body, &mut visit,
        )?;
        debug!(path = %info.path.display(), first_zxid = %Hex(info.first_zxid), last_zxid = ?info.last_zxid.map(Hex), valid_end = info.valid_end, "read segment");
        tail.segments.push(info);
        if torn.is_some() {
            tail.torn = torn;
        }
    }
    tail.last_zxid = chain.last;
    tail.records = chain.records;
    tail.visited = chain.visited;
    Ok(tail)
}

/// The ordering state carried from record to record and segment to segment.
struct Chain {
    after_zxid: Zxid,
    /// The last whole valid record, and the segment that holds it (kept
    /// apart so that a record costs no allocation).
    last: Option<Zxid>,
    last_path: PathBuf,
    records: u64,
    visited: u64,
}

impl Chain {
    fn last_zxid(&self) -> Zxid {
        self.last.unwrap_or(0)
    }
}

/// How the sequential read of a segment stopped.
enum Stop {
    /// End of file, or a zero length followed only by zeros.
    Clean,
    /// A record that is not whole and valid.
    Bad(RecordProblem),
}

fn read_segment<R: Read + Seek>(
    mut segment: SegmentReader<'_, R>,
    name_zxid: Zxid,
    is_last: bool,
    chain: &mut Chain,
    body: &mut Vec<u8>,
    visit: &mut impl FnMut(TxnEntry) -> Result<(), StorageError>,
) -> Result<(SegmentInfo, Option<TornTail>), StorageError> {
    let path = segment.path;
    let file_bytes = segment.file_bytes;
    let mut info = SegmentInfo {
        path: path.to_owned(),
        first_zxid: name_zxid,
        last_zxid: None,
        valid_end: 0,
        file_bytes,
    };

    let Some(first_zxid) = read_valid_header(&mut segment, name_zxid, is_last, chain)? else {
        let torn = TornTail {
            path: path.to_owned(),
            offset: 0,
            bytes: file_bytes,
        };
        warn!(path = %path.display(), file_bytes, "last segment has no whole header (crash while creating it); it holds no records");
        return Ok((info, Some(torn)));
    };
    info.valid_end = segment.pos;

    let stop = loop {
        let offset = segment.pos;
        let entry = match read_record(&mut segment, body)? {
            Ok(Some(entry)) => entry,
            Ok(None) => break Stop::Clean,
            Err(problem) => break Stop::Bad(problem),
        };
        check_order(
            path,
            offset,
            &entry,
            first_zxid,
            info.last_zxid.is_none(),
            chain,
        )?;
        if info.last_zxid.is_none() {
            chain.last_path = path.to_owned();
        }
        chain.last = Some(entry.zxid);
        chain.records += 1;
        info.last_zxid = Some(entry.zxid);
        info.valid_end = segment.pos;
        if entry.zxid > chain.after_zxid {
            chain.visited += 1;
            visit(entry)?;
        }
    };

    match stop {
        Stop::Clean => Ok((info, None)),
        Stop::Bad(problem) => {
            let offset = info.valid_end;
            let last_good_zxid = chain.last_zxid();
            if !is_last {
                return Err(StorageError::CorruptRecord {
                    path: path.to_owned(),
                    offset,
                    problem,
                    valid_record_at: None,
                    last_good_zxid,
                });
            }
            if let Some(at) = segment.find_valid_record(offset + 1, chain.last)? {
                return Err(StorageError::CorruptRecord {
                    path: path.to_owned(),
                    offset,
                    problem,
                    valid_record_at: Some(at),
                    last_good_zxid,
                });
            }
            let torn = TornTail {
                path: path.to_owned(),
                offset,
                bytes: file_bytes - offset,
            };
            warn!(path = %path.display(), offset, bytes = torn.bytes, %problem, last_zxid = %Hex(last_good_zxid), "log ends in a torn record (a write cut short by a crash); it was never acknowledged and will be truncated");
            Ok((info, Some(torn)))
        }
    }
}

/// Reads and checks the header. `Ok(None)`: the last segment's header is
/// torn and nothing but zeros follows it.
fn read_valid_header<R: Read + Seek>(
    segment: &mut SegmentReader<'_, R>,
    name_zxid: Zxid,
    is_last: bool,
    chain: &Chain,
) -> Result<Option<Zxid>, StorageError> {
    let path = segment.path;
    let problem = if segment.file_bytes < HEADER_BYTES as u64 {
        format!(
            "is only {} bytes long, shorter than a segment header ({HEADER_BYTES} bytes)",
            segment.file_bytes
        )
    } else {
        let mut bytes = [0u8; HEADER_BYTES];
        segment.read_exact(&mut bytes)?;
        match parse_header(&bytes) {
            Ok(header) if header.version != FORMAT_VERSION => {
                return Err(StorageError::UnsupportedVersion {
                    path: path.to_owned(),
                    version: header.version,
                });
            }
            Ok(header) if header.first_zxid != name_zxid => {
                return Err(StorageError::NameMismatch {
                    path: path.to_owned(),
                    header_zxid: header.first_zxid,
                    name_zxid,
                });
            }
            Ok(header) => return Ok(Some(header.first_zxid)),
            Err(problem) => problem.to_owned(),
        }
    };
    // A crash right after creating the segment can leave a short or partly
    // written header, with at most the preallocated zeros after it.
    if !is_last {
        return Err(StorageError::CorruptHeader {
            path: path.to_owned(),
            problem: format!("{problem}, and it is not the last segment"),
            last_good_zxid: chain.last_zxid(),
        });
    }
    // After a whole header the position is at its end; a shorter file has
    // nothing after its header to check.
    let longer_than_header = segment.file_bytes > HEADER_BYTES as u64;
    if longer_than_header && !segment.rest_is_zero()? {
        return Err(StorageError::CorruptHeader {
            path: path.to_owned(),
            problem: format!("{problem}, and non-zero bytes follow the header"),
            last_good_zxid: chain.last_zxid(),
        });
    }
    Ok(None)
}

/// Reads the record at the current position. `Ok(Ok(None))`: a clean end.
fn read_record<R: Read + Seek>(
    segment: &mut SegmentReader<'_, R>,
    body: &mut Vec<u8>,
) -> Result<Result<Option<TxnEntry>, RecordProblem>, StorageError> {
    let remaining = segment.file_bytes - segment.pos;
    if remaining == 0 {
        return Ok(Ok(None));
    }
    if remaining < RECORD_HEADER_BYTES as u64 {
        return Ok(if segment.rest_is_zero()? {
            Ok(None)
        } else {
            Err(RecordProblem::HeaderCut { bytes: remaining })
        });
    }
    let mut header = [0u8; RECORD_HEADER_BYTES];
    segment.read_exact(&mut header)?;
    let (length, stored) = parse_record_header(&header);
    if length == 0 {
        // The end of the log: the checksum field must be zero too.
        return Ok(if stored == 0 && segment.rest_is_zero()? {
            Ok(None)
        } else {
            Err(RecordProblem::ZeroLengthThenData)
        });
    }
    if length > RECORD_BYTES_MAX {
        return Ok(Err(RecordProblem::TooLong { length }));
    }
    // Checked before allocating: a damaged length never allocates more than
    // the file holds.
    if u64::from(length) > remaining - RECORD_HEADER_BYTES as u64 {
        return Ok(Err(RecordProblem::PastEnd {
            length,
            file_bytes: segment.file_bytes,
        }));
    }
    body.resize(length as usize, 0);
    segment.read_exact(body)?;
    let computed = record_crc(length, body);
    if computed != stored {
        return Ok(Err(RecordProblem::Checksum { stored, computed }));
    }
    Ok(match decode::<TxnEntry>(body) {
        Ok(entry) => Ok(Some(entry)),
        Err(err) => Err(RecordProblem::Undecodable {
            reason: err.to_string(),
        }),
    })
}

/// The ordering rules for a whole valid record at `offset` of `path`.
fn check_order(
    path: &Path,
    offset: u64,
    entry: &TxnEntry,
    first_zxid: Zxid,
    first_in_segment: bool,
    chain: &Chain,
) -> Result<(), StorageError> {
    let zxid = entry.zxid;
    if first_in_segment && zxid != first_zxid {
        return Err(StorageError::FirstRecordMismatch {
            path: path.to_owned(),
            offset,
            zxid,
            first_zxid,
            last_good_zxid: chain.last_zxid(),
        });
    }
    if let Some(prev_zxid) = chain.last {
        if zxid <= prev_zxid {
            return Err(StorageError::NotIncreasing {
                path: path.to_owned(),
                offset,
                zxid,
                prev_path: chain.last_path.clone(),
                prev_zxid,
            });
        }
        if !continues(prev_zxid, zxid) {
            return Err(StorageError::Gap {
                path: path.to_owned(),
                offset,
                zxid,
                prev_path: chain.last_path.clone(),
                prev_zxid,
            });
        }
    }
    // The first record the caller sees must continue its snapshot. Zero
    // means "no snapshot": whether the log then reaches back to the first
    // write is the caller's question.
    let after = chain.after_zxid;
    if chain.visited == 0 && after > 0 && zxid > after && !continues(after, zxid) {
        return Err(StorageError::SnapshotGap {
            path: path.to_owned(),
            offset,
            zxid,
            after_zxid: after,
        });
    }
    Ok(())
}

/// A segment read front to back, with its position.
struct SegmentReader<'a, R> {
    path: &'a Path,
    reader: BufReader<R>,
    pos: u64,
    file_bytes: u64,
}

impl<'a, R: Read + Seek> SegmentReader<'a, R> {
    fn new(path: &'a Path, bytes: R, file_bytes: u64) -> Self {
        let capacity = usize::try_from(file_bytes)
            .unwrap_or(usize::MAX)
            .clamp(HEADER_BYTES, READ_BUFFER_BYTES);
        SegmentReader {
            path,
            reader: BufReader::with_capacity(capacity, bytes),
            pos: 0,
            file_bytes,
        }
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), StorageError> {
        self.reader
            .read_exact(buf)
            .map_err(StorageError::io("read", self.path))?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    /// Whether every byte from the position to the end of the file is zero.
    /// Leaves the position at the first non-zero byte or the end.
    fn rest_is_zero(&mut self) -> Result<bool, StorageError> {
        loop {
            let chunk = self
                .reader
                .fill_buf()
                .map_err(StorageError::io("read", self.path))?;
            if chunk.is_empty() {
                return Ok(true);
            }
            if let Some(at) = chunk.iter().position(|&b| b != 0) {
                self.reader.consume(at);
                self.pos += at as u64;
                return Ok(false);
            }
            let used = chunk.len();
            self.reader.consume(used);
            self.pos += used as u64;
        }
    }

    /// The offset of the first whole valid record at or after `from`: its
    /// length is plausible and fits the file, its checksum holds, it decodes,
    /// and its zxid is above `after`. Every offset is tried, because a
    /// damaged length says nothing about where the next record starts.
    fn find_valid_record(
        &mut self,
        from: u64,
        after: Option<Zxid>,
    ) -> Result<Option<u64>, StorageError> {
        let path = self.path;
        let file_bytes = self.file_bytes;
        let file = self.reader.get_mut();
        let mut window = Vec::new();
        let mut body = Vec::new();
        let mut start = from;
        while start + RECORD_HEADER_BYTES as u64 <= file_bytes {
            let window_bytes = (file_bytes - start).min(SCAN_WINDOW_BYTES as u64) as usize;
            window.resize(window_bytes, 0);
            read_at(file, path, start, &mut window)?;
            for i in 0..=window_bytes - RECORD_HEADER_BYTES {
                let header: &[u8; RECORD_HEADER_BYTES] = window[i..i + RECORD_HEADER_BYTES]
                    .try_into()
                    .expect("slice of header length");
                let (length, stored) = parse_record_header(header);
                let offset = start + i as u64;
                let body_start = offset + RECORD_HEADER_BYTES as u64;
                if length == 0
                    || length > RECORD_BYTES_MAX
                    || body_start + u64::from(length) > file_bytes
                {
                    continue;
                }
                let body_in_window =
                    i + RECORD_HEADER_BYTES..i + RECORD_HEADER_BYTES + length as usize;
                let candidate = if body_in_window.end <= window_bytes {
                    &window[body_in_window]
                } else {
                    body.resize(length as usize, 0);
                    read_at(file, path, body_start, &mut body)?;
                    &body[..]
                };
                if record_crc(length, candidate) != stored {
                    continue;
                }
                if let Ok(entry) = decode::<TxnEntry>(candidate) {
                    let newer = match after {
                        Some(after) => entry.zxid > after,
                        None => true,
                    };
                    if newer {
                        return Ok(Some(offset));
                    }
                }
            }
            // The next window starts at the first offset not yet tried.
            start += (window_bytes - RECORD_HEADER_BYTES + 1) as u64;
        }
        Ok(None)
    }
}

fn read_at<R: Read + Seek>(
    file: &mut R,
    path: &Path,
    offset: u64,
    buf: &mut [u8],
) -> Result<(), StorageError> {
    file.seek(SeekFrom::Start(offset))
        .and_then(|_| file.read_exact(buf))
        .map_err(|source: io::Error| StorageError::Io {
            op: "read",
            path: path.to_owned(),
            source,
        })
}
