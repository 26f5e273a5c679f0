//! The log's contract, file by file: what is written reads back, a torn
//! tail at any byte is dropped, and anything else fails loudly.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use arbor_protocol::Zxid;

use super::format::{encode_record, HEADER_BYTES};
use super::*;
use crate::txn::{Txn, TxnEntry};

const E1: Zxid = 1 << 32;
const E2: Zxid = 2 << 32;

/// A directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "arbor-txnlog-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    /// A fresh temp dir holding a copy of every file in this one.
    fn copy(&self, name: &str) -> TempDir {
        let copy = TempDir::new(name);
        for file in fs::read_dir(self.path()).expect("list") {
            let file = file.expect("entry");
            fs::copy(file.path(), copy.path().join(file.file_name())).expect("copy");
        }
        copy
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn entry(zxid: Zxid) -> TxnEntry {
    TxnEntry {
        zxid,
        time_ms: 1_700_000_000_000 + (zxid & 0xffff),
        txn: Txn::ReapTtl {
            path: format!("/n{}", zxid & 0xffff),
        },
    }
}

/// Entries `epoch | first ..= epoch | last`.
fn entries(epoch: Zxid, first: u64, last: u64) -> Vec<TxnEntry> {
    (first..=last)
        .map(|counter| entry(epoch | counter))
        .collect()
}

fn options(segment_bytes_max: u64, fsync: FsyncPolicy) -> TxnLogOptions {
    TxnLogOptions {
        segment_bytes_max,
        fsync,
        preallocate_bytes: 0,
        spares: false,
    }
}

fn read_all(dir: &Path, after_zxid: Zxid) -> Result<(Vec<TxnEntry>, LogTail), StorageError> {
    let mut seen = Vec::new();
    let tail = read_log(dir, after_zxid, |entry| {
        seen.push(entry);
        Ok(())
    })?;
    Ok((seen, tail))
}

/// Reads the log and opens a writer after it.
fn reopen(dir: &Path, options: TxnLogOptions) -> TxnLogWriter {
    let (_, tail) = read_all(dir, 0).expect("log reads");
    TxnLogWriter::open(dir, &tail, options).expect("writer opens")
}

/// Writes `batches` to a new log in `dir`.
fn write_log(dir: &Path, options: TxnLogOptions, batches: &[Vec<TxnEntry>]) -> Vec<TxnEntry> {
    let mut writer = reopen(dir, options);
    for batch in batches {
        writer.append(batch).expect("append");
    }
    batches.concat()
}

fn record_bytes(entry: &TxnEntry) -> u64 {
    let mut out = Vec::new();
    encode_record(entry, &mut out).expect("encodes");
    out.len() as u64
}

/// Start offsets of the records of `segment_entries`, then the end of the last.
fn record_boundaries(segment_entries: &[TxnEntry]) -> Vec<u64> {
    let mut boundaries = vec![HEADER_BYTES as u64];
    for entry in segment_entries {
        let end = boundaries.last().expect("non-empty") + record_bytes(entry);
        boundaries.push(end);
    }
    boundaries
}

fn last_segment(dir: &Path) -> (Zxid, PathBuf) {
    list_segments(dir).expect("lists").pop().expect("a segment")
}

fn flip_byte(path: &Path, offset: u64, mask: u8) {
    let mut bytes = fs::read(path).expect("read");
    bytes[offset as usize] ^= mask;
    fs::write(path, bytes).expect("write");
}

fn append_bytes(path: &Path, bytes: &[u8]) {
    let mut file = OpenOptions::new().append(true).open(path).expect("open");
    file.write_all(bytes).expect("append");
}

/// A log of 5 segments, one per batch: E1|1..=3, E1|4..=6, E1|7..=9,
/// E1|10..=12, and a last one with E1|13..=17.
fn five_segment_log(dir: &Path) -> Vec<TxnEntry> {
    let batches = [
        entries(E1, 1, 3),
        entries(E1, 4, 6),
        entries(E1, 7, 9),
        entries(E1, 10, 12),
        entries(E1, 13, 17),
    ];
    // Room for one batch of three in a segment, not for two.
    let batch_bytes: u64 = batches[0].iter().map(record_bytes).sum();
    let written = write_log(
        dir,
        options(HEADER_BYTES as u64 + batch_bytes + 4, FsyncPolicy::Always),
        &batches,
    );
    let names: Vec<Zxid> = list_segments(dir)
        .expect("lists")
        .iter()
        .map(|s| s.0)
        .collect();
    assert_eq!(names, vec![E1 | 1, E1 | 4, E1 | 7, E1 | 10, E1 | 13]);
    written
}

#[test]
fn round_trip_and_reopen_across_an_epoch() {
    // Appended batches read back exactly, and a reopened writer continues the log into a new epoch.
    let dir = TempDir::new("round-trip");
    let (seen, tail) = read_all(dir.path(), 0).expect("empty log reads");
    assert!(seen.is_empty());
    assert_eq!(tail, LogTail::default());

    let mut writer =
        TxnLogWriter::open(dir.path(), &tail, TxnLogOptions::default()).expect("opens");
    assert_eq!(writer.last_zxid(), 0);
    let mut written = Vec::new();
    for batch in [entries(E1, 1, 10), entries(E1, 11, 11), entries(E1, 12, 57)] {
        writer.append(&batch).expect("append");
        written.extend(batch);
    }
    writer.append(&[]).expect("an empty batch is a no-op");
    assert_eq!(writer.last_zxid(), E1 | 57);
    drop(writer);

    let (seen, tail) = read_all(dir.path(), 0).expect("reads");
    assert_eq!(seen, written);
    assert_eq!(tail.last_zxid, Some(E1 | 57));
    assert_eq!((tail.records, tail.visited), (57, 57));
    assert_eq!(tail.torn, None);

    let mut writer =
        TxnLogWriter::open(dir.path(), &tail, TxnLogOptions::default()).expect("reopens");
    assert_eq!(writer.last_zxid(), E1 | 57);
    let next = entries(E2, 1, 5);
    writer.append(&next).expect("epoch jump continues the log");
    written.extend(next);
    assert_eq!(writer.last_zxid(), E2 | 5);

    let (seen, tail) = read_all(dir.path(), 0).expect("reads");
    assert_eq!(seen, written);
    assert_eq!(
        tail.segments.len(),
        2,
        "a reopened writer starts a new segment"
    );
    assert_eq!(tail.segments[1].first_zxid, E2 | 1);
    let (seen, tail) = read_all(dir.path(), E1 | 50).expect("reads after a zxid");
    assert_eq!(seen, written[50..]);
    assert_eq!((tail.records, tail.visited), (62, 12));
}

#[test]
fn segments_roll_and_purge_keeps_what_is_needed() {
    // Small segments roll between batches (never inside one), read back in order, and purge deletes exactly the redundant ones.
    let dir = TempDir::new("roll");
    let one = record_bytes(&entry(E1 | 1));
    let segment_bytes_max = HEADER_BYTES as u64 + 4 * one;
    let mut batches: Vec<Vec<TxnEntry>> =
        (0..10).map(|i| entries(E1, 3 * i + 1, 3 * i + 3)).collect();
    // One batch larger than a whole segment stays whole.
    batches.push(entries(E1, 31, 45));
    batches.push(entries(E1, 46, 46));
    let written = write_log(
        dir.path(),
        options(segment_bytes_max, FsyncPolicy::Always),
        &batches,
    );

    let listed = list_segments(dir.path()).expect("lists");
    let firsts: Vec<Zxid> = listed.iter().map(|s| s.0).collect();
    let expected: Vec<Zxid> = (0..10)
        .map(|i| E1 | (3 * i + 1))
        .chain([E1 | 31, E1 | 46])
        .collect();
    assert_eq!(firsts, expected);
    let (seen, tail) = read_all(dir.path(), 0).expect("reads");
    assert_eq!(seen, written);
    assert_eq!(tail.segments.len(), 12);
    assert!(tail.segments[10].file_bytes > segment_bytes_max);

    // Stray files are not segments.
    fs::write(dir.path().join("log.notazxid"), b"x").expect("write");
    fs::write(dir.path().join("README"), b"x").expect("write");

    // E1|8 lives in the segment starting at E1|7: everything before it goes.
    let keep_after = E1 | 8;
    let deleted = purge(dir.path(), keep_after).expect("purges");
    assert_eq!(
        deleted,
        listed[..2].iter().map(|s| s.1.clone()).collect::<Vec<_>>()
    );
    let (seen, _) = read_all(dir.path(), keep_after).expect("reads after purge");
    assert_eq!(seen, written[8..]);
    // A boundary: keep_after + 1 is the next segment's first zxid.
    let deleted = purge(dir.path(), E1 | 9).expect("purges");
    assert_eq!(deleted, vec![listed[2].1.clone()]);
    assert!(purge(dir.path(), E1 | 9).expect("purges").is_empty());

    // Even with everything redundant, the last segment stays.
    let deleted = purge(dir.path(), Zxid::MAX).expect("purges");
    assert_eq!(deleted.len(), 8);
    assert_eq!(
        list_segments(dir.path()).expect("lists"),
        vec![listed[11].clone()]
    );
    let (seen, tail) = read_all(dir.path(), E1 | 45).expect("reads");
    assert_eq!(seen, vec![entry(E1 | 46)]);
    assert_eq!(tail.last_zxid, Some(E1 | 46));

    // And a writer continues it.
    let mut writer = reopen(dir.path(), options(segment_bytes_max, FsyncPolicy::Always));
    writer.append(&entries(E1, 47, 48)).expect("append");
    let (seen, _) = read_all(dir.path(), E1 | 45).expect("reads");
    assert_eq!(seen, entries(E1, 46, 48));
}

#[test]
fn cut_at_every_byte_of_the_tail_reads_as_torn_and_heals() {
    // A crash can cut the last segment anywhere: whole records before the cut survive, the rest is reported torn (unless it is only zeros), and the writer continues cleanly.
    let dir = TempDir::new("cut");
    let written = five_segment_log(dir.path());
    let (last_first, last_path) = last_segment(dir.path());
    let in_last: Vec<TxnEntry> = written
        .iter()
        .filter(|e| e.zxid >= last_first)
        .cloned()
        .collect();
    let boundaries = record_boundaries(&in_last);
    let file_bytes = fs::metadata(&last_path).expect("stat").len();
    assert_eq!(*boundaries.last().expect("non-empty"), file_bytes);
    let name = last_path.file_name().expect("file name");

    let original = fs::read(&last_path).expect("read");
    let from = boundaries[boundaries.len() - 4];
    let mut torn_cuts = 0;
    for cut in from..=file_bytes {
        let copy = dir.copy("cut-copy");
        let path = copy.path().join(name);
        OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(cut))
            .expect("truncate");

        let (seen, tail) =
            read_all(copy.path(), 0).unwrap_or_else(|err| panic!("cut at {cut}: {err}"));
        let whole = boundaries
            .iter()
            .rposition(|&b| b <= cut)
            .expect("after header");
        let survivors = written.len() - in_last.len() + whole;
        assert_eq!(seen, written[..survivors], "cut at {cut}");
        // A cut inside a length field can leave only its leading zero bytes,
        // which are indistinguishable from zero fill: a clean end.
        let cut_bytes = &original[boundaries[whole] as usize..cut as usize];
        let clean_end = cut_bytes.iter().all(|&b| b == 0);
        match (&tail.torn, clean_end) {
            (None, true) => {}
            (Some(torn), false) => {
                torn_cuts += 1;
                assert_eq!(torn.path, path, "cut at {cut}");
                assert_eq!(torn.offset, boundaries[whole], "cut at {cut}");
                assert_eq!(torn.bytes, cut - boundaries[whole], "cut at {cut}");
            }
            (torn, _) => panic!("cut at {cut}: torn {torn:?}"),
        }

        let mut writer =
            TxnLogWriter::open(copy.path(), &tail, options(1 << 20, FsyncPolicy::Never))
                .unwrap_or_else(|err| panic!("cut at {cut}: {err}"));
        let last = seen.last().expect("records survive").zxid;
        assert_eq!(writer.last_zxid(), last);
        let more = vec![entry(last + 1), entry(last + 2)];
        writer.append(&more).expect("append after the cut");
        let (seen_again, tail) =
            read_all(copy.path(), 0).unwrap_or_else(|err| panic!("cut at {cut}: {err}"));
        assert_eq!(
            seen_again,
            [&written[..survivors], &more[..]].concat(),
            "cut at {cut}"
        );
        assert_eq!(tail.torn, None, "cut at {cut}");
        assert_eq!(
            fs::metadata(&path).expect("stat").len(),
            boundaries[whole],
            "cut at {cut}"
        );
    }
    // Most cuts leave a partial record; only a few leave nothing or zeros.
    assert!(torn_cuts * 2 > file_bytes - from, "{torn_cuts} torn cuts");
}

