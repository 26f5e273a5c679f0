//! `semaphore`: acquire + release cycles of a counting semaphore of N
//! permits by C concurrent clients, each on its own session.
//!
//! Arbor runs the real `arbor_client::recipes::Semaphore`; ZooKeeper runs
//! Curator's `InterProcessSemaphoreV2` protocol or kazoo's `Semaphore`
//! (`--zk-recipe`, see `target/zk_recipes.rs`). Each client loops: take the
//! next cycle number (until `--count`), acquire, hold `--hold-us`, release.
//! The standard `p50_us`… fields are the acquire's (call to grant, queueing
//! for a permit included); release and whole cycles have their own.
//!
//! Two checks ride along: the number of leases held at once, counted in
//! this process between grant and the start of the release, never passes N
//! (the run fails if it does), and `notifications_per_release` is the watch
//! events every session received during the run, after a barrier round trip
//! on each, per release.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use super::{close_all, fresh_root, remove_tree, Env};
use crate::stats::{micros, round3, Report, Summary};
use crate::target::zk_recipes::SemaphoreRecipe;
use crate::target::{ConnectOptions, Session};

/// How long the whole run may take before it fails (a lost wake-up would
/// otherwise hang it).
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// Time for watcher tasks to count events that a barrier flushed.
const EVENT_SETTLE: Duration = Duration::from_millis(50);

#[derive(clap::Args, Clone, Debug)]
pub struct SemaphoreArgs {
    /// Permits (leases granted at once).
    #[arg(long, default_value_t = 4)]
    pub permits: u32,
    /// Concurrent clients, each on its own session.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Acquire + release cycles, over all clients.
    #[arg(long, default_value_t = 2000)]
    pub count: u64,
    /// How long each lease is held before its release, in microseconds.
    #[arg(long, default_value_t = 0)]
    pub hold_us: u64,
    /// ZooKeeper only: whose semaphore protocol to run.
    #[arg(long, value_enum, default_value = "curator")]
    pub zk_recipe: SemaphoreRecipe,
}

/// What one client measured.
#[derive(Default)]
struct Samples {
    acquire: Vec<u32>,
    release: Vec<u32>,
    cycle: Vec<u32>,
}

pub async fn run(env: &Env, args: &SemaphoreArgs) -> Result<Report> {
    if args.count == 0 || args.clients == 0 || args.permits == 0 {
        return Err(anyhow!("--count, --clients and --permits must be positive"));
    }
    let options = ConnectOptions::default();
    eprintln!(
        "arbor-bench: semaphore: opening {} client sessions",
        args.clients
    );
    let sessions = env.connect_many(&options, args.clients).await?;
    let root = fresh_root("semaphore");
    sessions[0].ensure(&root, &[]).await?;
    let path = format!("{root}/sem");
    let events_before: u64 = sessions.iter().map(Session::watch_events).sum();

    eprintln!(
        "arbor-bench: semaphore: {} cycles, {} permits, {} clients on {path}",
        args.count, args.permits, args.clients
    );
    let next = Arc::new(AtomicU64::new(0));
    let holders = Arc::new(AtomicUsize::new(0));
    let most_held = Arc::new(AtomicUsize::new(0));
    let hold = Duration::from_micros(args.hold_us);
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(args.clients);
    for session in &sessions {
        let (session, path) = (session.clone(), path.clone());
        let (next, holders, most_held) = (next.clone(), holders.clone(), most_held.clone());
        let (count, permits, recipe) = (args.count, args.permits, args.zk_recipe);
        tasks.push(tokio::spawn(async move {
            let mut samples = Samples::default();
            while next.fetch_add(1, Ordering::Relaxed) < count {
                let begin = Instant::now();
                let lease = session.acquire_lease(&path, permits, recipe).await?;
                let granted = Instant::now();
                let held = holders.fetch_add(1, Ordering::SeqCst) + 1;
                most_held.fetch_max(held, Ordering::SeqCst);
                if !hold.is_zero() {
                    tokio::time::sleep(hold).await;
                }
                // Before the release is sent: no later grant can precede it.
                holders.fetch_sub(1, Ordering::SeqCst);
                let release_start = Instant::now();
                lease.release().await?;
                let released = Instant::now();
                samples.acquire.push(micros(granted - begin));
                samples.release.push(micros(released - release_start));
                samples.cycle.push(micros(released - begin));
            }
            Ok::<_, anyhow::Error>(samples)
        }));
    }
    let mut all = Samples::default();
    let joined = tokio::time::timeout(RUN_TIMEOUT, async {
        for task in tasks {
            let samples = task.await??;
            all.acquire.extend(samples.acquire);
            all.release.extend(samples.release);
            all.cycle.extend(samples.cycle);
        }
        Ok::<_, anyhow::Error>(())
    });
    joined
        .await
        .map_err(|_| anyhow!("the cycles took over {RUN_TIMEOUT:?}"))??;
    let elapsed = started.elapsed();
    let most_held = most_held.load(Ordering::SeqCst);
    if most_held > args.permits as usize {
        return Err(anyhow!(
            "{most_held} leases were held at once, past the {} permits",
            args.permits
        ));
    }
    for session in &sessions {
        session.barrier().await?;
    }
    tokio::time::sleep(EVENT_SETTLE).await;
    let events: u64 = sessions.iter().map(Session::watch_events).sum::<u64>() - events_before;

    if !env.keep {
        close_sessions_then_clean(sessions, env, &options, &root).await?;
    } else {
        close_all(sessions).await?;
    }

    let releases = all.cycle.len() as u64;
    let acquire = Summary::of(&mut all.acquire);
    let per_release = if releases > 0 {
        events as f64 / releases as f64
    } else {
        0.0
    };
    let mut report = Report::new("semaphore", env.kind.name(), &env.server);
    report
        .field("count", args.count)
        .field("permits", args.permits)
        .field("clients", args.clients)
        .field("hold_us", args.hold_us)
        .throughput(releases, elapsed, &acquire)
        .percentiles("acquire", &acquire)
        .percentiles("release", &Summary::of(&mut all.release))
        .percentiles("cycle", &Summary::of(&mut all.cycle))
        .field("max_holders", most_held)
        .field("notifications", events)
        .field("notifications_per_release", round3(per_release));
    if env.kind == crate::target::Kind::Zookeeper {
        report.field("zk_recipe", args.zk_recipe.name());
    }
    Ok(report)
}

/// Closes the client sessions (their ephemeral nodes go with them), then
/// removes the run's nodes from a fresh session.
pub async fn close_sessions_then_clean(
    sessions: Vec<Session>,
    env: &Env,
    options: &ConnectOptions,
    root: &str,
) -> Result<()> {
    close_all(sessions).await?;
    let cleaner = env.connect(options).await?;
    remove_tree(&cleaner, root).await?;
    cleaner.close().await
}
