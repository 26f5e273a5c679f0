//! The semaphore against real servers: at most N holders that can still write
//! through the fence, even with holders frozen past their session timeout;
//! grants in arrival order; one release wakes a bounded number of waiters;
//! try/timeout/mismatched-N leave the queue clean.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arbor_client::recipes::{FencedError, Lease, Semaphore, SemaphoreError};
use arbor_client::{Client, CreateMode, Error};
use arbor_tests::{client, connect_when_up, wait_for_children, TestServer};
use tokio::sync::mpsc;

#[tokio::test]
async fn try_timeout_and_a_mismatched_permit_count_leave_the_queue_clean() {
    // A full semaphore refuses try_acquire and times out acquire_timeout,
    // each removing its node; a contender with another N is refused.
    let server = TestServer::start();
    let c = client(&server).await;
    let pool = Semaphore::new(&c, "/sem/basic", 2);
    let first = pool.try_acquire().await.expect("a free permit");
    let second = pool.acquire().await.expect("the second permit");
    assert_ne!(first.fencing_token(), second.fencing_token());
    assert_eq!(c.get_data(first.node()).await.expect("read").0, b"2");
    assert!(matches!(
        pool.try_acquire().await,
        Err(SemaphoreError::NoPermit)
    ));
    assert!(matches!(
        pool.acquire_timeout(Duration::from_millis(200)).await,
        Err(SemaphoreError::Timeout)
    ));
    wait_for_children(&c, "/sem/basic", 2).await;
    let other_n = Semaphore::new(&c, "/sem/basic", 3);
    match other_n.try_acquire().await {
        Err(SemaphoreError::PermitsMismatch {
            permits: 3, found, ..
        }) => assert_eq!(found, "2"),
        Ok(_) => panic!("a contender with another N was granted"),
        Err(other) => panic!("unexpected {other}"),
    }
    wait_for_children(&c, "/sem/basic", 2).await;
    // A waiter is granted when a holder releases.
    let waiting = tokio::spawn({
        let pool = pool.clone();
        async move { pool.acquire().await }
    });
    wait_for_children(&c, "/sem/basic", 3).await;
    first.release().await.expect("released");
    let third = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("granted in time")
        .expect("joins")
        .expect("granted");
    assert!(third.fencing_token() > second.fencing_token());
    drop((second, third));
    wait_for_children(&c, "/sem/basic", 0).await;
    assert!(matches!(
        Semaphore::new(&c, "/sem/zero", 0).acquire().await,
        Err(SemaphoreError::BadPermits { permits: 0 })
    ));
}

#[tokio::test]
async fn grants_follow_arrival_order_and_one_release_wakes_few() {
    // permits = 2, 30 waiters: each release grants the next in line, and the
    // watch events it causes across all waiters stay bounded (a herd would
    // wake all 30).
    const WAITERS: usize = 30;
    const PERMITS: u32 = 2;
    let server = TestServer::start_with(&["--max-connections-per-ip", "100"]);
    let holder = client(&server).await;
    let pool = Semaphore::new(&holder, "/sem/fifo", PERMITS);
    let held = [
        pool.acquire().await.expect("granted"),
        pool.acquire().await.expect("granted"),
    ];
    let (granted_tx, mut granted_rx) = mpsc::channel::<(usize, Lease)>(WAITERS);
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let c = client(&server).await;
        let pool = Semaphore::new(&c, "/sem/fifo", PERMITS);
        let granted_tx = granted_tx.clone();
        tasks.push(tokio::spawn(async move {
            let lease = pool.acquire().await.expect("granted");
            granted_tx.send((i, lease)).await.expect("reported");
        }));
        clients.push(c);
        // Queue in a known order: wait until this waiter's node exists.
        wait_for_children(&holder, "/sem/fifo", PERMITS as usize + i + 1).await;
    }
    let events =
        |clients: &[Client]| -> u64 { clients.iter().map(|c| c.watch_events_received()).sum() };
    // Let every waiter set its watch; nothing changes meanwhile.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let quiet = events(&clients);
    assert_eq!(quiet, 0, "queueing alone wakes nobody");

    let [first, second] = held;
    first.release().await.expect("released");
    let (i, lease) = tokio::time::timeout(Duration::from_secs(10), granted_rx.recv())
        .await
        .expect("granted in time")
        .expect("a grant");
    assert_eq!(i, 0, "the first waiter is granted first");
    // Let the wake-ups this release caused arrive.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let one_release = events(&clients) - quiet;
    println!("watch events for one release: {one_release}");
    assert!(
        (1..=PERMITS as u64 + 2).contains(&one_release),
        "one release caused {one_release} watch events across {WAITERS} waiters"
    );

    let mut leases = std::collections::VecDeque::from([second, lease]);
    for want in 1..WAITERS {
        let oldest = leases.pop_front().expect("a holder");
        oldest.release().await.expect("released");
        let (i, lease) = tokio::time::timeout(Duration::from_secs(10), granted_rx.recv())
            .await
            .expect("granted in time")
            .expect("a grant");
        assert_eq!(i, want, "grants follow arrival order");
        leases.push_back(lease);
    }
    let total = events(&clients) - quiet;
    println!("watch events for {WAITERS} releases: {total}");
    assert!(
        total <= (WAITERS as u64) * (PERMITS as u64 + 2),
        "{total} watch events for {WAITERS} releases"
    );
    for task in tasks {
        task.await.expect("joins");
    }
}

