//! `create`, `get`, `set`, `delete`, `mixed`: pipelined single-node requests.
//!
//! Setup (untimed): the root, then for `get`/`set`/`mixed` a key space of
//! `--keys` nodes of `--size` bytes, for `delete` the `--count` nodes to
//! delete. The timed phase is [`super::pipelined`]; cleanup (untimed) removes
//! everything again.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};

use super::{close_all, create_keys, fresh_root, pipelined, remove_all, Env, Limit, Op, Plan};
use crate::cpu::CpuMark;
use crate::log_metrics::LogMark;
use crate::stats::{round3, Report, Summary};
use crate::target::{ConnectOptions, Kind as TargetKind, MAX_IN_FLIGHT_PER_SESSION};

/// Ops run when neither --count nor --secs is given.
const DEFAULT_COUNT: u64 = 50_000;

/// Flags shared by the single-op workloads.
#[derive(clap::Args, Clone, Debug)]
pub struct LoadArgs {
    /// Bytes of data per node written.
    #[arg(long, default_value_t = 100)]
    pub size: usize,
    /// Requests in flight in total (one task each).
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Sessions (connections) the tasks share round-robin.
    #[arg(long, default_value_t = 8)]
    pub conns: usize,
    /// Ops to run [default: 50000, or unbounded with --secs].
    #[arg(long)]
    pub count: Option<u64>,
    /// Run for this many seconds instead (stopping early at --count if given; not for delete).
    #[arg(long)]
    pub secs: Option<f64>,
    /// Nodes in the key space of get, set and mixed.
    #[arg(long, default_value_t = 1000)]
    pub keys: usize,
    /// Server processes (comma-separated pids) whose CPU time per op to
    /// report, with the load generator's own.
    #[arg(long, value_delimiter = ',')]
    pub server_pid: Vec<u32>,
    /// Arbor only: the server's admin port (`host:port`), whose `/metrics`
    /// say how many log syncs the run took, how many writes each made
    /// durable and how long each took.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<String>,
}

/// Which single-op workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Create,
    Get,
    Set,
    Delete,
    Mixed,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Create => "create",
            Kind::Get => "get",
            Kind::Set => "set",
            Kind::Delete => "delete",
            Kind::Mixed => "mixed",
        }
    }

    /// Whether every op of the workload is a write, so that the server's
    /// time per write is its time per op.
    fn writes_only(self) -> bool {
        matches!(self, Kind::Create | Kind::Set | Kind::Delete)
    }

    fn op(self) -> Op {
        match self {
            Kind::Create => Op::CreateNumbered,
            Kind::Get => Op::Get,
            Kind::Set => Op::Set,
            Kind::Delete => Op::DeleteKey,
            Kind::Mixed => Op::Mixed,
        }
    }
}

