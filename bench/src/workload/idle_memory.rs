//! `idle-memory`: server resident memory per idle connected session.
//!
//! 1. Opens [`WARMUP_CONNS`] sessions that make one request each and stay
//!    open: a server's first connections load code (the JVM's classes) and
//!    grow per-thread caches once, which is not a per-connection cost.
//! 2. Reads the server's settled VmRSS (`rss_before_bytes`).
//! 3. Opens `--conns` more sessions, each its own TCP connection, at most
//!    [`CONNECTS_IN_PARALLEL`] connecting at a time (a connect storm of
//!    thousands would overflow the accept queue and time out, which measures
//!    nothing). Latency fields are per connect: TCP, handshake and session
//!    creation (a logged txn on both servers).
//! 4. Leaves them idle for one negotiated session timeout, so only the
//!    clients' heartbeats keep them alive, then reads the settled VmRSS
//!    (`rss_after_bytes`).
//! 5. Checks with one round trip each that every session is still alive
//!    (an expired one would have freed its memory and flattered the figure),
//!    then closes all.
//!
//! `bytes_per_connection` = (after − before) ÷ `--conns`;
//! `idle_server_cpu_ms_per_s` is the server's CPU time during step 4 per
//! second of it: what heartbeats and session upkeep cost. The server must
//! accept that many connections from one address: ZooKeeper's
//! `maxClientCnxns` (60 in Debian's zoo.cfg; 0 lifts it), Arbor's
//! `--max-connections` and `--max-connections-per-ip`.

use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use tokio::task::JoinSet;

use super::memory::{rss_bytes, settled_rss};
use super::{close_many, Env};
use crate::cpu::cpu_us;
use crate::fd_limit::ensure_open_files;
use crate::stats::{micros, round3, Report, Summary};
use crate::target::{ConnectOptions, Kind, Session, CONNECTS_IN_PARALLEL};

#[derive(clap::Args, Clone, Debug)]
pub struct IdleMemoryArgs {
    /// PID of the server process whose RSS is read.
    #[arg(long)]
    pub server_pid: u32,
    /// Idle sessions to open (each its own connection).
    #[arg(long, default_value_t = 4096)]
    pub conns: usize,
}

/// Sessions opened (and used once) before the baseline reading.
pub const WARMUP_CONNS: usize = 16;

/// Most sessions one run opens: far past any server's default connection
/// limit, and each costs this process a socket and a task.
pub const CONNS_MAX: usize = 100_000;

/// Liveness round trips in flight at once in step 5.
const LIVENESS_PARALLEL: usize = 256;

pub async fn run(env: &Env, args: &IdleMemoryArgs) -> Result<Report> {
    if !(1..=CONNS_MAX).contains(&args.conns) {
        return Err(anyhow!("--conns must be between 1 and {CONNS_MAX}"));
    }
    let open_files = ensure_open_files((args.conns + WARMUP_CONNS) as u64)?;
    let options = ConnectOptions::default();
    let (warmup, _, _) = connect_timed(env.kind, &env.server, &options, WARMUP_CONNS)
        .await
        .context("opening the warm-up sessions")?;
    check_alive(&warmup).await?;
    let rss_before = settled_rss(args.server_pid).await?;
    eprintln!(
        "arbor-bench: idle-memory: opening {} sessions (server RSS {rss_before} B)",
        args.conns
    );
    let (sessions, mut latencies, elapsed) =
        connect_timed(env.kind, &env.server, &options, args.conns)
            .await
            .with_context(|| format!("opening {} sessions", args.conns))?;
    let rss_connected = rss_bytes(args.server_pid)?;
    let idle = sessions
        .iter()
        .map(Session::negotiated_timeout)
        .max()
        .unwrap_or(Duration::ZERO);
    eprintln!("arbor-bench: idle-memory: all connected; idle for {idle:?}, then settling");
    // What the server spends on sessions that only send heartbeats.
    let idle_started = Instant::now();
    let cpu_before = cpu_us(Some(args.server_pid))?;
    tokio::time::sleep(idle).await;
    let idle_cpu_us = cpu_us(Some(args.server_pid))?.saturating_sub(cpu_before);
    let idle_secs = idle_started.elapsed().as_secs_f64();
    let rss_after = settled_rss(args.server_pid).await?;
    check_alive(&sessions)
        .await
        .context("a session did not survive being idle")?;
    close_many(sessions).await?;
    close_many(warmup).await?;

    let latency = Summary::of(&mut latencies);
    let grown = rss_after as f64 - rss_before as f64;
    let mut report = Report::new("idle-memory", env.kind.name(), &env.server);
    report
        .field("conns", args.conns)
        .field("warmup_conns", WARMUP_CONNS)
        .field("server_pid", args.server_pid)
        .field("open_files_limit", open_files)
        .throughput(args.conns as u64, elapsed, &latency)
        .field(
            "idle_ms",
            u64::try_from(idle.as_millis()).unwrap_or(u64::MAX),
        )
        .field("rss_before_bytes", rss_before)
        .field("rss_after_bytes", rss_after)
        .field("rss_at_end_of_connect_bytes", rss_connected)
        .field("bytes_per_connection", round3(grown / args.conns as f64))
        .field(
            "idle_server_cpu_ms_per_s",
            round3(idle_cpu_us as f64 / 1000.0 / idle_secs.max(f64::MIN_POSITIVE)),
        );
    Ok(report)
}

/// Opens `count` sessions to `server`, at most [`CONNECTS_IN_PARALLEL`] at a
/// time; returns them, each one's connect latency, and the whole time taken.
async fn connect_timed(
    kind: Kind,
    server: &str,
    options: &ConnectOptions,
    count: usize,
) -> Result<(Vec<Session>, Vec<u32>, Duration)> {
    let started = Instant::now();
    let mut connecting = JoinSet::new();
    let mut sessions = Vec::with_capacity(count);
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        if connecting.len() >= CONNECTS_IN_PARALLEL {
            if let Some(joined) = connecting.join_next().await {
                let (session, latency) = joined??;
                sessions.push(session);
                latencies.push(latency);
            }
        }
        let (server, options) = (server.to_owned(), options.clone());
        connecting.spawn(async move {
            let issued = Instant::now();
            let session = Session::connect(kind, &server, &options).await?;
            Ok::<_, anyhow::Error>((session, micros(issued.elapsed())))
        });
    }
    while let Some(joined) = connecting.join_next().await {
        let (session, latency) = joined??;
        sessions.push(session);
        latencies.push(latency);
    }
    Ok((sessions, latencies, started.elapsed()))
}

/// One round trip on every session, [`LIVENESS_PARALLEL`] at a time.
async fn check_alive(sessions: &[Session]) -> Result<()> {
    let mut pinging = JoinSet::new();
    for session in sessions {
        if pinging.len() >= LIVENESS_PARALLEL {
            if let Some(joined) = pinging.join_next().await {
                joined??;
            }
        }
        let session = session.clone();
        pinging.spawn(async move { session.barrier().await });
    }
    while let Some(joined) = pinging.join_next().await {
        joined??;
    }
    Ok(())
}
