//! `watch-memory`: server resident memory per watch, set against the bytes
//! of the watched path.
//!
//! 1. Opens `--watchers` W sessions and creates `--nodes` M empty nodes
//!    whose paths are exactly `--path-bytes` L long (the run's root, then a
//!    numbered name padded with `p`), in multi transactions: tens of
//!    thousands of nodes one fsync each would take longer than the rest.
//! 2. Reads every node once with a plain exists (no watch), then the
//!    server's settled VmRSS (`rss_before_bytes`). Sessions and nodes are in
//!    place, and the request path's buffers and allocator caches are at
//!    their working size (the multis left memory that its allocator only
//!    takes back once its threads are busy again), so what grows next is the
//!    watches alone.
//! 3. First watches: session 1 sets a one-shot data watch (exists with a
//!    watch) on every node, M watches each alone on its path; settled VmRSS
//!    again (`rss_first_bytes`).
//! 4. Added watches: the other W − 1 sessions do the same, M × (W − 1)
//!    watches on paths already watched; settled VmRSS (`rss_after_bytes`).
//! 5. Unless `--keep`: deletes the nodes (multis again), which fires every
//!    watch, and
//!    counts the handles that saw `NodeDeleted` (`watches_fired`): M × W
//!    proves the server held every watch that was paid for.
//!
//! `--concurrency` requests are in flight, over the sessions of the phase;
//! latency fields are per watch-setting request, both phases. This process
//! keeps every watch handle until the end, since dropping one makes
//! ZooKeeper's client remove the watch on the server.
//!
//! Figures: `bytes_per_first_watch` (step 3 ÷ M), `bytes_per_added_watch`
//! (step 4 ÷ M(W − 1); absent when W = 1), `bytes_per_watch` (both ÷ MW),
//! and `bytes_per_watch_over_path` = `bytes_per_first_watch` − L: what a watch
//! costs beyond its path's bytes when nothing shares that path. The two
//! phases keep apart what a server pays per watched path from what it pays
//! per watch: a server that copies the path into every watch pays about L
//! again for each added watch, one that shares it pays only the overhead.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use tokio::task::JoinSet;

use super::memory::{rss_bytes, settled_rss};
use super::{close_many, fresh_root, Env};
use crate::fd_limit::ensure_open_files;
use crate::stats::{micros, round3, Report, Summary};
use crate::target::{ConnectOptions, Session, Watch, WatchOutcome};

#[derive(clap::Args, Clone, Debug)]
pub struct WatchMemoryArgs {
    /// PID of the server process whose RSS is read.
    #[arg(long)]
    pub server_pid: u32,
    /// Nodes to create; every session watches each of them.
    #[arg(long, default_value_t = 50_000)]
    pub nodes: usize,
    /// Length of each node's full path, in bytes.
    #[arg(long, default_value_t = 1024)]
    pub path_bytes: usize,
    /// Sessions, each watching every node.
    #[arg(long, default_value_t = 4)]
    pub watchers: usize,
    /// Watch-setting requests in flight, over all sessions.
    #[arg(long, default_value_t = super::SETUP_CONCURRENCY)]
    pub concurrency: usize,
}

/// Most nodes: each session holds one watch handle per node, and Arbor's
/// client holds at most this many watchers (its server allows 100 000 per
/// session by default).
pub const NODES_MAX: usize = arbor_client::WATCHERS_MAX;

/// Most sessions (each a socket here and a session on the server).
pub const WATCHERS_MAX: usize = 10_000;

/// Most watches in one run: this process keeps a handle (and the client its
/// own copy of the path) per watch, about 2 GiB at 1 KiB paths.
pub const WATCHES_MAX: usize = 2_000_000;

/// Longest path: Arbor's limit (`arbor_protocol::path::PATH_BYTES_MAX`).
pub const PATH_BYTES_MAX: usize = 4096;

/// Digits of a node's number: enough for [`NODES_MAX`], so every path has
/// the same prefix length.
const NAME_DIGITS: usize = 6;

/// Watch-setting requests in flight at most.
const CONCURRENCY_MAX: usize = 4096;

/// Path bytes in one multi: small, so the server's transient buffers (freed
/// lazily by its allocator, which would show as RSS shrinking during the
/// measured phases) stay small; still 64 nodes of 1 KiB per fsync.
const MULTI_PATH_BYTES_MAX: usize = 64 * 1024;

/// Ops in one multi at most: Arbor's limit.
const MULTI_OPS_MAX: usize = 1000;

/// Multis in flight while creating or deleting the nodes.
const MULTIS_IN_FLIGHT: usize = 4;

