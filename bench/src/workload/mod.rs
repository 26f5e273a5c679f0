//! The workloads, and the pipelined request loop they share.
//!
//! Load comes from `concurrency` tasks, each looping "take the next op index,
//! issue the op, await the reply", spread round-robin over `conns` sessions.
//! Each task records its latencies (issue to reply, in microseconds) into its
//! own vector; they are merged once at the end. Ops are described by a small
//! [`Op`] enum matched in the loop, so the hot path is one `match`, one path
//! lookup (or a `format!` for creates) and the request itself.
//!
//! Every workload runs under a fresh root (`/bench-<workload>-<pid>-<nanos>`)
//! and removes what it created unless `--keep` is given (`recovery` alone
//! uses a fixed root, which it keeps on purpose).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Result};

use crate::stats::micros;
use crate::target::{ConnectOptions, Kind, NodeMode, Session, ZkClient, CONNECTS_IN_PARALLEL};

pub mod children;
pub mod expiry;
pub mod failover;
pub mod fsync;
pub mod handoff;
pub mod idle_memory;
pub mod load;
pub mod lock;
pub mod memory;
pub mod queue;
pub mod recovery;
pub mod semaphore;
pub mod watch_memory;

/// What every subcommand gets from the global flags.
#[derive(Clone, Debug)]
pub struct Env {
    pub kind: Kind,
    pub server: String,
    /// Leave created nodes in place.
    pub keep: bool,
    /// The ZooKeeper client of the load workloads.
    pub zk_client: ZkClient,
}

impl Env {
    pub async fn connect(&self, options: &ConnectOptions) -> Result<Session> {
        Session::connect(self.kind, &self.server, options).await
    }

    pub async fn connect_many(
        &self,
        options: &ConnectOptions,
        count: usize,
    ) -> Result<Vec<Session>> {
        Session::connect_many(self.kind, &self.server, options, count).await
    }
}

/// A root path no other run uses.
pub fn fresh_root(workload: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    format!("/bench-{workload}-{}-{nanos}", std::process::id())
}

/// Concurrent setup and cleanup requests (untimed phases).
pub const SETUP_CONCURRENCY: usize = 64;

/// The share of `mixed` ops that are writes, in percent.
pub const MIXED_SET_PERCENT: u64 = 10;

/// One kind of request of the pipelined loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Create `<root>/n<index>`.
    CreateNumbered,
    /// Create `keys[index]` (setup).
    CreateKey,
    /// Read a random key.
    Get,
    /// Write a random key.
    Set,
    /// Delete `keys[index]`.
    DeleteKey,
    /// Delete `keys[index]` if it exists (cleanup).
    RemoveKey,
    /// [`MIXED_SET_PERCENT`] % `Set`, the rest `Get`.
    Mixed,
}

/// What the loop runs: the op and the data it works on.
pub struct Plan {
    pub op: Op,
    pub root: String,
    pub keys: Vec<String>,
    pub data: Vec<u8>,
}

/// When the loop stops: after `count` ops, or at `deadline` if sooner.
#[derive(Clone, Copy, Debug)]
pub struct Limit {
    pub count: u64,
    pub duration: Option<Duration>,
}

/// What a loop measured.
pub struct Run {
    pub ops: u64,
    pub elapsed: Duration,
    pub latencies: Vec<u32>,
}

