//! `lock`: uncontended acquire + release cycles on one session.
//!
//! Arbor runs the real `arbor_client::recipes::Mutex`; ZooKeeper runs the
//! Curator-style recipe of `target/zk_lock.rs`. Acquire, release and the
//! whole cycle are timed separately; the standard `p50_us`… fields are the
//! cycle's.

use std::time::Instant;

use anyhow::{anyhow, Result};

use super::{fresh_root, Env};
use crate::stats::{micros, Report, Summary};
use crate::target::ConnectOptions;

#[derive(clap::Args, Clone, Debug)]
pub struct LockArgs {
    /// Acquire + release cycles.
    #[arg(long, default_value_t = 2000)]
    pub count: u64,
}

pub async fn run(env: &Env, args: &LockArgs) -> Result<Report> {
    if args.count == 0 {
        return Err(anyhow!("--count must be positive"));
    }
    let session = env.connect(&ConnectOptions::default()).await?;
    let root = fresh_root("lock");
    session.ensure(&root, &[]).await?;
    let dir = format!("{root}/lock");
    let capacity = usize::try_from(args.count).unwrap_or(0);
    let (mut acquire, mut release, mut cycle) = (
        Vec::with_capacity(capacity),
        Vec::with_capacity(capacity),
        Vec::with_capacity(capacity),
    );
    eprintln!("arbor-bench: lock: {} cycles on {dir}", args.count);
    let started = Instant::now();
    for _ in 0..args.count {
        let begin = Instant::now();
        let guard = session.lock(&dir, false, None).await?;
        let granted = Instant::now();
        guard.release().await?;
        let released = Instant::now();
        acquire.push(micros(granted - begin));
        release.push(micros(released - granted));
        cycle.push(micros(released - begin));
    }
    let elapsed = started.elapsed();
    if !env.keep {
        // The lock directory is a container and may already be gone.
        session.delete_if_exists(&dir).await?;
        session.delete_if_exists(&root).await?;
    }
    session.close().await?;

    let cycle = Summary::of(&mut cycle);
    let mut report = Report::new("lock", env.kind.name(), &env.server);
    report
        .field("count", args.count)
        .throughput(args.count, elapsed, &cycle)
        .percentiles("acquire", &Summary::of(&mut acquire))
        .percentiles("release", &Summary::of(&mut release))
        .percentiles("cycle", &cycle);
    Ok(report)
}
