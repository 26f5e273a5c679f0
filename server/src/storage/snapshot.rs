//! Snapshots: the whole state (tree and sessions) as of one zxid, on disk.
//!
//! ## Byte format
//!
//! ```text
//! file   = header record* end
//! header = magic "ARBORSNP" (8 bytes) | format_version u32 BE (= 2; 1 is read)
//!          | last_zxid u64 BE | header_crc u32 BE (crc32c of the 20 bytes before it)
//! record = length u32 BE (1 ..= RECORD_BYTES_MAX)
//!          | crc u32 BE (crc32c over the 4 length bytes, then the body)
//!          | body (bincode SnapshotRecord: a Session, a Node, or a Replica)
//! end    = a record holding SnapshotRecord::End { sessions, nodes }, the counts
//!          of records before it; nothing may follow it
//! ```
//!
//! An ensemble member's snapshot starts with one Replica record: the
//! replicated log position the state is exact as of, and the membership in
//! force ([`crate::cluster::records::AppliedPosition`]). A standalone
//! snapshot has none, so its bytes are what they always were.
//!
//! Version 2 adds ACLs: each distinct ACL list the nodes use, as an AclList
//! record under its id before any node; a node whose ACL is not the open
//! one (or was ever set) as a NodeWithAcl record naming that id; sessions
//! as SessionWithIdentity records carrying what they proved. A version 1
//! file has none of these: every node open, every session anonymous.
//!
//! A node record carries its path, data, stat, kind and sequence counter;
//! children lists and the ephemeral/container/TTL indexes are derived again on
//! load. A snapshot without its end record, with a count that does not match,
//! or with any record failing its checksum does not verify, and recovery falls
//! back to an older one.
//!
//! ## Taking one without stopping the server
//!
//! A snapshot is written from a copy-on-write view ([`StateMachine::view`]):
//! taking it copies one pointer per node under the read lock, between two
//! applied batches, so it is exact as of its zxid (not fuzzy) and writes are
//! held up only for that copy. A node written afterwards is copied then. The
//! file is written by a background thread to a temporary name, fsynced,
//! renamed into place, and the directory fsynced; only then does it count.

use std::fs::{self, File};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use arbor_protocol::acl::Acl;
use arbor_protocol::{codec, SessionId, Stat, Zxid, SESSION_PASSWORD_BYTES};
use bincode::{Decode, Encode};

use crate::acl::table::{AclId, OPEN};
use crate::acl::Identity;
use crate::cluster::records::AppliedPosition;
use crate::pipeline::apply::{SessionRecord, StateMachine, StateView};
use crate::tree::{Node, NodeKind, TreeBuilder};

/// Identifies a snapshot file.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"ARBORSNP";
/// The format this code writes; it reads this one and
/// [`SNAPSHOT_FORMAT_VERSION_READ_MIN`] on.
pub const SNAPSHOT_FORMAT_VERSION: u32 = 2;
/// The oldest format this code reads (1: before ACLs).
pub const SNAPSHOT_FORMAT_VERSION_READ_MIN: u32 = 1;
/// Largest record body; a node is at most its data, path and stat.
pub const RECORD_BYTES_MAX: usize = codec::DECODE_INPUT_BYTES_MAX;

const HEADER_BYTES: usize = 8 + 4 + 8 + 4;
const RECORD_HEADER_BYTES: usize = 8;
const FILE_PREFIX: &str = "snapshot.";
const TEMP_SUFFIX: &str = ".tmp";
/// Buffer for writing and reading snapshot files.
const IO_BUFFER_BYTES: usize = 1024 * 1024;

/// Why a snapshot could not be written, read or trusted.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid snapshot: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("{path} fails verification at byte {offset}: {reason}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError + '_ {
    move |source| SnapshotError::Io {
        path: path.to_owned(),
        source,
    }
}

