//! The fair lock against a real server: FIFO grants, growing fencing tokens,
//! try-lock and timeouts, cancelled waiters leave no trace.

use std::sync::Arc;
use std::time::Duration;

use arbor_client::recipes::{LockError, Mutex};
use arbor_tests::{client, TestServer};
use tokio::sync::mpsc;

#[tokio::test]
async fn grants_follow_arrival_order_with_growing_tokens() {
    let server = TestServer::start_with(&["--max-connections-per-ip", "100"]);
    let holder = client(&server).await;
    let first = Mutex::new(&holder, "/locks/fifo")
        .lock()
        .await
        .expect("granted");
    let (granted_tx, mut granted_rx) = mpsc::channel(32);
    let mut waiters = Vec::new();
    for i in 0..20usize {
        let c = client(&server).await;
        let granted_tx = granted_tx.clone();
        let lock = Mutex::new(&c, "/locks/fifo");
        // Queue in a known order: wait until this waiter's node exists.
        let before = holder
            .get_children("/locks/fifo")
            .await
            .expect("listed")
            .len();
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock().await.expect("granted");
            granted_tx
                .send((i, guard.fencing_token()))
                .await
                .expect("reported");
            guard.release().await.expect("released");
            drop(c);
        }));
        while holder
            .get_children("/locks/fifo")
            .await
            .expect("listed")
            .len()
            == before
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let mut last_token = first.fencing_token();
    first.release().await.expect("released");
    for want in 0..20usize {
        let (i, token) = tokio::time::timeout(Duration::from_secs(10), granted_rx.recv())
            .await
            .expect("granted in time")
            .expect("a grant");
        assert_eq!(i, want, "grants come in arrival order");
        assert!(
            token > last_token,
            "tokens grow: {token} after {last_token}"
        );
        last_token = token;
    }
    for waiter in waiters {
        waiter.await.expect("waiter finishes");
    }
}

#[tokio::test]
async fn try_lock_refuses_while_held_and_timeouts_leave_the_queue() {
    let server = TestServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let held = Mutex::new(&a, "/locks/t").lock().await.expect("granted");
    let lock_b = Mutex::new(&b, "/locks/t");
    assert!(matches!(lock_b.try_lock().await, Err(LockError::Locked)));
    assert!(matches!(
        lock_b.lock_timeout(Duration::from_millis(200)).await,
        Err(LockError::Timeout)
    ));
    // The abandoned attempts removed their nodes (in the background).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        a.get_children("/locks/t").await.expect("listed"),
        vec![held.node().rsplit('/').next().expect("name").to_owned()]
    );
    let token = held.fencing_token();
    held.release().await.expect("released");
    let next = lock_b.try_lock().await.expect("free now");
    assert!(next.fencing_token() > token);
}

#[tokio::test]
async fn cancelling_random_waiters_leaves_no_stale_nodes_and_keeps_the_queue() {
    let server = TestServer::start_with(&["--max-connections-per-ip", "100"]);
    let holder = client(&server).await;
    let held = Mutex::new(&holder, "/locks/c")
        .lock()
        .await
        .expect("granted");
    let granted = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let mut clients = Vec::new();
    for i in 0..30usize {
        let c = client(&server).await;
        let lock = Mutex::new(&c, "/locks/c");
        let granted = granted.clone();
        clients.push(c);
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await.expect("granted");
            granted.lock().expect("not poisoned").push(i);
            guard.release().await.expect("released");
        }));
    }
    while holder.get_children("/locks/c").await.expect("listed").len() < 31 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Cancel ten waiters spread through the queue.
    let cancelled: Vec<usize> = (0..30).filter(|i| i % 3 == 1).collect();
    for &i in &cancelled {
        tasks[i].abort();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        holder.get_children("/locks/c").await.expect("listed").len(),
        21,
        "cancelled nodes are gone"
    );
    held.release().await.expect("released");
    for (i, task) in tasks.into_iter().enumerate() {
        if !cancelled.contains(&i) {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("granted in time")
                .expect("joins");
        }
    }
    assert_eq!(
        granted.lock().expect("not poisoned").len(),
        20,
        "every remaining waiter got the lock"
    );
}