/// Runs `plan` with `concurrency` tasks over `sessions` until `limit`.
pub async fn pipelined(
    sessions: &[Session],
    concurrency: usize,
    limit: Limit,
    plan: Arc<Plan>,
) -> Result<Run> {
    if sessions.is_empty() || concurrency == 0 {
        return Err(anyhow!("need at least one session and one task"));
    }
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let deadline = limit.duration.map(|duration| started + duration);
    let per_task = usize::try_from(limit.count / concurrency as u64 + 1).unwrap_or(0);
    let mut tasks = Vec::with_capacity(concurrency);
    for task in 0..concurrency {
        let session = sessions[task % sessions.len()].clone();
        let (plan, next, failed) = (plan.clone(), next.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_task.min(LATENCY_PREALLOC_MAX));
            let mut rng = Rng::new(task as u64);
            loop {
                if failed.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= limit.count {
                    break;
                }
                let issued = Instant::now();
                if let Err(err) = execute(&session, &plan, index, &mut rng).await {
                    failed.store(true, Ordering::Relaxed);
                    return Err(err);
                }
                latencies.push(micros(issued.elapsed()));
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    let mut all = Vec::new();
    let mut first_error = None;
    for task in tasks {
        match task.await? {
            Ok(latencies) => all.extend_from_slice(&latencies),
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    let elapsed = started.elapsed();
    if let Some(err) = first_error {
        return Err(err.context(format!("{:?} op failed", plan.op)));
    }
    Ok(Run {
        ops: all.len() as u64,
        elapsed,
        latencies: all,
    })
}

/// Latency slots reserved up front per task (more grow on demand): 256 KiB.
const LATENCY_PREALLOC_MAX: usize = 1 << 16;

async fn execute(session: &Session, plan: &Plan, index: u64, rng: &mut Rng) -> Result<()> {
    match plan.op {
        Op::CreateNumbered => {
            let path = format!("{}/n{index}", plan.root);
            session
                .create(&path, &plan.data, NodeMode::Persistent)
                .await?;
        }
        Op::CreateKey => {
            session
                .create(key(plan, index)?, &plan.data, NodeMode::Persistent)
                .await?;
        }
        Op::Get => {
            session.get(random_key(plan, rng)?).await?;
        }
        Op::Set => session.set(random_key(plan, rng)?, &plan.data).await?,
        Op::DeleteKey => session.delete(key(plan, index)?).await?,
        Op::RemoveKey => session.delete_if_exists(key(plan, index)?).await?,
        Op::Mixed => {
            if rng.next() % 100 < MIXED_SET_PERCENT {
                session.set(random_key(plan, rng)?, &plan.data).await?;
            } else {
                session.get(random_key(plan, rng)?).await?;
            }
        }
    }
    Ok(())
}

fn key(plan: &Plan, index: u64) -> Result<&str> {
    usize::try_from(index)
        .ok()
        .and_then(|index| plan.keys.get(index))
        .map(String::as_str)
        .ok_or_else(|| anyhow!("op index {index} past the {} keys", plan.keys.len()))
}

fn random_key<'a>(plan: &'a Plan, rng: &mut Rng) -> Result<&'a str> {
    if plan.keys.is_empty() {
        return Err(anyhow!("no keys to pick from"));
    }
    let index = rng.next() % plan.keys.len() as u64;
    key(plan, index)
}

/// Creates `keys` under `root` (untimed), pipelined through every session,
/// then syncs each session on `root`: on an ensemble a session's member may
/// not yet have applied the creates that went through the others, and a
/// read of one of those keys would find no node.
pub async fn create_keys(
    sessions: &[Session],
    keys: &[String],
    data: &[u8],
    root: &str,
) -> Result<()> {
    let plan = Arc::new(Plan {
        op: Op::CreateKey,
        root: String::new(),
        keys: keys.to_vec(),
        data: data.to_vec(),
    });
    let limit = Limit {
        count: keys.len() as u64,
        duration: None,
    };
    pipelined(sessions, SETUP_CONCURRENCY, limit, plan).await?;
    for session in sessions {
        session.sync(root).await?;
    }
    Ok(())
}

/// Deletes `keys` that exist (untimed), pipelined, then `root`.
pub async fn remove_all(sessions: &[Session], keys: Vec<String>, root: &str) -> Result<()> {
    let count = keys.len() as u64;
    let plan = Arc::new(Plan {
        op: Op::RemoveKey,
        root: String::new(),
        keys,
        data: Vec::new(),
    });
    pipelined(
        sessions,
        SETUP_CONCURRENCY,
        Limit {
            count,
            duration: None,
        },
        plan,
    )
    .await?;
    match sessions.first() {
        Some(session) => session.delete_if_exists(root).await,
        None => Ok(()),
    }
}

/// Attempts [`remove_tree`] makes while nodes of sessions just closed may
/// still be going (a ZooKeeper session's close is sent in the background).
const REMOVE_TREE_ATTEMPTS: usize = 20;

/// The pause between those attempts.
const REMOVE_TREE_PAUSE: Duration = Duration::from_millis(100);

/// Deletes `root` and every node below it (untimed cleanup), deepest first.
pub async fn remove_tree(session: &Session, root: &str) -> Result<()> {
    let mut failure = None;
    for _ in 0..REMOVE_TREE_ATTEMPTS {
        match remove_tree_once(session, root).await {
            Ok(()) => return Ok(()),
            Err(err) => failure = Some(err),
        }
        tokio::time::sleep(REMOVE_TREE_PAUSE).await;
    }
    Err(failure
        .unwrap_or_else(|| anyhow!("no attempt made"))
        .context(format!("removing {root}")))
}

async fn remove_tree_once(session: &Session, root: &str) -> Result<()> {
    if !session.exists(root).await? {
        return Ok(());
    }
    // Breadth first, so every node comes after its parent.
    let mut nodes = vec![root.to_owned()];
    let mut index = 0;
    while let Some(node) = nodes.get(index).cloned() {
        index += 1;
        for child in session.children(&node).await? {
            nodes.push(format!("{node}/{child}"));
        }
    }
    for node in nodes.iter().rev() {
        session.delete_if_exists(node).await?;
    }
    Ok(())
}

/// Closes every session, reporting the first failure.
pub async fn close_all(sessions: Vec<Session>) -> Result<()> {
    let mut result = Ok(());
    for session in sessions {
        if let Err(err) = session.close().await {
            if result.is_ok() {
                result = Err(err);
            }
        }
    }
    result
}

/// Closes every session, [`CONNECTS_IN_PARALLEL`] at a time (thousands of
/// Arbor closes one after the other would each wait for their own fsync),
/// reporting the first failure.
pub async fn close_many(sessions: Vec<Session>) -> Result<()> {
    let mut closing = tokio::task::JoinSet::new();
    let mut result = Ok(());
    for session in sessions {
        if closing.len() >= CONNECTS_IN_PARALLEL {
            note_first_error(&mut result, closing.join_next().await);
        }
        closing.spawn(session.close());
    }
    while let Some(closed) = closing.join_next().await {
        note_first_error(&mut result, Some(closed));
    }
    result
}

fn note_first_error(
    result: &mut Result<()>,
    joined: Option<std::result::Result<Result<()>, tokio::task::JoinError>>,
) {
    let error = match joined {
        Some(Ok(Err(err))) => err,
        Some(Err(err)) => err.into(),
        Some(Ok(Ok(()))) | None => return,
    };
    if result.is_ok() {
        *result = Err(error);
    }
}

/// xorshift64*: fast, allocation-free key choice; quality is irrelevant.
pub struct Rng(u64);

impl Rng {
    pub fn new(stream: u64) -> Rng {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos());
        Rng((u64::from(nanos) ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}
