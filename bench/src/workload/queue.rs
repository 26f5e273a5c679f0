//! `queue`: P producers put items into a distributed queue, C consumers take
//! and complete them, each client on its own session.
//!
//! Arbor runs the real `arbor_client::recipes::Queue` (take = claim, complete
//! = the fenced multi that removes the item); ZooKeeper runs kazoo's
//! `LockingQueue` protocol (`target/zk_recipes.rs`: get, then consume).
//!
//! Producers stop after `--items` puts; at most `--max-backlog` items are
//! put and not yet completed at any time (producers wait in this process),
//! so takers list a queue of bounded length and put→take latency measures
//! the queue, not a backlog built by producers outrunning consumers.
//!
//! Every item carries its number; the producer notes when it issued the put
//! (one process, one monotonic clock), the consumer when its take returned:
//! put→take latency, the standard `p50_us`… fields. `takes_per_s` is
//! items ÷ (start → last completion), end to end; `puts_per_s` items ÷
//! (start → last put acknowledged). Each number must be taken exactly once:
//! the run fails if one is lost or taken twice. `notifications_per_item` is
//! the watch events the consumer sessions received, per item.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use super::semaphore::close_sessions_then_clean;
use super::{close_all, fresh_root, Env};
use crate::stats::{micros, round3, Report, Summary};
use crate::target::{ConnectOptions, Session};

/// How long the whole run may take before it fails.
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// Time for watcher tasks to count events that a barrier flushed.
const EVENT_SETTLE: Duration = Duration::from_millis(50);

/// Bytes of the item number at the start of every item's data.
const NUMBER_BYTES: usize = 8;

#[derive(clap::Args, Clone, Debug)]
pub struct QueueArgs {
    /// Producer clients, each on its own session.
    #[arg(long, default_value_t = 2)]
    pub producers: usize,
    /// Consumer clients, each on its own session.
    #[arg(long, default_value_t = 4)]
    pub consumers: usize,
    /// Items put (and taken and completed), over all producers.
    #[arg(long, default_value_t = 2000)]
    pub items: u64,
    /// The most items put and not yet completed at a time.
    #[arg(long, default_value_t = 100)]
    pub max_backlog: usize,
    /// Bytes of each item's data (at least 8: the item's number).
    #[arg(long, default_value_t = 32)]
    pub data_bytes: usize,
}

/// What the clients share.
struct Shared {
    started: Instant,
    /// Nanoseconds from `started` to each item's put being issued.
    issued: Vec<AtomicU64>,
    /// How many times each item was taken.
    taken: Vec<AtomicU32>,
    next_put: AtomicU64,
    completed: AtomicU64,
    /// Free places in the backlog.
    backlog: tokio::sync::Semaphore,
}