#[test]
fn torn_segment_header_is_an_empty_segment() {
    // A crash while creating a segment leaves a short or zero header: no records lost, the writer deletes it and goes on.
    let dir = TempDir::new("torn-header");
    let written = write_log(
        dir.path(),
        options(1 << 20, FsyncPolicy::Always),
        &[entries(E1, 1, 4)],
    );
    let (_, good) = read_all(dir.path(), 0).expect("reads");
    for contents in [
        &b""[..],
        &b"ARBOR"[..],
        &[0u8; 4096][..],
        &b"ARBORWAL\0\0\0\x01\0\0\0\x01\0\0\0\x05\0\0\0\0\0\0\0\0"[..],
    ] {
        let copy = dir.copy("torn-header-copy");
        let torn_path = copy.path().join(format::segment_file_name(E1 | 5));
        fs::write(&torn_path, contents).expect("write");
        let (seen, tail) = read_all(copy.path(), 0).expect("reads");
        assert_eq!(seen, written);
        assert_eq!(tail.last_zxid, good.last_zxid);
        let torn = tail.torn.clone().expect("reported torn");
        assert_eq!((torn.path.as_path(), torn.offset), (torn_path.as_path(), 0));

        let mut writer =
            TxnLogWriter::open(copy.path(), &tail, options(1 << 20, FsyncPolicy::Always))
                .expect("opens");
        assert!(!torn_path.exists(), "the empty segment is deleted");
        writer.append(&entries(E1, 5, 6)).expect("append");
        let (seen, _) = read_all(copy.path(), 0).expect("reads");
        assert_eq!(seen, entries(E1, 1, 6));
    }
    // The same damage with data after it is corruption.
    let bad = dir.path().join(format::segment_file_name(E1 | 5));
    fs::write(&bad, [&b"ARBOR"[..], &[0u8; 40], &[1u8]].concat()).expect("write");
    let err = read_all(dir.path(), 0).expect_err("corrupt header");
    assert!(matches!(err, StorageError::CorruptHeader { .. }), "{err}");
}

