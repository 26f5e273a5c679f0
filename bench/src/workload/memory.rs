//! `memory`: server resident memory per znode.
//!
//! Reads the server's VmRSS from `/proc/<pid>/status`, creates `--count`
//! nodes of `--size` bytes as fast as it can — `multi` transactions of
//! `--batch` creates, `--concurrency` transactions in flight, on both targets
//! — and reads VmRSS again once it has settled (`rss_after_bytes`; the
//! reading right at the end of the fill is `rss_at_end_of_fill_bytes`).
//! The fill pauses halfway until RSS settles: `marginal_bytes_per_znode` is
//! what the second half added per znode, the cost of one more znode without
//! the fixed costs the first half paid (buffers the load grows, the
//! allocator's first pages, empty tables), which dominate a small fill's
//! `bytes_per_znode`.
//! With `--parents P` the nodes are spread over P parents (`<root>/p<j>`),
//! for counts past the server's children-per-node limit (Arbor: 2^20).
//! Latency fields are per transaction.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

use super::{close_all, fresh_root, Env};
use crate::stats::{micros, Report, Summary};
use crate::target::{ConnectOptions, Session};

#[derive(clap::Args, Clone, Debug)]
pub struct MemoryArgs {
    /// PID of the server process whose RSS is read.
    #[arg(long)]
    pub server_pid: u32,
    /// Nodes to create.
    #[arg(long, default_value_t = 1_000_000)]
    pub count: u64,
    /// Bytes of data per node.
    #[arg(long, default_value_t = 32)]
    pub size: usize,
    /// Creates per multi transaction.
    #[arg(long, default_value_t = 1000)]
    pub batch: u64,
    /// Transactions in flight.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Parents the nodes are spread over, round-robin (1: all under the root).
    #[arg(long, default_value_t = 1)]
    pub parents: u64,
}

/// Sessions the transactions are spread over.
const MEMORY_CONNS: usize = 4;

pub async fn run(env: &Env, args: &MemoryArgs) -> Result<Report> {
    if args.count == 0 || args.batch == 0 || args.concurrency == 0 || args.parents == 0 {
        return Err(anyhow!(
            "--count, --batch, --concurrency and --parents must be positive"
        ));
    }
    let sessions = env
        .connect_many(&ConnectOptions::default(), MEMORY_CONNS)
        .await?;
    let root = fresh_root("memory");
    sessions[0].ensure(&root, &[]).await?;
    let spec = Arc::new(Batches {
        root: root.clone(),
        count: args.count,
        batch: args.batch,
        parents: args.parents,
        data: vec![b'm'; args.size],
    });
    for parent in spec.parent_paths() {
        sessions[0].ensure(&parent, &[]).await?;
    }
    let rss_before = rss_bytes(args.server_pid)?;
    eprintln!(
        "arbor-bench: memory: creating {} nodes under {root} (server RSS {rss_before} B)",
        args.count
    );
    let batches = args.count.div_ceil(args.batch);
    let half = batches / 2;
    let first = run_batches(&sessions, args.concurrency, 0..half, &spec, true).await?;
    let rss_half = settled_rss(args.server_pid).await?;
    let second = run_batches(&sessions, args.concurrency, half..batches, &spec, true).await?;
    let rss_peak = rss_bytes(args.server_pid)?;
    let rss_after = settled_rss(args.server_pid).await?;
    if !env.keep {
        eprintln!("arbor-bench: memory: deleting the nodes");
        run_batches(&sessions, args.concurrency, 0..batches, &spec, false).await?;
        for parent in spec.parent_paths() {
            sessions[0].delete_if_exists(&parent).await?;
        }
        sessions[0].delete_if_exists(&root).await?;
    }
    close_all(sessions).await?;

    let mut latencies = first.latencies;
    latencies.extend(second.latencies);
    let latency = Summary::of(&mut latencies);
    let grown = rss_after.saturating_sub(rss_before);
    // Every batch but the last is full, so the first half's are.
    let second_half_nodes = args.count - half * args.batch;
    let mut report = Report::new("memory", env.kind.name(), &env.server);
    report
        .field("count", args.count)
        .field("size", args.size)
        .field("batch", args.batch)
        .field("concurrency", args.concurrency)
        .field("parents", args.parents)
        .field("server_pid", args.server_pid)
        .throughput(args.count, first.elapsed + second.elapsed, &latency)
        .field("batches", batches)
        .field("rss_before_bytes", rss_before)
        .field("rss_halfway_bytes", rss_half)
        .field("rss_after_bytes", rss_after)
        .field("rss_at_end_of_fill_bytes", rss_peak)
        .field(
            "bytes_per_znode",
            crate::stats::round3(grown as f64 / args.count as f64),
        );
    // Signed: RSS can fall while the JVM collects. None for a one-batch fill.
    if half > 0 {
        let added = rss_after as f64 - rss_half as f64;
        report.field(
            "marginal_bytes_per_znode",
            crate::stats::round3(added / second_half_nodes as f64),
        );
    }
    Ok(report)
}

