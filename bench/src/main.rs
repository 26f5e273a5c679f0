//! `arbor-bench`: measures Arbor and Apache ZooKeeper with the same workloads.
//!
//! Every run prints exactly one JSON line on stdout (the result, for a script
//! to collect) and its progress on stderr. On failure it prints one
//! `arbor-bench: error: …` line on stderr and exits with status 1.
//!
//! Layout: `target/` puts both systems behind one `Session` type (plus the
//! ZooKeeper lock, semaphore and queue recipes), `workload/` holds one
//! module per subcommand, `stats.rs` the percentiles and the JSON line,
//! `proxy.rs` the blackholing proxy of `expiry`, `cpu.rs` and
//! `log_metrics.rs` what a run cost the server: CPU time, and (Arbor) the
//! write-ahead log's syncs.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};

mod cpu;
mod fd_limit;
mod log_metrics;
mod proxy;
mod stats;
mod target;
mod workload;

use target::Kind;
use workload::{
    children, expiry, failover, fsync, handoff, idle_memory, load, lock, memory, queue, recovery,
    semaphore, watch_memory, Env,
};

/// Time given to zookeeper-client's background tasks to send CloseSession
/// for the sessions dropped at the end of a run, before the process exits.
const ZOOKEEPER_CLOSE_LINGER: Duration = Duration::from_millis(300);

#[derive(Parser, Debug)]
#[command(
    name = "arbor-bench",
    version,
    about = "Load generator measuring Arbor against Apache ZooKeeper; prints one JSON line per run"
)]
struct Cli {
    /// The system to measure.
    #[arg(long, global = true, value_enum, default_value = "arbor")]
    target: Kind,
    /// Server address [default: 127.0.0.1:7181 for arbor, 127.0.0.1:2181 for zookeeper].
    #[arg(long, global = true)]
    server: Option<String>,
    /// ZooKeeper only: the client the load workloads (create, get, set,
    /// delete, mixed) drive: `lean` (this tool's pipelined jute client,
    /// about as cheap per request as arbor-client, so the server gets the
    /// same CPU either way) or `crate` (zookeeper-client, a second load
    /// generator). Workloads that set watches always use zookeeper-client.
    #[arg(long, global = true, value_enum, default_value = "lean")]
    zk_client: target::ZkClient,
    /// Leave the workload's nodes in place instead of deleting them.
    #[arg(long, global = true)]
    keep: bool,
    /// Arbor only: every session proves digest credentials and every node
    /// the workload creates gets a three-entry ACL whose matching entry is
    /// last, so each request pays for ACL checks (against the open ACL of
    /// every other run).
    #[arg(long, global = true)]
    acl_heavy: bool,
    /// Arbor only: connect over TLS, trusting the CA certificates of this
    /// PEM file (--server then names the TLS port).
    #[arg(long, global = true, value_name = "PEM")]
    tls_ca: Option<std::path::PathBuf>,
    #[command(subcommand)]
    workload: Workload,
}

#[derive(Subcommand, Debug)]
enum Workload {
    /// Create new nodes.
    Create(load::LoadArgs),
    /// Read nodes of a key space.
    Get(load::LoadArgs),
    /// Overwrite nodes of a key space.
    Set(load::LoadArgs),
    /// Delete nodes created beforehand.
    Delete(load::LoadArgs),
    /// 90 % get, 10 % set on a key space.
    Mixed(load::LoadArgs),
    /// Uncontended fair-lock acquire + release cycles.
    Lock(lock::LockArgs),
    /// Lock handoff latency and notifications per release with queued waiters.
    Handoff(handoff::HandoffArgs),
    /// Semaphore acquire + release cycles: N permits, C concurrent clients.
    Semaphore(semaphore::SemaphoreArgs),
    /// Distributed queue: P producers put, C consumers take and complete.
    Queue(queue::QueueArgs),
    /// Server RSS growth per znode (needs --server-pid).
    Memory(memory::MemoryArgs),
    /// Server RSS growth per idle connected session (needs --server-pid).
    IdleMemory(idle_memory::IdleMemoryArgs),
    /// Server RSS growth per watch, against the watched path's bytes (needs --server-pid).
    WatchMemory(watch_memory::WatchMemoryArgs),
    /// Session expiry precision of a partitioned client.
    Expiry(expiry::ExpiryArgs),
    /// Restart time of a server holding N znodes.
    Recovery(recovery::RecoveryArgs),
    /// Get-children latency of a node with N children.
    Children(children::ChildrenArgs),
    /// Kill -9 of an ensemble's leader to the next acknowledged write.
    Failover(failover::FailoverArgs),
    /// Latency of a small write + fdatasync in a directory (no server).
    FsyncProbe(fsync::FsyncArgs),
}