#[test]
fn zero_fill_is_the_end_of_the_log() {
    // Preallocated or appended zeros end a segment cleanly, in any segment, and are not torn garbage.
    let dir = TempDir::new("zeros");
    let preallocated = TxnLogOptions {
        segment_bytes_max: 1 << 20,
        fsync: FsyncPolicy::Always,
        preallocate_bytes: 4096,
        spares: false,
    };
    let written = write_log(
        dir.path(),
        preallocated.clone(),
        &[entries(E1, 1, 3), entries(E1, 4, 5)],
    );
    let (_, path) = last_segment(dir.path());
    assert_eq!(
        fs::metadata(&path).expect("stat").len(),
        4096,
        "grown in a whole chunk"
    );
    let (seen, tail) = read_all(dir.path(), 0).expect("reads");
    assert_eq!(seen, written);
    assert_eq!(tail.torn, None);
    let valid_end = tail.segments[0].valid_end;
    assert!(valid_end < 4096);

    // More zeros, and fewer than a record header's worth at the very end.
    append_bytes(&path, &[0u8; 5000]);
    append_bytes(&path, &[0u8; 3]);
    let (seen, tail) = read_all(dir.path(), 0).expect("reads");
    assert_eq!(seen, written);
    assert_eq!(tail.torn, None);

    // Opening cuts the zeros off; later the first segment is not the last and still ends in zeros.
    let mut writer = TxnLogWriter::open(dir.path(), &tail, preallocated.clone()).expect("opens");
    assert_eq!(fs::metadata(&path).expect("stat").len(), valid_end);
    writer.append(&entries(E2, 1, 2)).expect("append");
    drop(writer);
    append_bytes(&path, &[0u8; 100]);
    let (seen, tail) = read_all(dir.path(), 0).expect("reads");
    assert_eq!(seen, [written, entries(E2, 1, 2)].concat());
    assert_eq!((tail.segments.len(), tail.torn), (2, None));

    // Non-zero garbage after a zero length field, with nothing valid in it, is a torn tail.
    let (_, last) = last_segment(dir.path());
    let valid_end = tail.segments[1].valid_end;
    let file_bytes = fs::metadata(&last).expect("stat").len();
    assert!(file_bytes > valid_end);
    append_bytes(&last, &[0, 0, 0, 0, 0, 0, 0, 0, 0xde, 0xad]);
    let (seen, tail) = read_all(dir.path(), 0).expect("reads");
    assert_eq!(seen.len(), 7);
    let torn = tail.torn.expect("garbage is torn");
    assert_eq!(
        (torn.offset, torn.bytes),
        (valid_end, file_bytes + 10 - valid_end)
    );
}

