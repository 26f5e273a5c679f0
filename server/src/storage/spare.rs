//! A log's next segment, made ahead: a background thread writes a spare file
//! full of zeros and syncs it while the current segment fills, and a roll
//! writes the segment's header over its first zeros and renames it into
//! place. Both logs use it: the write-ahead log ([`super::txnlog`]) and an
//! ensemble member's replicated log (`crate::cluster::log_files`).
//!
//! Why: the log preallocates (a write into fresh space makes every fdatasync
//! record the new size or block allocation too), and zeros written by the
//! commit path are flushed by the next batch's fdatasync. Measured here, an
//! fdatasync of one 4 KiB record took 178 µs (p50); with a 4 MiB chunk of
//! fresh zeros behind it, 3.8–4.4 ms. At 100 k writes/s that was one such
//! stall every quarter second, holding every write in flight, and it was the
//! p999 of `arbor-bench set`. Made ahead, the zeros are flushed off the commit
//! path, in steps small enough that a commit's sync never queues long behind
//! one.
//!
//! The fill is paced by the log: it runs at most [`FILL_PACE`] bytes of zeros
//! per byte appended (after a head start), and freely while no appends come.
//! Unpaced, a 64 MiB spare filled in well under a second and took that
//! second's writes from 70 k/s to 47 k/s (its page-cache copies and disk
//! writes beside the commits'); paced, the same work spreads over the time
//! the segment takes to fill, and is still done when it is a third full.
//!
//! Spares grow from `preallocate_bytes` by doubling up to the segment size,
//! so a server that writes little also zero-fills little. The spare's name is
//! not a segment's, so readers ignore it; one left by a crash is deleted when
//! the log is next opened. If a spare is not ready when the writer needs one,
//! the writer grows its segment itself as before: slower, never wrong.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tracing::{debug, warn};

use crate::storage::write_zeros;

/// The spare's file name in the log directory (not a segment name).
pub(crate) const SPARE_FILE_NAME: &str = "spare.wal";

/// Zeros pushed to disk per step before the next step is written: a commit
/// whose fdatasync arrives meanwhile waits behind at most this much.
const FILL_STEP_BYTES: u64 = 256 * 1024;

/// Bytes of zeros the fill may write per byte appended to the log since the
/// spare was asked for. Spares at most double the segment being filled, so
/// at 3 the spare is ready before the segment is full, with room for the
/// pacing's lag.
const FILL_PACE: u64 = 3;

/// Zeros written before the pacing starts: a small spare fills at once.
const FILL_HEAD_START_BYTES: u64 = 4 * 1024 * 1024;

/// No append for this long and the log counts as idle: the fill runs freely,
/// since it is in nobody's way.
const FILL_IDLE: Duration = Duration::from_millis(20);

/// How long the fill waits before looking at the log's appends again when it
/// is ahead of them.
const FILL_PAUSE: Duration = Duration::from_millis(2);

/// A spare, filled with zeros and synced: its size and blocks are durable.
#[derive(Debug)]
pub(crate) struct Spare {
    pub file: File,
    pub path: PathBuf,
    pub bytes: u64,
}

impl Spare {
    /// Makes this spare the segment `segment`: `header` written over its
    /// first zeros and synced before the rename, so a segment never appears
    /// without one. Returns the open file and its length. On error, which
    /// step failed is in the message; the spare's path is the caller's to name.
    pub fn into_segment(self, header: &[u8], segment: &Path) -> io::Result<(File, u64)> {
        use std::os::unix::fs::FileExt;
        let step = |what: &'static str| {
            move |err: io::Error| io::Error::new(err.kind(), format!("{what}: {err}"))
        };
        self.file
            .write_all_at(header, 0)
            .map_err(step("write the header"))?;
        self.file.sync_data().map_err(step("fsync"))?;
        fs::rename(&self.path, segment).map_err(step("rename"))?;
        Ok((self.file, self.bytes))
    }
}

#[derive(Debug, Default)]
struct State {
    /// Made and not yet taken.
    ready: Option<Spare>,
    /// The size of the spare to make next, once asked for.
    wanted: Option<u64>,
    /// Set when the writer goes.
    stop: bool,
}