/// One record of a snapshot file, as written (borrowing the live nodes).
#[derive(Encode)]
enum RecordOut<'a> {
    Session {
        id: SessionId,
        timeout_ms: u32,
        password: &'a [u8; SESSION_PASSWORD_BYTES],
    },
    Node {
        path: &'a str,
        data: &'a [u8],
        stat: &'a Stat,
        kind: &'a NodeKind,
        sequence: u64,
    },
    End {
        sessions: u64,
        nodes: u64,
    },
    Replica(&'a AppliedPosition),
    AclList {
        id: AclId,
        acl: &'a [Acl],
    },
    NodeWithAcl {
        path: &'a str,
        data: &'a [u8],
        stat: &'a Stat,
        kind: &'a NodeKind,
        sequence: u64,
        acl: AclId,
    },
    SessionWithIdentity {
        id: SessionId,
        timeout_ms: u32,
        password: &'a [u8; SESSION_PASSWORD_BYTES],
        identity: &'a Identity,
    },
}

/// One record of a snapshot file, as read. Same encoding as [`RecordOut`].
#[derive(Decode)]
enum RecordIn {
    Session {
        id: SessionId,
        timeout_ms: u32,
        password: [u8; SESSION_PASSWORD_BYTES],
    },
    Node {
        path: String,
        data: Vec<u8>,
        stat: Stat,
        kind: NodeKind,
        sequence: u64,
    },
    End {
        sessions: u64,
        nodes: u64,
    },
    Replica(AppliedPosition),
    AclList {
        id: AclId,
        acl: Vec<Acl>,
    },
    NodeWithAcl {
        path: String,
        data: Vec<u8>,
        stat: Stat,
        kind: NodeKind,
        sequence: u64,
        acl: AclId,
    },
    SessionWithIdentity {
        id: SessionId,
        timeout_ms: u32,
        password: [u8; SESSION_PASSWORD_BYTES],
        identity: Identity,
    },
}

/// A snapshot file in a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFile {
    pub zxid: Zxid,
    pub path: PathBuf,
}

/// What a loaded snapshot held.
#[derive(Debug)]
pub struct Loaded {
    pub state: StateMachine,
    pub nodes: u64,
    pub sessions: u64,
}

pub fn file_name(zxid: Zxid) -> String {
    format!("{FILE_PREFIX}{zxid:016x}")
}

/// The snapshots in `dir`, newest first. Temporary files are not listed.
pub fn list(dir: &Path) -> Result<Vec<SnapshotFile>, SnapshotError> {
    let mut found = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(err) => return Err(io_error(dir)(err)),
    };
    for entry in entries {
        let entry = entry.map_err(io_error(dir))?;
        let name = entry.file_name();
        let Some(hex) = name.to_str().and_then(|n| n.strip_prefix(FILE_PREFIX)) else {
            continue;
        };
        if hex.len() != 16 {
            continue;
        }
        if let Ok(zxid) = Zxid::from_str_radix(hex, 16) {
            found.push(SnapshotFile {
                zxid,
                path: entry.path(),
            });
        }
    }
    found.sort_by_key(|s| std::cmp::Reverse(s.zxid));
    Ok(found)
}

/// Removes temporary files left by a snapshot that a crash interrupted.
pub fn remove_temporaries(dir: &Path) -> Result<Vec<PathBuf>, SnapshotError> {
    let mut removed = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(removed);
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(FILE_PREFIX) && name.ends_with(TEMP_SUFFIX) {
            fs::remove_file(entry.path()).map_err(io_error(&entry.path()))?;
            removed.push(entry.path());
        }
    }
    Ok(removed)
}