#[test]
fn damage_before_valid_records_is_corruption() {
    // A flipped byte anywhere but the very end is an error naming the file and the record's offset, never a silent stop.
    let dir = TempDir::new("flip");
    let written = five_segment_log(dir.path());
    let (last_first, last_path) = last_segment(dir.path());
    let in_last: Vec<TxnEntry> = written
        .iter()
        .filter(|e| e.zxid >= last_first)
        .cloned()
        .collect();
    let boundaries = record_boundaries(&in_last);
    let middle = boundaries[2];

    // Body, length and checksum bytes of a record in the middle of the last segment.
    let positions = [
        middle + 8,
        middle + 12,
        middle + 3,
        middle + 2,
        middle,
        middle + 5,
    ];
    for (i, position) in positions.into_iter().enumerate() {
        for mask in [0x01, 0x80, 0xff] {
            let copy = dir.copy("flip-copy");
            let path = copy.path().join(last_path.file_name().expect("name"));
            flip_byte(&path, position, mask);
            let err = read_all(copy.path(), 0).expect_err("corruption is an error");
            match &err {
                StorageError::CorruptRecord {
                    path: at_path,
                    offset,
                    valid_record_at,
                    last_good_zxid,
                    ..
                } => {
                    assert_eq!(at_path, &path);
                    assert_eq!(*offset, middle, "flip {i} mask {mask:#x}");
                    assert!(valid_record_at.is_some());
                    assert_eq!(*last_good_zxid, E1 | 14);
                }
                other => panic!("flip {i} mask {mask:#x}: {other}"),
            }
            let message = err.to_string();
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(message.contains(&format!("byte {middle}")), "{message}");
        }
    }

    // A record in a segment that is not the last.
    let copy = dir.copy("flip-copy");
    let (first, first_path) = list_segments(copy.path()).expect("lists")[1].clone();
    assert_eq!(first, E1 | 4);
    let second_record = HEADER_BYTES as u64 + record_bytes(&entry(E1 | 4));
    flip_byte(&first_path, second_record + 9, 0x04);
    match read_all(copy.path(), 0).expect_err("corruption is an error") {
        StorageError::CorruptRecord {
            path,
            offset,
            valid_record_at: None,
            ..
        } => assert_eq!((path, offset), (first_path, second_record)),
        other => panic!("{other}"),
    }

    // The last record of a non-last segment, even with nothing after it.
    let copy = dir.copy("flip-copy");
    let (_, first_path) = list_segments(copy.path()).expect("lists")[0].clone();
    let len = fs::metadata(&first_path).expect("stat").len();
    flip_byte(&first_path, len - 1, 0x01);
    let err = read_all(copy.path(), 0).expect_err("corruption is an error");
    assert!(
        matches!(
            err,
            StorageError::CorruptRecord {
                valid_record_at: None,
                ..
            }
        ),
        "{err}"
    );

    // Damage to the very last record cannot be told from a torn write: it reads as torn.
    let copy = dir.copy("flip-copy");
    let path = copy.path().join(last_path.file_name().expect("name"));
    let last_record = boundaries[boundaries.len() - 2];
    flip_byte(&path, last_record + 10, 0x01);
    let (seen, tail) = read_all(copy.path(), 0).expect("reads");
    assert_eq!(seen, written[..written.len() - 1]);
    assert_eq!(tail.torn.expect("torn").offset, last_record);
}

