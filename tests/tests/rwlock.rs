//! The read-write lock against a real server: readers share, writers
//! exclude, grants follow arrival order (a queued writer holds back later
//! readers), try-locks refuse without leaving nodes behind.

use std::sync::Arc;
use std::time::Duration;

use arbor_client::recipes::{LockError, RwLock};
use arbor_tests::{client, wait_for_children, TestServer};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Long enough for a wrongly granted waiter to have been granted.
const SETTLE: Duration = Duration::from_millis(300);

async fn granted<T>(task: JoinHandle<T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("granted in time")
        .expect("joins")
}

#[tokio::test]
async fn two_readers_hold_together_while_a_writer_waits() {
    // Readers share the lock; a writer gets it only after the last reader leaves.
    let server = TestServer::start();
    let (a, b, w) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let first = RwLock::new(&a, "/locks/rw").read().await.expect("read");
    let second = tokio::time::timeout(SETTLE, RwLock::new(&b, "/locks/rw").read())
        .await
        .expect("a second reader is not held back by the first")
        .expect("read");
    let writer = tokio::spawn({
        let lock = RwLock::new(&w, "/locks/rw");
        async move { lock.write().await }
    });
    wait_for_children(&a, "/locks/rw", 3).await;
    tokio::time::sleep(SETTLE).await;
    assert!(!writer.is_finished(), "the writer waits for both readers");
    first.release().await.expect("released");
    tokio::time::sleep(SETTLE).await;
    assert!(
        !writer.is_finished(),
        "the writer waits for the second reader"
    );
    let read_token = second.fencing_token();
    second.release().await.expect("released");
    let guard = granted(writer).await.expect("written");
    assert!(guard.fencing_token() > read_token);
    guard.release().await.expect("released");
}

#[tokio::test]
async fn a_queued_writer_holds_back_later_readers() {
    // FIFO: a reader arriving after a waiting writer waits for it (no writer starvation).
    let server = TestServer::start();
    let (a, w, b) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let reading = RwLock::new(&a, "/locks/fifo").read().await.expect("read");
    let writer = tokio::spawn({
        let lock = RwLock::new(&w, "/locks/fifo");
        async move { lock.write().await }
    });
    wait_for_children(&a, "/locks/fifo", 2).await;
    let late_reader = tokio::spawn({
        let lock = RwLock::new(&b, "/locks/fifo");
        async move { lock.read().await }
    });
    wait_for_children(&a, "/locks/fifo", 3).await;
    tokio::time::sleep(SETTLE).await;
    assert!(!writer.is_finished(), "the writer waits for the reader");
    assert!(
        !late_reader.is_finished(),
        "the late reader does not overtake the queued writer"
    );
    reading.release().await.expect("released");
    let writing = granted(writer).await.expect("written");
    tokio::time::sleep(SETTLE).await;
    assert!(
        !late_reader.is_finished(),
        "the late reader waits while the writer holds"
    );
    let write_token = writing.fencing_token();
    writing.release().await.expect("released");
    let reading = granted(late_reader).await.expect("read");
    assert!(reading.fencing_token() > write_token);
}

/// Who holds the lock now, as the contenders themselves report it.
#[derive(Default)]
struct Holders {
    readers: usize,
    writers: usize,
}

impl Holders {
    /// Records a grant, asserting it is compatible with the current holders.
    fn enter(holders: &std::sync::Mutex<Holders>, write: bool) {
        let mut h = holders.lock().expect("not poisoned");
        if write {
            assert_eq!((h.readers, h.writers), (0, 0), "a writer holds alone");
            h.writers += 1;
        } else {
            assert_eq!(h.writers, 0, "no writer holds beside a reader");
            h.readers += 1;
        }
    }

    fn leave(holders: &std::sync::Mutex<Holders>, write: bool) {
        let mut h = holders.lock().expect("not poisoned");
        if write {
            h.writers -= 1;
        } else {
            h.readers -= 1;
        }
    }
}

#[tokio::test]
async fn grants_follow_arrival_order_and_exclude_writers() {
    // A mixed queue is served in order, readers in batches, never with a writer alongside.
    let server = TestServer::start_with(&["--max-connections-per-ip", "100"]);
    let holder = client(&server).await;
    let first = RwLock::new(&holder, "/locks/order")
        .write()
        .await
        .expect("written");
    let writes = [true, false, false, true, false, false, true];
    let holders = Arc::new(std::sync::Mutex::new(Holders::default()));
    let (granted_tx, mut granted_rx) = mpsc::channel(32);
    let mut tasks = Vec::new();
    for (i, &write) in writes.iter().enumerate() {
        let c = client(&server).await;
        let lock = RwLock::new(&c, "/locks/order");
        let (holders, granted_tx) = (holders.clone(), granted_tx.clone());
        tasks.push(tokio::spawn(async move {
            let hold = Duration::from_millis(50);
            if write {
                let guard = lock.write().await.expect("written");
                Holders::enter(&holders, true);
                granted_tx
                    .send((i, guard.fencing_token()))
                    .await
                    .expect("reported");
                tokio::time::sleep(hold).await;
                Holders::leave(&holders, true);
                guard.release().await.expect("released");
            } else {
                let guard = lock.read().await.expect("read");
                Holders::enter(&holders, false);
                granted_tx
                    .send((i, guard.fencing_token()))
                    .await
                    .expect("reported");
                tokio::time::sleep(hold).await;
                Holders::leave(&holders, false);
                guard.release().await.expect("released");
            }
            drop(c);
        }));
        // Queue in a known order: wait until this contender's node exists.
        wait_for_children(&holder, "/locks/order", i + 2).await;
    }
    let first_token = first.fencing_token();
    first.release().await.expect("released");
    let mut order = Vec::new();
    for _ in 0..writes.len() {
        let (i, token) = tokio::time::timeout(Duration::from_secs(10), granted_rx.recv())
            .await
            .expect("granted in time")
            .expect("a grant");
        assert!(token > first_token, "every later grant has a larger token");
        order.push(i);
    }
    // Readers granted together may report in either order: compare batches.
    let expected: [&[usize]; 5] = [&[0], &[1, 2], &[3], &[4, 5], &[6]];
    let mut rest = order.as_slice();
    for batch in expected {
        let (head, tail) = rest.split_at(batch.len());
        let mut head = head.to_vec();
        head.sort_unstable();
        assert_eq!(head, batch, "grants in arrival order: {order:?}");
        rest = tail;
    }
    for task in tasks {
        granted(task).await;
    }
}

#[tokio::test]
async fn try_write_is_refused_while_a_reader_holds() {
    // try_write says Locked (leaving no node) while a reader holds; try_read still shares.
    let server = TestServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let reading = RwLock::new(&a, "/locks/try").read().await.expect("read");
    let lock_b = RwLock::new(&b, "/locks/try");
    assert!(matches!(lock_b.try_write().await, Err(LockError::Locked)));
    assert!(matches!(
        lock_b.write_timeout(Duration::from_millis(200)).await,
        Err(LockError::Timeout)
    ));
    let shared = lock_b.try_read().await.expect("readers share");
    // The refused attempts removed their nodes.
    wait_for_children(&a, "/locks/try", 2).await;
    shared.release().await.expect("released");
    let token = reading.fencing_token();
    reading.release().await.expect("released");
    let writing = lock_b.try_write().await.expect("free now");
    assert!(writing.fencing_token() > token);
    assert!(matches!(
        RwLock::new(&a, "/locks/try").try_read().await,
        Err(LockError::Locked)
    ));
    writing.release().await.expect("released");
}
