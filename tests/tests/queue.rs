//! The distributed queue against real servers: every job is done exactly
//! once (none lost, none twice) while consumers freeze past their session
//! and the server is killed and restarted; items come out in (priority,
//! FIFO) order; a request that times out on a paused server neither loses
//! nor doubles a put, a claim or a completion.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arbor_client::recipes::{CompleteError, Queue, QueueError, DEFAULT_PRIORITY};
use arbor_client::{Client, ClientOptions, CreateMode, Error};
use arbor_tests::{connect_when_up, TestServer};

/// Server tick: session timeouts clamp to [200, 2000] ms.
const TICK_MS: u64 = 100;
const QUEUE: &str = "/stress/queue";
const RESULTS: &str = "/stress/results";
const PRODUCERS: u64 = 2;
const JOBS_PER_PRODUCER: u64 = 150;
const JOBS: u64 = PRODUCERS * JOBS_PER_PRODUCER;
const CONSUMERS: u64 = 6;
/// Consumers that freeze once, mid-job, past their session.
const PAUSERS: u64 = 3;
/// A consumer's own session: short, so a pause outlives it.
const CONSUMER_SESSION: Duration = Duration::from_millis(3 * TICK_MS);
/// The session results are written through: it outlives a pause, so the
/// server's fence, not a dead connection, is what refuses a late write.
const WRITER_SESSION: Duration = Duration::from_millis(20 * TICK_MS);
/// Longer than a consumer's session and its expiry tick, shorter than the
/// writer's session.
const PAUSE: Duration = Duration::from_millis(9 * TICK_MS);
/// A job's work.
const WORK: Duration = Duration::from_millis(3);
/// How long the whole run may take before the test gives up on it.
const RUN_DEADLINE: Duration = Duration::from_secs(60);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// What the consumers saw, summed.
#[derive(Default)]
struct Tally {
    completed: AtomicU64,
    /// Completions refused because the claim was lost (paused consumers).
    refused: AtomicU64,
    /// Of those, refused while the job's result already existed: an
    /// unfenced write would have done the job twice.
    refused_after_done: AtomicU64,
    unknown: AtomicU64,
    pauses: AtomicU64,
    /// Paused consumers that have tried their late completion.
    pauses_over: AtomicU64,
    /// Set once the server has been restarted.
    restarted: AtomicBool,
}

/// Puts its share of the jobs, each once, through restarts.
fn producer(addr: String, id: u64) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        runtime().block_on(async move {
            let mut client = connect_when_up(&addr, WRITER_SESSION).await;
            for n in 0..JOBS_PER_PRODUCER {
                let job = id * JOBS_PER_PRODUCER + n;
                loop {
                    if client.state().is_terminal() {
                        client = connect_when_up(&addr, WRITER_SESSION).await;
                    }
                    let queue = Queue::new(&client, QUEUE);
                    match queue.put(format!("{job}").into_bytes()).await {
                        Ok(_) => break,
                        Err(QueueError::PutOutcomeUnknown { attempt }) => {
                            // Settle it through a new session: the item
                            // exists, or was completed (its result exists),
                            // or it was never made.
                            client = connect_when_up(&addr, WRITER_SESSION).await;
                            let queue = Queue::new(&client, QUEUE);
                            let found = queue.find_put(&attempt).await.expect("listed");
                            if found.is_some() || result_count(&client, job).await > 0 {
                                break;
                            }
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
            }
        });
    })
}

