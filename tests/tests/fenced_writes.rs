//! Server-fenced writes against a real server, with holders frozen past
//! their lock session while their data session lives on: a holder that
//! lost its lock cannot write through the fence (the write is refused whole
//! and changes nothing), though the same write unfenced lands; and under
//! stress no fenced commit ever lands after a later grant, and the counter
//! the fence guards equals the number of fenced increments committed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arbor_client::recipes::{FencedError, Mutex};
use arbor_client::{Client, CreateMode, ErrorCode};
use arbor_tests::{connect_when_up, TestServer};

/// Server tick: a lock session of 2 ticks expires soon after its holder
/// freezes.
const TICK_MS: u64 = 100;
/// The lock's session: short, so a frozen holder loses it.
const LOCK_SESSION: Duration = Duration::from_millis(2 * TICK_MS);
/// The data client's session: long, so it outlives every pause.
const DATA_SESSION: Duration = Duration::from_secs(10);
/// A holder frozen this long has surely lost its lock session and node.
const PAUSE: Duration = Duration::from_millis(2 * TICK_MS + 3 * TICK_MS);
/// How long any one step may take before the test fails.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);

fn server() -> TestServer {
    let tick = TICK_MS.to_string();
    TestServer::start_with(&["--tick-ms", &tick, "--max-connections-per-ip", "200"])
}

/// A runtime of its own for the data clients: it keeps their sessions
/// alive while a holder's runtime is frozen.
fn data_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// What the frozen holder saw once it woke.
struct Woke {
    fenced: Result<(), FencedError>,
    after_fenced: Vec<u8>,
    after_unfenced: Vec<u8>,
    token: u64,
}

#[test]
fn a_paused_holders_fenced_write_is_refused_and_its_unfenced_write_lands() {
    let server = server();
    let addr = server.addr().to_owned();
    let data_rt = data_runtime();
    let data = data_rt.block_on(connect_when_up(&addr, DATA_SESSION));
    data_rt
        .block_on(data.create("/config", b"v0".to_vec(), CreateMode::Persistent))
        .expect("created");
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (wrote_tx, wrote_rx) = std::sync::mpsc::channel();
    let holder = std::thread::spawn({
        let (addr, data) = (addr.clone(), data.clone());
        move || {
            current_thread().block_on(async move {
                let lock_client = connect_when_up(&addr, LOCK_SESSION).await;
                let guard = Mutex::new(&lock_client, "/locks/config")
                    .lock()
                    .await
                    .expect("granted");
                // While it holds, the fenced write goes through.
                guard
                    .fenced()
                    .via(&data)
                    .set_data("/config", b"holder".to_vec(), None)
                    .commit()
                    .await
                    .expect("a holder writes");
                held_tx.send(()).expect("test alive");
                // Frozen whole, heartbeats included: the lock session
                // expires; the data client's runtime runs on.
                std::thread::sleep(PAUSE);
                wrote_rx
                    .recv_timeout(STEP_TIMEOUT)
                    .expect("the next holder wrote");
                let fenced = guard
                    .fenced()
                    .via(&data)
                    .set_data("/config", b"stale".to_vec(), None)
                    .commit()
                    .await
                    .map(drop);
                let after_fenced = data.get_data("/config").await.expect("read").0;
                data.set_data("/config", b"stale".to_vec(), None)
                    .await
                    .expect("an unfenced write lands");
                let after_unfenced = data.get_data("/config").await.expect("read").0;
                Woke {
                    fenced,
                    after_fenced,
                    after_unfenced,
                    token: guard.fencing_token(),
                }
            })
        }
    });
    held_rx
        .recv_timeout(STEP_TIMEOUT)
        .expect("the holder holds");
    let next_token = current_thread().block_on(async {
        let worker = connect_when_up(&addr, DATA_SESSION).await;
        let guard = tokio::time::timeout(STEP_TIMEOUT, Mutex::new(&worker, "/locks/config").lock())
            .await
            .expect("granted once the frozen holder's session expired")
            .expect("granted");
        guard
            .fenced()
            .set_data("/config", b"next".to_vec(), None)
            .commit()
            .await
            .expect("the new holder writes");
        wrote_tx.send(()).expect("holder alive");
        // Held on while the frozen holder tries: it is refused because its
        // own node is gone, not because the lock is free.
        let token = guard.fencing_token();
        let woke = holder.join().expect("the holder's thread ends");
        guard.release().await.expect("released");
        (token, woke)
    });
    let (next_token, woke) = next_token;
    assert!(next_token > woke.token, "the next grant's token is higher");
    assert!(
        matches!(woke.fenced, Err(FencedError::GrantLost { .. })),
        "the paused holder's fenced write is refused: {:?}",
        woke.fenced
    );
    assert_eq!(
        woke.after_fenced, b"next",
        "the refused write changed nothing"
    );
    assert_eq!(
        woke.after_unfenced, b"stale",
        "the same write unfenced lands over the new holder's"
    );
}

