//! A batch of jobs shared by a pool of workers, each job done exactly once:
//! a per-job fair lock decides who works on it, and the store the results go
//! to checks the lock's fencing token on every write. With `--queue`, the
//! jobs come from a distributed queue instead, and each result is written
//! to Arbor in the same server-fenced transaction that completes its job.
//!
//! ```text
//! cargo run --release -p arbor-server        # in another terminal
//! cargo run -p arbor-examples --example batch_workers -- \
//!     [--server 127.0.0.1:7181] [--workers 8] [--jobs 200] [--work-ms 1] [--queue]
//! ```
//!
//! # Lock mode (the default)
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
//! # Queue mode (`--queue`)
//!
//! The jobs are put into the [`Queue`] at `/batch/queue` (its data is the
//! job's name). Each worker loops: take a job (the queue's claim keeps
//! everyone else off it), work on it, then [`Job::complete_with`] one
//! transaction that checks the claim still stands, creates the result
//! `/batch/results/<job>-<seq>` and removes the job from the queue. A
//! worker whose claim was lost (its session expired mid-job) has its write
//! refused by the server and counted in `stale_writes_rejected`; the job is
//! back in the queue for someone else. The result names are sequential, so
//! a job done twice would leave two results: at the end the run counts, from
//! Arbor, the jobs put without a result (`lost_jobs`) and those with more
//! than one (`duplicate_jobs`). The summary line adds both:
//!
//! ```text
//! jobs=200 double_grants=0 stale_writes_rejected=0 lost_jobs=0 duplicate_jobs=0
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
use arbor_client::recipes::{
    CompleteError, Fence, FencingToken, Job, LockError, Mutex, Queue, QueueError,
};
use arbor_client::{multi, Client, ClientOptions, CreateMode, Error};

const ROOT: &str = "/batch";
const JOBS: &str = "/batch/jobs";
const LOCKS: &str = "/batch/locks";
const QUEUE: &str = "/batch/queue";
const RESULTS: &str = "/batch/results";
/// How long an idle queue worker waits for a job before it looks whether
/// any is left at all (claimed ones included).
const IDLE_LOOK: Duration = Duration::from_millis(200);

struct Args {
    server: String,
    workers: usize,
    jobs: usize,
    work: Duration,
    queue: bool,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        server: std::env::var("ARBOR_SERVER").unwrap_or_else(|_| "127.0.0.1:7181".into()),
        workers: 8,
        jobs: 200,
        work: Duration::from_millis(1),
        queue: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--queue" {
            args.queue = true;
            continue;
        }
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
                "unknown flag {other} \
                 (flags: --server ADDR, --workers N, --jobs N, --work-ms MS, --queue)"
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
    /// Completions whose outcome the session's end left unknown (the
    /// results in Arbor tell).
    unknown_outcomes: usize,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.completed += other.completed;
        self.skipped_done += other.skipped_done;
        self.double_grants += other.double_grants;
        self.stale_writes_rejected += other.stale_writes_rejected;
        self.lost_locks += other.lost_locks;
        self.unknown_outcomes += other.unknown_outcomes;
    }
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

