//! Decides when to snapshot, and writes snapshots on a background thread.
//!
//! The committer reports how many writes it applied (each op of a multi
//! counts: replay time and log size grow with ops, not txns; ZooKeeper
//! counts txns, so a log of big multis goes unsnapshotted there); once
//! [`writes_between`] of them were applied (jittered, so the members of an
//! ensemble do not all snapshot at once) it takes a copy-on-write view of the
//! state between two batches and hands it to the snapshot thread. The thread writes the file, keeps the
//! newest `snap_retain` snapshots, and purges the log segments that no kept
//! snapshot needs. If a snapshot is still being written when the next one is
//! due, the new one waits for the next batch: at most one is in progress.

use std::path::PathBuf;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;

use arbor_protocol::Hex;
use rand::Rng;
use tracing::{error, info, warn};

use crate::context::Shared;
use crate::pipeline::apply::StateView;
use crate::stats::Stats;
use crate::storage::{snapshot, txnlog};

/// Where the snapshot thread writes, and how much it keeps.
#[derive(Debug, Clone)]
pub struct SnapshotPolicy {
    pub snapshot_dir: PathBuf,
    pub log_dir: PathBuf,
    /// Writes (ops) between snapshots, before jitter.
    pub snap_count: u64,
    /// And at least this percentage of the tree's znodes.
    pub snap_tree_percent: u64,
    /// Snapshots kept.
    pub snap_retain: usize,
    /// Where a written (or failed) snapshot is counted.
    pub stats: Arc<Stats>,
}

/// The committer's side: counts applied txns and starts snapshots.
pub struct Snapshotter {
    views: SyncSender<StateView>,
    since_last: u64,
    next_after: u64,
    snap_count: u64,
    snap_tree_percent: u64,
}

/// The snapshot thread; joined at shutdown so a snapshot in progress finishes.
pub struct SnapshotThread {
    handle: JoinHandle<()>,
}

impl SnapshotThread {
    /// Waits for the snapshot in progress, if any.
    pub fn join(self) {
        if self.handle.join().is_err() {
            error!("snapshot thread panicked");
        }
    }
}

/// Starts the snapshot thread. It stops once the returned [`Snapshotter`] is
/// dropped (the committer ends).
pub fn start(policy: SnapshotPolicy) -> std::io::Result<(Snapshotter, SnapshotThread)> {
    // One view in the queue at most: views hold the tree alive.
    let (views, queue) = mpsc::sync_channel::<StateView>(0);
    let snap_count = policy.snap_count.max(1);
    let snap_tree_percent = policy.snap_tree_percent;
    let handle = std::thread::Builder::new()
        .name("arbor-snapshot".into())
        .spawn(move || {
            lower_this_threads_priority();
            while let Ok(view) = queue.recv() {
                take(&policy, &view);
            }
        })?;
    let snapshotter = Snapshotter {
        views,
        since_last: 0,
        next_after: jittered(snap_count),
        snap_count,
        snap_tree_percent,
    };
    Ok((snapshotter, SnapshotThread { handle }))
}

/// The nice value of the snapshot thread.
const SNAPSHOT_THREAD_NICE: libc::c_int = 19;

/// A snapshot is hundreds of milliseconds of CPU (sorting and encoding every
/// node) that can wait; the threads acknowledging writes cannot. On two
/// shared cores, write p999 over a run with a snapshot in it was 26–64 ms
/// before and 7–52 ms after (three noisy runs each; 6–16 ms with no
/// snapshot at all), so this helps but does not remove the stall.
fn lower_this_threads_priority() {
    // SAFETY: plain syscalls on the calling thread's own id.
    let result = unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, SNAPSHOT_THREAD_NICE)
    };
    if result != 0 {
        warn!("could not lower the snapshot thread's priority");
    }
}

/// The largest `snap_tree_percent`: past 100 the log since a snapshot
/// outgrows the snapshot, and so does the replay of a restart.
pub const SNAP_TREE_PERCENT_MAX: u64 = 1000;