#[test]
fn missing_segments_are_gaps() {
    // A deleted middle segment, or a log that does not continue the snapshot, is an error naming the files.
    let dir = TempDir::new("gap");
    five_segment_log(dir.path());
    let listed = list_segments(dir.path()).expect("lists");

    let copy = dir.copy("gap-copy");
    let copied = list_segments(copy.path()).expect("lists");
    fs::remove_file(&copied[2].1).expect("delete");
    let err = read_all(copy.path(), 0).expect_err("gap");
    match &err {
        StorageError::Gap {
            path,
            prev_path,
            zxid,
            prev_zxid,
            ..
        } => {
            assert_eq!((path, prev_path), (&copied[3].1, &copied[1].1));
            assert_eq!((*zxid, *prev_zxid), (E1 | 10, E1 | 6));
        }
        other => panic!("{other}"),
    }
    let message = err.to_string();
    assert!(
        message.contains(&copied[3].1.display().to_string()),
        "{message}"
    );
    assert!(
        message.contains(&copied[1].1.display().to_string()),
        "{message}"
    );

    // Purged for a snapshot at E1|6, the log starts at E1|7: fine from a snapshot at 9 or 6.
    purge(dir.path(), E1 | 6).expect("purges");
    assert_eq!(list_segments(dir.path()).expect("lists"), listed[2..]);
    read_all(dir.path(), E1 | 9).expect("snapshot at 9 is continued");
    read_all(dir.path(), E1 | 6).expect("snapshot at 6 is continued");
    // A snapshot at 3 is not: zxids 4..=6 are gone.
    match read_all(dir.path(), E1 | 3).expect_err("gap after the snapshot") {
        StorageError::SnapshotGap {
            path,
            offset,
            zxid,
            after_zxid,
        } => {
            assert_eq!((path, offset), (listed[2].1.clone(), HEADER_BYTES as u64));
            assert_eq!((zxid, after_zxid), (E1 | 7, E1 | 3));
        }
        other => panic!("{other}"),
    }
    // A snapshot from an earlier epoch is continued by a log that starts a new epoch.
    let epoch = TempDir::new("gap-epoch");
    write_log(
        epoch.path(),
        options(1 << 20, FsyncPolicy::Always),
        &[entries(E2, 1, 3)],
    );
    let (seen, _) = read_all(epoch.path(), E1 | 99).expect("epoch start continues");
    assert_eq!(seen.len(), 3);
    read_all(epoch.path(), E2 | 1).expect("snapshot inside the log");
}