/// How long the deletions may take to fire every watch.
const FIRE_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn run(env: &Env, args: &WatchMemoryArgs) -> Result<Report> {
    check_args(args)?;
    let (nodes, sessions_count) = (args.nodes, args.watchers);
    let watches = nodes * sessions_count;
    let root = fresh_root("watch-memory");
    let keys = node_paths(&root, nodes, args.path_bytes)?;
    ensure_open_files(sessions_count as u64)?;
    let sessions = env
        .connect_many(&ConnectOptions::default(), sessions_count)
        .await?;
    sessions[0].ensure(&root, &[]).await?;
    in_multis(&sessions, &keys, Change::Create)
        .await
        .context("creating the nodes")?;
    let keys = Arc::new(keys);
    run_pass(&sessions, &keys, args.concurrency, Pass::Warm).await?;
    let rss_before = settled_rss(args.server_pid).await?;
    eprintln!(
        "arbor-bench: watch-memory: {sessions_count} sessions setting {watches} watches on \
         {nodes} nodes of {}-byte paths (server RSS {rss_before} B)",
        args.path_bytes
    );
    let (first, rest) = sessions.split_at(1);
    let mut set = run_pass(first, &keys, args.concurrency, Pass::Watch).await?;
    let rss_first = settled_rss(args.server_pid).await?;
    if !rest.is_empty() {
        set.extend(run_pass(rest, &keys, args.concurrency, Pass::Watch).await?);
    }
    let rss_watched = rss_bytes(args.server_pid)?;
    let rss_after = settled_rss(args.server_pid).await?;
    let fired = if env.keep {
        None
    } else {
        eprintln!("arbor-bench: watch-memory: deleting the nodes (fires every watch)");
        in_multis(&sessions, &keys, Change::Delete)
            .await
            .context("deleting the nodes")?;
        sessions[0].delete_if_exists(&root).await?;
        Some(count_deleted(set.watches).await)
    };
    close_many(sessions).await?;

    let mut latencies = set.latencies;
    let latency = Summary::of(&mut latencies);
    let grown = |from: u64, to: u64| to as f64 - from as f64;
    let per_first = grown(rss_before, rss_first) / nodes as f64;
    let mut report = Report::new("watch-memory", env.kind.name(), &env.server);
    report
        .field("nodes", nodes)
        .field("path_bytes", args.path_bytes)
        .field("watchers", sessions_count)
        .field("concurrency", args.concurrency)
        .field("watches", watches)
        .field("server_pid", args.server_pid)
        .throughput(watches as u64, set.elapsed, &latency)
        .field("rss_before_bytes", rss_before)
        .field("rss_first_bytes", rss_first)
        .field("rss_after_bytes", rss_after)
        .field("rss_at_end_of_watching_bytes", rss_watched)
        .field(
            "bytes_per_watch",
            round3(grown(rss_before, rss_after) / watches as f64),
        )
        .field("bytes_per_first_watch", round3(per_first))
        .field(
            "bytes_per_watch_over_path",
            round3(per_first - args.path_bytes as f64),
        );
    if sessions_count > 1 {
        let added = (nodes * (sessions_count - 1)) as f64;
        report.field(
            "bytes_per_added_watch",
            round3(grown(rss_first, rss_after) / added),
        );
    }
    if let Some(fired) = fired {
        report.field("watches_fired", fired);
        if fired != watches as u64 {
            eprintln!("arbor-bench: watch-memory: only {fired} of {watches} watches fired");
        }
    }
    Ok(report)
}

fn check_args(args: &WatchMemoryArgs) -> Result<()> {
    if !(1..=NODES_MAX).contains(&args.nodes) {
        return Err(anyhow!("--nodes must be between 1 and {NODES_MAX}"));
    }
    if !(1..=WATCHERS_MAX).contains(&args.watchers) {
        return Err(anyhow!("--watchers must be between 1 and {WATCHERS_MAX}"));
    }
    if args.nodes * args.watchers > WATCHES_MAX {
        return Err(anyhow!(
            "--nodes × --watchers must be at most {WATCHES_MAX}"
        ));
    }
    if !(1..=CONCURRENCY_MAX).contains(&args.concurrency) {
        return Err(anyhow!(
            "--concurrency must be between 1 and {CONCURRENCY_MAX}"
        ));
    }
    if args.path_bytes > PATH_BYTES_MAX {
        return Err(anyhow!("--path-bytes must be at most {PATH_BYTES_MAX}"));
    }
    Ok(())
}

/// `<root>/<number>-ppp…`, each exactly `path_bytes` long.
fn node_paths(root: &str, nodes: usize, path_bytes: usize) -> Result<Vec<String>> {
    let prefix_bytes = root.len() + 1 + NAME_DIGITS + 1;
    if path_bytes < prefix_bytes {
        return Err(anyhow!(
            "--path-bytes must be at least {prefix_bytes} (this run's root is {root})"
        ));
    }
    Ok((0..nodes)
        .map(|index| {
            let mut path = format!("{root}/{index:0NAME_DIGITS$}-");
            path.push_str(&"p".repeat(path_bytes - prefix_bytes));
            path
        })
        .collect())
}

