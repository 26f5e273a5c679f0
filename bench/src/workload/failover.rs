//! `failover`: how long an ensemble takes to acknowledge writes again after
//! `kill -9` of its leader.
//!
//! `--writers` sessions, each connected with the whole server list (so each
//! client picks its member as it would in production), overwrite their own
//! node in a loop, one write in flight each, and note when each write is
//! acknowledged. Each of `--kills` rounds finds the leader (every member is
//! asked: Arbor's cluster status, ZooKeeper's `srvr`), runs `--kill-cmd`
//! for it, and measures from the moment that command returns (the process
//! is gone) to the first write acknowledged after it (`first_write`: the
//! ensemble serves writes again) and to the moment every writer has had one
//! (`all_writers`: clients on the dead member have moved too). Then
//! `--start-cmd` brings the member back, and the next round waits until
//! every member answers and one leads, plus `--settle-ms`.
//!
//! Both commands run with `sh -c`, `{member}` replaced by the leader's
//! 1-based position in `--server`; the kill command must return once the
//! process is gone, the start command at once (it inherits nothing useful:
//! its stdout goes to stderr, as this tool's stdout carries the JSON line).

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use tokio::sync::Notify;

use super::{fresh_root, Env};
use crate::stats::{micros, Report, Summary};
use crate::target::{self, ConnectOptions, Session};

/// How long one write may take before the writer gives up on it and tries
/// again (its outcome does not matter: the node is the writer's own).
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause after a failed write, so a disconnected writer does not spin.
const RETRY_PAUSE: Duration = Duration::from_millis(5);
/// Pause between two polls of the members while waiting for a leader.
const PROBE_PAUSE: Duration = Duration::from_millis(50);
/// Every writer must have had a write acknowledged this recently before a
/// kill, so each round starts from a serving ensemble.
const STEADY: Duration = Duration::from_millis(200);

#[derive(clap::Args, Clone, Debug)]
pub struct FailoverArgs {
    /// Times the leader is killed.
    #[arg(long, default_value_t = 10)]
    pub kills: usize,
    /// Shell command that kills member `{member}` with SIGKILL and returns
    /// once it is gone.
    #[arg(long)]
    pub kill_cmd: String,
    /// Shell command that starts member `{member}` again and returns at once.
    #[arg(long)]
    pub start_cmd: String,
    /// Sessions writing in a loop, one write in flight each.
    #[arg(long, default_value_t = 3)]
    pub writers: usize,
    /// Pause after the ensemble is whole again, before the next kill.
    #[arg(long, default_value_t = 2000)]
    pub settle_ms: u64,
    /// Give up if a round does not recover within this many seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,
}

/// When each writer's latest write was acknowledged.
struct Acks {
    latest: Mutex<Vec<Option<Instant>>>,
    changed: Notify,
}

impl Acks {
    fn latest(&self) -> MutexGuard<'_, Vec<Option<Instant>>> {
        // Only instants are stored: a panicked holder left nothing half-done.
        self.latest.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record(&self, writer: usize) {
        self.latest()[writer] = Some(Instant::now());
        self.changed.notify_waiters();
    }

    /// The first acknowledgement after `since`, and the time every writer
    /// had one after it (if all have).
    fn after(&self, since: Instant) -> (Option<Instant>, Option<Instant>) {
        let latest = self.latest();
        let after: Vec<Option<Instant>> = latest
            .iter()
            .map(|ack| ack.filter(|at| *at > since))
            .collect();
        let first = after.iter().flatten().min().copied();
        let all = if after.iter().all(Option::is_some) {
            after.iter().flatten().max().copied()
        } else {
            None
        };
        (first, all)
    }
}

