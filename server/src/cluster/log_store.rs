//! openraft's log storage on [`LogFiles`]: entries are kept in memory from
//! the last purge on (reads never touch the disk) and written by one I/O
//! thread, which is what makes them durable.
//!
//! The I/O thread takes requests in order from a bounded queue, so appends,
//! truncations, purges and votes reach the disk in the order openraft made
//! them (its rule: all log and vote I/O is serialized). Appends queued
//! together are written one after another and covered by one fdatasync
//! before any of their callbacks runs: group commit, as in the standalone
//! write-ahead log. openraft counts an entry as this member's only after its
//! callback, so nothing unsynced is ever acknowledged or voted on.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{Entry, LogId, RaftLogReader, StorageError, StorageIOError, Vote};
use parking_lot::RwLock;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, warn};

use super::log_files::{EncodedBatch, LogError, LogFiles, LogOptions};
use super::meta_file::{self, COMMITTED_FILE, COMMITTED_MAGIC, PURGED_FILE, PURGED_MAGIC};
use super::meta_file::{VOTE_FILE, VOTE_MAGIC};
use super::records::{LogPosition, MemberId, VoteRecord};
use super::types::TypeConfig;
use crate::storage::txnlog::FsyncPolicy;

/// Requests waiting for the I/O thread. Past this, openraft waits: it
/// already bounds how much it appends before hearing back.
pub const LOG_IO_QUEUE_MAX: usize = 1024;
/// Appends covered by one sync at most, so one sync's callbacks never wait
/// behind an unbounded batch.
pub const LOG_GROUP_COMMIT_MAX: usize = 256;
/// The committed position is a hint (see [`meta_file::COMMITTED_FILE`]):
/// replacing its file costs a create and a rename, and asking the I/O
/// thread to do it costs a wake-up, so it is passed on at most this often,
/// and the newest is saved once more when the log closes.
const COMMITTED_SAVE_INTERVAL: Duration = Duration::from_millis(100);

/// The entries from the last purge on, and the small durable values.
#[derive(Debug, Default)]
struct LogCache {
    /// By index. Raft keeps them consecutive; openraft's conformance suite
    /// does not, so nothing here assumes it.
    entries: BTreeMap<u64, Entry<TypeConfig>>,
    last_purged: Option<LogId<MemberId>>,
    vote: Option<Vote<MemberId>>,
    committed: Option<LogId<MemberId>>,
}

impl LogCache {
    fn last_log_id(&self) -> Option<LogId<MemberId>> {
        self.entries
            .last_key_value()
            .map(|(_, entry)| entry.log_id)
            .or(self.last_purged)
    }
}

enum LogIo {
    Append {
        batch: EncodedBatch,
        flushed: LogFlushed<TypeConfig>,
    },
    Truncate {
        index: u64,
        done: oneshot::Sender<Result<(), LogError>>,
    },
    Purge {
        through: LogPosition,
        done: oneshot::Sender<Result<(), LogError>>,
    },
    SaveVote {
        vote: VoteRecord,
        done: oneshot::Sender<Result<(), LogError>>,
    },
    SaveCommitted {
        committed: Option<LogPosition>,
    },
}

/// The replicated log of one member.
pub struct LogStore {
    cache: Arc<RwLock<LogCache>>,
    io: mpsc::Sender<LogIo>,
    /// When the committed position was last passed to the I/O thread.
    committed_sent_at: Option<Instant>,
}

/// Reads entries for replication; many may exist at once.
#[derive(Clone)]
pub struct LogReader {
    cache: Arc<RwLock<LogCache>>,
}

/// The I/O thread: it ends once its [`LogStore`] is dropped and its queue
/// is empty.
pub struct LogIoThread {
    handle: JoinHandle<()>,
}

impl LogIoThread {
    /// Waits for the queued writes to finish.
    pub fn join(self) {
        if self.handle.join().is_err() {
            error!("the replicated log's I/O thread panicked");
        }
    }
}

