//! The shared counter against a real server: concurrent adds are exact and
//! each returns a distinct value; compare-and-set sets only on a match, and
//! of racing ones exactly one wins; adds stay exact across a server killed
//! and restarted mid-run, and with workers frozen past their session
//! timeout, some mid-add (any add whose outcome is unknown is reported as
//! such and accounted for; an add reported failed never counted).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arbor_client::recipes::{Counter, CounterError};
use arbor_client::{Client, ClientOptions, CreateMode};
use arbor_tests::{client, connect_when_up, TestServer};

const WORKERS: usize = 8;
const ADDS: usize = 200;
/// Short, so that a frozen server makes writes time out at the client.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(300);

/// What the adds returned: the values of those that succeeded, and how many
/// reported an unknown outcome.
#[derive(Default)]
struct Outcomes {
    values: std::sync::Mutex<Vec<i64>>,
    unknown: AtomicU64,
}

async fn add_all(counter: Counter, outcomes: Arc<Outcomes>) {
    for _ in 0..ADDS {
        match counter.add(1).await {
            Ok(value) => outcomes.values.lock().expect("not poisoned").push(value),
            Err(CounterError::OutcomeUnknown { .. }) => {
                // Not retried: it may have counted.
                outcomes.unknown.fetch_add(1, Ordering::SeqCst);
            }
            Err(err) => panic!("add failed: {err}"),
        }
    }
}

/// Checks the final value against what the adds reported.
fn check(final_value: i64, outcomes: &Outcomes) {
    let values = outcomes.values.lock().expect("not poisoned").clone();
    let unknown = outcomes.unknown.load(Ordering::SeqCst) as i64;
    let succeeded = values.len() as i64;
    assert_eq!(
        succeeded + unknown,
        (WORKERS * ADDS) as i64,
        "every add reported"
    );
    let distinct: BTreeSet<i64> = values.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        values.len(),
        "no two adds returned the same value"
    );
    assert!(
        distinct.iter().all(|v| (1..=final_value).contains(v)),
        "every returned value is one the counter passed through"
    );
    assert!(
        (succeeded..=succeeded + unknown).contains(&final_value),
        "final {final_value}: {succeeded} adds succeeded, {unknown} unknown"
    );
    if unknown == 0 {
        assert_eq!(final_value, (WORKERS * ADDS) as i64, "exact");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_adds_are_exact_and_each_returns_a_distinct_value() {
    // 8 workers x 200 add(1) on their own sessions end at exactly 1600.
    let server = TestServer::start();
    let outcomes = Arc::new(Outcomes::default());
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let c = client(&server).await;
        tasks.push(tokio::spawn(add_all(
            Counter::new(&c, "/stats/adds"),
            outcomes.clone(),
        )));
    }
    for task in tasks {
        task.await.expect("worker finishes");
    }
    let reader = client(&server).await;
    let final_value = Counter::new(&reader, "/stats/adds")
        .get()
        .await
        .expect("read");
    check(final_value, &outcomes);
    assert_eq!(outcomes.unknown.load(Ordering::SeqCst), 0);
    // Readable by `arbor get`: the value comes first.
    let (data, _) = reader.get_data("/stats/adds").await.expect("read");
    assert!(String::from_utf8(data).expect("text").starts_with("1600 "));
}

