//! The server's counters: one [`Stats`], shared by every part that counts,
//! is the source of truth that `/metrics`, `/commands/stat` and the CLI's
//! `arbor stat` all read. Everything here is a relaxed atomic: a figure is
//! a little stale at worst, and counting never takes a lock or allocates on
//! the request path. Figures that the state already knows (znodes, sessions,
//! watches) are not counted again here; a view reads them from the state.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant, SystemTime};

use arbor_protocol::{ErrorCode, Op};

/// Upper bounds of the latency histograms' buckets, in microseconds (the
/// last bucket, `+Inf`, is implied). From 50 µs (a read served from memory)
/// to 2.5 s (a write stuck behind a slow disk).
pub const LATENCY_BOUNDS_US: [u64; 15] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000,
];

/// Upper bounds of the commit batch size histogram's buckets, in txns (a
/// batch holds at most [`crate::Config::commit_batch_max`]).
pub const BATCH_BOUNDS: [u64; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// The ops counted one by one, in [`op_slot`]'s order; the last slot is a
/// request the server could not read as any op (a ZooKeeper op Arbor does
/// not serve).
pub const OP_NAMES: [&str; OPS] = [
    "create",
    "delete",
    "set_data",
    "get_data",
    "exists",
    "get_children",
    "get_children_with_stat",
    "multi",
    "sync",
    "ping",
    "close_session",
    "add_watch",
    "remove_watches",
    "set_watches",
    "children_below",
    "cluster_status",
    "add_member",
    "remove_member",
    "get_acl",
    "set_acl",
    "auth",
    "who_am_i",
    "get_ephemerals",
    "count_descendants",
    "multi_read",
    "check_watches",
    "admin",
    "unsupported",
];

const OPS: usize = 28;

/// The slot of a request the server could not read as an op.
pub const UNSUPPORTED_OP: usize = OPS - 1;

/// A request's result as `/metrics` labels it: `ok`, or the error's name,
/// in [`result_slot`]'s order.
pub const RESULT_NAMES: [&str; RESULTS] = [
    "ok",
    "no_node",
    "node_exists",
    "bad_version",
    "not_empty",
    "no_children_for_ephemerals",
    "invalid_path",
    "session_expired",
    "session_moved",
    "not_leader",
    "unavailable",
    "too_large",
    "auth_failed",
    "no_auth",
    "unimplemented",
    "bad_arguments",
    "no_watcher",
    "limit_exceeded",
    "bad_request",
    "internal",
    "invalid_acl",
    "outcome_unknown",
];

const RESULTS: usize = 22;

/// Latency classes, each with its own histogram.
pub const CLASS_NAMES: [&str; CLASSES] = ["read", "write", "other"];

const CLASSES: usize = 3;

/// The slot of `op` in [`OP_NAMES`] (`CreateWithAcl` counts as a create).
pub fn op_slot(op: &Op) -> usize {
    match op {
        Op::Create { .. } | Op::CreateWithAcl { .. } => 0,
        Op::Delete { .. } => 1,
        Op::SetData { .. } => 2,
        Op::GetData { .. } => 3,
        Op::Exists { .. } => 4,
        Op::GetChildren { .. } => 5,
        Op::GetChildrenWithStat { .. } => 6,
        Op::Multi { .. } => 7,
        Op::Sync { .. } => 8,
        Op::Ping => 9,
        Op::CloseSession => 10,
        Op::AddWatch { .. } => 11,
        Op::RemoveWatches { .. } => 12,
        Op::SetWatches(_) => 13,
        Op::ChildrenBelow { .. } => 14,
        Op::ClusterStatus => 15,
        Op::AddMember { .. } => 16,
        Op::RemoveMember { .. } => 17,
        Op::GetAcl { .. } => 18,
        Op::SetAcl { .. } => 19,
        Op::Auth { .. } => 20,
        Op::WhoAmI => 21,
        Op::GetEphemerals { .. } => 22,
        Op::CountDescendants { .. } => 23,
        Op::MultiRead { .. } => 24,
        Op::CheckWatches { .. } => 25,
        Op::Admin(_) => 26,
    }
}

/// The slot of a result in [`RESULT_NAMES`].
pub fn result_slot<T>(result: &Result<T, ErrorCode>) -> usize {
    let Err(code) = result else { return 0 };
    match code {
        ErrorCode::NoNode => 1,
        ErrorCode::NodeExists => 2,
        ErrorCode::BadVersion => 3,
        ErrorCode::NotEmpty => 4,
        ErrorCode::NoChildrenForEphemerals => 5,
        ErrorCode::InvalidPath => 6,
        ErrorCode::SessionExpired => 7,
        ErrorCode::SessionMoved => 8,
        ErrorCode::NotLeader => 9,
        ErrorCode::Unavailable => 10,
        ErrorCode::TooLarge => 11,
        ErrorCode::AuthFailed => 12,
        ErrorCode::NoAuth => 13,
        ErrorCode::Unimplemented => 14,
        ErrorCode::BadArguments => 15,
        ErrorCode::NoWatcher => 16,
        ErrorCode::LimitExceeded => 17,
        ErrorCode::BadRequest => 18,
        ErrorCode::Internal => 19,
        ErrorCode::InvalidAcl => 20,
        ErrorCode::OutcomeUnknown => 21,
    }
}

/// The latency class of each op of [`OP_NAMES`] (an index of
/// [`CLASS_NAMES`]): what the client waited on.
const CLASS_OF: [u8; OPS] = {
    const READ: u8 = 0;
    const WRITE: u8 = 1;
    const OTHER: u8 = 2;
    let mut classes = [OTHER; OPS];
    let writes = [0, 1, 2, 7, 10, 19];
    let reads = [3, 4, 5, 6, 14, 18, 22, 23, 24];
    let mut i = 0;
    while i < writes.len() {
        classes[writes[i]] = WRITE;
        i += 1;
    }
    let mut i = 0;
    while i < reads.len() {
        classes[reads[i]] = READ;
        i += 1;
    }
    classes
};

fn class_of(slot: usize) -> usize {
    usize::from(CLASS_OF[slot])
}

/// A histogram with fixed bucket bounds: a count per bucket (not
/// cumulative; a view adds them up), the sum and the count.
pub struct Histogram<const N: usize> {
    bounds: &'static [u64; N],
    /// One more than the bounds: the last is `+Inf`.
    buckets: [AtomicU64; BUCKETS_MAX],
    sum: AtomicU64,
    count: AtomicU64,
}

/// Buckets a histogram can have, `+Inf` included.
const BUCKETS_MAX: usize = 16;

impl<const N: usize> Histogram<N> {
    const fn new(bounds: &'static [u64; N]) -> Self {
        assert!(N < BUCKETS_MAX, "a histogram has at most 15 bounds");
        Self {
            bounds,
            buckets: [const { AtomicU64::new(0) }; BUCKETS_MAX],
            sum: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    pub fn record(&self, value: u64) {
        let bucket = self.bounds.partition_point(|&bound| bound < value);
        self.buckets[bucket].fetch_add(1, Relaxed);
        self.sum.fetch_add(value, Relaxed);
        self.count.fetch_add(1, Relaxed);
    }

    /// `(bound, cumulative count)` for each bound, then `(None, count)`
    /// for `+Inf`; and the sum.
    pub fn read(&self) -> HistogramReading {
        let mut cumulative = 0;
        let mut buckets = Vec::with_capacity(N + 1);
        for (index, bound) in self.bounds.iter().enumerate() {
            cumulative += self.buckets[index].load(Relaxed);
            buckets.push((Some(*bound), cumulative));
        }
        cumulative += self.buckets[N].load(Relaxed);
        buckets.push((None, cumulative));
        HistogramReading {
            buckets,
            sum: self.sum.load(Relaxed),
            // The count is the +Inf bucket's, so the two always agree even
            // while requests are being recorded.
            count: cumulative,
        }
    }
}

/// What a [`Histogram`] held when read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramReading {
    /// Cumulative counts, by upper bound; `None` is `+Inf`.
    pub buckets: Vec<(Option<u64>, u64)>,
    pub sum: u64,
    pub count: u64,
}

/// A request on its way: which op, and since when.
#[derive(Debug, Clone, Copy)]
pub struct Started {
    op: u8,
    at: Instant,
}

/// The last snapshot written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotFigures {
    pub count: u64,
    pub zxid: u64,
    pub bytes: u64,
    pub duration_ms: u64,
    /// When it was written, in ms since the Unix epoch.
    pub written_unix_ms: u64,
}

/// Counters of a running server.
pub struct Stats {
    started: Instant,
    /// Requests answered, by op and result.
    requests: [[AtomicU64; RESULTS]; OPS],
    /// Requests whose connection ended before their answer was made.
    unanswered: AtomicU64,
    /// Requests read and not yet answered (or given up).
    outstanding: AtomicI64,
    latency: [Histogram<15>; CLASSES],
    /// Txns per durable batch of the standalone log.
    commit_batch: Histogram<11>,
    /// Microseconds one batch took to write and fdatasync.
    log_sync_us: Histogram<15>,
    /// Writes committed on their connection's thread.
    inline_commits: AtomicU64,
    connections_open: AtomicI64,
    connections_accepted: AtomicU64,
    /// Refused at accept: the total limit, the per-address one.
    refused_total_limit: AtomicU64,
    refused_address_limit: AtomicU64,
    /// Connections closed for breaking the protocol.
    protocol_errors: AtomicU64,
    snapshots: AtomicU64,
    snapshot_zxid: AtomicU64,
    snapshot_bytes: AtomicU64,
    snapshot_duration_ms: AtomicU64,
    snapshot_written_unix_ms: AtomicU64,
    snapshot_failures: AtomicU64,
    /// Set once the commit log has failed: the server stops taking writes.
    log_failed: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stats")
            .field("uptime", &self.uptime())
            .field("outstanding", &self.requests_outstanding())
            .finish_non_exhaustive()
    }
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            requests: [const { [const { AtomicU64::new(0) }; RESULTS] }; OPS],
            unanswered: AtomicU64::new(0),
            outstanding: AtomicI64::new(0),
            latency: [const { Histogram::new(&LATENCY_BOUNDS_US) }; CLASSES],
            commit_batch: Histogram::new(&BATCH_BOUNDS),
            log_sync_us: Histogram::new(&LATENCY_BOUNDS_US),
            inline_commits: AtomicU64::new(0),
            connections_open: AtomicI64::new(0),
            connections_accepted: AtomicU64::new(0),
            refused_total_limit: AtomicU64::new(0),
            refused_address_limit: AtomicU64::new(0),
            protocol_errors: AtomicU64::new(0),
            snapshots: AtomicU64::new(0),
            snapshot_zxid: AtomicU64::new(0),
            snapshot_bytes: AtomicU64::new(0),
            snapshot_duration_ms: AtomicU64::new(0),
            snapshot_written_unix_ms: AtomicU64::new(0),
            snapshot_failures: AtomicU64::new(0),
            log_failed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// A request was read: `op_slot` is its [`op_slot`] (or
    /// [`UNSUPPORTED_OP`]).
    pub fn request_started(&self, op_slot: usize) -> Started {
        self.outstanding.fetch_add(1, Relaxed);
        Started {
            op: op_slot.min(UNSUPPORTED_OP) as u8,
            at: Instant::now(),
        }
    }

    /// The answer to `started` was made.
    pub fn request_answered<T>(&self, started: Started, result: &Result<T, ErrorCode>) {
        let op = usize::from(started.op);
        self.requests[op][result_slot(result)].fetch_add(1, Relaxed);
        let elapsed_us = started.at.elapsed().as_micros() as u64;
        self.latency[class_of(op)].record(elapsed_us);
        self.outstanding.fetch_sub(1, Relaxed);
    }

    /// `started` will not be answered: its connection ended first.
    pub fn request_unanswered(&self, _started: Started) {
        self.unanswered.fetch_add(1, Relaxed);
        self.outstanding.fetch_sub(1, Relaxed);
    }

    /// Requests answered with `op` and `result` (slots of [`OP_NAMES`] and
    /// [`RESULT_NAMES`]).
    pub fn requests(&self, op: usize, result: usize) -> u64 {
        self.requests[op][result].load(Relaxed)
    }

    pub fn requests_unanswered(&self) -> u64 {
        self.unanswered.load(Relaxed)
    }

    pub fn requests_outstanding(&self) -> u64 {
        self.outstanding.load(Relaxed).max(0) as u64
    }

    /// The latency histogram of [`CLASS_NAMES`]`[class]`, in µs.
    pub fn latency(&self, class: usize) -> HistogramReading {
        self.latency[class].read()
    }

    /// A batch of `txns` was made durable in `elapsed`.
    pub fn log_synced(&self, txns: usize, elapsed: Duration) {
        self.commit_batch.record(txns as u64);
        self.log_sync_us.record(elapsed.as_micros() as u64);
    }

    /// A write was committed on its connection's thread, alone.
    pub fn committed_inline(&self) {
        self.inline_commits.fetch_add(1, Relaxed);
    }

    pub fn inline_commits(&self) -> u64 {
        self.inline_commits.load(Relaxed)
    }

    pub fn commit_batches(&self) -> HistogramReading {
        self.commit_batch.read()
    }

    pub fn log_syncs(&self) -> HistogramReading {
        self.log_sync_us.read()
    }

    pub fn log_failed(&self) {
        self.log_failed.store(true, Relaxed);
    }

    /// Whether the commit log has failed (the server is stopping).
    pub fn has_log_failed(&self) -> bool {
        self.log_failed.load(Relaxed)
    }

    /// A connection was accepted; [`Stats::connection_closed`] when it ends.
    pub fn connection_opened(&self) {
        self.connections_accepted.fetch_add(1, Relaxed);
        self.connections_open.fetch_add(1, Relaxed);
    }

    pub fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Relaxed);
    }

    /// A connection was refused at accept: over the total limit, or over
    /// the per-address one.
    pub fn connection_refused(&self, per_address: bool) {
        let counter = if per_address {
            &self.refused_address_limit
        } else {
            &self.refused_total_limit
        };
        counter.fetch_add(1, Relaxed);
    }

    /// A connection was closed for breaking the protocol.
    pub fn protocol_error(&self) {
        self.protocol_errors.fetch_add(1, Relaxed);
    }

    pub fn connections(&self) -> ConnectionFigures {
        ConnectionFigures {
            open: self.connections_open.load(Relaxed).max(0) as u64,
            accepted: self.connections_accepted.load(Relaxed),
            refused_total_limit: self.refused_total_limit.load(Relaxed),
            refused_address_limit: self.refused_address_limit.load(Relaxed),
            protocol_errors: self.protocol_errors.load(Relaxed),
        }
    }

    /// A snapshot of `bytes` at `zxid` was written in `elapsed`.
    pub fn snapshot_written(&self, zxid: u64, bytes: u64, elapsed: Duration) {
        let now_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64);
        self.snapshot_zxid.store(zxid, Relaxed);
        self.snapshot_bytes.store(bytes, Relaxed);
        self.snapshot_duration_ms
            .store(elapsed.as_millis() as u64, Relaxed);
        self.snapshot_written_unix_ms.store(now_ms, Relaxed);
        self.snapshots.fetch_add(1, Relaxed);
    }

    pub fn snapshot_failed(&self) {
        self.snapshot_failures.fetch_add(1, Relaxed);
    }

    pub fn snapshot_failures(&self) -> u64 {
        self.snapshot_failures.load(Relaxed)
    }

    /// The last snapshot this process wrote (all zero before the first).
    pub fn last_snapshot(&self) -> SnapshotFigures {
        SnapshotFigures {
            count: self.snapshots.load(Relaxed),
            zxid: self.snapshot_zxid.load(Relaxed),
            bytes: self.snapshot_bytes.load(Relaxed),
            duration_ms: self.snapshot_duration_ms.load(Relaxed),
            written_unix_ms: self.snapshot_written_unix_ms.load(Relaxed),
        }
    }
}