#[test]
fn writer_refuses_a_batch_that_does_not_continue_the_log() {
    // A batch with a gap, a repeat or a bad epoch start is refused whole, and nothing of it is written.
    let dir = TempDir::new("refuse");
    let mut writer = reopen(dir.path(), options(1 << 20, FsyncPolicy::Always));
    assert!(matches!(
        writer.append(&[entry(0)]),
        Err(StorageError::Discontinuous {
            zxid: 0,
            last_zxid: 0
        })
    ));
    writer.append(&entries(E1, 1, 3)).expect("append");
    for bad in [
        vec![entry(E1 | 5)],
        vec![entry(E1 | 3)],
        vec![entry(E1 | 4), entry(E1 | 6)],
        vec![entry(E1 | 4), entry(E1 | 4)],
        vec![entry(E2 | 2)],
        vec![entry(E1 | 2)],
    ] {
        let err = writer.append(&bad).expect_err("refused");
        assert!(matches!(err, StorageError::Discontinuous { .. }), "{err}");
        assert_eq!(writer.last_zxid(), E1 | 3);
    }
    writer
        .append(&[entry(E1 | 4), entry(E2 | 1)])
        .expect("append");
    let (seen, _) = read_all(dir.path(), 0).expect("reads");
    assert_eq!(seen, [entries(E1, 1, 4), entries(E2, 1, 1)].concat());
}

