//! `children`: get-children latency of a node with `--children` children.
//!
//! Creates the children under a fresh root (`multi` transactions of
//! `--batch` creates, as `memory` fills), then lists them `--count` times
//! with one request in flight, each listing checked to hold every child.
//! Latency fields are per listing; the fill is not timed.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, Result};

use super::memory::{run_batches, Batches};
use super::{close_all, fresh_root, Env};
use crate::cpu::MachineTicks;
use crate::stats::{micros, Report, Summary};
use crate::target::ConnectOptions;

#[derive(clap::Args, Clone, Debug)]
pub struct ChildrenArgs {
    /// Children of the listed node.
    #[arg(long, default_value_t = 1000)]
    pub children: u64,
    /// Listings to time.
    #[arg(long, default_value_t = 2000)]
    pub count: u64,
    /// Creates per multi transaction while filling.
    #[arg(long, default_value_t = 1000)]
    pub batch: u64,
}

/// Sessions the fill is spread over, and its transactions in flight.
const FILL_CONNS: usize = 4;
const FILL_CONCURRENCY: usize = 8;

pub async fn run(env: &Env, args: &ChildrenArgs) -> Result<Report> {
    if args.children == 0 || args.count == 0 || args.batch == 0 {
        return Err(anyhow!("--children, --count and --batch must be positive"));
    }
    let sessions = env
        .connect_many(&ConnectOptions::default(), FILL_CONNS)
        .await?;
    let root = fresh_root("children");
    sessions[0].ensure(&root, &[]).await?;
    eprintln!(
        "arbor-bench: children: creating {} children under {root}",
        args.children
    );
    let batches = args.children.div_ceil(args.batch);
    let spec = Arc::new(Batches {
        root: root.clone(),
        count: args.children,
        batch: args.batch,
        parents: 1,
        data: Vec::new(),
    });
    run_batches(&sessions, FILL_CONCURRENCY, 0..batches, &spec, true).await?;

    let machine_before = MachineTicks::now()?;
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(usize::try_from(args.count).unwrap_or(0));
    for _ in 0..args.count {
        let issued = Instant::now();
        let names = sessions[0].children(&root).await?;
        latencies.push(micros(issued.elapsed()));
        if names.len() as u64 != args.children {
            return Err(anyhow!(
                "{root} lists {} children, not {}",
                names.len(),
                args.children
            ));
        }
    }
    let elapsed = started.elapsed();
    let steal_percent = machine_before.steal_percent_since(&MachineTicks::now()?);

    if !env.keep {
        run_batches(&sessions, FILL_CONCURRENCY, 0..batches, &spec, false).await?;
        sessions[0].delete_if_exists(&root).await?;
    }
    close_all(sessions).await?;

    let latency = Summary::of(&mut latencies);
    let mut report = Report::new("children", env.kind.name(), &env.server);
    report
        .field("children", args.children)
        .field("count", args.count)
        .throughput(args.count, elapsed, &latency)
        .field("steal_percent", steal_percent);
    Ok(report)
}