/// Writes `view` as a snapshot in `dir` and returns its path. Durable when it
/// returns: file fsynced, renamed into place, directory fsynced.
pub fn write(dir: &Path, view: &StateView) -> Result<PathBuf, SnapshotError> {
    fs::create_dir_all(dir).map_err(io_error(dir))?;
    let path = dir.join(file_name(view.last_zxid));
    let temp = dir.join(format!("{}{TEMP_SUFFIX}", file_name(view.last_zxid)));
    let file = File::create(&temp).map_err(io_error(&temp))?;
    let mut out = BufWriter::with_capacity(IO_BUFFER_BYTES, file);
    write_to(&mut out, view, &temp)?;
    let file = out
        .into_inner()
        .map_err(|err| io_error(&temp)(err.into_error()))?;
    file.sync_all().map_err(io_error(&temp))?;
    drop(file);
    fs::rename(&temp, &path).map_err(io_error(&path))?;
    sync_dir(dir)?;
    Ok(path)
}

/// Writes `view`'s snapshot bytes to `out`, naming `path` in errors: the
/// file [`write()`] makes, without the file, so the fuzz target can check that
/// what [`load_from`] accepted is written back as the same state.
pub fn write_to(out: &mut impl Write, view: &StateView, path: &Path) -> Result<(), SnapshotError> {
    let mut header = Vec::with_capacity(HEADER_BYTES);
    header.extend_from_slice(&SNAPSHOT_MAGIC);
    header.extend_from_slice(&SNAPSHOT_FORMAT_VERSION.to_be_bytes());
    header.extend_from_slice(&view.last_zxid.to_be_bytes());
    header.extend_from_slice(&crc32c::crc32c(&header).to_be_bytes());
    out.write_all(&header).map_err(io_error(path))?;
    let mut body = Vec::new();
    if view.replica != AppliedPosition::default() {
        write_record(out, &mut body, &RecordOut::Replica(&view.replica), path)?;
    }
    for (id, record) in &view.sessions {
        let session = if *record.identity == Identity::default() {
            RecordOut::Session {
                id: *id,
                timeout_ms: record.timeout_ms,
                password: &record.password,
            }
        } else {
            RecordOut::SessionWithIdentity {
                id: *id,
                timeout_ms: record.timeout_ms,
                password: &record.password,
                identity: &record.identity,
            }
        };
        write_record(out, &mut body, &session, path)?;
    }
    for (id, acl) in view.tree.acls().iter() {
        write_record(out, &mut body, &RecordOut::AclList { id, acl }, path)?;
    }
    // In the map's order, not sorted: loading links each node to its parent
    // by lookup once all are in (`TreeBuilder::finish`), and sorting a
    // million paths was half of a snapshot's time, on a core the writes need.
    for entry in view.tree.iter() {
        let node = entry.node;
        let stat = node.stat();
        let record = if node.acl_id() == OPEN && stat.aversion == 0 {
            RecordOut::Node {
                path: &entry.path,
                data: node.data(),
                stat: &stat,
                kind: &node.kind(),
                sequence: entry.sequence,
            }
        } else {
            RecordOut::NodeWithAcl {
                path: &entry.path,
                data: node.data(),
                stat: &stat,
                kind: &node.kind(),
                sequence: entry.sequence,
                acl: node.acl_id(),
            }
        };
        write_record(out, &mut body, &record, path)?;
    }
    let end = RecordOut::End {
        sessions: view.sessions.len() as u64,
        nodes: view.tree.len() as u64,
    };
    write_record(out, &mut body, &end, path)
}

fn write_record(
    out: &mut impl Write,
    body: &mut Vec<u8>,
    record: &RecordOut<'_>,
    path: &Path,
) -> Result<(), SnapshotError> {
    body.clear();
    codec::encode_into(record, body).map_err(|err| SnapshotError::Invalid {
        path: path.to_owned(),
        reason: err.to_string(),
    })?;
    let length = (body.len() as u32).to_be_bytes();
    let crc = crc32c::crc32c_append(crc32c::crc32c(&length), body);
    out.write_all(&length).map_err(io_error(path))?;
    out.write_all(&crc.to_be_bytes()).map_err(io_error(path))?;
    out.write_all(body).map_err(io_error(path))
}

