//! The log reader target: up to four segments, read as recovery reads a
//! log directory.
//!
//! Input: a mode byte, then the segments. Each but the last is a two-byte
//! length and that many bytes; the last is the rest. Mode bit 0 frames each
//! segment's bytes as records behind a valid header (named for the zxid of
//! the first record, when it decodes); bits 1–2 are the number of segments
//! less one; bit 3 reads only what follows the first segment's zxid, as
//! recovery does after a snapshot.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use arbor_protocol::{codec, Zxid};

use super::{frame_records, mode};
use crate::storage::error::StorageError;
use crate::storage::txnlog::{format, read_segments, LogTail};
use crate::txn::TxnEntry;

/// Segments one input may hold: enough for the rules across segments.
const SEGMENTS_MAX: usize = 4;

struct Segment {
    first_zxid: Zxid,
    path: PathBuf,
    bytes: Vec<u8>,
}

pub fn txnlog(data: &[u8]) {
    let Some((mode, rest)) = mode(data) else {
        return;
    };
    let count = 1 + usize::from(mode.bits & 0b11);
    let mut segments: Vec<Segment> = split(rest, count)
        .into_iter()
        .map(|bytes| {
            if mode.framed {
                framed_segment(bytes)
            } else {
                raw_segment(bytes)
            }
        })
        .collect();
    // `list_segments` hands the reader segments in name order.
    segments.sort_by_key(|segment| segment.first_zxid);
    for (index, segment) in segments.iter_mut().enumerate() {
        let name = format::segment_file_name(segment.first_zxid);
        segment.path = Path::new("fuzz").join(index.to_string()).join(name);
    }
    let after_zxid = match segments.first() {
        Some(first) if mode.bits & 0b100 != 0 => first.first_zxid,
        _ => 0,
    };
    let mut entries = Vec::new();
    let Ok(tail) = read(&segments, after_zxid, &mut entries) else {
        return;
    };
    check_tail(&segments, after_zxid, &tail, &entries);
    rewrite_and_compare(&entries);
}

/// The segments' bytes: `count - 1` length-prefixed pieces and the rest.
fn split(mut data: &[u8], count: usize) -> Vec<&[u8]> {
    let mut pieces = Vec::with_capacity(count.min(SEGMENTS_MAX));
    for _ in 1..count.min(SEGMENTS_MAX) {
        let [high, low, rest @ ..] = data else {
            break;
        };
        let wanted = usize::from(u16::from_be_bytes([*high, *low]));
        let (piece, after) = rest.split_at(wanted.min(rest.len()));
        pieces.push(piece);
        data = after;
    }
    pieces.push(data);
    pieces
}

/// The bytes as a file, named for the zxid its header claims (a name that
/// disagrees with its header is refused at once, and teaches the fuzzer
/// nothing).
fn raw_segment(bytes: &[u8]) -> Segment {
    let first_zxid = bytes
        .get(12..20)
        .and_then(|zxid| zxid.try_into().ok())
        .map_or(0, u64::from_be_bytes);
    Segment {
        first_zxid,
        path: PathBuf::new(),
        bytes: bytes.to_vec(),
    }
}

/// A valid header, then the bytes framed as records.
fn framed_segment(records: &[u8]) -> Segment {
    let mut framed = Vec::new();
    frame_records(records, &mut framed);
    let first_zxid = first_record_zxid(&framed).unwrap_or(1);
    let mut bytes = format::encode_header(first_zxid).to_vec();
    bytes.extend_from_slice(&framed);
    Segment {
        first_zxid,
        path: PathBuf::new(),
        bytes,
    }
}

fn first_record_zxid(framed: &[u8]) -> Option<Zxid> {
    let length = u32::from_be_bytes(framed.get(..4)?.try_into().ok()?) as usize;
    let body = framed.get(format::RECORD_HEADER_BYTES..format::RECORD_HEADER_BYTES + length)?;
    codec::decode::<TxnEntry>(body).ok().map(|entry| entry.zxid)
}

/// `read_segments` over the segments' bytes, collecting what it visits.
fn read(
    segments: &[Segment],
    after_zxid: Zxid,
    entries: &mut Vec<TxnEntry>,
) -> Result<LogTail, StorageError> {
    let listed: Vec<(Zxid, PathBuf)> = segments
        .iter()
        .map(|segment| (segment.first_zxid, segment.path.clone()))
        .collect();
    let mut unopened = segments.iter();
    let open = |path: &Path| {
        let segment = unopened.next().expect("each segment is opened once");
        assert_eq!(segment.path, path, "segments are opened in order");
        let bytes = Cursor::new(segment.bytes.as_slice());
        Ok((bytes, segment.bytes.len() as u64))
    };
    read_segments(&listed, open, after_zxid, |entry| {
        entries.push(entry);
        Ok(())
    })
}

/// What a log the reader accepted must look like.
fn check_tail(segments: &[Segment], after_zxid: Zxid, tail: &LogTail, entries: &[TxnEntry]) {
    assert_eq!(tail.segments.len(), segments.len(), "a segment went unread");
    assert_eq!(tail.visited, entries.len() as u64);
    assert!(tail.visited <= tail.records);
    for pair in entries.windows(2) {
        assert!(
            format::continues(pair[0].zxid, pair[1].zxid),
            "{} followed by {}",
            pair[0].zxid,
            pair[1].zxid
        );
    }
    assert!(entries.iter().all(|entry| entry.zxid > after_zxid));
    if let Some(last) = entries.last() {
        assert_eq!(tail.last_zxid, Some(last.zxid));
    }
    for (info, segment) in tail.segments.iter().zip(segments) {
        assert_eq!(info.file_bytes, segment.bytes.len() as u64);
        assert!(info.valid_end <= info.file_bytes);
    }
    if let (Some(torn), Some(last)) = (&tail.torn, tail.segments.last()) {
        assert_eq!(torn.path, last.path, "only the last segment may be torn");
        assert_eq!(torn.offset + torn.bytes, last.file_bytes);
    }
}

/// The records read, written again as one segment, read back the same.
fn rewrite_and_compare(entries: &[TxnEntry]) {
    let Some(first) = entries.first() else {
        return;
    };
    let mut bytes = format::encode_header(first.zxid).to_vec();
    for entry in entries {
        format::encode_record(entry, &mut bytes).expect("a record read back encodes");
    }
    let segment = Segment {
        first_zxid: first.zxid,
        path: Path::new("fuzz").join(format::segment_file_name(first.zxid)),
        bytes,
    };
    let mut again = Vec::new();
    let tail = read(std::slice::from_ref(&segment), 0, &mut again)
        .expect("records written by the writer read back");
    assert_eq!(tail.torn, None);
    assert_eq!(again, entries, "records changed when written again");
}