pub async fn run(env: &Env, args: &QueueArgs) -> Result<Report> {
    if args.items == 0 || args.producers == 0 || args.consumers == 0 || args.max_backlog == 0 {
        return Err(anyhow!(
            "--items, --producers, --consumers and --max-backlog must be positive"
        ));
    }
    let items = usize::try_from(args.items).context("--items")?;
    let data_bytes = args.data_bytes.max(NUMBER_BYTES);
    let options = ConnectOptions::default();
    eprintln!(
        "arbor-bench: queue: opening {} producer and {} consumer sessions",
        args.producers, args.consumers
    );
    let producers = env.connect_many(&options, args.producers).await?;
    let consumers = env.connect_many(&options, args.consumers).await?;
    let root = fresh_root("queue");
    producers[0].ensure(&root, &[]).await?;
    let path = format!("{root}/queue");
    producers[0]
        .queue(&path)?
        .prepare(&producers[0], &path)
        .await?;
    let events_before: u64 = consumers.iter().map(Session::watch_events).sum();

    eprintln!(
        "arbor-bench: queue: {} items, {} producers, {} consumers on {path}",
        args.items, args.producers, args.consumers
    );
    let shared = Arc::new(Shared {
        started: Instant::now(),
        issued: (0..items).map(|_| AtomicU64::new(0)).collect(),
        taken: (0..items).map(|_| AtomicU32::new(0)).collect(),
        next_put: AtomicU64::new(0),
        completed: AtomicU64::new(0),
        backlog: tokio::sync::Semaphore::new(args.max_backlog),
    });
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let stop = Arc::new(stop);

    let mut producing = Vec::with_capacity(args.producers);
    for session in &producers {
        let (queue, shared) = (session.queue(&path)?, shared.clone());
        let count = args.items;
        producing.push(tokio::spawn(async move {
            let mut puts = Vec::new();
            let mut data = vec![0u8; data_bytes];
            loop {
                let number = shared.next_put.fetch_add(1, Ordering::Relaxed);
                if number >= count {
                    break;
                }
                shared.backlog.acquire().await?.forget();
                data[..NUMBER_BYTES].copy_from_slice(&number.to_be_bytes());
                let issued = Instant::now();
                shared.issued[number as usize].store(
                    u64::try_from((issued - shared.started).as_nanos()).unwrap_or(u64::MAX),
                    Ordering::SeqCst,
                );
                queue.put(&data).await?;
                puts.push(micros(issued.elapsed()));
            }
            Ok::<_, anyhow::Error>((puts, shared.started.elapsed()))
        }));
    }
    let mut consuming = Vec::with_capacity(args.consumers);
    for session in &consumers {
        let (queue, shared) = (session.queue(&path)?, shared.clone());
        let (stop, mut stopped) = (stop.clone(), stopped.clone());
        let count = args.items;
        consuming.push(tokio::spawn(async move {
            let (mut put_to_take, mut completes) = (Vec::new(), Vec::new());
            loop {
                let job = tokio::select! {
                    biased;
                    _ = stopped.wait_for(|done| *done) => break,
                    job = queue.take() => job?,
                };
                let taken = Instant::now();
                let number = item_number(job.data())?;
                let slot = usize::try_from(number)
                    .ok()
                    .filter(|slot| *slot < shared.taken.len())
                    .ok_or_else(|| anyhow!("item number {number} was never put"))?;
                shared.taken[slot].fetch_add(1, Ordering::SeqCst);
                let issued = Duration::from_nanos(shared.issued[slot].load(Ordering::SeqCst));
                put_to_take.push(micros((taken - shared.started).saturating_sub(issued)));
                job.complete().await?;
                completes.push(micros(taken.elapsed()));
                shared.backlog.add_permits(1);
                if shared.completed.fetch_add(1, Ordering::SeqCst) + 1 >= count {
                    let _ = stop.send(true);
                }
            }
            Ok::<_, anyhow::Error>((put_to_take, completes))
        }));
    }

    let (mut puts, mut put_to_take, mut completes) = (Vec::new(), Vec::new(), Vec::new());
    let mut puts_done = Duration::ZERO;
    let joined = tokio::time::timeout(RUN_TIMEOUT, async {
        for task in producing {
            let (samples, done) = task.await??;
            puts.extend(samples);
            puts_done = puts_done.max(done);
        }
        for task in consuming {
            let (latencies, samples) = task.await??;
            put_to_take.extend(latencies);
            completes.extend(samples);
        }
        Ok::<_, anyhow::Error>(())
    });
    joined
        .await
        .map_err(|_| anyhow!("the queue run took over {RUN_TIMEOUT:?}"))??;
    let elapsed = shared.started.elapsed();
    let (mut lost, mut duplicates) = (0u64, 0u64);
    for count in &shared.taken {
        match count.load(Ordering::SeqCst) {
            0 => lost += 1,
            1 => {}
            more => duplicates += u64::from(more - 1),
        }
    }
    if lost > 0 || duplicates > 0 {
        return Err(anyhow!(
            "{lost} items were never taken and {duplicates} were taken again"
        ));
    }
    for session in &consumers {
        session.barrier().await?;
    }
    tokio::time::sleep(EVENT_SETTLE).await;
    let events: u64 = consumers.iter().map(Session::watch_events).sum::<u64>() - events_before;

    let mut sessions = producers;
    sessions.extend(consumers);
    if env.keep {
        close_all(sessions).await?;
    } else {
        close_sessions_then_clean(sessions, env, &options, &root).await?;
    }

    let rate = |secs: f64| {
        if secs > 0.0 {
            round3(args.items as f64 / secs)
        } else {
            0.0
        }
    };
    let latency = Summary::of(&mut put_to_take);
    let mut report = Report::new("queue", env.kind.name(), &env.server);
    report
        .field("items", args.items)
        .field("producers", args.producers)
        .field("consumers", args.consumers)
        .field("max_backlog", args.max_backlog)
        .field("data_bytes", data_bytes)
        .throughput(args.items, elapsed, &latency)
        .field("puts_per_s", rate(puts_done.as_secs_f64()))
        .field("takes_per_s", rate(elapsed.as_secs_f64()))
        .percentiles("put_to_take", &latency)
        .percentiles("put", &Summary::of(&mut puts))
        .percentiles("complete", &Summary::of(&mut completes))
        .field("lost", lost)
        .field("duplicates", duplicates)
        .field("notifications", events)
        .field(
            "notifications_per_item",
            round3(events as f64 / args.items as f64),
        );
    if env.kind == crate::target::Kind::Zookeeper {
        report.field("zk_recipe", "kazoo-locking-queue");
    }
    Ok(report)
}

/// The item number at the start of an item's data.
fn item_number(data: &[u8]) -> Result<u64> {
    let bytes: [u8; NUMBER_BYTES] = data
        .get(..NUMBER_BYTES)
        .and_then(|head| head.try_into().ok())
        .ok_or_else(|| anyhow!("an item of {} bytes carries no number", data.len()))?;
    Ok(u64::from_be_bytes(bytes))
}
