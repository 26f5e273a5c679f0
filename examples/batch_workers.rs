//! A batch of jobs shared by a pool of workers, each job done exactly once:
//! a per-job fair lock decides who works on it, and the store the results go
//! to checks the lock's fencing token on every write.
//!
//! ```text
//! cargo run --release -p arbor-server        # in another terminal
//! cargo run -p arbor-examples --example batch_workers -- \
//!     [--server 127.0.0.1:7181] [--workers 8] [--jobs 200] [--work-ms 1]
//! ```
//!
//! The jobs are persistent nodes under `/batch/jobs`. Each worker is its own
//! [`Client`] (its own session) and loops: list the jobs, take the lowest one
//! whose lock `/batch/locks/<job>` is free ([`Mutex::try_lock`]), skip it if
//! it is already done, work on it (a short sleep), write the result into the
//! fenced store with the grant's fencing token, mark the job done by deleting
//! its node, and release the lock. The lock directories are containers: the
//! server removes them once empty.
//!
//! The store stands in for a database. Each row has its own [`Fence`] (as a
//! table would keep the newest token per row) and an "in progress" flag, so
//! the run can count what must never happen: two workers on one job at once
//! (`double_grants`), and writes refused because a newer grant had already
//! written (`stale_writes_rejected`; see the `fencing` example for a run
//! that provokes one). The last line is the summary:
//!
//! ```text
//! jobs=200 double_grants=0 stale_writes_rejected=0
//! ```
//!
//! `/batch` is deleted at the start, so the example can be run again.
//! Against an ensemble (`--server a,b,c`), workers ride out a failover: a
//! request whose outcome was lost is asked again once the session has
//! resumed on another member, and the session keeps its locks meanwhile.

use std::collections::HashMap;
use std::sync::Mutex as StdMutex;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use arbor_client::recipes::{Fence, FencingToken, LockError, Mutex};
use arbor_client::{multi, Client, ClientOptions, CreateMode, Error};

const ROOT: &str = "/batch";
const JOBS: &str = "/batch/jobs";
const LOCKS: &str = "/batch/locks";

struct Args {
    server: String,
    workers: usize,
    jobs: usize,
    work: Duration,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        server: std::env::var("ARBOR_SERVER").unwrap_or_else(|_| "127.0.0.1:7181".into()),
        workers: 8,
        jobs: 200,
        work: Duration::from_millis(1),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        let number = || -> Result<u64> {
            value
                .parse()
                .with_context(|| format!("{flag} takes a number, not {value:?}"))
        };
        match flag.as_str() {
            "--server" => args.server = value.clone(),
            "--workers" => args.workers = number()?.try_into()?,
            "--jobs" => args.jobs = number()?.try_into()?,
            "--work-ms" => args.work = Duration::from_millis(number()?),
            other => bail!(
                "unknown flag {other} (flags: --server ADDR, --workers N, --jobs N, --work-ms MS)"
            ),
        }
    }
    if args.workers == 0 {
        bail!("--workers must be at least 1");
    }
    Ok(args)
}

async fn connect(server: &str) -> Result<Client> {
    Client::connect(server, ClientOptions::default())
        .await
        .with_context(|| {
            format!(
                "no arbord at {server}: start one with `cargo run --release -p arbor-server`, \
                 or name it with --server / ARBOR_SERVER"
            )
        })
}

/// One row of the store.
#[derive(Default)]
struct Row {
    /// The newest fencing token that wrote this row.
    fence: Fence,
    /// A worker is between `begin` and `end` on this job.
    in_progress: bool,
    result: Option<String>,
    writes: u32,
}

/// The protected resource: a map written only with a fencing token.
#[derive(Default)]
struct FencedStore {
    rows: StdMutex<HashMap<String, Row>>,
}