/// Fsyncs a directory, so renames and deletions in it are durable.
pub fn sync_dir(dir: &Path) -> Result<(), SnapshotError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))
}

/// Reads and verifies a snapshot.
pub fn load(path: &Path) -> Result<Loaded, SnapshotError> {
    let file = File::open(path).map_err(io_error(path))?;
    load_from(BufReader::with_capacity(IO_BUFFER_BYTES, file), path)
}

/// Reads and verifies a snapshot from `input`, naming `path` in errors:
/// [`load`] without the file, so the fuzz target runs the loader a start runs.
pub fn load_from(mut input: impl Read, path: &Path) -> Result<Loaded, SnapshotError> {
    let invalid = |reason: String| SnapshotError::Invalid {
        path: path.to_owned(),
        reason,
    };
    let mut header = [0u8; HEADER_BYTES];
    input
        .read_exact(&mut header)
        .map_err(|_| invalid("shorter than its header".into()))?;
    if header[..8] != SNAPSHOT_MAGIC {
        return Err(invalid("wrong magic number".into()));
    }
    let version = u32::from_be_bytes(header[8..12].try_into().expect("4 bytes"));
    if !(SNAPSHOT_FORMAT_VERSION_READ_MIN..=SNAPSHOT_FORMAT_VERSION).contains(&version) {
        return Err(invalid(format!(
            "format version {version}; this arbord reads versions \
             {SNAPSHOT_FORMAT_VERSION_READ_MIN} to {SNAPSHOT_FORMAT_VERSION}"
        )));
    }
    let last_zxid = u64::from_be_bytes(header[12..20].try_into().expect("8 bytes"));
    let header_crc = u32::from_be_bytes(header[20..24].try_into().expect("4 bytes"));
    if crc32c::crc32c(&header[..20]) != header_crc {
        return Err(invalid("header fails its checksum".into()));
    }

    let mut offset = HEADER_BYTES as u64;
    let mut sessions = Vec::new();
    let mut nodes = TreeBuilder::new();
    let mut added = 0u64;
    let mut replica = None;
    let mut body = Vec::new();
    let corrupt = |offset: u64, reason: String| SnapshotError::Corrupt {
        path: path.to_owned(),
        offset,
        reason,
    };
    let (session_count, node_count) = loop {
        let record =
            read_record(&mut input, &mut body).map_err(|reason| corrupt(offset, reason))?;
        let record_offset = offset;
        offset += (RECORD_HEADER_BYTES + body.len()) as u64;
        match record {
            RecordIn::Session {
                id,
                timeout_ms,
                password,
            } => sessions.push((
                id,
                SessionRecord {
                    timeout_ms,
                    password,
                    identity: Default::default(),
                },
            )),
            RecordIn::SessionWithIdentity {
                id,
                timeout_ms,
                password,
                identity,
            } => sessions.push((
                id,
                SessionRecord {
                    timeout_ms,
                    password,
                    identity: identity.into(),
                },
            )),
            RecordIn::AclList { id, acl } => nodes
                .acl(id, acl)
                .map_err(|reason| corrupt(record_offset, reason))?,
            RecordIn::Node {
                path: node_path,
                data,
                stat,
                kind,
                sequence,
            } => {
                let name = arbor_protocol::path::name(&node_path);
                let node = Node::restore(name, &data, &stat, kind)
                    .map_err(|reason| corrupt(record_offset, reason))?;
                nodes
                    .add(node_path, node, sequence)
                    .map_err(|reason| corrupt(record_offset, reason))?;
                added += 1;
            }
            RecordIn::NodeWithAcl {
                path: node_path,
                data,
                stat,
                kind,
                sequence,
                acl,
            } => {
                let name = arbor_protocol::path::name(&node_path);
                let mut node = Node::restore(name, &data, &stat, kind)
                    .map_err(|reason| corrupt(record_offset, reason))?;
                node.set_acl(acl, stat.aversion);
                nodes
                    .add(node_path, node, sequence)
                    .map_err(|reason| corrupt(record_offset, reason))?;
                added += 1;
            }
            RecordIn::End {
                sessions: s,
                nodes: n,
            } => {
                if s != sessions.len() as u64 || n != added {
                    let reason = format!(
                        "end record counts {s} sessions and {n} nodes, the file holds {} and {added}",
                        sessions.len(),
                    );
                    return Err(corrupt(record_offset, reason));
                }
                break (s, n);
            }
            RecordIn::Replica(position) => {
                if replica.replace(position).is_some() {
                    return Err(corrupt(record_offset, "a second replica record".into()));
                }
            }
        }
    };
    let mut rest = [0u8; 1];
    if input.read(&mut rest).map_err(io_error(path))? != 0 {
        return Err(corrupt(offset, "bytes after the end record".into()));
    }
    let tree = nodes.finish().map_err(invalid)?;
    let mut state = StateMachine::from_parts(tree, sessions, last_zxid);
    state.replica = replica.unwrap_or_default();
    Ok(Loaded {
        state,
        nodes: node_count,
        sessions: session_count,
    })
}