/// A queue worker: takes jobs until none is left, and completes each with
/// its result in one server-fenced transaction.
async fn queue_worker(
    id: usize,
    client: Client,
    store: Arc<FencedStore>,
    work: Duration,
) -> Result<Tally> {
    let mut tally = Tally::default();
    let queue = Queue::new(&client, QUEUE);
    loop {
        let job = match queue.take_timeout(IDLE_LOOK).await {
            Ok(Some(job)) => job,
            // Nothing unclaimed: done once nothing is claimed either (a
            // claim lost with its worker's session puts its job back).
            Ok(None) => match queue.len().await {
                Ok(0) => break,
                Ok(_) => continue,
                Err(QueueError::Client(err)) if transient(&err) => continue,
                Err(err) => return Err(err.into()),
            },
            Err(QueueError::Client(err)) if transient(&err) => {
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            Err(err) => return Err(err.into()),
        };
        let name = String::from_utf8_lossy(job.data()).into_owned();
        if !store.begin(&name) {
            tally.double_grants += 1;
        }
        let finished = tokio::select! {
            state = job.lost() => {
                eprintln!("worker {id}: claim on {name} may be lost ({state:?}), abandoning it");
                false
            }
            () = tokio::time::sleep(work) => true,
        };
        if finished {
            complete(id, job, &name, &mut tally).await?;
        } else {
            // Dropped: the claim is given up (or went with the session).
            tally.lost_locks += 1;
        }
        store.end(&name);
    }
    client.close().await?;
    Ok(tally)
}

/// Writes `name`'s result and removes its job, in one transaction that the
/// server refuses if the claim is gone.
async fn complete(id: usize, job: Job, name: &str, tally: &mut Tally) -> Result<()> {
    let result = format!("{RESULTS}/{name}-");
    let data = format!("{name} done by worker {id}").into_bytes();
    let completed = job
        .complete_with(|fenced| fenced.create(result, data, CreateMode::PersistentSequential))
        .await;
    match completed {
        Ok(_) => tally.completed += 1,
        Err(CompleteError::ClaimLost { .. }) => {
            eprintln!("worker {id}: claim on {name} lost: the server refused the result");
            tally.stale_writes_rejected += 1;
        }
        Err(CompleteError::OutcomeUnknown { .. }) => tally.unknown_outcomes += 1,
        Err(err) => return Err(err.into()),
    }
    Ok(())
}

/// Puts the jobs into the queue, a bounded number in flight at a time.
async fn put_jobs(admin: &Client, names: &[String]) -> Result<()> {
    /// Puts in flight at once.
    const PUTS_IN_FLIGHT: usize = 32;
    let queue = Queue::new(admin, QUEUE);
    for chunk in names.chunks(PUTS_IN_FLIGHT) {
        let mut puts = tokio::task::JoinSet::new();
        for name in chunk {
            let (queue, data) = (queue.clone(), name.clone().into_bytes());
            puts.spawn(async move { queue.put(data).await });
        }
        while let Some(put) = puts.join_next().await {
            put??;
        }
    }
    Ok(())
}

/// Lost and duplicated jobs, counted from the results in Arbor: a job put
/// with no result is lost; one with two or more, or a result of a job never
/// put, is a duplicate.
async fn count_results(admin: &Client, names: &[String]) -> Result<(usize, usize, usize)> {
    let mut per_job: HashMap<String, usize> = names.iter().map(|n| (n.clone(), 0)).collect();
    let mut strays = 0;
    for result in again(|| admin.get_children(RESULTS)).await? {
        // `<job>-<sequence>`
        let job = result
            .rsplit_once('-')
            .map_or(result.as_str(), |(job, _)| job);
        match per_job.get_mut(job) {
            Some(count) => *count += 1,
            None => strays += 1,
        }
    }
    let done = per_job.values().filter(|n| **n > 0).count();
    let lost = per_job.values().filter(|n| **n == 0).count();
    let duplicates = per_job.values().filter(|n| **n > 1).count() + strays;
    Ok((done, lost, duplicates))
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
    let names: Vec<String> = (0..args.jobs).map(|i| format!("job-{i:06}")).collect();
    if args.queue {
        return run_queue(&args, admin, &names).await;
    }
    admin
        .create(JOBS, Vec::new(), CreateMode::Persistent)
        .await?;
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
        total.add(&tally);
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

/// `--queue`: the jobs come from the distributed queue; each result is
/// written to Arbor by the transaction that completes its job.
async fn run_queue(args: &Args, admin: Client, names: &[String]) -> Result<()> {
    admin
        .create(RESULTS, Vec::new(), CreateMode::Persistent)
        .await?;
    put_jobs(&admin, names).await.context("putting the jobs")?;
    println!(
        "{} jobs in the queue {QUEUE}, {} workers, server {}",
        args.jobs, args.workers, args.server
    );

    let store = Arc::new(FencedStore::default());
    let started = Instant::now();
    let mut workers = Vec::new();
    for id in 0..args.workers {
        let client = connect(&args.server).await?;
        workers.push(tokio::spawn(queue_worker(
            id,
            client,
            store.clone(),
            args.work,
        )));
    }
    let mut total = Tally::default();
    for (id, handle) in workers.into_iter().enumerate() {
        let tally = handle
            .await?
            .with_context(|| format!("worker {id} failed"))?;
        println!("worker {id}: {} jobs", tally.completed);
        total.add(&tally);
    }
    let elapsed = started.elapsed();

    let left = Queue::new(&admin, QUEUE).len().await?;
    let (done, lost, duplicates) = count_results(&admin, names).await?;
    admin.close().await?;

    println!(
        "{} jobs in {:.2?} ({:.0} jobs/s); {left} left in the queue",
        total.completed,
        elapsed,
        total.completed as f64 / elapsed.as_secs_f64()
    );
    println!(
        "results in {RESULTS}: {done} jobs done; {} claims lost mid-job, {} completions unknown",
        total.lost_locks, total.unknown_outcomes
    );
    println!(
        "jobs={done} double_grants={} stale_writes_rejected={} lost_jobs={lost} duplicate_jobs={duplicates}",
        total.double_grants, total.stale_writes_rejected
    );

    if total.double_grants > 0 || lost > 0 || duplicates > 0 || left > 0 || done != args.jobs {
        bail!("not every job was done exactly once by one worker at a time");
    }
    Ok(())
}
