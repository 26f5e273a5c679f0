//! The bytes of a segment: header, record framing, file names, and the rule
//! that says which zxid may follow which. The grammar is in the parent
//! module's docs; this file is its only implementation.

use std::fmt;

use arbor_protocol::codec::{encode_into, DECODE_INPUT_BYTES_MAX};
use arbor_protocol::Zxid;

use crate::storage::error::StorageError;
use crate::txn::TxnEntry;

/// The first bytes of every segment.
pub const MAGIC: [u8; 8] = *b"ARBORWAL";
/// The only format this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// magic (8) + format_version (4) + first_zxid (8) + header_crc (4).
pub const HEADER_BYTES: usize = 24;
/// The bytes the header checksum covers: everything before it.
const HEADER_CRC_COVERED_BYTES: usize = 20;
/// length (4) + crc (4).
pub const RECORD_HEADER_BYTES: usize = 8;
/// The largest record body. A txn is at most about one frame, and the codec
/// refuses to decode more than its ceiling, so a longer record could never be
/// read back.
pub const RECORD_BYTES_MAX: u32 = 64 * 1024 * 1024;
const _: () = assert!(RECORD_BYTES_MAX as usize <= DECODE_INPUT_BYTES_MAX);

/// Segment file names: this prefix, then the first zxid in 16 lowercase hex
/// digits, so that name order is zxid order.
pub const SEGMENT_PREFIX: &str = "log.";
const SEGMENT_ZXID_DIGITS: usize = 16;

/// The low half of a zxid: the counter within an epoch.
const COUNTER_MASK: Zxid = 0xffff_ffff;

/// Whether `next` may directly follow `prev` in the log: the next counter of
/// the same epoch, or the first zxid (counter 1) of a later epoch. Anything
/// else means records are missing.
pub fn continues(prev: Zxid, next: Zxid) -> bool {
    prev.checked_add(1) == Some(next) || (next >> 32 > prev >> 32 && next & COUNTER_MASK == 1)
}

/// `log.<first_zxid as 16 lowercase hex digits>`.
pub fn segment_file_name(first_zxid: Zxid) -> String {
    format!("{SEGMENT_PREFIX}{first_zxid:016x}")
}

/// The first zxid a segment file name stands for, if it is one.
pub fn parse_segment_file_name(name: &str) -> Option<Zxid> {
    let digits = name.strip_prefix(SEGMENT_PREFIX)?;
    // Exactly the canonical spelling, so that one zxid has one name.
    let canonical = digits.len() == SEGMENT_ZXID_DIGITS
        && digits
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !canonical {
        return None;
    }
    Zxid::from_str_radix(digits, 16).ok()
}

/// The header of a new segment.
pub fn encode_header(first_zxid: Zxid) -> [u8; HEADER_BYTES] {
    let mut header = [0u8; HEADER_BYTES];
    header[..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&FORMAT_VERSION.to_be_bytes());
    header[12..20].copy_from_slice(&first_zxid.to_be_bytes());
    let crc = crc32c::crc32c(&header[..HEADER_CRC_COVERED_BYTES]);
    header[20..24].copy_from_slice(&crc.to_be_bytes());
    header
}

/// A header that passed its magic and checksum tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u32,
    pub first_zxid: Zxid,
}

/// Checks magic and checksum. A failure here is what a crash while creating
/// the segment can leave behind; a wrong version or zxid is not, so those
/// are left to the caller.
pub fn parse_header(bytes: &[u8; HEADER_BYTES]) -> Result<Header, &'static str> {
    if bytes[..8] != MAGIC {
        return Err("does not start with the magic \"ARBORWAL\" (it is not an Arbor log segment)");
    }
    let stored = u32::from_be_bytes(bytes[20..24].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[..HEADER_CRC_COVERED_BYTES]) != stored {
        return Err("has a header that fails its checksum");
    }
    Ok(Header {
        version: u32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes")),
        first_zxid: u64::from_be_bytes(bytes[12..20].try_into().expect("8 bytes")),
    })
}

/// The checksum of a record: over the length field, then the body, so that a
/// damaged length is caught as surely as a damaged body.
pub fn record_crc(length: u32, body: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&length.to_be_bytes()), body)
}

/// Splits a record header into (length, crc).
pub fn parse_record_header(bytes: &[u8; RECORD_HEADER_BYTES]) -> (u32, u32) {
    (
        u32::from_be_bytes(bytes[..4].try_into().expect("4 bytes")),
        u32::from_be_bytes(bytes[4..].try_into().expect("4 bytes")),
    )
}