pub async fn run(env: &Env, workload: Kind, args: &LoadArgs) -> Result<Report> {
    let count = match (args.count, args.secs) {
        (Some(count), _) => count,
        (None, Some(_)) => u64::MAX,
        (None, None) => DEFAULT_COUNT,
    };
    if args.concurrency == 0 || args.conns == 0 || count == 0 {
        return Err(anyhow!(
            "--concurrency, --conns and --count must be positive"
        ));
    }
    let duration = match args.secs {
        Some(_) if workload == Kind::Delete => {
            return Err(anyhow!("delete runs --count ops; --secs is not supported"))
        }
        Some(secs) if secs.is_finite() && secs > 0.0 => Some(Duration::from_secs_f64(secs)),
        Some(secs) => return Err(anyhow!("--secs must be positive, got {secs}")),
        None => None,
    };
    if args.admin.is_some() && env.kind != TargetKind::Arbor {
        return Err(anyhow!(
            "--admin reads an Arbor server's metrics; it measures Arbor only"
        ));
    }
    let name = workload.name();
    let root = fresh_root(name);
    let data = vec![b'x'; args.size];
    let per_session = args.concurrency.div_ceil(args.conns);
    let options = ConnectOptions {
        max_in_flight: per_session.clamp(
            arbor_client::DEFAULT_MAX_IN_FLIGHT,
            MAX_IN_FLIGHT_PER_SESSION,
        ),
        zk_client: env.zk_client,
        ..ConnectOptions::default()
    };
    let sessions = env.connect_many(&options, args.conns).await?;
    sessions[0].ensure(&root, &[]).await?;

    let keys: Vec<String> = match workload {
        Kind::Create => Vec::new(),
        Kind::Delete => (0..count).map(|i| format!("{root}/d{i}")).collect(),
        Kind::Get | Kind::Set | Kind::Mixed => {
            if args.keys == 0 {
                return Err(anyhow!("--keys must be positive"));
            }
            (0..args.keys).map(|i| format!("{root}/k{i}")).collect()
        }
    };
    eprintln!(
        "arbor-bench: {name}: setting up {} nodes under {root}",
        keys.len()
    );
    create_keys(&sessions, &keys, &data, &root).await?;

    eprintln!("arbor-bench: {name}: running");
    let plan = Arc::new(Plan {
        op: workload.op(),
        root: root.clone(),
        keys,
        data,
    });
    let limit = Limit { count, duration };
    let log_before = read_log(args.admin.as_deref()).await?;
    let cpu_before = CpuMark::now(&args.server_pid)?;
    let mut run = pipelined(&sessions, args.concurrency, limit, plan.clone()).await?;
    let cpu_after = CpuMark::now(&args.server_pid)?;
    let log_after = read_log(args.admin.as_deref()).await?;

    if !env.keep {
        eprintln!("arbor-bench: {name}: cleaning up");
        let leftovers = match workload {
            Kind::Create => (0..run.ops).map(|i| format!("{root}/n{i}")).collect(),
            Kind::Delete => Vec::new(),
            _ => plan.keys.clone(),
        };
        remove_all(&sessions, leftovers, &root).await?;
    }
    close_all(sessions).await?;

    let latency = Summary::of(&mut run.latencies);
    let mut report = Report::new(name, env.kind.name(), &env.server);
    report
        .field("size", args.size)
        .field("concurrency", args.concurrency)
        .field("conns", args.conns)
        .field("count", args.count)
        .field("secs_limit", args.secs)
        .throughput(run.ops, run.elapsed, &latency);
    if matches!(workload, Kind::Get | Kind::Set | Kind::Mixed) {
        report.field("keys", args.keys);
    }
    let (server_cpu, bench_cpu) = cpu_before.per_op_since(&cpu_after, run.ops);
    if !args.server_pid.is_empty() {
        report.field("server_cpu_us_per_op", server_cpu);
    }
    report.field("bench_cpu_us_per_op", bench_cpu);
    report.field("steal_percent", cpu_before.steal_percent_since(&cpu_after));
    if let (Some(before), Some(after)) = (log_before, log_after) {
        let log = before.since(&after, run.elapsed);
        report
            .field("log_syncs", log.syncs)
            .field("writes_per_log_sync", round3(log.writes_per_sync))
            .field("log_sync_mean_us", round3(log.sync_mean_us))
            .field("log_syncing_percent", round3(log.syncing_percent))
            .field("server_write_mean_us", round3(log.server_write_mean_us));
        if workload.writes_only() {
            // What the client waited beyond the server's own time: the
            // answer's way out, the client's next request and its way in.
            report.field(
                "way_back_mean_us",
                round3(f64::from(latency.mean) - log.server_write_mean_us),
            );
        }
    }
    if workload == Kind::Mixed {
        report.field("set_percent", super::MIXED_SET_PERCENT);
    }
    Ok(report)
}

/// The log's counters, when an admin port was given.
async fn read_log(admin: Option<&str>) -> Result<Option<LogMark>> {
    match admin {
        Some(admin) => Ok(Some(LogMark::read(admin).await?)),
        None => Ok(None),
    }
}