fn read_record(input: &mut impl Read, body: &mut Vec<u8>) -> Result<RecordIn, String> {
    let mut head = [0u8; RECORD_HEADER_BYTES];
    input
        .read_exact(&mut head)
        .map_err(|_| "the file ends before its end record (truncated)".to_owned())?;
    let length_bytes: [u8; 4] = head[..4].try_into().expect("4 bytes");
    let length = u32::from_be_bytes(length_bytes) as usize;
    let crc = u32::from_be_bytes(head[4..].try_into().expect("4 bytes"));
    if length == 0 || length > RECORD_BYTES_MAX {
        return Err(format!("record length {length} is out of range"));
    }
    body.clear();
    input
        .take(length as u64)
        .read_to_end(body)
        .map_err(|err| err.to_string())?;
    if body.len() != length {
        return Err("the file ends inside a record (truncated)".into());
    }
    if crc32c::crc32c_append(crc32c::crc32c(&length_bytes), body) != crc {
        return Err("record fails its checksum".into());
    }
    codec::decode(body).map_err(|err| format!("record does not decode: {err}"))
}

/// Deletes all but the newest `keep` snapshots; returns the zxid of the oldest
/// one kept (the log must be kept from there, so that falling back to it
/// still loses nothing).
pub fn retain(dir: &Path, keep: usize) -> Result<Option<Zxid>, SnapshotError> {
    let snapshots = list(dir)?;
    let keep = keep.max(1);
    for old in snapshots.iter().skip(keep) {
        // Out of the way first (a crash leaves a temporary, removed at the
        // next start), then freed in steps (see `delete_gradually`).
        let mut doomed = old.path.clone().into_os_string();
        doomed.push(TEMP_SUFFIX);
        let doomed = PathBuf::from(doomed);
        fs::rename(&old.path, &doomed).map_err(io_error(&old.path))?;
        crate::storage::delete_gradually(&doomed).map_err(io_error(&doomed))?;
    }
    if snapshots.len() > keep {
        sync_dir(dir)?;
    }
    Ok(snapshots.iter().take(keep).map(|s| s.zxid).min())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::{Txn, TxnEntry};
    use arbor_protocol::{CreateMode, MultiOp};

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("arbor-snap-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    fn sample_state() -> StateMachine {
        let mut sm = StateMachine::new();
        let txns = [
            Txn::CreateSession {
                session_id: 9,
                password: [3; 16],
                timeout_ms: 4000,
            },
            Txn::Write {
                session_id: 9,
                op: MultiOp::Create {
                    path: "/a".into(),
                    data: b"1".to_vec(),
                    mode: CreateMode::Persistent,
                },
            },
            Txn::Write {
                session_id: 9,
                op: MultiOp::Create {
                    path: "/a/e-".into(),
                    data: vec![],
                    mode: CreateMode::EphemeralSequential,
                },
            },
            Txn::Write {
                session_id: 9,
                op: MultiOp::Create {
                    path: "/c".into(),
                    data: vec![],
                    mode: CreateMode::Container,
                },
            },
        ];
        for (i, txn) in txns.into_iter().enumerate() {
            sm.apply(&TxnEntry {
                zxid: 10 + i as u64,
                time_ms: 5,
                txn,
            });
        }
        sm
    }

    fn same_state(a: &StateMachine, b: &StateMachine) {
        assert_eq!(a.last_zxid(), b.last_zxid());
        assert_eq!(a.tree.len(), b.tree.len());
        for path in ["/", "/a", "/a/e-0000000000", "/c"] {
            let (x, y) = (
                a.tree.node(path).expect("in a"),
                b.tree.node(path).expect("in b"),
            );
            assert_eq!(
                (x.stat(), x.data(), x.kind()),
                (y.stat(), y.data(), y.kind())
            );
        }
        let sequences = |sm: &StateMachine| -> Vec<(String, u64)> {
            let mut all: Vec<_> = sm
                .tree
                .view()
                .iter()
                .map(|e| (e.path, e.sequence))
                .collect();
            all.sort();
            all
        };
        assert_eq!(sequences(a), sequences(b));
        assert_eq!(a.session(9), b.session(9));
        assert_eq!(b.tree.ephemerals_of(9).count(), 1);
    }

    #[test]
    fn a_snapshot_round_trips_the_state() {
        // Written from a view, read back: the same tree, sessions and zxid.
        let dir = temp_dir("round-trip");
        let state = sample_state();
        let path = write(&dir, &state.view()).expect("written");
        let loaded = load(&path).expect("loads");
        same_state(&state, &loaded.state);
        assert_eq!((loaded.nodes, loaded.sessions), (4, 1));
        assert_eq!(list(&dir).expect("listed")[0].zxid, 13);
        fs::remove_dir_all(dir).expect("cleanup");
    }

    #[test]
    fn every_truncation_and_any_flipped_byte_fails_verification() {
        // A snapshot cut short anywhere, or with any byte changed, never loads.
        let dir = temp_dir("damage");
        let path = write(&dir, &sample_state().view()).expect("written");
        let bytes = fs::read(&path).expect("read");
        let damaged = dir.join("damaged");
        for cut in 0..bytes.len() {
            fs::write(&damaged, &bytes[..cut]).expect("write");
            assert!(load(&damaged).is_err(), "cut at {cut} loaded");
        }
        for at in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x40;
            fs::write(&damaged, &flipped).expect("write");
            assert!(load(&damaged).is_err(), "flip at {at} loaded");
        }
        fs::remove_dir_all(dir).expect("cleanup");
    }

    #[test]
    fn retain_keeps_the_newest_and_reports_the_oldest_kept() {
        // Older snapshots go; the zxid the log must be kept from is returned.
        let dir = temp_dir("retain");
        let mut state = sample_state();
        for zxid in 20..25u64 {
            state.apply(&TxnEntry {
                zxid,
                time_ms: 6,
                txn: Txn::Write {
                    session_id: 9,
                    op: MultiOp::SetData {
                        path: "/a".into(),
                        data: vec![zxid as u8],
                        version: -1,
                    },
                },
            });
            write(&dir, &state.view()).expect("written");
        }
        fs::write(dir.join("snapshot.0000000000000099.tmp"), b"partial").expect("write");
        assert_eq!(retain(&dir, 3).expect("retained"), Some(22));
        let zxids: Vec<Zxid> = list(&dir).expect("listed").iter().map(|s| s.zxid).collect();
        assert_eq!(zxids, vec![24, 23, 22]);
        assert_eq!(remove_temporaries(&dir).expect("removed").len(), 1);
        fs::remove_dir_all(dir).expect("cleanup");
    }
}
