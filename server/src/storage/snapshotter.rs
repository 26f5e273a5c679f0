//! Decides when to snapshot, and writes snapshots on a background thread.
//!
//! The committer reports how many writes it applied (each op of a multi
//! counts: replay time and log size grow with ops, not txns; ZooKeeper
//! counts txns, so a log of big multis goes unsnapshotted there); every
//! `snap_count` of them
//! (jittered, so the members of a future ensemble do not all snapshot at
//! once) it takes a copy-on-write view of the state between two batches and
//! hands it to the snapshot thread. The thread writes the file, keeps the
//! newest `snap_retain` snapshots, and purges the log segments that no kept
//! snapshot needs. If a snapshot is still being written when the next one is
//! due, the new one waits for the next batch: at most one is in progress.

use std::path::PathBuf;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::thread::JoinHandle;

use rand::Rng;
use tracing::{error, info, warn};

use crate::context::Shared;
use crate::pipeline::apply::StateView;
use crate::storage::{snapshot, txnlog};

/// Where the snapshot thread writes, and how much it keeps.
#[derive(Debug, Clone)]
pub struct SnapshotPolicy {
    pub snapshot_dir: PathBuf,
    pub log_dir: PathBuf,
    /// Writes (ops) between snapshots, before jitter.
    pub snap_count: u64,
    /// Snapshots kept.
    pub snap_retain: usize,
}

/// The committer's side: counts applied txns and starts snapshots.
pub struct Snapshotter {
    views: SyncSender<StateView>,
    since_last: u64,
    next_after: u64,
    snap_count: u64,
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
                info!(zxid, nodes, view_us, "snapshot started");
                self.since_last = 0;
                self.next_after = jittered(self.snap_count);
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
            error!(error = %err, zxid = view.last_zxid, "snapshot failed");
            return;
        }
    };
    info!(
        path = %path.display(),
        zxid = view.last_zxid,
        nodes = view.tree.len(),
        sessions = view.sessions.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
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
                keep_after_zxid = oldest_kept,
                "purged log segments"
            )
        }
        Ok(_) => {}
        Err(err) => warn!(error = %err, "cannot purge log segments"),
    }
}
