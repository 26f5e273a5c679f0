//! `recovery`: how long a server holding N znodes takes to serve again after
//! a restart.
//!
//! Fills the fixed root `/bench-recovery` with `--count` nodes unless its
//! marker node already holds that count (so repeated runs against the same
//! data directory skip the fill), runs `--restart-cmd` with `sh -c`, and
//! times from just before spawning it until a brand-new session reads the
//! marker (one attempt every [`POLL_INTERVAL`], each bounded by
//! [`ATTEMPT_TIMEOUT`]).
//!
//! The command must kill the server, wait until it is gone (or the first
//! attempt may still reach the old process), start the new one in the
//! background with its output redirected (it inherits nothing useful: this
//! tool's stdout carries only the JSON line, so the command's stdout is sent
//! to stderr) and return at once.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use super::Env;
use crate::stats::{micros, round3, Report, Summary};
use crate::target::{ConnectOptions, Session};

/// Where the nodes live; kept across runs on purpose.
pub const ROOT: &str = "/bench-recovery";
/// Holds the number of nodes under [`ROOT`] once filled.
pub const MARKER: &str = "/bench-recovery/marker";
/// Pause between reconnect attempts.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How long one reconnect attempt (connect + read) may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(500);
/// Creates per fill transaction.
const FILL_BATCH: u64 = 1000;
/// Fill transactions in flight.
const FILL_CONCURRENCY: usize = 8;

#[derive(clap::Args, Clone, Debug)]
pub struct RecoveryArgs {
    /// Nodes the server must hold (filled under /bench-recovery if needed).
    #[arg(long, default_value_t = 100_000)]
    pub count: u64,
    /// Shell command that restarts the server and returns at once.
    #[arg(long)]
    pub restart_cmd: String,
    /// Give up if the server does not serve again within this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
    /// Bytes of data per filled node.
    #[arg(long, default_value_t = 32)]
    pub size: usize,
    /// Parents the filled nodes are spread over (`/bench-recovery/p<j>`),
    /// for counts past a server's children-per-node limit; 1: all under
    /// /bench-recovery.
    #[arg(long, default_value_t = 1)]
    pub parents: u64,
}

pub async fn run(env: &Env, args: &RecoveryArgs) -> Result<Report> {
    if args.parents == 0 {
        return Err(anyhow!("--parents must be positive"));
    }
    // The marker names the shape too: a fill of another shape is not reused.
    let expected = match args.parents {
        1 => args.count.to_string(),
        parents => format!("{}/{parents}", args.count),
    }
    .into_bytes();
    let session = env.connect(&ConnectOptions::default()).await?;
    let filled_now = session.get_if_exists(MARKER).await?.as_deref() != Some(&expected[..]);
    let fill_started = Instant::now();
    if filled_now {
        eprintln!(
            "arbor-bench: recovery: filling {ROOT} with {} nodes",
            args.count
        );
        session.ensure(ROOT, &[]).await?;
        if args.parents > 1 {
            for parent in 0..args.parents {
                session.ensure(&format!("{ROOT}/p{parent}"), &[]).await?;
            }
        }
        fill(&session, args.count, args.parents, &vec![b'r'; args.size]).await?;
        session.ensure(MARKER, &expected).await?;
        session.set(MARKER, &expected).await?;
    }
    let fill_secs = fill_started.elapsed().as_secs_f64();
    session.close().await?;

    eprintln!("arbor-bench: recovery: restarting: {}", args.restart_cmd);
    let started = Instant::now();
    let status = Command::new("sh")
        .arg("-c")
        .arg(&args.restart_cmd)
        .stdin(Stdio::null())
        .stdout(std::io::stderr())
        .status()
        .context("running --restart-cmd")?;
    if !status.success() {
        return Err(anyhow!("--restart-cmd failed: {status}"));
    }
    let limit = Duration::from_secs(args.timeout_secs);
    let options = ConnectOptions {
        connect_timeout: ATTEMPT_TIMEOUT,
        ..ConnectOptions::default()
    };
    let mut attempts = 0u64;
    let recovered = loop {
        attempts += 1;
        let attempt = tokio::time::timeout(ATTEMPT_TIMEOUT, read_marker(env, &options)).await;
        if let Ok(Ok(Some(data))) = attempt {
            if data == expected {
                break started.elapsed();
            }
            return Err(anyhow!(
                "after the restart {MARKER} holds {:?}, not {}",
                String::from_utf8_lossy(&data),
                args.count
            ));
        }
        if started.elapsed() > limit {
            return Err(anyhow!(
                "server not serving {MARKER} {limit:?} after the restart"
            ));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    };

    let mut samples = vec![micros(recovered)];
    let latency = Summary::of(&mut samples);
    let mut report = Report::new("recovery", env.kind.name(), &env.server);
    report
        .field("count", args.count)
        .field("parents", args.parents)
        .field("restart_cmd", args.restart_cmd.as_str())
        .throughput(1, recovered, &latency)
        .field("recovery_ms", round3(recovered.as_secs_f64() * 1000.0))
        .field("attempts", attempts)
        .field("filled", filled_now)
        .field("fill_secs", round3(fill_secs));
    Ok(report)
}

/// One attempt: a new session reads the marker, then closes.
async fn read_marker(env: &Env, options: &ConnectOptions) -> Result<Option<Vec<u8>>> {
    let session = env.connect(options).await?;
    let data = session.get_if_exists(MARKER).await;
    session.close().await?;
    data
}

/// Creates `<ROOT>/n<i>` for i < count in transactions; a transaction that
/// fails (some nodes exist from an earlier, partial fill) is redone node by
/// node, skipping existing ones.
async fn fill(session: &Session, count: u64, parents: u64, data: &[u8]) -> Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let batches = count.div_ceil(FILL_BATCH);
    let mut tasks = Vec::with_capacity(FILL_CONCURRENCY);
    for _ in 0..FILL_CONCURRENCY {
        let (session, next, data) = (session.clone(), next.clone(), data.to_vec());
        tasks.push(tokio::spawn(async move {
            loop {
                let batch = next.fetch_add(1, Ordering::Relaxed);
                if batch >= batches {
                    return Ok::<_, anyhow::Error>(());
                }
                let start = batch * FILL_BATCH;
                let paths: Vec<String> = (start..(start + FILL_BATCH).min(count))
                    .map(|i| match parents {
                        1 => format!("{ROOT}/n{i}"),
                        parents => format!("{ROOT}/p{}/n{i}", i % parents),
                    })
                    .collect();
                if session.create_batch(&paths, &data).await.is_err() {
                    for path in &paths {
                        session.ensure(path, &data).await?;
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}