impl FencedStore {
    fn rows(&self) -> std::sync::MutexGuard<'_, HashMap<String, Row>> {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks `job` as being worked on; false if someone already is (a double
    /// grant: the lock let two holders in).
    fn begin(&self, job: &str) -> bool {
        let mut rows = self.rows();
        let row = rows.entry(job.to_owned()).or_default();
        !std::mem::replace(&mut row.in_progress, true)
    }

    fn end(&self, job: &str) {
        if let Some(row) = self.rows().get_mut(job) {
            row.in_progress = false;
        }
    }

    /// Writes `job`'s result if `token` is not older than the row's newest.
    fn write(&self, job: &str, token: FencingToken, result: String) -> bool {
        let mut rows = self.rows();
        let row = rows.entry(job.to_owned()).or_default();
        row.fence
            .write(token, || {
                row.result = Some(result);
                row.writes += 1;
            })
            .is_ok()
    }
}

/// Pause before trying again while the client reconnects.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Tries of one request through reconnects (an ensemble's failover takes a
/// second or two; the session lives on meanwhile).
const RETRIES_MAX: usize = 50;

/// The request's outcome is unknown, or the ensemble is between leaders:
/// the client resumes its session by itself, so the request can be asked
/// again (reads, and writes whose repetition is harmless).
fn transient(err: &Error) -> bool {
    matches!(
        err,
        Error::ConnectionLoss | Error::Timeout | Error::NotLeader | Error::Unavailable
    )
}

/// Runs `request` until it gives an answer that is not transient.
async fn again<T, F, Fut>(mut request: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    for _ in 1..RETRIES_MAX {
        match request().await {
            Err(err) if transient(&err) => tokio::time::sleep(RETRY_PAUSE).await,
            other => return other,
        }
    }
    request().await
}

/// What one worker did.
#[derive(Default)]
struct Tally {
    completed: usize,
    skipped_done: usize,
    double_grants: usize,
    stale_writes_rejected: usize,
    lost_locks: usize,
}