const WORKERS: u64 = 6;
const CYCLES: u64 = 30;

/// What the stress run counted, across workers.
#[derive(Default)]
struct Tally {
    /// The highest fencing token granted so far.
    newest_grant: AtomicU64,
    /// Fenced increments that committed.
    committed: AtomicU64,
    /// Fenced commits whose outcome is unknown (a lost reply).
    unknown: AtomicU64,
    /// Commits sent after a higher token had been granted: the lock was
    /// surely lost before they left.
    stale_sent: AtomicU64,
    /// Of those, the ones the fence refused.
    stale_refused: AtomicU64,
    /// Of those, the ones that committed: must stay 0.
    stale_committed: AtomicU64,
}

/// One worker: its lock client on its own thread and runtime (frozen by a
/// pause), its data client on the shared data runtime (never frozen).
fn worker(addr: String, data: Client, tally: Arc<Tally>, id: u64) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        current_thread().block_on(async move {
            let pause_at = (id * 5 + 3) % CYCLES;
            let mut lock_client = connect_when_up(&addr, LOCK_SESSION).await;
            for cycle in 0..CYCLES {
                if lock_client.state().is_terminal() {
                    lock_client = connect_when_up(&addr, LOCK_SESSION).await;
                }
                let Ok(guard) = Mutex::new(&lock_client, "/locks/counter").lock().await else {
                    continue; // lost the session while waiting: start over
                };
                let token = guard.fencing_token();
                tally.newest_grant.fetch_max(token, Ordering::SeqCst);
                let Ok((value, stat)) = data.get_data("/counter").await else {
                    continue;
                };
                let value: u64 = String::from_utf8_lossy(&value).parse().expect("a count");
                if cycle == pause_at {
                    std::thread::sleep(PAUSE);
                }
                let stale = tally.newest_grant.load(Ordering::SeqCst) > token;
                let result = guard
                    .fenced()
                    .via(&data)
                    .set_data("/counter", (value + 1).to_string(), Some(stat.version))
                    .commit()
                    .await;
                if stale {
                    tally.stale_sent.fetch_add(1, Ordering::SeqCst);
                }
                match result {
                    Ok(_) => {
                        tally.committed.fetch_add(1, Ordering::SeqCst);
                        if stale {
                            tally.stale_committed.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    Err(FencedError::GrantLost { .. }) if stale => {
                        tally.stale_refused.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(FencedError::GrantLost { .. }) => {}
                    Err(FencedError::OpFailed {
                        code: ErrorCode::BadVersion,
                        ..
                    }) => {}
                    Err(FencedError::Client(err)) if err.code().is_none() => {
                        tally.unknown.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(err) => panic!("unexpected fenced outcome: {err}"),
                }
                let _ = guard.release().await;
            }
        });
    })
}

#[test]
fn under_stress_no_fenced_commit_lands_after_its_lock_was_lost() {
    let server = server();
    let addr = server.addr().to_owned();
    let data_rt = data_runtime();
    let setup = data_rt.block_on(connect_when_up(&addr, DATA_SESSION));
    data_rt
        .block_on(setup.create("/counter", b"0".to_vec(), CreateMode::Persistent))
        .expect("created");
    let tally = Arc::new(Tally::default());
    let workers: Vec<_> = (0..WORKERS)
        .map(|id| {
            let data = data_rt.block_on(connect_when_up(&addr, DATA_SESSION));
            worker(addr.clone(), data, tally.clone(), id)
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker finishes");
    }
    let (value, _) = data_rt.block_on(setup.get_data("/counter")).expect("read");
    let value: u64 = String::from_utf8_lossy(&value).parse().expect("a count");
    let committed = tally.committed.load(Ordering::SeqCst);
    let unknown = tally.unknown.load(Ordering::SeqCst);
    let stale_sent = tally.stale_sent.load(Ordering::SeqCst);
    let stale_refused = tally.stale_refused.load(Ordering::SeqCst);
    let stale_committed = tally.stale_committed.load(Ordering::SeqCst);
    println!(
        "counter {value}, committed {committed}, unknown {unknown}, \
         stale sent {stale_sent}, refused {stale_refused}, committed {stale_committed}"
    );
    assert_eq!(stale_committed, 0, "no commit landed after a later grant");
    assert!(
        stale_sent > 0,
        "paused holders came back after a later grant and tried"
    );
    assert_eq!(
        stale_refused, stale_sent,
        "every one of them was refused by the fence itself"
    );
    assert!(
        (committed..=committed + unknown).contains(&value),
        "the counter ({value}) counts exactly the committed increments ({committed}, {unknown} unknown)"
    );
    assert!(committed > 0, "work was done");
}