pub async fn run(env: &Env, args: &FailoverArgs) -> Result<Report> {
    let servers = target::servers(&env.server);
    if servers.len() < 3 {
        return Err(anyhow!(
            "failover needs an ensemble: --server lists {} server(s)",
            servers.len()
        ));
    }
    if args.writers == 0 || args.kills == 0 {
        return Err(anyhow!("--writers and --kills must be at least 1"));
    }
    let limit = Duration::from_secs(args.timeout_secs);
    wait_for_leader(env, &servers, limit).await?;

    let root = fresh_root("failover");
    let setup = env.connect(&ConnectOptions::default()).await?;
    setup.ensure(&root, &[]).await?;
    let mut writers = Vec::with_capacity(args.writers);
    for w in 0..args.writers {
        let path = format!("{root}/w{w}");
        setup.ensure(&path, &[]).await?;
        writers.push((env.connect(&ConnectOptions::default()).await?, path));
    }
    let acks = Arc::new(Acks {
        latest: Mutex::new(vec![None; args.writers]),
        changed: Notify::new(),
    });
    let tasks: Vec<_> = writers
        .into_iter()
        .enumerate()
        .map(|(w, (session, path))| {
            tokio::spawn(write_loop(env.clone(), session, path, w, acks.clone()))
        })
        .collect();

    let mut first_write = Vec::with_capacity(args.kills);
    let mut all_writers = Vec::with_capacity(args.kills);
    let result = async {
        for kill in 0..args.kills {
            wait_steady(&acks, limit).await?;
            let leader = wait_for_leader(env, &servers, limit).await?;
            eprintln!(
                "arbor-bench: failover: kill {} of {}: member {} ({})",
                kill + 1,
                args.kills,
                leader + 1,
                servers[leader]
            );
            shell(&args.kill_cmd, leader).context("--kill-cmd")?;
            let killed = Instant::now();
            let (first, all) = wait_recovered(&acks, killed, limit).await?;
            first_write.push(micros(first - killed));
            all_writers.push(micros(all - killed));
            shell(&args.start_cmd, leader).context("--start-cmd")?;
            wait_whole(env, &servers, limit).await?;
            tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
        }
        Ok::<_, anyhow::Error>(())
    }
    .await;
    for task in &tasks {
        task.abort();
    }
    result?;
    if !env.keep {
        // Best effort: the run's figures do not depend on the clean-up.
        for w in 0..args.writers {
            let _ = setup.delete_if_exists(&format!("{root}/w{w}")).await;
        }
        let _ = setup.delete_if_exists(&root).await;
    }
    let _ = setup.close().await;

    let ms = |us: u32| f64::from(us) / 1000.0;
    let first = Summary::of(&mut first_write);
    let all = Summary::of(&mut all_writers);
    let mut report = Report::new("failover", env.kind.name(), &env.server);
    report
        .field("kills", args.kills)
        .field("writers", args.writers)
        .field("first_write_p50_ms", ms(first.p50))
        .field("first_write_p99_ms", ms(first.p99))
        .field("first_write_max_ms", ms(first.max))
        .field("all_writers_p50_ms", ms(all.p50))
        .field("all_writers_p99_ms", ms(all.p99))
        .field("all_writers_max_ms", ms(all.max))
        .field(
            "first_write_ms",
            first_write.iter().map(|us| ms(*us)).collect::<Vec<f64>>(),
        );
    Ok(report)
}