#[tokio::test]
async fn compare_and_set_sets_only_on_a_match_and_one_racer_wins() {
    let server = TestServer::start();
    let c = client(&server).await;
    let counter = Counter::new(&c, "/cas/value");
    // A missing node reads as 0, and the first write creates it.
    assert_eq!(counter.get().await.expect("read"), 0);
    assert!(!counter.compare_and_set(5, 6).await.expect("asked"));
    assert!(c.exists("/cas/value").await.expect("asked").is_none());
    assert!(counter.compare_and_set(0, 10).await.expect("asked"));
    assert!(!counter.compare_and_set(0, 11).await.expect("asked"));
    assert_eq!(counter.get().await.expect("read"), 10);
    counter.set(-3).await.expect("set");
    assert_eq!(counter.add(4).await.expect("added"), 1);
    assert!(matches!(
        counter.add(i64::MAX).await,
        Err(CounterError::Overflow { value: 1, .. })
    ));

    // Ten sessions race compare_and_set(1, i): exactly one wins.
    let mut racers = Vec::new();
    for i in 0..10i64 {
        let racer = client(&server).await;
        racers.push(tokio::spawn(async move {
            let won = Counter::new(&racer, "/cas/value")
                .compare_and_set(1, 100 + i)
                .await
                .expect("asked");
            (i, won)
        }));
    }
    let mut winners = Vec::new();
    for racer in racers {
        let (i, won) = racer.await.expect("joins");
        if won {
            winners.push(i);
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    assert_eq!(counter.get().await.expect("read"), 100 + winners[0]);

    // A value written by something else counts; a non-number is refused.
    c.set_data("/cas/value", b"41".to_vec(), None)
        .await
        .expect("set");
    assert_eq!(counter.add(1).await.expect("added"), 42);
    c.create("/cas/junk", b"forty".to_vec(), CreateMode::Persistent)
        .await
        .expect("created");
    assert!(matches!(
        Counter::new(&c, "/cas/junk").add(1).await,
        Err(CounterError::Malformed { .. })
    ));
}

#[test]
fn adds_stay_exact_across_a_server_pause_and_restart() {
    // Mid-run the server is first frozen (SIGSTOP) past the clients' request
    // timeout, so writes time out at the client yet are applied once it
    // runs again; later it is killed (SIGKILL) and restarted on the same
    // data. Sessions resume, and the adds whose replies were lost are
    // settled by the node's tags: the final value matches the adds that
    // succeeded, within the ones reported unknown (exactly, if none was).
    let mut server = TestServer::start();
    let addr = server.addr().to_owned();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let options = ClientOptions::default()
        .with_session_timeout(Duration::from_secs(10))
        .with_request_timeout(REQUEST_TIMEOUT);
    let outcomes = Arc::new(Outcomes::default());
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let c = runtime
                .block_on(Client::connect(&addr, options.clone()))
                .expect("connects");
            runtime.spawn(add_all(
                Counter::new(&c, "/stats/restart"),
                outcomes.clone(),
            ))
        })
        .collect();
    let watcher = runtime
        .block_on(Client::connect(&addr, options.clone()))
        .expect("connects");
    let watched = Counter::new(&watcher, "/stats/restart");
    let reach = |value: i64| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while runtime.block_on(watched.get()).unwrap_or(0) < value {
            assert!(std::time::Instant::now() < deadline, "no progress");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let total = (WORKERS * ADDS) as i64;
    reach(total / 4);
    server.pause();
    std::thread::sleep(REQUEST_TIMEOUT * 3);
    server.unpause();
    reach(total / 2);
    let before = runtime.block_on(watched.get()).expect("read");
    server.restart();
    for worker in workers {
        runtime.block_on(worker).expect("worker finishes");
    }
    let final_value = runtime.block_on(watched.get()).expect("read");
    let unknown = outcomes.unknown.load(Ordering::SeqCst);
    println!("restarted at {before}; final {final_value}, outcomes unknown {unknown}");
    assert!(
        final_value > before,
        "adds went on after the restart: {final_value} after {before}"
    );
    check(final_value, &outcomes);
}

/// Workers whose whole runtime freezes past their session timeout.
const FROZEN_WORKERS: usize = 6;
const FROZEN_ADDS: usize = 120;
/// Freezes per worker: each may land with an add's write in flight.
const FREEZES: u64 = 3;
/// Server tick for the frozen run: sessions of 3 ticks expire quickly.
const FROZEN_TICK_MS: u64 = 100;
const FROZEN_SESSION: Duration = Duration::from_millis(3 * FROZEN_TICK_MS);
/// Past the session timeout, with room for the server to notice.
const FREEZE: Duration = Duration::from_millis(3 * FROZEN_TICK_MS + 5 * FROZEN_TICK_MS);

/// What one frozen worker saw.
#[derive(Default)]
struct FrozenOutcomes {
    values: Vec<i64>,
    unknown: u64,
    /// Adds that failed because the session ended with nothing pending:
    /// they must not have counted.
    failed: u64,
    sessions_lost: u64,
}

/// Adds on its own thread and runtime; a task on the same runtime freezes
/// it (a blocking sleep, heartbeats included) at a moment that depends on
/// `id`, so some freezes land in the middle of an add with its write sent.
fn frozen_worker(addr: String, id: u64) -> std::thread::JoinHandle<FrozenOutcomes> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let mut client = connect_when_up(&addr, FROZEN_SESSION).await;
            tokio::spawn(async move {
                for freeze in 0..FREEZES {
                    let at = 20 + 37 * id + 13 * freeze;
                    tokio::time::sleep(Duration::from_millis(at)).await;
                    std::thread::sleep(FREEZE);
                }
            });
            let mut seen = FrozenOutcomes::default();
            for _ in 0..FROZEN_ADDS {
                let counter = Counter::new(&client, "/stats/frozen");
                match counter.add(1).await {
                    Ok(value) => seen.values.push(value),
                    Err(CounterError::OutcomeUnknown { .. }) => seen.unknown += 1,
                    Err(CounterError::Client(err)) if err.is_session_ended() => seen.failed += 1,
                    Err(err) => panic!("add failed: {err}"),
                }
                if client.state().is_terminal() {
                    seen.sessions_lost += 1;
                    client = connect_when_up(&addr, FROZEN_SESSION).await;
                }
            }
            seen
        })
    })
}