#[test]
fn fsync_never_still_writes_readable_records() {
    // Without fsync the records are written all the same, across segment rolls.
    let dir = TempDir::new("never");
    let batches: Vec<Vec<TxnEntry>> = (0..6).map(|i| entries(E1, 4 * i + 1, 4 * i + 4)).collect();
    let options = TxnLogOptions {
        segment_bytes_max: 256,
        fsync: FsyncPolicy::Never,
        preallocate_bytes: 128,
        spares: false,
    };
    let written = write_log(dir.path(), options, &batches);
    let (seen, tail) = read_all(dir.path(), 0).expect("reads");
    assert_eq!(seen, written);
    assert!(tail.segments.len() > 1);
    assert_eq!(tail.torn, None);
}

#[test]
fn headers_that_lie_are_errors() {
    // A renamed segment, a future format version and a first record that is not the header's zxid are refused.
    let dir = TempDir::new("lie");
    write_log(
        dir.path(),
        options(1 << 20, FsyncPolicy::Always),
        &[entries(E1, 1, 3)],
    );
    let (_, path) = last_segment(dir.path());

    let copy = dir.copy("lie-copy");
    let renamed = copy.path().join(format::segment_file_name(E1 | 2));
    fs::rename(copy.path().join(path.file_name().expect("name")), &renamed).expect("rename");
    let err = read_all(copy.path(), 0).expect_err("renamed");
    assert!(
        matches!(err, StorageError::NameMismatch { header_zxid, name_zxid, .. } if header_zxid == E1 | 1 && name_zxid == E1 | 2),
        "{err}"
    );

    let copy = dir.copy("lie-copy");
    let file = copy.path().join(path.file_name().expect("name"));
    let mut bytes = fs::read(&file).expect("read");
    bytes[..HEADER_BYTES].copy_from_slice(&format::encode_header(E1 | 1));
    bytes[11] = 2;
    let crc = crc32c::crc32c(&bytes[..20]);
    bytes[20..24].copy_from_slice(&crc.to_be_bytes());
    fs::write(&file, bytes).expect("write");
    let err = read_all(copy.path(), 0).expect_err("version");
    assert!(
        matches!(err, StorageError::UnsupportedVersion { version: 2, .. }),
        "{err}"
    );

    let copy = TempDir::new("lie-first");
    let file = copy.path().join(format::segment_file_name(E1 | 1));
    let mut bytes = format::encode_header(E1 | 1).to_vec();
    encode_record(&entry(E1 | 2), &mut bytes).expect("encodes");
    fs::write(&file, bytes).expect("write");
    let err = read_all(copy.path(), 0).expect_err("first record");
    assert!(
        matches!(err, StorageError::FirstRecordMismatch { zxid, first_zxid, .. } if zxid == E1 | 2 && first_zxid == E1 | 1),
        "{err}"
    );
}

