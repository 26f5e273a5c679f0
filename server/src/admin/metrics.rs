//! `/metrics`: the Prometheus text exposition format (version 0.0.4). Every
//! family has its HELP and TYPE; names carry their unit (`_seconds`,
//! `_bytes`) and counters end in `_total`, as Prometheus' naming rules ask,
//! so dashboards and alerts can be written against them without guessing.

use std::fmt::{Display, Write};

use crate::context::Shared;
use crate::net::idle_spin::SpinCounts;
use crate::net::open_files::OpenFilesLimit;
use crate::stats::{HistogramReading, Stats, CLASS_NAMES, OP_NAMES, RESULT_NAMES, UNSUPPORTED_OP};
use crate::watch::WatchKind;

use super::figures::{self, Figures};

/// The page. Blocking: it reads the data directory.
pub fn render(shared: &Shared) -> String {
    let figures = figures::read(shared);
    let mut page = Exposition::default();
    requests(&mut page, &shared.stats);
    storage(&mut page, &shared.stats, &figures);
    state(&mut page, &figures);
    connections(&mut page, &figures);
    if let Some(status) = &figures.ensemble {
        ensemble(&mut page, status);
    }
    process(&mut page, &figures);
    if let Some(counts) = crate::net::idle_spin::counts() {
        idle_spin(&mut page, counts);
    }
    page.out
}

fn idle_spin(page: &mut Exposition, counts: SpinCounts) {
    page.family(
        "arbor_idle_spins_total",
        "counter",
        "Polls for work by the last busy worker before it sleeps, by how they ended: work (a wake-up saved), worker_woke, window (nothing came).",
    );
    for (ended, count) in [
        ("work", counts.found_work),
        ("worker_woke", counts.worker_woke),
        ("window", counts.window_passed),
    ] {
        page.sample("arbor_idle_spins_total", &[("ended", ended)], count);
    }
    page.counter(
        "arbor_idle_spin_seconds_total",
        "Time worker threads spent polling for work instead of sleeping.",
        counts.spun_us as f64 / 1e6,
    );
    page.counter(
        "arbor_idle_spins_skipped_total",
        "Times the last busy worker slept without polling, because clients had sent only heartbeats since it last slept.",
        counts.skipped_after_pings,
    );
}

fn requests(page: &mut Exposition, stats: &Stats) {
    page.family(
        "arbor_requests_total",
        "counter",
        "Requests answered, by op and result (ok, or the error's name).",
    );
    for (op, op_name) in OP_NAMES.iter().enumerate() {
        for (result, result_name) in RESULT_NAMES.iter().enumerate() {
            let count = stats.requests(op, result);
            // An op never asked is left out, but its `ok` line shows, so
            // that a rate over it starts from 0.
            if count > 0 || (result == 0 && op != UNSUPPORTED_OP) {
                page.sample(
                    "arbor_requests_total",
                    &[("op", op_name), ("result", result_name)],
                    count,
                );
            }
        }
    }
    page.family(
        "arbor_requests_unanswered_total",
        "counter",
        "Requests whose connection ended before their answer was made.",
    );
    page.sample(
        "arbor_requests_unanswered_total",
        &[],
        stats.requests_unanswered(),
    );
    page.family(
        "arbor_requests_outstanding",
        "gauge",
        "Requests read and not yet answered.",
    );
    page.sample(
        "arbor_requests_outstanding",
        &[],
        stats.requests_outstanding(),
    );
    page.family(
        "arbor_request_duration_seconds",
        "histogram",
        "From a request read to its answer made, by class (read, write, other).",
    );
    for (class, name) in CLASS_NAMES.iter().enumerate() {
        page.histogram(
            "arbor_request_duration_seconds",
            &[("class", name)],
            &stats.latency(class),
            MICROS,
        );
    }
}

fn storage(page: &mut Exposition, stats: &Stats, figures: &Figures) {
    page.family(
        "arbor_commit_batch_txns",
        "histogram",
        "Txns made durable together in one write and fdatasync of the log.",
    );
    page.histogram("arbor_commit_batch_txns", &[], &stats.commit_batches(), 1.0);
    page.counter(
        "arbor_commits_inline_total",
        "Writes committed alone on their connection's thread, the commit thread idle.",
        stats.inline_commits(),
    );
    page.family(
        "arbor_log_sync_duration_seconds",
        "histogram",
        "Time to write one commit batch to the log and fdatasync it.",
    );
    page.histogram(
        "arbor_log_sync_duration_seconds",
        &[],
        &stats.log_syncs(),
        MICROS,
    );
    page.gauge(
        "arbor_log_failed",
        "1 once the write-ahead log has failed (the server stops).",
        u8::from(stats.has_log_failed()),
    );
    page.gauge(
        "arbor_log_segments",
        "Files in the log directory.",
        figures.log.count,
    );
    page.gauge(
        "arbor_log_bytes",
        "Bytes in the log directory.",
        figures.log.bytes,
    );
    page.gauge(
        "arbor_snapshot_files",
        "Snapshots kept in the data directory.",
        figures.snapshots.count,
    );
    page.gauge(
        "arbor_snapshot_bytes",
        "Size of the newest snapshot.",
        figures.snapshots.newest_bytes,
    );
    if let Some(age) = figures.snapshot_age_seconds {
        page.gauge(
            "arbor_snapshot_age_seconds",
            "Time since the newest snapshot was written.",
            age,
        );
    }
    let last = figures.last_snapshot;
    page.gauge(
        "arbor_snapshot_duration_seconds",
        "How long the last snapshot this process wrote took (0 before one).",
        last.duration_ms as f64 / 1000.0,
    );
    page.counter(
        "arbor_snapshots_written_total",
        "Snapshots this process has written.",
        last.count,
    );
    page.counter(
        "arbor_snapshot_failures_total",
        "Snapshots this process failed to write (the log still holds their writes).",
        stats.snapshot_failures(),
    );
}

