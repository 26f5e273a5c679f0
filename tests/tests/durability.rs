//! Durability across restarts: acknowledged writes survive, torn tails are
//! cut back to whole records, corruption stops the start with a clear
//! message, snapshots fall back, sessions and ephemerals resume.

use std::path::{Path, PathBuf};
use std::time::Duration;

use arbor_client::{Client, CreateMode};
use arbor_protocol::{Op, OpResult, SessionCredentials};
use arbor_tests::{client, RawConnection, TempDir, TestServer};

/// Bytes before the first record of a segment: magic, version, first zxid, crc.
const SEGMENT_HEADER_BYTES: usize = 24;
/// Bytes before a record's body: length and crc.
const RECORD_HEADER_BYTES: usize = 8;

fn segments(data_dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(data_dir.join("log"))
        .expect("log dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("log."))
        })
        .collect();
    found.sort();
    found
}

fn snapshots(data_dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(data_dir.join("snapshots"))
        .expect("snapshot dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| !p.to_string_lossy().ends_with(".tmp"))
        .collect();
    found.sort();
    found
}

/// Byte offsets where each whole record of a segment ends.
fn record_ends(segment: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut at = SEGMENT_HEADER_BYTES;
    while at + RECORD_HEADER_BYTES <= segment.len() {
        let length = u32::from_be_bytes(segment[at..at + 4].try_into().expect("4 bytes")) as usize;
        if length == 0 || at + RECORD_HEADER_BYTES + length > segment.len() {
            break;
        }
        at += RECORD_HEADER_BYTES + length;
        ends.push(at);
    }
    ends
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else if entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Runs `arbord --verify` on a data directory.
fn verify(data_dir: &Path) -> (bool, String) {
    arbor_tests::run_arbord(["--verify", "--data-dir", &data_dir.to_string_lossy()])
}

async fn present(c: &Client, names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut found = Vec::new();
    for name in names {
        if c.exists(&format!("/d/{name}"))
            .await
            .expect("exists")
            .is_some()
        {
            found.push(name);
        }
    }
    found
}

/// A server in `dir` with one node per record: `/d` then `/d/k0`.. `/d/k{n-1}`.
async fn write_keys(dir: &Path, n: usize, extra: &[&str]) {
    let (mut server, c) = start_with_keys(dir, n, extra).await;
    c.close().await.expect("closed");
    let status = server.terminate();
    assert!(status.success());
}

/// A server in `dir` holding `/d/k0` .. `/d/k{n-1}`, and its client.
async fn start_with_keys(dir: &Path, n: usize, extra: &[&str]) -> (TestServer, Client) {
    let server = TestServer::start_in(dir, extra);
    let c = client(&server).await;
    c.create("/d", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    for i in 0..n {
        c.create(
            &format!("/d/k{i}"),
            vec![i as u8; 20],
            CreateMode::Persistent,
        )
        .await
        .expect("created");
    }
    (server, c)
}

#[tokio::test]
async fn acknowledged_writes_and_zxids_survive_a_restart() {
    let dir = TempDir::new();
    let mut server = TestServer::start_in(dir.path(), &[]);
    let c = client(&server).await;
    let (_, before) = c
        .create_with_stat("/kept", b"v".to_vec(), CreateMode::Persistent)
        .await
        .expect("created");
    c.set_data("/kept", b"v2".to_vec(), Some(0))
        .await
        .expect("set");
    drop(c);
    server.kill();
    server.restart();
    let c = client(&server).await;
    let (data, stat) = c.get_data("/kept").await.expect("survived");
    assert_eq!(
        (data.as_slice(), stat.version, stat.czxid),
        (&b"v2"[..], 1, before.czxid)
    );
    let (_, after) = c
        .create_with_stat("/next", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    assert!(
        after.czxid > stat.mzxid,
        "zxid never goes back across restarts"
    );
    assert!(
        after.czxid >> 32 > before.czxid >> 32,
        "a new epoch at each start"
    );
}

#[tokio::test]
async fn cutting_the_last_segment_anywhere_keeps_exactly_the_whole_records() {
    let dir = TempDir::new();
    write_keys(dir.path(), 6, &[]).await;
    let segment = segments(dir.path()).pop().expect("a segment");
    let bytes = std::fs::read(&segment).expect("read");
    let ends = record_ends(&bytes);
    assert!(ends.len() >= 4, "enough records: {}", ends.len());
    let from = ends[ends.len() - 4];
    let names: Vec<String> = (0..6).map(|i| format!("k{i}")).collect();
    let copy = TempDir::new();
    // Every offset through the last record, then the whole (preallocated,
    // zero-filled) file.
    let valid_end = *ends.last().expect("records");
    for cut in (from..=valid_end).chain([bytes.len()]) {
        let _ = std::fs::remove_dir_all(copy.path());
        copy_dir(dir.path(), copy.path());
        let cut_segment = copy
            .path()
            .join("log")
            .join(segment.file_name().expect("name"));
        std::fs::write(&cut_segment, &bytes[..cut]).expect("cut");
        let whole = ends.iter().filter(|&&end| end <= cut).count();
        let (ok, report) = verify(copy.path());
        assert!(ok, "cut at {cut}: verify refused: {report}");
        assert!(
            report.contains(&format!("{whole} records read")),
            "cut at {cut}: {report}"
        );
        // A full start (and client check) at record boundaries and a few places between.
        if ends.contains(&cut) || cut % 13 == 0 || cut >= valid_end {
            let server = TestServer::start_in(copy.path(), &[]);
            let c = client(&server).await;
            // Records: session, /d, k0.. — the session's create is the first.
            let keys_kept = present(&c, names.clone()).await;
            let expected = whole.saturating_sub(2).min(6);
            assert_eq!(keys_kept.len(), expected, "cut at {cut}: {keys_kept:?}");
            assert_eq!(keys_kept, names[..expected].to_vec(), "a prefix, in order");
        }
    }
}

#[tokio::test]
async fn a_flipped_byte_before_the_tail_refuses_to_start_and_says_where() {
    let dir = TempDir::new();
    write_keys(dir.path(), 6, &[]).await;
    let segment = segments(dir.path()).pop().expect("a segment");
    let mut bytes = std::fs::read(&segment).expect("read");
    let ends = record_ends(&bytes);
    let middle = ends[1] + RECORD_HEADER_BYTES + 3; // inside the third record's body
    bytes[middle] ^= 0x55;
    std::fs::write(&segment, &bytes).expect("write");
    let stderr = match TestServer::try_start_in(dir.path(), &[]) {
        Ok(_) => panic!("started on a corrupt log"),
        Err(stderr) => stderr,
    };
    let name = segment
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(stderr.contains(&name), "names the file: {stderr}");
    assert!(
        stderr.contains(&ends[1].to_string()),
        "names the offset {}: {stderr}",
        ends[1]
    );
    let (ok, report) = verify(dir.path());
    assert!(!ok && report.contains(&name), "{report}");
    assert_eq!(
        std::fs::read(&segment).expect("read"),
        bytes,
        "a refused start changes nothing"
    );
}

#[tokio::test]
async fn a_truncated_newest_snapshot_falls_back_to_the_previous_one() {
    let dir = TempDir::new();
    let (mut server, c) = start_with_keys(
        dir.path(),
        60,
        &[
            "--snap-count",
            "10",
            "--snap-tree-percent",
            "0",
            "--snap-retain",
            "3",
        ],
    )
    .await;
    // The snapshot thread runs at low priority: on a busy machine it may
    // still be writing the first snapshot when the last key is written, and
    // a due snapshot only starts with a later write. A few more, paced.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut extra = 0;
    while snapshots(dir.path()).len() < 2 {
        assert!(std::time::Instant::now() < deadline, "no second snapshot");
        c.create(
            &format!("/extra-{extra}"),
            Vec::new(),
            CreateMode::Persistent,
        )
        .await
        .expect("created");
        extra += 1;
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    c.close().await.expect("closed");
    assert!(server.terminate().success());
    let snaps = snapshots(dir.path());
    assert!(snaps.len() >= 2, "snapshots were taken: {snaps:?}");
    let newest = snaps.last().expect("newest");
    let len = std::fs::metadata(newest).expect("meta").len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(newest)
        .expect("open");
    file.set_len(len / 2).expect("truncate");
    let (ok, report) = verify(dir.path());
    assert!(ok && report.contains("DOES NOT VERIFY"), "{report}");
    let server = TestServer::start_in(dir.path(), &[]);
    let c = client(&server).await;
    let names: Vec<String> = (0..60).map(|i| format!("k{i}")).collect();
    assert_eq!(present(&c, names.clone()).await, names, "nothing lost");
}

#[tokio::test]
async fn a_missing_segment_or_a_log_without_its_snapshot_refuses_to_start() {
    let dir = TempDir::new();
    write_keys(
        dir.path(),
        40,
        &["--segment-bytes", "600", "--snap-count", "1000000"],
    )
    .await;
    let segs = segments(dir.path());
    assert!(segs.len() >= 3, "several segments: {segs:?}");
    let copy = TempDir::new();
    copy_dir(dir.path(), copy.path());
    std::fs::remove_file(
        copy.path()
            .join("log")
            .join(segs[1].file_name().expect("name")),
    )
    .expect("rm");
    let err = TestServer::try_start_in(copy.path(), &[])
        .err()
        .expect("refused");
    assert!(err.contains("gap") || err.contains("missing"), "{err}");
    std::fs::remove_file(
        copy.path()
            .join("log")
            .join(segs[0].file_name().expect("name")),
    )
    .expect("rm");
    let err = TestServer::try_start_in(copy.path(), &[])
        .err()
        .expect("refused");
    assert!(err.contains("no snapshot"), "{err}");
}

#[tokio::test]
async fn a_second_server_cannot_use_the_same_data_directory() {
    let dir = TempDir::new();
    let _first = TestServer::start_in(dir.path(), &[]);
    let err = TestServer::try_start_in(dir.path(), &[])
        .err()
        .expect("refused");
    assert!(err.contains("in use"), "{err}");
}

#[tokio::test]
async fn an_ephemeral_survives_a_restart_if_its_session_resumes_in_time() {
    let dir = TempDir::new();
    let mut server = TestServer::start_in(dir.path(), &[]);
    let timeout_ms = 1200;
    let (mut kept, kept_grant) = RawConnection::session(server.addr(), timeout_ms).await;
    let (mut lost, _) = RawConnection::session(server.addr(), timeout_ms).await;
    for (conn, path) in [(&mut kept, "/stays"), (&mut lost, "/goes")] {
        let create = Op::Create {
            path: path.into(),
            data: vec![],
            mode: CreateMode::Ephemeral,
        };
        assert!(conn.request(create).await.0.is_ok());
    }
    let (_, seen_zxid) = kept.request(Op::Ping).await;
    server.kill();
    drop((kept, lost));
    // Down for longer than the session timeout: the restart gives a fresh one.
    tokio::time::sleep(Duration::from_millis(u64::from(timeout_ms) + 300)).await;
    server.restart();
    let mut resumed = RawConnection::open(server.addr()).await;
    let credentials = SessionCredentials {
        id: kept_grant.session_id,
        password: kept_grant.password,
    };
    resumed
        .handshake(timeout_ms, Some(credentials), seen_zxid)
        .await
        .expect("session resumes after restart");
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(resumed.request(Op::Ping).await.0, Ok(OpResult::Pong));
    }
    let exists = |path: &str| Op::Exists {
        path: path.into(),
        watch: false,
    };
    assert!(matches!(
        resumed.request(exists("/stays")).await.0,
        Ok(OpResult::Exists(Some(_)))
    ));
    assert!(
        matches!(
            resumed.request(exists("/goes")).await.0,
            Ok(OpResult::Exists(None))
        ),
        "the other session expired"
    );
}