/// What [`in_multis`] does to every node.
#[derive(Clone, Copy, Debug)]
enum Change {
    Create,
    Delete,
}

/// Creates or deletes all `keys` in multis of at most
/// [`MULTI_PATH_BYTES_MAX`] path bytes, [`MULTIS_IN_FLIGHT`] at a time,
/// spread over the sessions.
async fn in_multis(sessions: &[Session], keys: &[String], change: Change) -> Result<()> {
    let path_bytes = keys.first().map_or(1, String::len).max(1);
    let per_multi = (MULTI_PATH_BYTES_MAX / path_bytes).clamp(1, MULTI_OPS_MAX);
    let mut pending = JoinSet::new();
    for (index, chunk) in keys.chunks(per_multi).enumerate() {
        if pending.len() >= MULTIS_IN_FLIGHT {
            if let Some(joined) = pending.join_next().await {
                joined??;
            }
        }
        let session = sessions[index % sessions.len()].clone();
        let chunk = chunk.to_vec();
        pending.spawn(async move {
            match change {
                Change::Create => session.create_batch(&chunk, &[]).await,
                Change::Delete => session.delete_batch(&chunk).await,
            }
        });
    }
    while let Some(joined) = pending.join_next().await {
        joined??;
    }
    Ok(())
}

/// What setting the watches produced.
struct WatchesSet {
    watches: Vec<Watch>,
    latencies: Vec<u32>,
    elapsed: Duration,
}

impl WatchesSet {
    /// Adds a later phase's watches, latencies and time.
    fn extend(&mut self, later: WatchesSet) {
        self.watches.extend(later.watches);
        self.latencies.extend(later.latencies);
        self.elapsed += later.elapsed;
    }
}

/// The requests of one pass over the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    /// One plain exists per node, request `i` on session `i % n`.
    Warm,
    /// A watch on every node from every session: request `i` is session
    /// `i % n` watching node `i / n`, so each pair occurs exactly once and
    /// consecutive requests spread over the sessions.
    Watch,
}

/// Runs `pass` over `sessions` with `concurrency` requests in flight.
async fn run_pass(
    sessions: &[Session],
    keys: &Arc<Vec<String>>,
    concurrency: usize,
    pass: Pass,
) -> Result<WatchesSet> {
    let total = match pass {
        Pass::Warm => keys.len(),
        Pass::Watch => keys.len() * sessions.len(),
    } as u64;
    let sessions = Arc::new(sessions.to_vec());
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let (sessions, keys, next) = (sessions.clone(), keys.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let (mut watches, mut latencies) = (Vec::new(), Vec::new());
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= total {
                    return Ok::<_, anyhow::Error>((watches, latencies));
                }
                let index = usize::try_from(index).context("request index")?;
                let session = &sessions[index % sessions.len()];
                let path = match pass {
                    Pass::Warm => &keys[index],
                    Pass::Watch => &keys[index / sessions.len()],
                };
                let vanished = || anyhow!("{path} vanished while the run still needed it");
                let issued = Instant::now();
                if pass == Pass::Watch {
                    watches.push(session.exists_watch(path).await?.ok_or_else(vanished)?);
                } else if !session.exists(path).await? {
                    return Err(vanished());
                }
                latencies.push(micros(issued.elapsed()));
            }
        }));
    }
    let mut set = WatchesSet {
        watches: Vec::with_capacity(watches_of(pass, total)),
        latencies: Vec::with_capacity(usize::try_from(total).unwrap_or(0)),
        elapsed: Duration::ZERO,
    };
    for task in tasks {
        let (watches, latencies) = task.await??;
        set.watches.extend(watches);
        set.latencies.extend(latencies);
    }
    set.elapsed = started.elapsed();
    Ok(set)
}

/// Room for the watch handles a pass of `total` requests sets.
fn watches_of(pass: Pass, total: u64) -> usize {
    match pass {
        Pass::Warm => 0,
        Pass::Watch => usize::try_from(total).unwrap_or(0),
    }
}

/// How many `watches` report their node deleted within [`FIRE_TIMEOUT`].
async fn count_deleted(watches: Vec<Watch>) -> u64 {
    let deadline = tokio::time::Instant::now() + FIRE_TIMEOUT;
    let mut deleted = 0;
    for watch in watches {
        match tokio::time::timeout_at(deadline, watch.fired()).await {
            Ok(Ok(WatchOutcome::Deleted)) => deleted += 1,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    deleted
}