/// The writer's handle on the spare thread. Dropping it stops the thread
/// (within one fill step) and deletes a spare nobody took.
#[derive(Debug)]
pub(crate) struct Spares {
    state: Arc<(Mutex<State>, Condvar)>,
    /// Bytes appended to the log so far, which pace the fill.
    appended: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
    /// The size to ask for after the next take.
    next_bytes: u64,
    bytes_max: u64,
}

impl Spares {
    /// Deletes a spare left in `dir` and starts making one on a thread named
    /// `thread_name`: the first of `preallocate_bytes` (and at least a byte
    /// more than the log's `header_bytes`, or it would hold no record); later
    /// ones double up to `bytes_max`.
    pub fn start(
        dir: &Path,
        header_bytes: u64,
        preallocate_bytes: u64,
        bytes_max: u64,
        thread_name: &str,
    ) -> io::Result<Self> {
        let first_bytes = preallocate_bytes.max(header_bytes + 1);
        let path = dir.join(SPARE_FILE_NAME);
        match fs::remove_file(&path) {
            Ok(()) => debug!(path = %path.display(), "deleted a spare log segment left by a crash"),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
        let first_bytes = first_bytes.min(bytes_max);
        let state = Arc::new((
            Mutex::new(State {
                wanted: Some(first_bytes),
                ..State::default()
            }),
            Condvar::new(),
        ));
        let appended = Arc::new(AtomicU64::new(0));
        let thread = {
            let state = state.clone();
            let appended = appended.clone();
            std::thread::Builder::new()
                .name(thread_name.into())
                .spawn(move || make_spares(&path, &state, &appended))?
        };
        Ok(Self {
            state,
            appended,
            thread: Some(thread),
            next_bytes: first_bytes.saturating_mul(2).min(bytes_max),
            bytes_max,
        })
    }

    /// Counts `bytes` appended to the log: the fill keeps pace with them.
    pub fn appended(&self, bytes: u64) {
        self.appended.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The ready spare if it holds at least `bytes`; `None` (and the spare
    /// stays) if none is ready or it is too small. Once the taken spare has
    /// been renamed away, [`Spares::make_next`] asks for the next one.
    pub fn take(&mut self, bytes: u64) -> Option<Spare> {
        let mut state = self.state.0.lock();
        if state.ready.as_ref().is_none_or(|spare| spare.bytes < bytes) {
            return None;
        }
        state.ready.take()
    }

    /// Asks for the next spare (the last one taken no longer has the
    /// spare's name).
    pub fn make_next(&mut self) {
        let (lock, wake) = &*self.state;
        lock.lock().wanted = Some(self.next_bytes);
        self.next_bytes = self.next_bytes.saturating_mul(2).min(self.bytes_max);
        wake.notify_one();
    }

    /// Waits until a spare is ready (or the thread has given up), for tests
    /// that need one.
    #[cfg(test)]
    pub fn wait_ready(&self) -> bool {
        let (lock, wake) = &*self.state;
        let mut state = lock.lock();
        while state.ready.is_none() && state.wanted.is_some() {
            wake.wait(&mut state);
        }
        state.ready.is_some()
    }
}

impl Drop for Spares {
    fn drop(&mut self) {
        let (lock, wake) = &*self.state;
        lock.lock().stop = true;
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                warn!("the spare log segment thread panicked");
            }
        }
        if let Some(spare) = lock.lock().ready.take() {
            // Not taken: no file is left that an operator would wonder about.
            drop(spare.file);
            if let Err(err) = fs::remove_file(&spare.path) {
                debug!(path = %spare.path.display(), error = %err, "could not delete the spare log segment");
            }
        }
    }
}

/// The spare thread: makes each spare asked for, until told to stop. A
/// failure ends it (the writer then grows its segments itself).
fn make_spares(path: &Path, state: &(Mutex<State>, Condvar), appended: &AtomicU64) {
    let (lock, wake) = state;
    loop {
        let bytes = {
            let mut state = lock.lock();
            loop {
                if state.stop {
                    return;
                }
                if let Some(bytes) = state.wanted {
                    break bytes;
                }
                wake.wait(&mut state);
            }
        };
        let stopped = || lock.lock().stop;
        let pace = Pace::new(appended);
        match make_spare(path, bytes, pace, stopped) {
            Ok(Some(spare)) => {
                let mut state = lock.lock();
                state.ready = Some(spare);
                state.wanted = None;
                wake.notify_all();
            }
            Ok(None) => return,
            Err(err) => {
                warn!(path = %path.display(), error = %err, "could not make a spare log segment; the log grows its segments itself from now on");
                let _ = fs::remove_file(path);
                lock.lock().wanted = None;
                wake.notify_all();
                return;
            }
        }
    }
}

/// Keeps the fill of one spare in step with the log's appends.
struct Pace<'a> {
    appended: &'a AtomicU64,
    /// `appended` when the spare was begun.
    base: u64,
    /// `appended` when last looked at, and when it last changed.
    seen: u64,
    seen_change: Instant,
    /// [`FILL_IDLE`], but for tests.
    idle: Duration,
}