/// The committed position saved in `dir`, if it names an entry this log
/// holds (or its purge point). The file is a hint, replaced without a sync
/// (see [`meta_file::COMMITTED_FILE`]): a power cut can leave it empty,
/// torn or naming entries that were never synced. Any of those is ignored
/// with a warning, never fatal: the member then applies what a leader
/// tells it is committed, a moment later.
fn committed_hint(
    dir: &Path,
    entries: &BTreeMap<u64, Entry<TypeConfig>>,
    last_purged: Option<LogId<MemberId>>,
) -> Option<LogId<MemberId>> {
    let hint: LogId<MemberId> = match meta_file::read::<Option<LogPosition>>(
        dir,
        COMMITTED_FILE,
        COMMITTED_MAGIC,
    ) {
        Ok(hint) => LogId::from(hint.flatten()?),
        Err(err) => {
            warn!(error = %err, "the committed-position hint cannot be read (a power cut leaves it so); ignoring it");
            return None;
        }
    };
    let held = entries.get(&hint.index).map(|entry| entry.log_id) == Some(hint)
        || last_purged == Some(hint);
    if !held {
        warn!(
            hint_index = hint.index,
            hint_term = hint.leader_id.term,
            last_index = entries.last_key_value().map(|(index, _)| *index),
            "the committed-position hint names an entry this log does not hold; ignoring it"
        );
        return None;
    }
    Some(hint)
}

impl LogStore {
    /// Opens the log in `dir` (its segments in `dir/log`), creating it if
    /// missing, and starts the I/O thread.
    pub fn open(dir: &Path, options: LogOptions) -> Result<(Self, LogIoThread), LogError> {
        std::fs::create_dir_all(dir).map_err(|source| LogError::Io {
            op: "create",
            path: dir.to_owned(),
            source,
        })?;
        let vote: Option<VoteRecord> = meta_file::read(dir, VOTE_FILE, VOTE_MAGIC)?;
        let purged: Option<LogPosition> = meta_file::read(dir, PURGED_FILE, PURGED_MAGIC)?;
        let mut entries = BTreeMap::new();
        let files = LogFiles::open(
            &dir.join("log"),
            options.clone(),
            purged.map(|p| p.index),
            |record| {
                entries.insert(record.position.index, Entry::from(record));
            },
        )?;
        let last_purged = purged.map(LogId::from);
        let committed = committed_hint(dir, &entries, last_purged);
        let cache = LogCache {
            entries,
            last_purged,
            vote: vote.map(Vote::from),
            committed,
        };
        debug!(dir = %dir.display(), entries = cache.entries.len(), last = ?cache.last_log_id(), "opened the replicated log");
        let cache = Arc::new(RwLock::new(cache));
        let (io, queue) = mpsc::channel(LOG_IO_QUEUE_MAX);
        let writer = LogWriter {
            dir: dir.to_owned(),
            cache: cache.clone(),
            files,
            sync: options.fsync == FsyncPolicy::Always,
            failed: false,
        };
        let handle = std::thread::Builder::new()
            .name("arbor-raft-log".into())
            .spawn(move || writer.run(queue))
            .map_err(|source| LogError::Io {
                op: "start the I/O thread for",
                path: dir.to_owned(),
                source,
            })?;
        let store = Self {
            cache,
            io,
            committed_sent_at: None,
        };
        Ok((store, LogIoThread { handle }))
    }

    async fn request(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<(), LogError>>) -> LogIo,
    ) -> Result<(), LogError> {
        let (done, result) = oneshot::channel();
        self.io
            .send(make(done))
            .await
            .map_err(|_| LogError::Failed)?;
        result.await.map_err(|_| LogError::Failed)?
    }
}