#[test]
fn writer_refuses_a_stale_tail() {
    // The writer opens only on the directory read_log described.
    let dir = TempDir::new("stale");
    write_log(
        dir.path(),
        options(1 << 20, FsyncPolicy::Always),
        &[entries(E1, 1, 3)],
    );
    let (_, tail) = read_all(dir.path(), 0).expect("reads");
    fs::write(dir.path().join(format::segment_file_name(E1 | 9)), b"").expect("write");
    let err = TxnLogWriter::open(dir.path(), &tail, TxnLogOptions::default()).expect_err("stale");
    assert!(matches!(err, StorageError::TailMismatch { .. }), "{err}");
}

// Proves a segment half-purged by a crash (renamed, partly shrunk) is not read as part of the log and is removed by the next purge.
#[test]
fn a_half_purged_segment_is_ignored_then_removed() {
    let dir = TempDir::new("half-purged");
    let leftover = dir
        .path()
        .join(format!("{}.purging", format::segment_file_name(7)));
    fs::write(&leftover, vec![9u8; 3 * 1024 * 1024 + 5]).expect("write");
    assert!(list_segments(dir.path()).expect("list").is_empty());
    assert!(purge(dir.path(), 0).expect("purge").is_empty());
    assert!(!leftover.exists(), "the leftover was deleted");
}

#[test]
fn spare_segments_take_the_growth_off_the_append() {
    // A segment whose preallocated space is used up rolls into a spare made
    // ahead, so no append grows a file; spares double up to the segment size.
    let dir = TempDir::new("spares");
    let options = TxnLogOptions {
        segment_bytes_max: 16 * 1024,
        fsync: FsyncPolicy::Always,
        preallocate_bytes: 4096,
        spares: true,
    };
    let spare = dir.path().join(crate::storage::spare::SPARE_FILE_NAME);
    let mut writer = reopen(dir.path(), options.clone());
    let mut written = Vec::new();
    for i in 0..200 {
        assert!(writer.wait_for_spare(), "a spare is made");
        let batch = entries(E1, 4 * i + 1, 4 * i + 4);
        writer.append(&batch).expect("append");
        written.extend(batch);
    }
    assert_eq!(writer.grown_inline(), 0, "every roll found its spare");
    assert!(writer.wait_for_spare() && spare.exists());
    let mut sizes: Vec<u64> = list_segments(dir.path())
        .expect("lists")
        .iter()
        .map(|(_, path)| fs::metadata(path).expect("stat").len())
        .collect();
    let last = sizes.pop().expect("segments");
    assert_eq!(last, 16 * 1024, "the last segment is its spare's size");
    assert!(sizes.len() >= 2, "{sizes:?}");
    assert!(
        sizes[0] <= 4096 && (4096..=8192).contains(&sizes[1]),
        "{sizes:?}"
    );

    // A batch bigger than any spare grows its segment the old way.
    let big = entries(E1, 801, 1400);
    assert!(record_bytes(&big[0]) * 600 > 16 * 1024);
    writer.append(&big).expect("append");
    assert_eq!(writer.grown_inline(), 1);
    written.extend(big);

    // The spare nobody took goes with the writer; the log reads back whole.
    drop(writer);
    assert!(!spare.exists());
    let (seen, tail) = read_all(dir.path(), 0).expect("reads");
    assert_eq!(seen, written);
    assert_eq!(tail.torn, None);

    // A spare left by a crash is not a segment and is replaced on open.
    fs::write(&spare, b"left by a crash").expect("write");
    let (seen, _) = read_all(dir.path(), 0).expect("reads");
    assert_eq!(seen, written);
    let mut writer = reopen(dir.path(), options);
    assert!(writer.wait_for_spare());
    writer.append(&entries(E2, 1, 4)).expect("append");
    assert_eq!(writer.grown_inline(), 0);
    drop(writer);
    let (seen, _) = read_all(dir.path(), 0).expect("reads");
    assert_eq!(seen, [written, entries(E2, 1, 4)].concat());
}