impl Workload {
    /// The workloads `--zk-client` applies to.
    fn is_load(&self) -> bool {
        matches!(
            self,
            Workload::Create(_)
                | Workload::Get(_)
                | Workload::Set(_)
                | Workload::Delete(_)
                | Workload::Mixed(_)
        )
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            // One line: the chain of contexts, joined.
            eprintln!("arbor-bench: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<String> {
    if let Workload::FsyncProbe(args) = &cli.workload {
        return Ok(fsync::run(args)?.line());
    }
    if cli.acl_heavy {
        if cli.target != Kind::Arbor {
            return Err(anyhow::anyhow!("--acl-heavy measures Arbor only"));
        }
        target::arbor::use_heavy_acls()?;
    }
    if let Some(ca) = &cli.tls_ca {
        if cli.target != Kind::Arbor {
            return Err(anyhow::anyhow!("--tls-ca measures Arbor only"));
        }
        target::arbor::use_tls(ca)?;
    }
    let env = Env {
        kind: cli.target,
        server: cli
            .server
            .unwrap_or_else(|| cli.target.default_server().to_owned()),
        keep: cli.keep,
        zk_client: cli.zk_client,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(async {
        let report = match &cli.workload {
            Workload::Create(args) => load::run(&env, load::Kind::Create, args).await?,
            Workload::Get(args) => load::run(&env, load::Kind::Get, args).await?,
            Workload::Set(args) => load::run(&env, load::Kind::Set, args).await?,
            Workload::Delete(args) => load::run(&env, load::Kind::Delete, args).await?,
            Workload::Mixed(args) => load::run(&env, load::Kind::Mixed, args).await?,
            Workload::Lock(args) => lock::run(&env, args).await?,
            Workload::Handoff(args) => handoff::run(&env, args).await?,
            Workload::Semaphore(args) => semaphore::run(&env, args).await?,
            Workload::Queue(args) => queue::run(&env, args).await?,
            Workload::Memory(args) => memory::run(&env, args).await?,
            Workload::IdleMemory(args) => idle_memory::run(&env, args).await?,
            Workload::WatchMemory(args) => watch_memory::run(&env, args).await?,
            Workload::Expiry(args) => expiry::run(&env, args).await?,
            Workload::Recovery(args) => recovery::run(&env, args).await?,
            Workload::Children(args) => children::run(&env, args).await?,
            Workload::Failover(args) => failover::run(&env, args).await?,
            Workload::FsyncProbe(args) => fsync::run(args)?,
        };
        if env.kind == Kind::Zookeeper {
            // (Lean sessions close explicitly; this is for zookeeper-client's.)
            tokio::time::sleep(ZOOKEEPER_CLOSE_LINGER).await;
        }
        let mut report = report;
        if cli.acl_heavy {
            report.field("acl_heavy", true);
        }
        if cli.tls_ca.is_some() {
            report.field("tls", true);
        }
        if env.kind == Kind::Zookeeper && cli.workload.is_load() {
            report.field("zk_client", env.zk_client.name());
        }
        Ok::<_, anyhow::Error>(report.line())
    });
    // Do not wait for background tasks (e.g. a blackholed client retrying).
    runtime.shutdown_timeout(Duration::from_millis(100));
    result
}