/// Results of `job` present now.
async fn result_count(client: &Client, job: u64) -> usize {
    let prefix = format!("job-{job:06}-");
    loop {
        match client.get_children(RESULTS).await {
            Ok(names) => return names.iter().filter(|n| n.starts_with(&prefix)).count(),
            Err(Error::NoNode { .. }) => return 0,
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Takes jobs and completes each with a fenced result write, until `stop`.
/// A pauser freezes (heartbeats included: one thread, one runtime) once,
/// holding a job, then tries to complete it anyway.
fn consumer(
    addr: String,
    id: u64,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        runtime().block_on(async move {
            let mut client = connect_when_up(&addr, CONSUMER_SESSION).await;
            let mut writer = connect_when_up(&addr, WRITER_SESSION).await;
            // After the restart, on the first job taken then: a restart
            // gives every session a full timeout again, which would let a
            // pause overlapping it go unnoticed by the server.
            let mut pause_pending = id < PAUSERS;
            while !stop.load(Ordering::SeqCst) {
                if client.state().is_terminal() {
                    client = connect_when_up(&addr, CONSUMER_SESSION).await;
                }
                if writer.state().is_terminal() {
                    writer = connect_when_up(&addr, WRITER_SESSION).await;
                }
                let queue = Queue::new(&client, QUEUE);
                let job = match queue.take_timeout(Duration::from_millis(300)).await {
                    Ok(Some(job)) => job,
                    Ok(None) => continue,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let number: u64 = String::from_utf8_lossy(job.data())
                    .parse()
                    .expect("a job number");
                tokio::time::sleep(WORK).await;
                let pausing = pause_pending && tally.restarted.load(Ordering::SeqCst);
                if pausing {
                    pause_pending = false;
                    tally.pauses.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(PAUSE);
                    // The writer's session outlives the pause, but its
                    // connection may need a moment: send the late write
                    // for real, so the server's fence is what answers it.
                    let deadline = Instant::now() + Duration::from_secs(5);
                    while writer.ping().await.is_err() && Instant::now() < deadline {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
                // A sequential name, so a job done twice shows as two nodes.
                let result = format!("{RESULTS}/job-{number:06}-");
                let by = format!("consumer {id}").into_bytes();
                let done = job
                    .complete_with(|fenced| {
                        fenced
                            .via(&writer)
                            .create(result, by, CreateMode::PersistentSequential)
                    })
                    .await;
                match done {
                    Ok(_) => {
                        tally.completed.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(CompleteError::ClaimLost { .. }) => {
                        tally.refused.fetch_add(1, Ordering::SeqCst);
                        if result_count(&writer, number).await > 0 {
                            tally.refused_after_done.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    Err(CompleteError::OutcomeUnknown { .. }) => {
                        tally.unknown.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(other) => eprintln!("consumer {id}: completion failed: {other}"),
                }
                if pausing {
                    tally.pauses_over.fetch_add(1, Ordering::SeqCst);
                }
            }
            let _ = client.close().await;
            let _ = writer.close().await;
        });
    })
}

/// Results per job id, read from the server.
async fn results(client: &Client) -> BTreeMap<u64, usize> {
    let mut per_job = BTreeMap::new();
    for name in client.get_children(RESULTS).await.expect("results listed") {
        let number = name
            .strip_prefix("job-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|digits| digits.parse().ok())
            .unwrap_or_else(|| panic!("a result name: {name}"));
        *per_job.entry(number).or_insert(0) += 1;
    }
    per_job
}

#[test]
fn every_job_is_done_exactly_once_across_pauses_and_a_server_restart() {
    let tick = TICK_MS.to_string();
    let mut server =
        TestServer::start_with(&["--tick-ms", &tick, "--max-connections-per-ip", "200"]);
    let addr = server.addr().to_owned();
    let admin_runtime = runtime();
    let admin = admin_runtime.block_on(async {
        let admin = connect_when_up(&addr, WRITER_SESSION).await;
        for path in ["/stress", RESULTS] {
            admin
                .create(path, Vec::new(), CreateMode::Persistent)
                .await
                .expect("created");
        }
        admin
    });
    drop(admin);

    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|id| consumer(addr.clone(), id, tally.clone(), stop.clone()))
        .collect();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|id| producer(addr.clone(), id))
        .collect();

    // Kill the server once a third of the jobs are done, down long enough
    // for the consumers' sessions to expire; restart it on its data.
    let started = Instant::now();
    while tally.completed.load(Ordering::SeqCst) < JOBS / 3 {
        assert!(
            started.elapsed() < RUN_DEADLINE,
            "no progress before the kill"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    server.kill();
    std::thread::sleep(CONSUMER_SESSION + Duration::from_millis(2 * TICK_MS));
    server.restart();
    tally.restarted.store(true, Ordering::SeqCst);
    let restarted_at = tally.completed.load(Ordering::SeqCst);

    for producer in producers {
        producer.join().expect("producer finishes");
    }
    let (per_job, left) = admin_runtime.block_on(async {
        let admin = connect_when_up(&addr, WRITER_SESSION).await;
        let queue = Queue::new(&admin, QUEUE);
        loop {
            let per_job = results(&admin).await;
            let left = queue.len().await.expect("len");
            if (per_job.len() as u64 == JOBS && left == 0) || started.elapsed() > RUN_DEADLINE {
                if left > 0 {
                    for dir in ["items", "claims"] {
                        let path = format!("{QUEUE}/{dir}");
                        let (children, _) =
                            admin.get_children_with_stat(&path).await.expect("listed");
                        for child in children {
                            let owner = child.stat.ephemeral_owner;
                            println!("left in {dir}: {} (owner {owner:#x})", child.name);
                        }
                    }
                }
                return (per_job, left);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    stop.store(true, Ordering::SeqCst);
    for consumer in consumers {
        consumer.join().expect("consumer finishes");
    }
    let load = |n: &AtomicU64| n.load(Ordering::SeqCst);
    println!(
        "completed {} ({} before the restart), refused {} ({} already done elsewhere), \
         unknown {}, pauses {}, {:.1?}",
        load(&tally.completed),
        restarted_at,
        load(&tally.refused),
        load(&tally.refused_after_done),
        load(&tally.unknown),
        load(&tally.pauses),
        started.elapsed()
    );

    let missing: Vec<u64> = (0..JOBS).filter(|j| !per_job.contains_key(j)).collect();
    let twice: Vec<(&u64, &usize)> = per_job.iter().filter(|(_, n)| **n > 1).collect();
    let strange: Vec<&u64> = per_job.keys().filter(|j| **j >= JOBS).collect();
    assert!(missing.is_empty(), "jobs lost: {missing:?}");
    assert!(twice.is_empty(), "jobs done twice: {twice:?}");
    assert!(strange.is_empty(), "results of jobs never put: {strange:?}");
    assert_eq!(left, 0, "the items directory is empty");
    assert_eq!(load(&tally.pauses_over), PAUSERS, "every pauser paused");
    assert!(restarted_at < JOBS, "the restart came mid-run");
    assert!(
        load(&tally.refused) > 0,
        "a paused consumer's late completion was refused by the fence"
    );
}

#[test]
fn items_come_out_by_priority_then_in_put_order() {
    // One consumer; mixed priorities; also release, drop and waiting takes.
    let server = TestServer::start();
    runtime().block_on(async {
        let client = arbor_tests::client(&server).await;
        let queue = Queue::new(&client, "/prio");
        let priorities = [DEFAULT_PRIORITY, 5, 0, 5, 7, DEFAULT_PRIORITY, 0, 7, 5];
        let mut expected = Vec::new();
        for (i, priority) in priorities.iter().enumerate() {
            let data = format!("{i}").into_bytes();
            if *priority == DEFAULT_PRIORITY && i % 2 == 0 {
                queue.put(data.clone()).await.expect("put");
            } else {
                queue
                    .put_with_priority(data.clone(), *priority)
                    .await
                    .expect("put");
            }
            expected.push((*priority, i));
        }
        // A stable sort: FIFO within a priority.
        expected.sort_by_key(|(priority, _)| *priority);
        let expected: Vec<String> = expected.iter().map(|(_, i)| format!("{i}")).collect();
        assert_eq!(queue.len().await.expect("len"), priorities.len());

        // A released item goes back to the front; so does a dropped job.
        let first = queue.take().await.expect("taken");
        assert_eq!(first.data(), expected[0].as_bytes());
        let (peeked, _) = queue.peek().await.expect("peek").expect("an item");
        assert_ne!(peeked, first.item(), "peek skips a claimed item");
        first.release().await.expect("released");
        let again = queue.take().await.expect("taken");
        assert_eq!(
            again.data(),
            expected[0].as_bytes(),
            "released to the front"
        );
        drop(again);
        // The dropped job's claim is given up in the background: wait for it.
        let deadline = Instant::now() + Duration::from_secs(10);
        while queue.peek().await.expect("peek").map(|(_, data)| data)
            != Some(expected[0].clone().into_bytes())
        {
            assert!(Instant::now() < deadline, "the dropped job never came back");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut taken = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while taken.len() < priorities.len() {
            assert!(Instant::now() < deadline, "items stuck: {taken:?}");
            let Some(job) = queue.try_take().await.expect("try_take") else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            taken.push(String::from_utf8_lossy(job.data()).into_owned());
            job.complete().await.expect("completed");
        }
        assert_eq!(taken, expected);
        assert!(queue.is_empty().await.expect("len"));
        assert!(queue.try_take().await.expect("try_take").is_none());

        // A waiting take wakes on a put, and on a claim lost with its session.
        let other = arbor_tests::client(&server).await;
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { queue.take().await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let held = Queue::new(&other, "/prio");
        held.put(b"late".to_vec()).await.expect("put");
        let woken = waiting.await.expect("joined").expect("taken");
        assert_eq!(woken.data(), b"late");
        woken.release().await.expect("released");
        let job = held.take().await.expect("taken by the other session");
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { queue.take_timeout(Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        std::mem::forget(job); // no release: only the session's end frees it
        other.close().await.expect("closed");
        let woken = waiting
            .await
            .expect("joined")
            .expect("take")
            .expect("in time");
        assert_eq!(woken.data(), b"late");
        woken.complete().await.expect("completed");
    });
}

#[test]
fn requests_timed_out_on_a_paused_server_neither_lose_nor_double_anything() {
    // Puts, a claim and a completion sent while the server is stopped time
    // out; once it runs again, each took effect exactly once.
    let server = TestServer::start();
    runtime().block_on(async {
        let options = ClientOptions::default()
            .with_session_timeout(Duration::from_secs(4))
            .with_request_timeout(Duration::from_millis(300));
        let client = Client::connect(server.addr(), options)
            .await
            .expect("connects");
        client
            .create("/done", Vec::new(), CreateMode::Persistent)
            .await
            .expect("created");
        let queue = Queue::new(&client, "/paused");
        queue.put(b"warm-up".to_vec()).await.expect("put");
        queue
            .take()
            .await
            .expect("taken")
            .complete()
            .await
            .expect("done");

        // Stopped for more than three request timeouts, less than the session.
        let pause_for = Duration::from_millis(1000);
        // Five puts in flight while the server is stopped.
        server.pause();
        let puts =
            futures_util::future::join_all((0..5).map(|i| queue.put(format!("{i}").into_bytes())));
        let (puts, ()) = tokio::join!(puts, async {
            tokio::time::sleep(pause_for).await;
            server.unpause();
        });
        let mut paths: Vec<String> = puts.into_iter().map(|p| p.expect("put")).collect();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), 5, "five distinct items");
        assert_eq!(queue.len().await.expect("len"), 5, "one item per put");

        // A claim in flight while the server is stopped.
        server.pause();
        let (job, ()) = tokio::join!(queue.take(), async {
            tokio::time::sleep(pause_for).await;
            server.unpause();
        });
        let job = job.expect("taken");
        assert_eq!(job.data(), b"0");
        let claims = client.get_children("/paused/claims").await.expect("claims");
        assert_eq!(claims.len(), 2, "one key and one grant: {claims:?}");

        // A completion in flight while the server is stopped.
        server.pause();
        let (done, ()) = tokio::join!(
            job.complete_with(|f| f.create("/done/0", b"ok".to_vec(), CreateMode::Persistent)),
            async {
                tokio::time::sleep(pause_for).await;
                server.unpause();
            }
        );
        let completion = done.expect("completed");
        println!(
            "completion results {}",
            if completion.results().is_some() {
                "seen"
            } else {
                "learned by looking"
            }
        );
        assert_eq!(client.get_data("/done/0").await.expect("result").0, b"ok");
        assert_eq!(queue.len().await.expect("len"), 4, "exactly that item left");
        let claims = client.get_children("/paused/claims").await.expect("claims");
        assert!(claims.is_empty(), "the claim went with it: {claims:?}");
        let next = queue.try_take().await.expect("take").expect("an item");
        assert_eq!(next.data(), b"1", "the rest in order");
    });
}