/// Writes between two snapshots, before jitter: `snap_count`, or
/// `tree_percent` % of the tree's znodes if that is more (100 by default). A snapshot costs every node, the log it retires only
/// the writes in it; with a fixed count a tree of 10 M znodes was rewritten
/// every 100 k writes, and creates ran at a quarter of their speed on a small
/// tree (server CPU per create 10 → 65 µs; 1 M znodes: 111 k/s with no
/// snapshot, 53–69 k/s with one per 100 k). Growing the interval with the
/// tree (the rule of Redis's AOF rewrite at 100 %) bounds a snapshot's cost
/// per write whatever the size, and recovery still replays no more writes
/// than it loads nodes.
pub fn writes_between(snap_count: u64, tree_percent: u64, tree_nodes: usize) -> u64 {
    let by_tree = (tree_nodes as u64).saturating_mul(tree_percent.min(SNAP_TREE_PERCENT_MAX)) / 100;
    snap_count.max(by_tree).max(1)
}

/// Somewhere in [count/2, count], as ZooKeeper does.
fn jittered(count: u64) -> u64 {
    let half = count / 2;
    half + rand::thread_rng().gen_range(0..=count - half)
}

impl Snapshotter {
    /// Counts applied writes (ops); starts a snapshot when one is due and
    /// the thread is free.
    pub fn applied(&mut self, ops: u64, shared: &Shared) {
        self.since_last += ops;
        if self.since_last < self.next_after {
            return;
        }
        let started = std::time::Instant::now();
        let view = shared.state.read().view();
        // Writes wait for this copy (reads do not): worth watching.
        let view_us = started.elapsed().as_micros() as u64;
        let (zxid, nodes) = (view.last_zxid, view.tree.len());
        match self.views.try_send(view) {
            Ok(()) => {
                info!(zxid = %Hex(zxid), nodes, view_us, "snapshot started");
                self.since_last = 0;
                self.next_after = jittered(writes_between(
                    self.snap_count,
                    self.snap_tree_percent,
                    nodes,
                ));
            }
            Err(TrySendError::Full(_)) => {} // still writing the previous one
            Err(TrySendError::Disconnected(_)) => {
                warn!("snapshot thread is gone; no more snapshots will be taken");
                self.since_last = 0;
                self.next_after = u64::MAX;
            }
        }
    }
}

fn take(policy: &SnapshotPolicy, view: &StateView) {
    let started = std::time::Instant::now();
    let path = match snapshot::write(&policy.snapshot_dir, view) {
        Ok(path) => path,
        Err(err) => {
            // The log still holds everything; the next snapshot may succeed.
            error!(error = %err, zxid = %Hex(view.last_zxid), "snapshot failed");
            policy.stats.snapshot_failed();
            return;
        }
    };
    let elapsed = started.elapsed();
    let bytes = std::fs::metadata(&path).map_or(0, |meta| meta.len());
    policy
        .stats
        .snapshot_written(view.last_zxid, bytes, elapsed);
    info!(
        path = %path.display(),
        zxid = %Hex(view.last_zxid),
        nodes = view.tree.len(),
        sessions = view.sessions.len(),
        bytes,
        elapsed_ms = elapsed.as_millis() as u64,
        "snapshot written"
    );
    let oldest_kept = match snapshot::retain(&policy.snapshot_dir, policy.snap_retain) {
        Ok(Some(zxid)) => zxid,
        Ok(None) => return,
        Err(err) => {
            warn!(error = %err, "cannot remove old snapshots");
            return;
        }
    };
    match txnlog::purge(&policy.log_dir, oldest_kept) {
        Ok(purged) if !purged.is_empty() => {
            info!(
                segments = purged.len(),
                keep_after_zxid = %Hex(oldest_kept),
                "purged log segments"
            )
        }
        Ok(_) => {}
        Err(err) => warn!(error = %err, "cannot purge log segments"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_grows_with_the_tree_past_snap_count() {
        assert_eq!(writes_between(100_000, 100, 10_000), 100_000);
        assert_eq!(writes_between(100_000, 100, 10_000_000), 10_000_000);
        assert_eq!(writes_between(100_000, 50, 10_000_000), 5_000_000);
        assert_eq!(
            writes_between(100_000, 0, 10_000_000),
            100_000,
            "0: snap_count alone"
        );
        assert_eq!(
            writes_between(1, SNAP_TREE_PERCENT_MAX * 10, 1000),
            10_000,
            "the percentage is capped"
        );
        assert_eq!(writes_between(0, 0, 0), 1);
    }

    #[test]
    fn jitter_stays_within_half_to_all() {
        for _ in 0..1000 {
            let due = jittered(1000);
            assert!((500..=1000).contains(&due), "{due}");
        }
    }
}
