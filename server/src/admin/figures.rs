//! What the server's state and counters say, read once for one page:
//! `/metrics` and `/commands/stat` both print these.

use std::path::Path;
use std::time::SystemTime;

use arbor_protocol::ClusterStatus;

use crate::context::Shared;
use crate::stats::{ConnectionFigures, SnapshotFigures};
use crate::storage::recovery::DataLayout;
use crate::watch::WatchSummary;

/// Everything a page shows, but the per-op counters (read from
/// [`crate::stats::Stats`] directly).
pub struct Figures {
    pub mode: &'static str,
    pub last_zxid: u64,
    pub znodes: usize,
    pub data_bytes: u64,
    pub ephemerals: usize,
    pub sessions: usize,
    pub watches: WatchSummary,
    pub connections: ConnectionFigures,
    /// Sessions that have a connection here now.
    pub attached_sessions: usize,
    pub outstanding: u64,
    pub outbound_bytes: u64,
    pub uptime_seconds: f64,
    pub log: Files,
    pub snapshots: Files,
    /// The newest snapshot file's age, in seconds; `None` without one.
    pub snapshot_age_seconds: Option<f64>,
    /// The last snapshot this process wrote.
    pub last_snapshot: SnapshotFigures,
    pub ensemble: Option<ClusterStatus>,
}

/// Files in one directory of the data directory.
#[derive(Debug, Clone, Copy, Default)]
pub struct Files {
    pub count: u64,
    pub bytes: u64,
    /// The newest one's size.
    pub newest_bytes: u64,
    newest: Option<SystemTime>,
}

/// Reads the figures. Blocking: it lists the data directory.
pub fn read(shared: &Shared) -> Figures {
    let mode = match shared.ensemble() {
        None => "standalone",
        Some(ensemble) if ensemble.is_leader() => "leader",
        Some(_) => "follower",
    };
    let (last_zxid, znodes, data_bytes, ephemerals, sessions) = {
        let state = shared.state.read();
        (
            state.last_zxid(),
            state.tree.len(),
            state.tree.data_bytes(),
            state.tree.ephemeral_count(),
            state.session_count(),
        )
    };
    let watches = shared.watches.lock().summary();
    let attached_sessions = shared.connections.lock().len();
    let layout = DataLayout::new(&shared.config.data_dir);
    let snapshots = files_in(&layout.snapshot_dir);
    let snapshot_age_seconds = snapshots.newest.map(|newest| {
        SystemTime::now()
            .duration_since(newest)
            .unwrap_or_default()
            .as_secs_f64()
    });
    let stats = &shared.stats;
    Figures {
        mode,
        last_zxid,
        znodes,
        data_bytes,
        ephemerals,
        sessions,
        watches,
        connections: stats.connections(),
        attached_sessions,
        outstanding: stats.requests_outstanding(),
        outbound_bytes: shared.outbound_total.queued() as u64,
        uptime_seconds: stats.uptime().as_secs_f64(),
        // A member's log is the replicated one (`raft/log`).
        log: match shared.ensemble() {
            Some(_) => files_in(&crate::cluster::bootstrap::raft_dir(&layout.data_dir).join("log")),
            None => files_in(&layout.log_dir),
        },
        snapshots,
        snapshot_age_seconds,
        last_snapshot: stats.last_snapshot(),
        ensemble: shared.ensemble().map(|ensemble| ensemble.status()),
    }
}

/// Counts the regular files of `dir` (none if it cannot be read).
fn files_in(dir: &Path) -> Files {
    let mut files = Files::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        files.count += 1;
        files.bytes += meta.len();
        let modified = meta.modified().ok();
        if modified > files.newest {
            files.newest = modified;
            files.newest_bytes = meta.len();
        }
    }
    files
}
