//! What an Arbor server's write-ahead log did during a run, from its admin
//! port's `/metrics`: how many syncs, how many writes each made durable,
//! how long each took, and how long the server held each write, from reading
//! it to making its answer. A write row's throughput on a small machine
//! follows the log's syncs more than the server's CPU; with these figures a
//! row says whether that was so in this run, not only in a measurement by
//! hand. The server's time per write against the client's round trip says
//! how much of it was spent outside the server (the way back).

use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The most of a `/metrics` answer read (it is a few KiB).
const METRICS_BYTES_MAX: u64 = 1024 * 1024;

/// Longest wait for the admin port's answer.
const METRICS_TIMEOUT: Duration = Duration::from_secs(5);

/// The series read, all counters that only grow. The batch histogram's
/// count is not read: the server records a batch's size and its sync time
/// one after the other, so a read between the two could see them differ by
/// one, which is noise here but no reason to fail a run.
const BATCH_TXNS_SUM: &str = "arbor_commit_batch_txns_sum";
const SYNC_SECONDS_SUM: &str = "arbor_log_sync_duration_seconds_sum";
const SYNC_COUNT: &str = "arbor_log_sync_duration_seconds_count";
const WRITE_SECONDS_SUM: &str = "arbor_request_duration_seconds_sum{class=\"write\"}";
const WRITE_COUNT: &str = "arbor_request_duration_seconds_count{class=\"write\"}";

/// The log's counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogMark {
    /// Writes made durable so far.
    txns: f64,
    /// Syncs so far (one per batch).
    syncs: f64,
    /// Time spent writing and syncing, in seconds.
    sync_seconds: f64,
    /// Write requests answered so far.
    writes: f64,
    /// Their time in the server, from read to answer made, in seconds.
    write_seconds: f64,
}

/// The log's work between two marks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogFigures {
    pub syncs: u64,
    pub writes_per_sync: f64,
    pub sync_mean_us: f64,
    /// Share of the run's wall time the log spent syncing.
    pub syncing_percent: f64,
    /// The server's mean time per write request, from reading it to making
    /// its answer (0 without writes).
    pub server_write_mean_us: f64,
}

impl LogMark {
    /// Reads the counters from the admin port at `admin` (`host:port`).
    pub async fn read(admin: &str) -> Result<Self> {
        let body = tokio::time::timeout(METRICS_TIMEOUT, get_metrics(admin))
            .await
            .map_err(|_| anyhow!("no answer from {admin}/metrics within {METRICS_TIMEOUT:?}"))??;
        Self::parse(&body).with_context(|| format!("reading {admin}/metrics"))
    }

    fn parse(text: &str) -> Result<Self> {
        let value = |name: &str| -> Result<f64> {
            text.lines()
                .find_map(|line| {
                    let (series, value) = line.split_once(' ')?;
                    (series == name).then_some(value)
                })
                .ok_or_else(|| anyhow!("no {name} series"))?
                .trim()
                .parse::<f64>()
                .with_context(|| format!("parsing {name}"))
        };
        Ok(LogMark {
            txns: value(BATCH_TXNS_SUM)?,
            syncs: value(SYNC_COUNT)?,
            sync_seconds: value(SYNC_SECONDS_SUM)?,
            writes: value(WRITE_COUNT)?,
            write_seconds: value(WRITE_SECONDS_SUM)?,
        })
    }

    /// What the log did from `self` to `later`, over `elapsed` of wall time.
    pub fn since(&self, later: &LogMark, elapsed: Duration) -> LogFigures {
        let syncs = (later.syncs - self.syncs).max(0.0);
        let txns = (later.txns - self.txns).max(0.0);
        let seconds = (later.sync_seconds - self.sync_seconds).max(0.0);
        let per_sync = |value: f64| if syncs > 0.0 { value / syncs } else { 0.0 };
        let writes = (later.writes - self.writes).max(0.0);
        let write_seconds = (later.write_seconds - self.write_seconds).max(0.0);
        let wall = elapsed.as_secs_f64();
        LogFigures {
            syncs: syncs as u64,
            writes_per_sync: per_sync(txns),
            sync_mean_us: per_sync(seconds) * 1e6,
            syncing_percent: if wall > 0.0 {
                seconds / wall * 100.0
            } else {
                0.0
            },
            server_write_mean_us: if writes > 0.0 {
                write_seconds / writes * 1e6
            } else {
                0.0
            },
        }
    }
}

/// `GET /metrics` over HTTP/1.0; the body of a 200 answer.
async fn get_metrics(admin: &str) -> Result<String> {
    let mut stream = TcpStream::connect(admin)
        .await
        .with_context(|| format!("connecting to {admin}"))?;
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {admin}\r\n\r\n").as_bytes())
        .await?;
    let mut answer = Vec::new();
    stream
        .take(METRICS_BYTES_MAX)
        .read_to_end(&mut answer)
        .await?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("{admin} sent no complete HTTP answer"))?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(anyhow!("{admin}/metrics answered {status:?}"));
    }
    Ok(body.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/metrics` page as the server writes it, with a read class beside
    /// the write class that must not be taken for it.
    fn page(txns: u64, syncs: u64, seconds: f64, write_seconds: f64) -> String {
        format!(
            "# TYPE arbor_commit_batch_txns histogram\n\
             arbor_commit_batch_txns_bucket{{le=\"1\"}} 3\n\
             {BATCH_TXNS_SUM} {txns}\n\
             arbor_commit_batch_txns_count {syncs}\n\
             arbor_log_sync_duration_seconds_bucket{{le=\"0.001\"}} 1\n\
             {SYNC_SECONDS_SUM} {seconds}\n\
             {SYNC_COUNT} {syncs}\n\
             arbor_request_duration_seconds_sum{{class=\"read\"}} 99\n\
             arbor_request_duration_seconds_count{{class=\"read\"}} 7\n\
             {WRITE_SECONDS_SUM} {write_seconds}\n\
             {WRITE_COUNT} {txns}\n"
        )
    }

    #[test]
    fn figures_come_from_the_counters_growth() {
        let before = LogMark::parse(&page(100, 10, 0.002, 0.05)).expect("parses");
        let after = LogMark::parse(&page(2_300, 110, 0.022, 1.05)).expect("parses");
        let figures = before.since(&after, Duration::from_millis(40));
        assert_eq!(figures.syncs, 100);
        assert!((figures.writes_per_sync - 22.0).abs() < 1e-9, "{figures:?}");
        assert!((figures.sync_mean_us - 200.0).abs() < 1e-6, "{figures:?}");
        assert!((figures.syncing_percent - 50.0).abs() < 1e-6, "{figures:?}");
        // 1 s over 2 200 writes.
        assert!(
            (figures.server_write_mean_us - 454.545).abs() < 1e-3,
            "{figures:?}"
        );
    }

    #[test]
    fn a_run_without_syncs_reports_zeros() {
        let mark = LogMark::parse(&page(5, 1, 0.001, 0.002)).expect("parses");
        let figures = mark.since(&mark, Duration::from_secs(1));
        assert_eq!(figures.syncs, 0);
        assert_eq!(figures.writes_per_sync, 0.0);
        assert_eq!(figures.sync_mean_us, 0.0);
        assert_eq!(figures.syncing_percent, 0.0);
        assert_eq!(figures.server_write_mean_us, 0.0);
    }

    #[test]
    fn a_page_without_the_series_is_an_error() {
        let err = LogMark::parse("arbor_znodes 1\n").expect_err("no log series");
        assert!(err.to_string().contains(BATCH_TXNS_SUM), "{err}");
    }
}