impl<'a> Pace<'a> {
    fn new(appended: &'a AtomicU64) -> Self {
        Self::with_idle(appended, FILL_IDLE)
    }

    fn with_idle(appended: &'a AtomicU64, idle: Duration) -> Self {
        let base = appended.load(Ordering::Relaxed);
        Self {
            appended,
            base,
            seen: base,
            seen_change: Instant::now(),
            idle,
        }
    }

    /// May zeros up to `end` be written now? If not, the caller pauses for
    /// [`FILL_PAUSE`] and asks again.
    fn allows(&mut self, end: u64) -> bool {
        let now = self.appended.load(Ordering::Relaxed);
        if now != self.seen {
            self.seen = now;
            self.seen_change = Instant::now();
        }
        let budget =
            FILL_HEAD_START_BYTES.saturating_add((now - self.base).saturating_mul(FILL_PACE));
        end <= budget || self.seen_change.elapsed() >= self.idle
    }
}

/// Writes `bytes` of zeros to a new file at `path` in steps, each pushed to
/// disk before the next and paced by `pace`, then syncs size and blocks.
/// `None` if stopped.
fn make_spare(
    path: &Path,
    bytes: u64,
    mut pace: Pace<'_>,
    stopped: impl Fn() -> bool,
) -> io::Result<Option<Spare>> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    let mut at = 0;
    while at < bytes {
        if stopped() {
            drop(file);
            fs::remove_file(path)?;
            return Ok(None);
        }
        let end = (at + FILL_STEP_BYTES).min(bytes);
        if !pace.allows(end) {
            std::thread::sleep(FILL_PAUSE);
            continue;
        }
        write_zeros(&file, at..end)?;
        push_to_disk(&file, at..end)?;
        at = end;
    }
    file.sync_all()?;
    Ok(Some(Spare {
        file,
        path: path.to_owned(),
        bytes,
    }))
}

/// Writes `range` back and waits for it, without a cache flush of the device
/// (the final `sync_all` makes it durable): unlike an fdatasync per step,
/// this does not queue a flush ahead of the commits' own.
fn push_to_disk(file: &File, range: std::ops::Range<u64>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    let len = range.end - range.start;
    // SAFETY: a plain syscall on a descriptor this function's caller owns.
    let result = unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            range.start as libc::off64_t,
            len as libc::off64_t,
            flags,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn the_fill_keeps_pace_with_the_appends_unless_the_log_is_idle() {
        let appended = AtomicU64::new(10 * MIB);
        // Counted from when the spare was begun, not from the log's start.
        let mut pace = Pace::with_idle(&appended, Duration::from_secs(3600));
        assert!(pace.allows(FILL_HEAD_START_BYTES));
        assert!(!pace.allows(FILL_HEAD_START_BYTES + 1));
        appended.fetch_add(MIB, Ordering::Relaxed);
        assert!(pace.allows(FILL_HEAD_START_BYTES + FILL_PACE * MIB));
        assert!(!pace.allows(FILL_HEAD_START_BYTES + FILL_PACE * MIB + 1));

        let mut idle = Pace::with_idle(&appended, Duration::ZERO);
        assert!(
            idle.allows(64 * MIB),
            "an idle log does not hold the fill back"
        );
    }
}