#[test]
fn adds_by_workers_frozen_past_their_session_are_exact_or_reported_unknown() {
    // A frozen worker's session expires, maybe with a write of an add sent
    // and its reply never read. That add must come back as OutcomeUnknown
    // (it may have counted) or have truly not counted: the final value is
    // within [succeeded, succeeded + unknown], so an add reported failed
    // that had counted would push it past the top.
    let tick = FROZEN_TICK_MS.to_string();
    let server = TestServer::start_with(&["--tick-ms", &tick]);
    let workers: Vec<_> = (0..FROZEN_WORKERS as u64)
        .map(|id| frozen_worker(server.addr().to_owned(), id))
        .collect();
    let seen: Vec<FrozenOutcomes> = workers
        .into_iter()
        .map(|worker| worker.join().expect("worker finishes"))
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let final_value = runtime.block_on(async {
        let reader = client(&server).await;
        Counter::new(&reader, "/stats/frozen")
            .get()
            .await
            .expect("read")
    });
    let values: Vec<i64> = seen.iter().flat_map(|s| s.values.iter().copied()).collect();
    let succeeded = values.len() as i64;
    let unknown: u64 = seen.iter().map(|s| s.unknown).sum();
    let failed: u64 = seen.iter().map(|s| s.failed).sum();
    let lost: u64 = seen.iter().map(|s| s.sessions_lost).sum();
    println!(
        "final {final_value}: {succeeded} succeeded, {unknown} unknown, {failed} failed, \
         {lost} sessions lost"
    );
    assert!(lost >= 1, "the freezes outlived sessions");
    assert_eq!(
        succeeded as u64 + unknown + failed,
        (FROZEN_WORKERS * FROZEN_ADDS) as u64,
        "every add reported"
    );
    let distinct: BTreeSet<i64> = values.iter().copied().collect();
    assert_eq!(distinct.len(), values.len(), "no value returned twice");
    assert!(
        (succeeded..=succeeded + unknown as i64).contains(&final_value),
        "final {final_value}: {succeeded} succeeded, {unknown} unknown, {failed} failed"
    );
}
