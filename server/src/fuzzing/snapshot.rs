//! The snapshot loader target: one snapshot file, loaded as a start loads
//! it, and (when it loads) written again and loaded back the same.
//!
//! Input: a mode byte, then the file. Mode bit 0 frames the rest as records
//! behind a valid header; bit 1 then claims format version 1 (before ACLs)
//! instead of the current one.

use std::path::Path;

use arbor_protocol::acl::Acl;
use arbor_protocol::{SessionId, Stat};

use super::{frame_records, mode};
use crate::cluster::records::AppliedPosition;
use crate::pipeline::apply::{SessionRecord, StateView};
use crate::storage::snapshot::{
    self, Loaded, SNAPSHOT_FORMAT_VERSION, SNAPSHOT_FORMAT_VERSION_READ_MIN, SNAPSHOT_MAGIC,
};
use crate::tree::NodeKind;

/// The zxid the framed mode's header claims.
const FRAMED_ZXID: u64 = 1;

pub fn snapshot(data: &[u8]) {
    let Some((mode, rest)) = mode(data) else {
        return;
    };
    let path = Path::new("fuzz").join(snapshot::file_name(FRAMED_ZXID));
    let loaded = if mode.framed {
        let version = if mode.bits & 1 == 1 {
            SNAPSHOT_FORMAT_VERSION_READ_MIN
        } else {
            SNAPSHOT_FORMAT_VERSION
        };
        snapshot::load_from(&framed_file(version, rest)[..], &path)
    } else {
        snapshot::load_from(rest, &path)
    };
    if let Ok(loaded) = loaded {
        rewrite_and_compare(&loaded, &path);
    }
}

fn framed_file(version: u32, records: &[u8]) -> Vec<u8> {
    let mut file = Vec::new();
    file.extend_from_slice(&SNAPSHOT_MAGIC);
    file.extend_from_slice(&version.to_be_bytes());
    file.extend_from_slice(&FRAMED_ZXID.to_be_bytes());
    let crc = crc32c::crc32c(&file);
    file.extend_from_slice(&crc.to_be_bytes());
    frame_records(records, &mut file);
    file
}

/// A state that loaded is written as the snapshot writer writes it, and
/// that loads back as the same state.
fn rewrite_and_compare(loaded: &Loaded, path: &Path) {
    let view = loaded.state.view();
    assert_eq!(loaded.nodes, view.tree.len() as u64, "node count");
    assert_eq!(loaded.sessions, view.sessions.len() as u64, "session count");
    let mut written = Vec::new();
    snapshot::write_to(&mut written, &view, path).expect("a loaded state writes");
    let again = snapshot::load_from(&written[..], path).expect("a written snapshot loads");
    assert_eq!(
        Comparable::of(&again.state.view()),
        Comparable::of(&view),
        "the state changed when written again"
    );
}

/// A state as plain values, in a fixed order, for comparing two of them.
#[derive(Debug, PartialEq, Eq)]
struct Comparable {
    last_zxid: u64,
    replica: AppliedPosition,
    sessions: Vec<(SessionId, SessionRecord)>,
    nodes: Vec<ComparableNode>,
}

#[derive(Debug, PartialEq, Eq)]
struct ComparableNode {
    path: String,
    stat: Stat,
    data: Vec<u8>,
    kind: NodeKind,
    sequence: u64,
    acl: Vec<Acl>,
}

impl Comparable {
    fn of(view: &StateView) -> Comparable {
        let mut sessions = view.sessions.clone();
        sessions.sort_by_key(|(id, _)| *id);
        let mut nodes: Vec<ComparableNode> = view
            .tree
            .iter()
            .map(|entry| ComparableNode {
                path: entry.path,
                stat: entry.node.stat(),
                data: entry.node.data().to_vec(),
                kind: entry.node.kind(),
                sequence: entry.sequence,
                acl: view.tree.acls().get(entry.node.acl_id()).to_vec(),
            })
            .collect();
        // A tree holds each path once.
        nodes.sort_by(|a, b| a.path.cmp(&b.path));
        Comparable {
            last_zxid: view.last_zxid,
            replica: view.replica.clone(),
            sessions,
            nodes,
        }
    }
}
