//! Mutual exclusion under stress, with holders frozen past their session
//! timeout: the fenced store accepts no stale write and loses no update; the
//! same run against an unfenced store loses updates (so the test can fail).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arbor_client::recipes::{Fence, Mutex};
use arbor_client::{Client, ClientOptions, ConnectionState};
use arbor_tests::TestServer;

const WORKERS: u64 = 20;
const CYCLES: u64 = 200;
/// Server tick for this test: session timeouts of 2 ticks expire quickly.
const TICK_MS: u64 = 100;
const SESSION_TIMEOUT: Duration = Duration::from_millis(2 * TICK_MS);
/// A holder frozen this long has surely lost its session and its lock.
const PAUSE: Duration = Duration::from_millis(2 * TICK_MS + 3 * TICK_MS);

/// The protected resource: a counter incremented read-modify-write.
struct Store {
    fence: Option<Fence>,
    value: std::sync::Mutex<u64>,
    /// Writes the store took.
    accepted: AtomicU64,
    /// Writes the fence refused as stale.
    rejected: AtomicU64,
    /// Accepted writes whose token was older than one accepted before them:
    /// counted independently of the fence.
    stale_accepted: AtomicU64,
    newest_accepted: AtomicU64,
}

impl Store {
    fn new(fenced: bool) -> Self {
        Self {
            fence: fenced.then(Fence::new),
            value: std::sync::Mutex::new(0),
            accepted: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            stale_accepted: AtomicU64::new(0),
            newest_accepted: AtomicU64::new(0),
        }
    }

    fn read(&self) -> u64 {
        *self.value.lock().expect("not poisoned")
    }

    fn write(&self, token: u64, value: u64) {
        let store = || {
            *self.value.lock().expect("not poisoned") = value;
            if self.newest_accepted.fetch_max(token, Ordering::SeqCst) > token {
                self.stale_accepted.fetch_add(1, Ordering::SeqCst);
            }
        };
        match &self.fence {
            Some(fence) => match fence.write(token, store) {
                Ok(()) => self.accepted.fetch_add(1, Ordering::SeqCst),
                Err(_) => self.rejected.fetch_add(1, Ordering::SeqCst),
            },
            None => {
                store();
                self.accepted.fetch_add(1, Ordering::SeqCst)
            }
        };
    }
}

async fn connect(addr: &str) -> Client {
    let options = ClientOptions::default().with_session_timeout(SESSION_TIMEOUT);
    loop {
        match Client::connect(addr, options.clone()).await {
            Ok(client) => return client,
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// One worker on its own thread and runtime, so that a pause (a blocking
/// sleep) freezes it entirely — heartbeats included — like a GC pause.
fn worker(addr: String, store: Arc<Store>, id: u64) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let pause_at = (id * 7 + 13) % CYCLES;
            let mut client = connect(&addr).await;
            for cycle in 0..CYCLES {
                if client.state().is_terminal() {
                    client = connect(&addr).await;
                }
                let Ok(guard) = Mutex::new(&client, "/stress").lock().await else {
                    continue; // lost the session while waiting: start over
                };
                let seen = store.read();
                if cycle == pause_at {
                    std::thread::sleep(PAUSE);
                }
                store.write(guard.fencing_token(), seen + 1);
                let _ = guard.release().await;
                if client.state() == ConnectionState::Expired {
                    client = connect(&addr).await;
                }
            }
        });
    })
}

/// Final value, accepted writes, refused writes, stale writes accepted.
fn run(fenced: bool) -> (u64, u64, u64, u64) {
    let tick = TICK_MS.to_string();
    let server = TestServer::start_with(&["--tick-ms", &tick, "--max-connections-per-ip", "200"]);
    let store = Arc::new(Store::new(fenced));
    let workers: Vec<_> = (0..WORKERS)
        .map(|id| worker(server.addr().to_owned(), store.clone(), id))
        .collect();
    for worker in workers {
        worker.join().expect("worker finishes");
    }
    let accepted = store.accepted.load(Ordering::SeqCst);
    let rejected = store.rejected.load(Ordering::SeqCst);
    let stale = store.stale_accepted.load(Ordering::SeqCst);
    (store.read(), accepted, rejected, stale)
}

#[test]
fn a_fenced_store_loses_no_update_and_an_unfenced_one_does() {
    let (value, accepted, rejected, stale) = run(true);
    println!(
        "fenced: value {value}, accepted {accepted}, rejected {rejected}, stale accepted {stale}"
    );
    assert_eq!(stale, 0, "the fenced store accepted no stale write");
    assert_eq!(value, accepted, "with the fence no update is lost");
    assert!(
        rejected > 0,
        "paused holders came back with stale tokens and were refused"
    );

    let (value, accepted, _, stale) = run(false);
    println!("unfenced: value {value}, accepted {accepted}, stale accepted {stale}");
    assert!(stale > 0, "without the fence stale writes land");
    assert!(
        value < accepted,
        "and they overwrite newer values: lost updates"
    );
}