const STRESS_WORKERS: u64 = 12;
const STRESS_CYCLES: u64 = 25;
const STRESS_PERMITS: u32 = 3;
/// Server tick for the stress test: short sessions expire quickly.
const TICK_MS: u64 = 100;
const SESSION_TIMEOUT: Duration = Duration::from_millis(3 * TICK_MS);
/// The writers' sessions survive every pause.
const WRITER_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// A worker frozen this long has surely lost its session and its lease.
const PAUSE: Duration = Duration::from_millis(3 * TICK_MS + 4 * TICK_MS);

/// What the workers saw, counted independently of the semaphore.
#[derive(Default)]
struct Tally {
    /// The most registered holders whose leases all stood at one zxid.
    max_live: AtomicU64,
    /// The most registrations at one zxid, stale ones included.
    max_registered: AtomicU64,
    entered: AtomicU64,
    exited: AtomicU64,
    /// Stale registrations removed by later entries.
    collected: AtomicU64,
    /// Fenced writes refused because the lease was gone.
    refused: AtomicU64,
}

/// The shared state in Arbor: `/count` holds the number of registrations,
/// `/holders/<token>` one per registered holder with its lease node as data.
/// Every change to `/holders` sets `/count` with its version, so a multi
/// that passes sees the registrations exactly as listed after reading it.
async fn enter(client: &Client, lease: &Lease, tally: &Tally) -> Result<(), FencedError> {
    let me = format!("/holders/{}", lease.fencing_token());
    loop {
        let (count, stat) = client.get_data("/count").await?;
        let registered: u64 = String::from_utf8_lossy(&count).parse().expect("a count");
        let mut fenced = lease.fenced().via(client);
        let mut live = 0u64;
        let mut stale = 0u64;
        for name in client.get_children("/holders").await? {
            let registration = format!("/holders/{name}");
            let Ok((owner, _)) = client.get_data(&registration).await else {
                continue; // changed under us: the version check fails below
            };
            let owner = String::from_utf8(owner).expect("a lease path");
            if client.exists(&owner).await?.is_some() {
                // Counted as live only if its lease still stands at commit.
                fenced = fenced.check(owner, None);
                live += 1;
            } else {
                // Its lease is gone for good (lease names are never reused).
                fenced = fenced.delete(registration, None);
                stale += 1;
            }
        }
        let now = live + 1;
        let committed = fenced
            .set_data("/count", now.to_string().into_bytes(), Some(stat.version))
            .create(
                &me,
                lease.node().as_bytes().to_vec(),
                CreateMode::Persistent,
            )
            .commit()
            .await;
        match committed {
            Ok(_) => {}
            Err(FencedError::OpFailed { .. }) => continue, // contention, or a lease died
            Err(FencedError::Client(Error::ConnectionLoss | Error::Timeout)) => {
                if client.exists(&me).await?.is_none() {
                    continue;
                }
            }
            Err(err) => return Err(err),
        }
        tally.max_live.fetch_max(now, Ordering::SeqCst);
        tally
            .max_registered
            .fetch_max(registered.max(now), Ordering::SeqCst);
        tally.entered.fetch_add(1, Ordering::SeqCst);
        tally.collected.fetch_add(stale, Ordering::SeqCst);
        return Ok(());
    }
}

/// Deregisters through the fence: refused once the lease is gone (the
/// registration stays, stale, until the next enter removes it).
async fn exit(client: &Client, lease: &Lease, tally: &Tally) -> Result<(), FencedError> {
    let me = format!("/holders/{}", lease.fencing_token());
    loop {
        let (count, stat) = client.get_data("/count").await?;
        let registered: u64 = String::from_utf8_lossy(&count).parse().expect("a count");
        let committed = lease
            .fenced()
            .via(client)
            .delete(&me, None)
            .set_data(
                "/count",
                registered.saturating_sub(1).to_string().into_bytes(),
                Some(stat.version),
            )
            .commit()
            .await;
        match committed {
            Ok(_) => {}
            Err(FencedError::OpFailed { .. }) => continue,
            Err(FencedError::Client(Error::ConnectionLoss | Error::Timeout)) => {
                if client.exists(&me).await?.is_some() {
                    continue;
                }
            }
            Err(err) => return Err(err),
        }
        tally.exited.fetch_add(1, Ordering::SeqCst);
        return Ok(());
    }
}