/// Overwrites `path` forever, noting each acknowledgement. A writer that
/// has had no write acknowledged for longer than its session's timeout
/// opens a new session, as an application would once its session expired:
/// an outage longer than the timeout (a second member lost while the one
/// killed before is still catching up) ends every session, and a client
/// never writes through an expired one again.
async fn write_loop(env: Env, mut session: Session, path: String, writer: usize, acks: Arc<Acks>) {
    let data = b"failover".to_vec();
    // The last acknowledgement, or the last new session.
    let mut last_ack = Instant::now();
    loop {
        match tokio::time::timeout(WRITE_TIMEOUT, session.set(&path, &data)).await {
            Ok(Ok(())) => {
                last_ack = Instant::now();
                acks.record(writer);
            }
            Ok(Err(_)) | Err(_) => {
                if last_ack.elapsed() > session.negotiated_timeout() {
                    if let Ok(Ok(fresh)) =
                        tokio::time::timeout(WRITE_TIMEOUT, env.connect(&ConnectOptions::default()))
                            .await
                    {
                        session = fresh;
                        last_ack = Instant::now();
                    }
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

/// Waits until every writer has been acknowledged within [`STEADY`].
async fn wait_steady(acks: &Acks, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let since = Instant::now() - STEADY;
        if acks.after(since).1.is_some() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(anyhow!("writers not all acknowledged within {limit:?}"));
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// Waits for the first acknowledgement after `killed` and for every writer.
async fn wait_recovered(
    acks: &Acks,
    killed: Instant,
    limit: Duration,
) -> Result<(Instant, Instant)> {
    let deadline = tokio::time::Instant::from_std(killed + limit);
    loop {
        let changed = acks.changed.notified();
        tokio::pin!(changed);
        // Registered before looking, so no acknowledgement is missed.
        changed.as_mut().enable();
        match acks.after(killed) {
            (Some(first), Some(all)) => return Ok((first, all)),
            (first, _) => {
                if tokio::time::timeout_at(deadline, changed).await.is_err() {
                    return Err(anyhow!(
                        "no recovery within {limit:?} of the kill (a write acknowledged: {})",
                        first.is_some()
                    ));
                }
            }
        }
    }
}

/// One poll of every member: which answered, which lead, the last error.
struct Poll {
    answering: usize,
    leaders: Vec<usize>,
    last_error: Option<String>,
}

async fn poll(env: &Env, servers: &[String]) -> Poll {
    let mut poll = Poll {
        answering: 0,
        leaders: Vec::new(),
        last_error: None,
    };
    for (at, addr) in servers.iter().enumerate() {
        match Session::is_leader(env.kind, addr).await {
            Ok(leads) => {
                poll.answering += 1;
                if leads {
                    poll.leaders.push(at);
                }
            }
            Err(err) => poll.last_error = Some(format!("{err:#}")),
        }
    }
    poll
}

/// Polls the members until `done` holds; returns the last poll.
async fn poll_until(
    env: &Env,
    servers: &[String],
    limit: Duration,
    what: &str,
    done: impl Fn(&Poll) -> bool,
) -> Result<Poll> {
    let deadline = Instant::now() + limit;
    loop {
        let now = poll(env, servers).await;
        if done(&now) {
            return Ok(now);
        }
        if Instant::now() > deadline {
            return Err(anyhow!(
                "{what} within {limit:?}: {} of {} members answer, {} lead (last error: {})",
                now.answering,
                servers.len(),
                now.leaders.len(),
                now.last_error.as_deref().unwrap_or("none")
            ));
        }
        tokio::time::sleep(PROBE_PAUSE).await;
    }
}

/// Waits until exactly one member says it leads; returns its position.
async fn wait_for_leader(env: &Env, servers: &[String], limit: Duration) -> Result<usize> {
    let found = poll_until(env, servers, limit, "no single leader", |p| {
        p.leaders.len() == 1
    })
    .await?;
    Ok(found.leaders[0])
}

/// Waits until every member answers and one leads.
async fn wait_whole(env: &Env, servers: &[String], limit: Duration) -> Result<()> {
    poll_until(env, servers, limit, "ensemble not whole", |p| {
        p.answering == servers.len() && p.leaders.len() == 1
    })
    .await
    .map(drop)
}

/// Runs `command` with `{member}` set to `member + 1`.
fn shell(command: &str, member: usize) -> Result<()> {
    let command = command.replace("{member}", &(member + 1).to_string());
    let status = Command::new("sh")
        .arg("-c")
        .arg(&command)
        .stdin(Stdio::null())
        .stdout(std::io::stderr())
        .status()
        .with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        return Err(anyhow!("{command:?} failed: {status}"));
    }
    Ok(())
}