fn state(page: &mut Exposition, figures: &Figures) {
    page.gauge(
        "arbor_last_zxid",
        "The zxid of the last write applied here.",
        figures.last_zxid,
    );
    page.gauge(
        "arbor_znodes",
        "Nodes in the tree, the root included.",
        figures.znodes,
    );
    page.gauge(
        "arbor_data_bytes",
        "Bytes of data held by all nodes.",
        figures.data_bytes,
    );
    page.gauge("arbor_ephemerals", "Ephemeral nodes.", figures.ephemerals);
    page.gauge("arbor_sessions", "Live sessions.", figures.sessions);
    page.family(
        "arbor_watches",
        "gauge",
        "Watch registrations held here, by kind.",
    );
    for kind in WatchKind::ALL {
        let index = WatchKind::ALL
            .iter()
            .position(|k| *k == kind)
            .unwrap_or_default();
        page.sample(
            "arbor_watches",
            &[("kind", kind.name())],
            figures.watches.by_kind[index],
        );
    }
    page.gauge(
        "arbor_watched_paths",
        "Paths with at least one watch.",
        figures.watches.paths,
    );
}

fn connections(page: &mut Exposition, figures: &Figures) {
    let connections = figures.connections;
    page.gauge(
        "arbor_connections",
        "Client connections open, on every client port.",
        connections.open,
    );
    page.gauge(
        "arbor_connected_sessions",
        "Sessions with a connection here.",
        figures.attached_sessions,
    );
    page.counter(
        "arbor_connections_accepted_total",
        "Client connections accepted.",
        connections.accepted,
    );
    page.family(
        "arbor_connections_refused_total",
        "counter",
        "Client connections refused at accept, by the limit they hit.",
    );
    page.sample(
        "arbor_connections_refused_total",
        &[("limit", "total")],
        connections.refused_total_limit,
    );
    page.sample(
        "arbor_connections_refused_total",
        &[("limit", "per_address")],
        connections.refused_address_limit,
    );
    page.counter(
        "arbor_protocol_errors_total",
        "Connections closed for breaking the protocol (bad frame, undecodable request).",
        connections.protocol_errors,
    );
    page.gauge(
        "arbor_outbound_queued_bytes",
        "Bytes queued for clients and not yet written.",
        figures.outbound_bytes,
    );
}

fn ensemble(page: &mut Exposition, status: &arbor_protocol::ClusterStatus) {
    let leads = status.leader == Some(status.member_id);
    let role = match status.leader {
        None => "candidate",
        Some(_) if leads => "leader",
        Some(_) => "follower",
    };
    page.family(
        "arbor_ensemble_role",
        "gauge",
        "1 for this member's role: leader, follower or candidate (no leader known).",
    );
    for name in ["leader", "follower", "candidate"] {
        page.sample(
            "arbor_ensemble_role",
            &[("role", name)],
            u8::from(name == role),
        );
    }
    page.gauge(
        "arbor_ensemble_member_id",
        "This member's id.",
        status.member_id,
    );
    page.gauge("arbor_ensemble_term", "The current term.", status.term);
    page.gauge(
        "arbor_ensemble_log_index",
        "The last index in this member's log.",
        status.last_log_index.unwrap_or(0),
    );
    page.gauge(
        "arbor_ensemble_applied_index",
        "The last index this member has applied.",
        status.applied_index.unwrap_or(0),
    );
    page.gauge(
        "arbor_ensemble_members",
        "Members in the configuration in force (learners included).",
        status.members.len(),
    );
    if leads {
        page.family(
            "arbor_ensemble_follower_lag_entries",
            "gauge",
            "On the leader: entries each other member has yet to confirm.",
        );
        let last = status.last_log_index.unwrap_or(0);
        for member in status.members.iter().filter(|m| m.id != status.member_id) {
            let lag = last.saturating_sub(member.matched_index.unwrap_or(0));
            let id = member.id.to_string();
            page.sample(
                "arbor_ensemble_follower_lag_entries",
                &[("member", &id)],
                lag,
            );
        }
    }
}

