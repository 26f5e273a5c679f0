//! `handoff`: how fast a contended fair lock passes from one holder to the
//! next, and how many watch notifications each release costs.
//!
//! Each round:
//! 1. a coordinator session takes the lock (the gate);
//! 2. `--waiters` W tasks, spread over `--conns` sessions, queue on it (each
//!    watching only its predecessor, or with `--herd` the whole directory);
//! 3. once all W nodes are queued and every waiter is waiting — signalled by
//!    the recipe where it can tell, else after a settle pause (Arbor's library
//!    `Mutex` does not expose it) — a barrier round trip on every session
//!    flushes stray events and the waiter sessions' event counts are read;
//! 4. the coordinator releases; every grantee records its grant instant and
//!    at once records its release start and releases — a chain of W grants.
//!
//! Handoff latency = grant instant − release start of the previous holder (one
//! process, one monotonic clock). After the chain another barrier flushes the
//! last events; `notifications_per_release` = events received by the waiter
//! sessions during the chain ÷ handoffs (W per round). Without `--herd` it is
//! exactly 1 when every waiter watched its predecessor in time.
//!
//! Notifications are counted per session for Arbor (the client's count) and
//! per watcher for ZooKeeper (the client library fans one server event out to
//! every watcher of the session). The two agree when each waiter has its own
//! session, the default.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use super::{close_all, fresh_root, Env};
use crate::stats::{micros, Report, Summary};
use crate::target::{ConnectOptions, Session};

/// Pause before the chain when readiness cannot be observed: at least this…
const SETTLE_MIN: Duration = Duration::from_millis(20);
/// …at most this, otherwise twice the time the waiters took to queue (each
/// waiter needs two more round trips after its node appears).
const SETTLE_MAX: Duration = Duration::from_secs(5);
/// Time for watcher tasks to count events that a barrier flushed.
const EVENT_SETTLE: Duration = Duration::from_millis(20);
/// How long queueing or one chain may take before the run fails.
const ROUND_TIMEOUT: Duration = Duration::from_secs(120);
/// Pause between polls of the queue length.
const POLL_INTERVAL: Duration = Duration::from_millis(2);
/// Samples wanted by default: rounds = max(3, this ÷ waiters).
const DEFAULT_SAMPLES: u64 = 500;

#[derive(clap::Args, Clone, Debug)]
pub struct HandoffArgs {
    /// Waiters queued on the lock each round.
    #[arg(long, default_value_t = 10)]
    pub waiters: usize,
    /// Sessions the waiters are spread over [default: one per waiter].
    #[arg(long)]
    pub conns: Option<usize>,
    /// Rounds, each re-queueing all waiters [default: max(3, 500 / waiters)].
    #[arg(long)]
    pub rounds: Option<u64>,
    /// Every waiter watches the lock directory's children (herd effect).
    #[arg(long)]
    pub herd: bool,
}

pub async fn run(env: &Env, args: &HandoffArgs) -> Result<Report> {
    let waiters = args.waiters;
    if waiters == 0 {
        return Err(anyhow!("--waiters must be positive"));
    }
    let conns = args.conns.unwrap_or(waiters).clamp(1, waiters);
    let rounds = args
        .rounds
        .unwrap_or_else(|| (DEFAULT_SAMPLES / waiters as u64).max(3));
    if rounds == 0 {
        return Err(anyhow!("--rounds must be positive"));
    }
    let options = ConnectOptions::default();
    eprintln!("arbor-bench: handoff: opening {conns} waiter sessions");
    let sessions = env.connect_many(&options, conns).await?;
    let coordinator = env.connect(&options).await?;
    let root = fresh_root("handoff");
    coordinator.ensure(&root, &[]).await?;
    let dir = format!("{root}/lock");
    let signalled = sessions[0].signals_ready(args.herd);

    let mut samples = Vec::new();
    let mut notifications = 0u64;
    let mut chain_time = Duration::ZERO;
    for round in 0..rounds {
        eprintln!("arbor-bench: handoff: round {}/{rounds}", round + 1);
        let outcome = tokio::time::timeout(
            ROUND_TIMEOUT,
            one_round(&coordinator, &sessions, &dir, waiters, args.herd, signalled),
        )
        .await
        .map_err(|_| anyhow!("round {} took over {ROUND_TIMEOUT:?}", round + 1))??;
        samples.extend(outcome.handoffs);
        notifications += outcome.notifications;
        chain_time += outcome.chain;
    }
    if !env.keep {
        coordinator.delete_if_exists(&dir).await?;
        coordinator.delete_if_exists(&root).await?;
    }
    close_all(sessions).await?;
    coordinator.close().await?;

    let handoffs = samples.len() as u64;
    let latency = Summary::of(&mut samples);
    let per_release = if handoffs > 0 {
        notifications as f64 / handoffs as f64
    } else {
        0.0
    };
    let mut report = Report::new("handoff", env.kind.name(), &env.server);
    report
        .field("waiters", waiters)
        .field("conns", conns)
        .field("rounds", rounds)
        .field("herd", args.herd)
        .field("readiness", if signalled { "signalled" } else { "settled" })
        .throughput(handoffs, chain_time, &latency)
        .percentiles("handoff", &latency)
        .field("releases", handoffs)
        .field("notifications", notifications)
        .field(
            "notifications_per_release",
            crate::stats::round3(per_release),
        );
    Ok(report)
}