#[tokio::test]
async fn a_hundred_waiters_one_notification_per_release_and_random_cancels() {
    // 100 queued waiters: FIFO grants, one watch event per release among the
    // live waiters, and 10 random cancellations leave no node behind.
    let server = TestServer::start_with(&[
        "--max-connections-per-ip",
        "250",
        "--max-connections",
        "400",
    ]);
    let holder = client(&server).await;
    let held = Mutex::new(&holder, "/locks/h")
        .lock()
        .await
        .expect("granted");
    let (granted_tx, mut granted_rx) = mpsc::channel(128);
    let (release_tx, _) = tokio::sync::broadcast::channel::<usize>(128);
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..100usize {
        let c = client(&server).await;
        let lock = Mutex::new(&c, "/locks/h");
        let granted_tx = granted_tx.clone();
        let mut release_rx = release_tx.subscribe();
        let before = holder.get_children("/locks/h").await.expect("listed").len();
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await.expect("granted");
            granted_tx
                .send((i, guard.fencing_token()))
                .await
                .expect("reported");
            // Hold until the test says this grant may go.
            while release_rx.recv().await.expect("test alive") != i {}
            guard.release().await.expect("released");
        }));
        clients.push(c);
        while holder.get_children("/locks/h").await.expect("listed").len() == before {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64
        | 1;
    let mut rng = seed;
    let mut cancelled = std::collections::BTreeSet::new();
    while cancelled.len() < 10 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        cancelled.insert((rng % 100) as usize);
    }
    for &i in &cancelled {
        tasks[i].abort();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        holder.get_children("/locks/h").await.expect("listed").len(),
        91,
        "seed {seed}: cancelled waiters {cancelled:?} left nodes behind"
    );
    let live: Vec<usize> = (0..100).filter(|i| !cancelled.contains(i)).collect();
    let live_events = |clients: &[arbor_client::Client]| -> u64 {
        live.iter()
            .map(|&i| clients[i].watch_events_received())
            .sum()
    };
    let mut last_token = held.fencing_token();
    let mut before = live_events(&clients);
    held.release().await.expect("released");
    for &want in &live {
        let (i, token) = tokio::time::timeout(Duration::from_secs(10), granted_rx.recv())
            .await
            .expect("granted in time")
            .expect("a grant");
        assert_eq!(i, want, "seed {seed}: grants follow arrival order");
        assert!(token > last_token, "tokens grow");
        last_token = token;
        tokio::time::sleep(Duration::from_millis(5)).await;
        let after = live_events(&clients);
        assert_eq!(
            after - before,
            1,
            "seed {seed}: exactly one notification for the release before grant {i}"
        );
        before = after;
        let _ = release_tx.send(i);
    }
    for (i, task) in tasks.into_iter().enumerate() {
        if !cancelled.contains(&i) {
            task.await.expect("joins");
        }
    }
}

/// Waits until `path` has exactly `count` children, or fails naming `what`.
async fn settle(client: &arbor_client::Client, path: &str, count: usize, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let children = client.get_children(path).await.expect("listed");
        if children.len() == count {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: left {children:?} behind"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_lock_cancelled_at_any_step_leaves_no_node() {
    // Lost replies are common in a failover, and a caller's timeout can fire
    // while the create is in flight: the waiter's node must go wherever the
    // future is dropped, including before the create's reply was read.
    let server = TestServer::start();
    let holder = client(&server).await;
    let waiter = client(&server).await;
    let held = Mutex::new(&holder, "/locks/steps")
        .lock()
        .await
        .expect("granted");
    let lock = Mutex::new(&waiter, "/locks/steps");
    // Drop after exactly `polls` polls, the reply given time to arrive
    // between them: each await point of `lock` in turn.
    for polls in 0..12 {
        let mut attempt = Box::pin(lock.lock());
        for _ in 0..polls {
            let polled = tokio::time::timeout(Duration::ZERO, &mut attempt).await;
            assert!(polled.is_err(), "the lock is held, so no grant");
            tokio::time::sleep(Duration::from_micros(300)).await;
        }
        drop(attempt);
        settle(
            &holder,
            "/locks/steps",
            1,
            &format!("dropped after {polls} polls"),
        )
        .await;
    }
    // Drop after a time instead: anywhere in the first round trips.
    for micros in (0..3_000).step_by(150) {
        let timeout = Duration::from_micros(micros);
        let result = lock.lock_timeout(timeout).await;
        assert!(
            matches!(result, Err(LockError::Timeout)),
            "held, so no grant"
        );
        settle(
            &holder,
            "/locks/steps",
            1,
            &format!("timed out after {micros} µs"),
        )
        .await;
    }
    held.release().await.expect("released");
    let next = tokio::time::timeout(Duration::from_secs(5), lock.lock())
        .await
        .expect("the queue is not blocked")
        .expect("granted");
    next.release().await.expect("released");
}