async fn worker(
    id: usize,
    client: Client,
    store: Arc<FencedStore>,
    work: Duration,
) -> Result<Tally> {
    let mut tally = Tally::default();
    loop {
        let mut jobs = again(|| client.get_children(JOBS)).await?;
        if jobs.is_empty() {
            break;
        }
        jobs.sort();
        let mut took_one = false;
        // The lowest job nobody holds; a held lock means someone is on it.
        for job in jobs {
            let guard = match Mutex::new(&client, &format!("{LOCKS}/{job}"))
                .try_lock()
                .await
            {
                Ok(guard) => guard,
                Err(LockError::Locked) => continue,
                // Between servers (a failover): the attempt cleans up after
                // itself; look again once the session is back.
                Err(LockError::Client(err)) if transient(&err) => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                    break;
                }
                Err(err) => return Err(err.into()),
            };
            took_one = true;
            let job_path = format!("{JOBS}/{job}");
            // Finished by another worker since the listing: its holder
            // deleted the node before releasing, so this read sees it.
            if again(|| client.exists(&job_path)).await?.is_none() {
                tally.skipped_done += 1;
                guard.release().await?;
                continue;
            }
            let token = guard.fencing_token();
            if !store.begin(&job) {
                tally.double_grants += 1;
            }
            // The work. Should the session be suspended or expire meanwhile,
            // the lock may be someone else's: stop and write nothing.
            let finished = tokio::select! {
                state = guard.lost() => {
                    eprintln!("worker {id}: lock on {job} lost ({state:?}), abandoning it");
                    false
                }
                () = tokio::time::sleep(work) => true,
            };
            if finished {
                let result = format!("{job} done by worker {id} with token {token:#x}");
                if !store.write(&job, token, result) {
                    tally.stale_writes_rejected += 1;
                }
            } else {
                tally.lost_locks += 1;
            }
            store.end(&job);
            if finished {
                // Done: the job leaves the queue before the lock is released.
                // Still ours to delete after a reconnect (the session and its
                // lock survive it): gone already means an earlier try did it.
                match again(|| client.delete(&job_path, None)).await {
                    Ok(()) | Err(Error::NoNode { .. }) => {}
                    Err(err) => return Err(err.into()),
                }
                tally.completed += 1;
            }
            guard.release().await?;
            // Start again from the lowest remaining job.
            break;
        }
        if !took_one {
            // Every remaining job is being worked on: wait for them to go.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    client.close().await?;
    Ok(tally)
}

/// Deletes `root` and everything under it; what is already gone is fine.
async fn delete_tree(client: &Client, root: &str) -> Result<(), Error> {
    loop {
        // Parents before children...
        let mut order = Vec::new();
        let mut stack = vec![root.to_owned()];
        while let Some(path) = stack.pop() {
            match client.get_children(&path).await {
                Ok(children) => {
                    stack.extend(children.iter().map(|c| format!("{path}/{c}")));
                    order.push(path);
                }
                Err(Error::NoNode { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        // ...so deleting in reverse removes children first.
        let mut again = false;
        for path in order.iter().rev() {
            match client.delete(path, None).await {
                Ok(()) | Err(Error::NoNode { .. }) => {}
                // Something was created meanwhile: go round once more.
                Err(Error::NotEmpty { .. }) => again = true,
                Err(err) => return Err(err),
            }
        }
        if !again {
            return Ok(());
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let admin = connect(&args.server).await?;

    delete_tree(&admin, ROOT)
        .await
        .context("removing a previous run's /batch")?;
    admin
        .create(ROOT, Vec::new(), CreateMode::Persistent)
        .await?;
    admin
        .create(JOBS, Vec::new(), CreateMode::Persistent)
        .await?;
    let names: Vec<String> = (0..args.jobs).map(|i| format!("job-{i:06}")).collect();
    for chunk in names.chunks(100) {
        let ops = chunk
            .iter()
            .map(|name| {
                multi::create(
                    format!("{JOBS}/{name}"),
                    b"todo".to_vec(),
                    CreateMode::Persistent,
                )
            })
            .collect();
        admin.multi(ops).await?;
    }
    println!(
        "{} jobs under {JOBS}, {} workers, server {}",
        args.jobs, args.workers, args.server
    );

    let store = Arc::new(FencedStore::default());
    let started = Instant::now();
    let mut workers = Vec::new();
    for id in 0..args.workers {
        let client = connect(&args.server).await?;
        workers.push(tokio::spawn(worker(id, client, store.clone(), args.work)));
    }
    let mut total = Tally::default();
    for (id, handle) in workers.into_iter().enumerate() {
        let tally = handle
            .await?
            .with_context(|| format!("worker {id} failed"))?;
        println!(
            "worker {id}: {} jobs, {} found already done",
            tally.completed, tally.skipped_done
        );
        total.completed += tally.completed;
        total.skipped_done += tally.skipped_done;
        total.double_grants += tally.double_grants;
        total.stale_writes_rejected += tally.stale_writes_rejected;
        total.lost_locks += tally.lost_locks;
    }
    let elapsed = started.elapsed();

    let left = admin.get_children(JOBS).await?.len();
    let (results, rewritten) = {
        let rows = store.rows();
        let results = rows.values().filter(|r| r.result.is_some()).count();
        let rewritten = rows.values().filter(|r| r.writes > 1).count();
        (results, rewritten)
    };
    admin.close().await?;

    println!(
        "{} jobs in {:.2?} ({:.0} jobs/s); {left} left in the queue",
        total.completed,
        elapsed,
        total.completed as f64 / elapsed.as_secs_f64()
    );
    println!(
        "store: {results} results, {rewritten} written more than once; {} locks lost mid-job",
        total.lost_locks
    );
    println!(
        "jobs={} double_grants={} stale_writes_rejected={}",
        total.completed, total.double_grants, total.stale_writes_rejected
    );

    if total.double_grants > 0 || total.completed != args.jobs || results != args.jobs || left > 0 {
        bail!("not every job was done exactly once by one worker at a time");
    }
    Ok(())
}