struct RoundOutcome {
    handoffs: Vec<u32>,
    notifications: u64,
    chain: Duration,
}

async fn one_round(
    coordinator: &Session,
    sessions: &[Session],
    dir: &str,
    waiters: usize,
    herd: bool,
    signalled: bool,
) -> Result<RoundOutcome> {
    let gate = coordinator
        .lock(dir, herd, None)
        .await
        .context("taking the gate")?;
    let ready = Arc::new(AtomicUsize::new(0));
    let queued_since = Instant::now();
    let mut tasks = Vec::with_capacity(waiters);
    for waiter in 0..waiters {
        let session = sessions[waiter % sessions.len()].clone();
        let (dir, ready) = (dir.to_owned(), ready.clone());
        tasks.push(tokio::spawn(async move {
            let guard = session.lock(&dir, herd, Some(&ready)).await?;
            let granted = Instant::now();
            let release_start = Instant::now();
            guard.release().await?;
            Ok::<_, anyhow::Error>((granted, release_start))
        }));
    }
    // Everyone queued (the gate's node plus W)…
    while coordinator.children(dir).await?.len() < waiters + 1 {
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    // …and waiting with its watch set.
    if signalled {
        while ready.load(Ordering::SeqCst) < waiters {
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    } else {
        let settle = (queued_since.elapsed() * 2).clamp(SETTLE_MIN, SETTLE_MAX);
        tokio::time::sleep(settle).await;
    }
    let before = flushed_events(sessions).await?;

    let release_start = Instant::now();
    gate.release().await.context("releasing the gate")?;
    let mut grants = Vec::with_capacity(waiters);
    for task in tasks {
        grants.push(task.await??);
    }
    let after = flushed_events(sessions).await?;

    // Grants are serialized by the lock: in grant order, each follows the
    // previous holder's release.
    grants.sort_by_key(|(granted, _)| *granted);
    let mut previous = release_start;
    let mut handoffs = Vec::with_capacity(waiters);
    for (granted, released) in &grants {
        handoffs.push(micros(granted.saturating_duration_since(previous)));
        previous = *released;
    }
    let chain = grants.last().map_or(Duration::ZERO, |(granted, _)| {
        granted.saturating_duration_since(release_start)
    });
    Ok(RoundOutcome {
        handoffs,
        notifications: after.saturating_sub(before),
        chain,
    })
}

/// The waiter sessions' total event count, after a barrier round trip on
/// each so that every event already triggered has arrived and been counted.
async fn flushed_events(sessions: &[Session]) -> Result<u64> {
    let barriers: Vec<_> = sessions
        .iter()
        .map(|session| {
            let session = session.clone();
            tokio::spawn(async move { session.barrier().await })
        })
        .collect();
    for barrier in barriers {
        barrier.await??;
    }
    tokio::time::sleep(EVENT_SETTLE).await;
    Ok(sessions.iter().map(Session::watch_events).sum())
}