fn read_entries(cache: &RwLock<LogCache>, range: impl RangeBounds<u64>) -> Vec<Entry<TypeConfig>> {
    let start = match range.start_bound() {
        Bound::Included(i) => Bound::Included(*i),
        Bound::Excluded(i) => Bound::Excluded(*i),
        Bound::Unbounded => Bound::Unbounded,
    };
    let end = match range.end_bound() {
        Bound::Included(i) => Bound::Included(*i),
        Bound::Excluded(i) => Bound::Excluded(*i),
        Bound::Unbounded => Bound::Unbounded,
    };
    if matches!((start, end), (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b)) if a >= b)
    {
        return Vec::new();
    }
    let cache = cache.read();
    cache
        .entries
        .range((start, end))
        .map(|(_, entry)| entry.clone())
        .collect()
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<MemberId>> {
        Ok(read_entries(&self.cache, range))
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<MemberId>> {
        Ok(read_entries(&self.cache, range))
    }
}

fn write_error(err: LogError) -> StorageError<MemberId> {
    StorageIOError::write_logs(&err).into()
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<MemberId>> {
        let cache = self.cache.read();
        Ok(LogState {
            last_purged_log_id: cache.last_purged,
            last_log_id: cache.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        LogReader {
            cache: self.cache.clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote<MemberId>) -> Result<(), StorageError<MemberId>> {
        let record = VoteRecord::from(vote);
        self.request(|done| LogIo::SaveVote { vote: record, done })
            .await
            .map_err(|err| StorageIOError::write_vote(&err))?;
        self.cache.write().vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<MemberId>>, StorageError<MemberId>> {
        Ok(self.cache.read().vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<MemberId>>,
    ) -> Result<(), StorageError<MemberId>> {
        self.cache.write().committed = committed;
        let due = self
            .committed_sent_at
            .is_none_or(|at| at.elapsed() >= COMMITTED_SAVE_INTERVAL);
        if !due {
            return Ok(());
        }
        self.committed_sent_at = Some(Instant::now());
        let committed = committed.map(LogPosition::from);
        self.io
            .send(LogIo::SaveCommitted { committed })
            .await
            .map_err(|_| write_error(LogError::Failed))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<MemberId>>, StorageError<MemberId>> {
        Ok(self.cache.read().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<MemberId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let Some(first) = entries.first() else {
            callback.log_io_completed(Ok(()));
            return Ok(());
        };
        let first_index = first.log_id.index;
        let batch = EncodedBatch::encode(&entries).map_err(write_error)?;
        let overlaps = {
            let mut cache = self.cache.write();
            let overlaps = !cache.entries.split_off(&first_index).is_empty();
            cache
                .entries
                .extend(entries.into_iter().map(|entry| (entry.log_id.index, entry)));
            overlaps
        };
        if overlaps {
            // Appending where the log has entries replaces them. The I/O
            // thread does the two in order; nobody waits in between.
            let (done, _) = oneshot::channel();
            self.io
                .send(LogIo::Truncate {
                    index: first_index,
                    done,
                })
                .await
                .map_err(|_| write_error(LogError::Failed))?;
        }
        self.io
            .send(LogIo::Append {
                batch,
                flushed: callback,
            })
            .await
            .map_err(|_| write_error(LogError::Failed))
    }

    async fn truncate(&mut self, log_id: LogId<MemberId>) -> Result<(), StorageError<MemberId>> {
        self.cache.write().entries.split_off(&log_id.index);
        self.request(|done| LogIo::Truncate {
            index: log_id.index,
            done,
        })
        .await
        .map_err(write_error)
    }

    async fn purge(&mut self, log_id: LogId<MemberId>) -> Result<(), StorageError<MemberId>> {
        {
            let mut cache = self.cache.write();
            let kept = cache.entries.split_off(&(log_id.index + 1));
            cache.entries = kept;
            cache.last_purged = Some(log_id);
        }
        self.request(|done| LogIo::Purge {
            through: log_id.into(),
            done,
        })
        .await
        .map_err(write_error)
    }
}

/// The I/O thread's state.
struct LogWriter {
    dir: PathBuf,
    /// Shared with the store; read for the committed position at the end.
    cache: Arc<RwLock<LogCache>>,
    files: LogFiles,
    sync: bool,
    /// After a failed write nothing more is written: the log on disk may
    /// end anywhere in the failed batch, and only a restart (which cuts a
    /// torn tail) may go on from there.
    failed: bool,
}

impl LogWriter {
    fn run(mut self, mut queue: mpsc::Receiver<LogIo>) {
        let mut flushed = Vec::with_capacity(LOG_GROUP_COMMIT_MAX);
        // The committed position is a hint that openraft saves after every
        // commit, between the appends: it must not cut a group commit
        // short, so only the newest is written, after the group's sync.
        let mut committed = None;
        while let Some(first) = queue.blocking_recv() {
            let mut next = Some(first);
            while let Some(request) = next.take() {
                match request {
                    LogIo::Append { batch, flushed: f } => {
                        let written = self.guard(|files| files.write(&batch));
                        flushed.push((f, written));
                        if flushed.len() < LOG_GROUP_COMMIT_MAX {
                            next = queue.try_recv().ok();
                        }
                    }
                    LogIo::SaveCommitted { committed: newest } => {
                        committed = Some(newest);
                        next = queue.try_recv().ok();
                    }
                    other => {
                        self.complete(&mut flushed);
                        self.handle(other);
                        next = queue.try_recv().ok();
                    }
                }
            }
            self.complete(&mut flushed);
            if let Some(committed) = committed.take() {
                self.save_committed(&committed);
            }
        }
        // The newest position, which the store may not have passed on.
        let newest = self.cache.read().committed.map(LogPosition::from);
        self.save_committed(&newest);
    }

    fn save_committed(&mut self, committed: &Option<LogPosition>) {
        // A hint only (see meta_file): never synced, and a failure costs
        // nothing but a later apply after a restart.
        if let Err(err) =
            meta_file::write(&self.dir, COMMITTED_FILE, COMMITTED_MAGIC, committed, false)
        {
            debug!(error = %err, "could not record the committed position");
        }
    }

    /// Syncs what was written, then runs the callbacks of the appends.
    fn complete(&mut self, flushed: &mut Vec<(LogFlushed<TypeConfig>, Result<(), LogError>)>) {
        if flushed.is_empty() {
            return;
        }
        let synced = self.guard(LogFiles::sync);
        for (callback, written) in flushed.drain(..) {
            let result = written.and(synced.as_ref().map(|_| ()).map_err(|_| LogError::Failed));
            callback.log_io_completed(result.map_err(std::io::Error::other));
        }
    }

    fn handle(&mut self, request: LogIo) {
        match request {
            LogIo::Append { .. } => unreachable!("appends are grouped by run"),
            LogIo::Truncate { index, done } => {
                let _ = done.send(self.guard(|files| files.truncate_from(index)));
            }
            LogIo::Purge { through, done } => {
                let (dir, sync) = (self.dir.clone(), self.sync);
                let result = self.guard(|files| {
                    meta_file::write(&dir, PURGED_FILE, PURGED_MAGIC, &through, sync)?;
                    files.purge_through(through.index)
                });
                let _ = done.send(result);
            }
            LogIo::SaveVote { vote, done } => {
                let result = meta_file::write(&self.dir, VOTE_FILE, VOTE_MAGIC, &vote, self.sync);
                let _ = done.send(result);
            }
            LogIo::SaveCommitted { committed } => self.save_committed(&committed),
        }
    }

    fn guard(
        &mut self,
        op: impl FnOnce(&mut LogFiles) -> Result<(), LogError>,
    ) -> Result<(), LogError> {
        if self.failed {
            return Err(LogError::Failed);
        }
        let result = op(&mut self.files);
        if let Err(err) = &result {
            error!(error = %err, dir = %self.dir.display(), "the replicated log failed; it takes no more writes");
            self.failed = true;
        }
        result
    }
}
