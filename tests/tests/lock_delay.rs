//! Lock-delay against a real server: after a holder's session expires the
//! next grant waits the delay (a waiter's and a newcomer's alike), while a
//! clean release, a dropped guard, a timed-out, refused or cancelled waiter
//! delay nobody.
//!
//! Time is only ever bounded from below where the implementation guarantees
//! it (a grant comes at least `delay` after the delete it waited for), and
//! from above only with a margin far wider than any schedule: "not delayed"
//! is checked with a 30 s delay against a 10 s deadline.

use std::time::{Duration, Instant};

use arbor_client::recipes::{LockError, Mutex};
use arbor_client::{Client, ClientOptions};
use arbor_tests::TestServer;
use tokio::sync::oneshot;

/// Server tick: a 300 ms session expires soon after its holder freezes.
const TICK_MS: &str = "100";
const SHORT_SESSION: Duration = Duration::from_millis(300);
const LONG_SESSION: Duration = Duration::from_secs(10);
/// A holder frozen this long has surely lost its session and its node.
const PAUSE: Duration = Duration::from_millis(1_200);
/// The delay that expiry tests wait out.
const DELAY: Duration = Duration::from_secs(1);
/// The delay that tests of "no delay" must never see: far above `DEADLINE`.
const LONG_DELAY: Duration = Duration::from_secs(30);
/// How long a grant that must not be delayed may take.
const DEADLINE: Duration = Duration::from_secs(10);

async fn connect(server: &TestServer, session: Duration) -> Client {
    let options = ClientOptions::default().with_session_timeout(session);
    Client::connect(server.addr(), options)
        .await
        .expect("client connects")
}

fn server() -> TestServer {
    TestServer::start_with(&["--tick-ms", TICK_MS])
}

/// A holder on its own thread and runtime: it takes the lock, reports its
/// node, and when told, freezes whole (heartbeats included) past its
/// session, like a GC pause. It never releases on purpose.
fn frozen_holder(
    addr: String,
    path: &'static str,
    held: oneshot::Sender<String>,
    freeze: oneshot::Receiver<()>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let options = ClientOptions::default().with_session_timeout(SHORT_SESSION);
            let client = Client::connect(&addr, options).await.expect("connects");
            let guard = Mutex::new(&client, path)
                .with_lock_delay(DELAY)
                .lock()
                .await
                .expect("granted");
            held.send(guard.node().to_owned()).expect("test alive");
            let _ = freeze.await;
            std::thread::sleep(PAUSE);
            // Its node is gone by now; the guard's drop finds nothing to do.
            drop(guard);
        });
    })
}