/// Appends one whole record for `entry` to `out`. On error `out` is left as
/// it was.
pub fn encode_record(entry: &TxnEntry, out: &mut Vec<u8>) -> Result<(), StorageError> {
    let start = out.len();
    out.extend_from_slice(&[0u8; RECORD_HEADER_BYTES]);
    let body_start = out.len();
    let encoded = encode_into(entry, out);
    let body_bytes = out.len() - body_start;
    let length = match encoded {
        Ok(_) => match u32::try_from(body_bytes) {
            Ok(length) if (1..=RECORD_BYTES_MAX).contains(&length) => length,
            _ => {
                out.truncate(start);
                return Err(StorageError::RecordTooLarge {
                    zxid: entry.zxid,
                    bytes: body_bytes,
                    max: RECORD_BYTES_MAX,
                });
            }
        },
        Err(source) => {
            out.truncate(start);
            return Err(StorageError::Encode {
                zxid: entry.zxid,
                source,
            });
        }
    };
    let crc = record_crc(length, &out[body_start..]);
    out[start..start + 4].copy_from_slice(&length.to_be_bytes());
    out[start + 4..body_start].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// What is wrong with a record, phrased to follow "record at byte N of F".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordProblem {
    /// Fewer than [`RECORD_HEADER_BYTES`] non-zero bytes at the end of the file.
    HeaderCut {
        bytes: u64,
    },
    /// A zero length (end of log) with non-zero bytes after it.
    ZeroLengthThenData,
    TooLong {
        length: u32,
    },
    PastEnd {
        length: u32,
        file_bytes: u64,
    },
    Checksum {
        stored: u32,
        computed: u32,
    },
    Undecodable {
        reason: String,
    },
}

impl fmt::Display for RecordProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordProblem::HeaderCut { bytes } => write!(
                f,
                "is cut short: only {bytes} of its {RECORD_HEADER_BYTES} header bytes are in the file"
            ),
            RecordProblem::ZeroLengthThenData => {
                write!(f, "has length 0 (end of log), but non-zero bytes follow it")
            }
            RecordProblem::TooLong { length } => write!(
                f,
                "declares a length of {length} bytes, over the limit of {RECORD_BYTES_MAX}"
            ),
            RecordProblem::PastEnd { length, file_bytes } => write!(
                f,
                "declares a length of {length} bytes, which runs past the end of the file ({file_bytes} bytes)"
            ),
            RecordProblem::Checksum { stored, computed } => write!(
                f,
                "fails its checksum (stored {stored:#010x}, computed {computed:#010x})"
            ),
            RecordProblem::Undecodable { reason } => {
                write!(f, "has a valid checksum but does not decode ({reason})")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zxids_continue_by_counter_or_epoch_start() {
        // The gap rule: +1, or counter 1 of a later epoch; nothing else.
        let e1 = 1u64 << 32;
        let e2 = 2u64 << 32;
        assert!(continues(e1 | 57, e1 | 58));
        assert!(continues(e1 | 57, e2 | 1));
        assert!(continues(e1 | 57, (5 << 32) | 1));
        assert!(continues(0, 1));
        assert!(!continues(e1 | 57, e1 | 59));
        assert!(!continues(e1 | 57, e1 | 57));
        assert!(!continues(e1 | 57, e2 | 2));
        assert!(!continues(e2 | 1, e1 | 1));
        assert!(!continues(u64::MAX, 0));
    }

    #[test]
    fn segment_names_round_trip_and_only_canonical_names_parse() {
        // Name order is zxid order, and stray files are not segments.
        let name = segment_file_name((1 << 32) | 1);
        assert_eq!(name, "log.0000000100000001");
        assert_eq!(parse_segment_file_name(&name), Some((1 << 32) | 1));
        assert_eq!(parse_segment_file_name("log.0000000100000001.tmp"), None);
        assert_eq!(parse_segment_file_name("log.000000010000000A"), None);
        assert_eq!(parse_segment_file_name("log.+000000010000001"), None);
        assert_eq!(parse_segment_file_name("snapshot.0000000100000001"), None);
    }

    #[test]
    fn header_round_trips_and_damage_is_detected() {
        // A header reads back, and any flipped bit fails magic or checksum.
        let header = encode_header(42);
        assert_eq!(
            parse_header(&header),
            Ok(Header {
                version: FORMAT_VERSION,
                first_zxid: 42
            })
        );
        for byte in 0..HEADER_BYTES {
            let mut damaged = header;
            damaged[byte] ^= 0x10;
            assert!(parse_header(&damaged).is_err(), "byte {byte}");
        }
    }
}