fn process(page: &mut Exposition, figures: &Figures) {
    page.family(
        "arbor_build_info",
        "gauge",
        "Always 1; the labels say which arbord this is.",
    );
    page.sample(
        "arbor_build_info",
        &[
            ("version", env!("CARGO_PKG_VERSION")),
            ("mode", figures.mode),
        ],
        1,
    );
    page.gauge(
        "arbor_uptime_seconds",
        "Time since the server started serving.",
        figures.uptime_seconds,
    );
    let process = ProcessFigures::read();
    if let Some(cpu) = process.cpu_seconds {
        page.counter(
            "process_cpu_seconds_total",
            "User and system CPU time spent.",
            cpu,
        );
    }
    if let Some(rss) = process.resident_bytes {
        page.gauge(
            "process_resident_memory_bytes",
            "Resident memory size.",
            rss,
        );
    }
    if let Some(fds) = process.open_fds {
        page.gauge("process_open_fds", "Open file descriptors.", fds);
    }
    if let Some(max) = process.max_fds {
        page.gauge(
            "process_max_fds",
            "The limit on open file descriptors.",
            max,
        );
    }
}

/// The figures of `/proc/self` that Prometheus' process collector names.
struct ProcessFigures {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<u64>,
    open_fds: Option<usize>,
    max_fds: Option<u64>,
}

impl ProcessFigures {
    fn read() -> Self {
        // SAFETY: sysconf reads a constant of the system.
        let (ticks, page_bytes) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        // Fields after the command (which may hold spaces) are counted from
        // the closing parenthesis: utime and stime are the 14th and 15th.
        let cpu_seconds = stat.as_deref().and_then(|stat| {
            let rest = &stat[stat.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            (ticks > 0).then(|| (utime + stime) / ticks as f64)
        });
        let resident_bytes = std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map(|pages| pages * page_bytes.max(0) as u64);
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|entries| entries.count());
        let max_fds = OpenFilesLimit::current().ok().map(|limit| limit.soft);
        Self {
            cpu_seconds,
            resident_bytes,
            open_fds,
            max_fds,
        }
    }
}

/// Histograms of microseconds are shown in seconds.
const MICROS: f64 = 1e6;

/// A page being written.
#[derive(Default)]
struct Exposition {
    out: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn gauge(&mut self, name: &str, help: &str, value: impl Display) {
        self.family(name, "gauge", help);
        self.sample(name, &[], value);
    }

    fn counter(&mut self, name: &str, help: &str, value: impl Display) {
        self.family(name, "counter", help);
        self.sample(name, &[], value);
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.out.push_str(name);
        self.labels(labels, None);
        let _ = writeln!(self.out, " {value}");
    }

    fn labels(&mut self, labels: &[(&str, &str)], le: Option<&str>) {
        let le = le.map(|le| ("le", le));
        let mut all = labels.iter().copied().chain(le).peekable();
        if all.peek().is_none() {
            return;
        }
        self.out.push('{');
        for (index, (key, value)) in all.enumerate() {
            if index > 0 {
                self.out.push(',');
            }
            let _ = write!(self.out, "{key}=\"");
            for c in value.chars() {
                match c {
                    '\\' => self.out.push_str("\\\\"),
                    '"' => self.out.push_str("\\\""),
                    '\n' => self.out.push_str("\\n"),
                    c => self.out.push(c),
                }
            }
            self.out.push('"');
        }
        self.out.push('}');
    }

    /// The `_bucket`, `_sum` and `_count` lines of one histogram, its
    /// bounds and sum divided by `scale` (to show µs in seconds).
    fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        reading: &HistogramReading,
        scale: f64,
    ) {
        for (bound, count) in &reading.buckets {
            let le = match bound {
                Some(bound) => format!("{}", *bound as f64 / scale),
                None => "+Inf".to_owned(),
            };
            let _ = write!(self.out, "{name}_bucket");
            self.labels(labels, Some(&le));
            let _ = writeln!(self.out, " {count}");
        }
        let _ = write!(self.out, "{name}_sum");
        self.labels(labels, None);
        let _ = writeln!(self.out, " {}", reading.sum as f64 / scale);
        let _ = write!(self.out, "{name}_count");
        self.labels(labels, None);
        let _ = writeln!(self.out, " {}", reading.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves label values are escaped as the format asks, and a histogram
    // ends with +Inf, its sum and its count.
    #[test]
    fn samples_and_histograms_follow_the_format() {
        let mut page = Exposition::default();
        page.sample("a_total", &[("path", "x\"y\\z\nw")], 3);
        assert_eq!(page.out, "a_total{path=\"x\\\"y\\\\z\\nw\"} 3\n");
        let mut page = Exposition::default();
        let reading = HistogramReading {
            buckets: vec![(Some(50), 1), (Some(2_500_000), 2), (None, 3)],
            sum: 1_000_000,
            count: 3,
        };
        page.histogram("d_seconds", &[("class", "read")], &reading, MICROS);
        assert_eq!(
            page.out,
            "d_seconds_bucket{class=\"read\",le=\"0.00005\"} 1\n\
             d_seconds_bucket{class=\"read\",le=\"2.5\"} 2\n\
             d_seconds_bucket{class=\"read\",le=\"+Inf\"} 3\n\
             d_seconds_sum{class=\"read\"} 1\n\
             d_seconds_count{class=\"read\"} 3\n"
        );
    }
}