/// Polls `node` until it is gone and returns when the last request that
/// still found it was sent: a moment before the server deleted it.
async fn last_seen_before_gone(observer: &Client, node: &str) -> Instant {
    let mut last_present = Instant::now();
    let deadline = Instant::now() + DEADLINE;
    loop {
        let sent = Instant::now();
        match observer.exists(node).await.expect("read") {
            Some(_) => last_present = sent,
            None => return last_present,
        }
        assert!(Instant::now() < deadline, "the frozen holder's node went");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn children(client: &Client, path: &str) -> u32 {
    client
        .exists(path)
        .await
        .expect("read")
        .map_or(0, |stat| stat.num_children)
}

async fn wait_children(client: &Client, path: &str, count: u32) {
    let deadline = Instant::now() + DEADLINE;
    while children(client, path).await != count {
        assert!(Instant::now() < deadline, "{path} has {count} children");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn a_waiter_behind_an_expired_holder_waits_the_delay() {
    // B queued behind A; A's session expires: B is granted no earlier than
    // DELAY after the last moment A's node was seen to exist.
    let server = server();
    let path = "/delay/waiter";
    let (held_tx, held_rx) = oneshot::channel();
    let (freeze_tx, freeze_rx) = oneshot::channel();
    let holder = frozen_holder(server.addr().to_owned(), path, held_tx, freeze_rx);
    let node = held_rx.await.expect("A holds");
    let b = connect(&server, LONG_SESSION).await;
    let observer = connect(&server, LONG_SESSION).await;
    let waiting = tokio::spawn({
        let lock = Mutex::new(&b, path).with_lock_delay(DELAY);
        async move {
            let guard = lock.lock().await.expect("granted");
            (Instant::now(), guard)
        }
    });
    wait_children(&observer, path, 2).await;
    freeze_tx.send(()).expect("A alive");
    let last_present = last_seen_before_gone(&observer, &node).await;
    let (granted_at, guard) = tokio::time::timeout(DEADLINE, waiting)
        .await
        .expect("granted in time")
        .expect("joins");
    let waited = granted_at - last_present;
    println!("granted {waited:?} after A's node was last seen");
    assert!(
        waited >= DELAY,
        "the grant came {waited:?} after the expiry, sooner than the delay {DELAY:?}"
    );
    guard.release().await.expect("released");
    holder.join().expect("A's thread ends");
}

#[tokio::test]
async fn a_newcomer_after_an_expiry_with_nobody_waiting_waits_once() {
    // A expires alone; the directory keeps the record (it is persistent),
    // so D, arriving later, waits the delay; once D has, the expiry is
    // accounted for: E, with a delay far over the deadline, is not delayed.
    let server = server();
    let path = "/delay/newcomer";
    let (held_tx, held_rx) = oneshot::channel();
    let (freeze_tx, freeze_rx) = oneshot::channel();
    let holder = frozen_holder(server.addr().to_owned(), path, held_tx, freeze_rx);
    let node = held_rx.await.expect("A holds");
    let observer = connect(&server, LONG_SESSION).await;
    freeze_tx.send(()).expect("A alive");
    last_seen_before_gone(&observer, &node).await;
    // Past the container reaper's interval: a container would be gone.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        observer.exists(path).await.expect("read").is_some(),
        "the lock-delay directory outlives its last contender"
    );
    let d = connect(&server, LONG_SESSION).await;
    let asked = Instant::now();
    let guard = tokio::time::timeout(DEADLINE, Mutex::new(&d, path).with_lock_delay(DELAY).lock())
        .await
        .expect("granted in time")
        .expect("granted");
    let waited = asked.elapsed();
    println!("the newcomer was granted after {waited:?}");
    assert!(
        waited >= DELAY,
        "granted after {waited:?}, before the delay"
    );
    guard.release().await.expect("released");
    let e = connect(&server, LONG_SESSION).await;
    let again = tokio::time::timeout(
        DEADLINE,
        Mutex::new(&e, path).with_lock_delay(LONG_DELAY).lock(),
    )
    .await
    .expect("the expiry is waited for once, not again")
    .expect("granted");
    again.release().await.expect("released");
    holder.join().expect("A's thread ends");
}

#[tokio::test]
async fn clean_releases_and_dropped_guards_delay_nobody() {
    // A waiter behind a releasing holder, a newcomer after it, and one after
    // a guard that was dropped (released in the background): all granted
    // well inside the deadline, though the delay is 30 s.
    let server = server();
    let path = "/delay/clean";
    let (h, w) = (
        connect(&server, LONG_SESSION).await,
        connect(&server, LONG_SESSION).await,
    );
    let lock_h = Mutex::new(&h, path).with_lock_delay(LONG_DELAY);
    let lock_w = Mutex::new(&w, path).with_lock_delay(LONG_DELAY);
    let held = lock_h.lock().await.expect("granted");
    let waiting = tokio::spawn(async move { lock_w.lock().await });
    wait_children(&h, path, 2).await;
    held.release().await.expect("released");
    let next = tokio::time::timeout(DEADLINE, waiting)
        .await
        .expect("a clean release does not delay the waiter")
        .expect("joins")
        .expect("granted");
    next.release().await.expect("released");
    let newcomer = tokio::time::timeout(DEADLINE, lock_h.lock())
        .await
        .expect("nor a newcomer")
        .expect("granted");
    drop(newcomer);
    let after_drop = tokio::time::timeout(DEADLINE, lock_h.lock())
        .await
        .expect("a dropped guard's release delays nobody")
        .expect("granted");
    after_drop.release().await.expect("released");
}

#[tokio::test]
async fn waiters_that_give_up_delay_nobody() {
    // Waiters behind a holder leave in every way there is — a timeout, a
    // refused try_lock, a future dropped at each step of its acquisition —
    // and then the holder releases: the one waiter left is granted at once.
    let server = server();
    let path = "/delay/cancelled";
    let (h, w, c) = (
        connect(&server, LONG_SESSION).await,
        connect(&server, LONG_SESSION).await,
        connect(&server, LONG_SESSION).await,
    );
    let held = Mutex::new(&h, path)
        .with_lock_delay(LONG_DELAY)
        .lock()
        .await
        .expect("granted");
    let lock_w = Mutex::new(&w, path).with_lock_delay(LONG_DELAY);
    let waiting = tokio::spawn(async move { lock_w.lock().await });
    wait_children(&h, path, 2).await;
    let lock_c = Mutex::new(&c, path).with_lock_delay(LONG_DELAY);
    assert!(matches!(
        lock_c.lock_timeout(Duration::from_millis(200)).await,
        Err(LockError::Timeout)
    ));
    assert!(matches!(lock_c.try_lock().await, Err(LockError::Locked)));
    // Dropped after each number of polls: the create in flight, its reply
    // read, the look, the watch (the lost-create clean-up included).
    for polls in 0..8 {
        let mut attempt = Box::pin(lock_c.lock());
        for _ in 0..polls {
            let polled = tokio::time::timeout(Duration::ZERO, &mut attempt).await;
            assert!(polled.is_err(), "the lock is held, so no grant");
            tokio::time::sleep(Duration::from_micros(300)).await;
        }
        drop(attempt);
        wait_children(&h, path, 2).await;
    }
    held.release().await.expect("released");
    let next = tokio::time::timeout(DEADLINE, waiting)
        .await
        .expect("cancelled waiters do not delay the grant")
        .expect("joins")
        .expect("granted");
    next.release().await.expect("released");
}