/// Connection counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionFigures {
    pub open: u64,
    pub accepted: u64,
    pub refused_total_limit: u64,
    pub refused_address_limit: u64,
    pub protocol_errors: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves every op lands in the slot that bears its name.
    #[test]
    fn op_slots_match_op_names() {
        let ops = [
            Op::Create {
                path: "/a".into(),
                data: vec![],
                mode: arbor_protocol::CreateMode::Persistent,
            },
            Op::GetData {
                path: "/a".into(),
                watch: false,
            },
            Op::Ping,
            Op::WhoAmI,
            Op::CheckWatches {
                path: "/a".into(),
                kind: arbor_protocol::WatcherKind::Any,
            },
            Op::MultiRead { ops: vec![] },
        ];
        for op in &ops {
            assert_eq!(OP_NAMES[op_slot(op)], op.name());
        }
        let class = |name: &str| {
            let slot = OP_NAMES.iter().position(|n| *n == name).expect("an op");
            CLASS_NAMES[class_of(slot)]
        };
        assert_eq!(class("create"), "write");
        assert_eq!(class("set_acl"), "write");
        assert_eq!(class("multi_read"), "read");
        assert_eq!(class("get_data"), "read");
        assert_eq!(class("ping"), "other");
        assert_eq!(OP_NAMES[UNSUPPORTED_OP], "unsupported");
    }

    // Proves result slots name the error.
    #[test]
    fn result_slots_name_the_error() {
        assert_eq!(RESULT_NAMES[result_slot(&Ok::<(), _>(()))], "ok");
        let err: Result<(), _> = Err(ErrorCode::NoNode);
        assert_eq!(RESULT_NAMES[result_slot(&err)], "no_node");
        let err: Result<(), _> = Err(ErrorCode::InvalidAcl);
        assert_eq!(RESULT_NAMES[result_slot(&err)], "invalid_acl");
    }

    // Proves a value lands in the first bucket whose bound holds it, and
    // that the reading is cumulative with +Inf equal to the count.
    #[test]
    fn histogram_buckets_are_cumulative() {
        static BOUNDS: [u64; 3] = [10, 100, 1000];
        let histogram = Histogram::new(&BOUNDS);
        for value in [5, 10, 11, 500, 5000] {
            histogram.record(value);
        }
        let reading = histogram.read();
        assert_eq!(
            reading.buckets,
            vec![(Some(10), 2), (Some(100), 3), (Some(1000), 4), (None, 5)]
        );
        assert_eq!((reading.sum, reading.count), (5526, 5));
    }

    // Proves a request counts once, by op and result, and leaves the
    // outstanding gauge where it was.
    #[test]
    fn requests_count_by_op_and_result() {
        let stats = Stats::new();
        let started = stats.request_started(op_slot(&Op::Ping));
        assert_eq!(stats.requests_outstanding(), 1);
        stats.request_answered(started, &Err::<(), _>(ErrorCode::NoNode));
        let lost = stats.request_started(3);
        stats.request_unanswered(lost);
        assert_eq!(stats.requests(9, 1), 1);
        assert_eq!(stats.requests(9, 0), 0);
        assert_eq!(stats.requests_outstanding(), 0);
        assert_eq!(stats.requests_unanswered(), 1);
        assert_eq!(stats.latency(2).count, 1);
        assert_eq!(stats.latency(0).count, 0);
    }
}