/// How often the settled RSS is sampled, how many samples in a row must
/// agree (within 1 %), and how long to wait at most.
const SETTLE_SAMPLE: Duration = Duration::from_millis(500);
const SETTLE_SAMPLES: usize = 5;
const SETTLE_MAX: Duration = Duration::from_secs(30);

/// The server's RSS once it stops moving: a background snapshot's
/// copy-on-write pages (Arbor) or garbage not yet collected (the JVM) are
/// not the cost of holding the znodes.
pub async fn settled_rss(pid: u32) -> Result<u64> {
    let deadline = tokio::time::Instant::now() + SETTLE_MAX;
    let mut window = vec![rss_bytes(pid)?];
    loop {
        tokio::time::sleep(SETTLE_SAMPLE).await;
        window.push(rss_bytes(pid)?);
        if window.len() > SETTLE_SAMPLES {
            window.remove(0);
        }
        let (low, high) = (
            window.iter().copied().min().unwrap_or(0),
            window.iter().copied().max().unwrap_or(0),
        );
        let steady = window.len() == SETTLE_SAMPLES && (high - low) * 100 <= low;
        if steady || tokio::time::Instant::now() >= deadline {
            return Ok(window.last().copied().unwrap_or(high));
        }
    }
}

/// The nodes `<root>/<index>` (or, over several parents,
/// `<root>/p<index % parents>/<index>`) split into transactions.
pub(super) struct Batches {
    pub(super) root: String,
    pub(super) count: u64,
    pub(super) batch: u64,
    pub(super) parents: u64,
    pub(super) data: Vec<u8>,
}

impl Batches {
    fn paths(&self, batch: u64) -> Vec<String> {
        let start = batch * self.batch;
        let end = (start + self.batch).min(self.count);
        (start..end)
            .map(|i| match self.parents {
                0 | 1 => format!("{}/{i}", self.root),
                parents => format!("{}/p{}/{i}", self.root, i % parents),
            })
            .collect()
    }

    /// The parents to create before the nodes (none when they go under the root).
    pub(super) fn parent_paths(&self) -> Vec<String> {
        match self.parents {
            0 | 1 => Vec::new(),
            parents => (0..parents)
                .map(|j| format!("{}/p{j}", self.root))
                .collect(),
        }
    }
}

/// Runs the batches of `range` (creating, or deleting), `concurrency` at a
/// time.
pub(super) async fn run_batches(
    sessions: &[Session],
    concurrency: usize,
    range: std::ops::Range<u64>,
    spec: &Arc<Batches>,
    create: bool,
) -> Result<super::Run> {
    let batches = range.end;
    let next = Arc::new(std::sync::atomic::AtomicU64::new(range.start));
    let started = std::time::Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    for task in 0..concurrency {
        let session = sessions[task % sessions.len()].clone();
        let (spec, next) = (spec.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let batch = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if batch >= batches {
                    return Ok::<_, anyhow::Error>(latencies);
                }
                let paths = spec.paths(batch);
                let issued = std::time::Instant::now();
                if create {
                    session.create_batch(&paths, &spec.data).await
                } else {
                    session.delete_batch(&paths).await
                }
                .with_context(|| format!("transaction {batch}"))?;
                latencies.push(micros(issued.elapsed()));
            }
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    Ok(super::Run {
        ops: latencies.len() as u64,
        elapsed: started.elapsed(),
        latencies,
    })
}

/// The resident set size of process `pid`, in bytes.
pub fn rss_bytes(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .ok_or_else(|| anyhow!("no VmRSS line in {path}"))?;
    let kib: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .with_context(|| format!("parsing {line:?}"))?;
    Ok(kib * 1024)
}