fn count_refusal(result: Result<(), FencedError>, tally: &Tally) -> bool {
    match result {
        Ok(()) => true,
        Err(FencedError::GrantLost { .. }) => {
            tally.refused.fetch_add(1, Ordering::SeqCst);
            false
        }
        Err(_) => false, // the session ended mid-way: start over
    }
}

/// One worker on its own thread and runtime, so a pause (a blocking sleep)
/// freezes it entirely, heartbeats included, like a GC pause.
fn worker(addr: String, tally: Arc<Tally>, id: u64) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let pause_at = (id * 7 + 3) % STRESS_CYCLES;
            let mut client = connect_when_up(&addr, SESSION_TIMEOUT).await;
            // Writes go through a second session that outlives the pauses,
            // so a frozen holder comes back able to send, and only the
            // fence stops it.
            let writer = connect_when_up(&addr, WRITER_SESSION_TIMEOUT).await;
            for cycle in 0..STRESS_CYCLES {
                if client.state().is_terminal() {
                    client = connect_when_up(&addr, SESSION_TIMEOUT).await;
                }
                let pool = Semaphore::new(&client, "/sem/stress", STRESS_PERMITS);
                let Ok(lease) = pool.acquire().await else {
                    continue; // lost the session while waiting: start over
                };
                // Odd workers freeze before registering, even ones inside.
                if cycle == pause_at && id % 2 == 1 {
                    std::thread::sleep(PAUSE);
                }
                if count_refusal(enter(&writer, &lease, &tally).await, &tally) {
                    if cycle == pause_at && id.is_multiple_of(2) {
                        std::thread::sleep(PAUSE);
                    } else {
                        tokio::time::sleep(Duration::from_millis(2 + id % 5)).await;
                    }
                    count_refusal(exit(&writer, &lease, &tally).await, &tally);
                }
                let _ = lease.release().await;
            }
        });
    })
}

#[test]
fn never_more_than_n_holders_can_write_through_the_fence() {
    // 12 workers, 3 permits, each worker frozen once past its session: at
    // every registration, the registered holders whose leases still stood
    // (checked in the same multi) numbered at most 3.
    let tick = TICK_MS.to_string();
    let server = TestServer::start_with(&["--tick-ms", &tick, "--max-connections-per-ip", "200"]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let admin = runtime.block_on(client(&server));
    runtime.block_on(async {
        admin
            .create("/count", b"0".to_vec(), CreateMode::Persistent)
            .await
            .expect("created");
        admin
            .create("/holders", Vec::new(), CreateMode::Persistent)
            .await
            .expect("created");
    });
    let tally = Arc::new(Tally::default());
    let workers: Vec<_> = (0..STRESS_WORKERS)
        .map(|id| worker(server.addr().to_owned(), tally.clone(), id))
        .collect();
    for worker in workers {
        worker.join().expect("worker finishes");
    }
    let max_live = tally.max_live.load(Ordering::SeqCst);
    let max_registered = tally.max_registered.load(Ordering::SeqCst);
    let entered = tally.entered.load(Ordering::SeqCst);
    let exited = tally.exited.load(Ordering::SeqCst);
    let refused = tally.refused.load(Ordering::SeqCst);
    let collected = tally.collected.load(Ordering::SeqCst);
    println!(
        "max live holders {max_live}, max registrations {max_registered}, entered {entered}, \
         exited {exited}, stale collected {collected}, refused {refused}"
    );
    assert!(
        max_live <= STRESS_PERMITS as u64,
        "{max_live} holders could write at once"
    );
    assert!(
        max_live >= 2,
        "holders overlapped (it is a semaphore, not a lock)"
    );
    assert!(
        refused > 0,
        "frozen holders came back and were refused by the fence"
    );
    runtime.block_on(async {
        // Consistent at the end: /count counts the registrations, and every
        // registration left behind belongs to a lease that is gone.
        let (count, _) = admin.get_data("/count").await.expect("read");
        let count: u64 = String::from_utf8_lossy(&count).parse().expect("a count");
        let left = admin.get_children("/holders").await.expect("listed");
        assert_eq!(
            count,
            left.len() as u64,
            "the count matches the registrations"
        );
        assert_eq!(
            entered - exited - collected,
            count,
            "every entry exited, was collected, or is left stale"
        );
        for name in left {
            let (owner, _) = admin
                .get_data(&format!("/holders/{name}"))
                .await
                .expect("read");
            let owner = String::from_utf8(owner).expect("a lease path");
            assert!(
                admin.exists(&owner).await.expect("asked").is_none(),
                "{owner} outlived its worker"
            );
        }
    });
}
