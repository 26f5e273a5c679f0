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
