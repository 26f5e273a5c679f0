//! The read-write lock against a real server: readers share, writers
//! exclude, grants follow arrival order (a queued writer holds back later
//! readers), try-locks refuse without leaving nodes behind.

use std::sync::Arc;
use std::time::Duration;

use arbor_client::recipes::{LockError, RwLock};
use arbor_tests::{client, listings, wait_for_children, TestServer};
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
    // The refused attempts removed their nodes (the timed-out one in the
    // background: until then it is a writer queued ahead of any reader).
    wait_for_children(&a, "/locks/try", 1).await;
    let shared = lock_b.try_read().await.expect("readers share");
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

/// Waits until the lock's directory has `count` children, by its stat (not
/// by listing it, which the test counts).
async fn queued(client: &arbor_client::Client, path: &str, count: u32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while client
        .exists(path)
        .await
        .expect("read")
        .map_or(0, |stat| stat.num_children)
        != count
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{count} queued in time"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn fifty_waiters_no_herd_and_no_listing() {
    // 25 writers then 25 readers queue behind a writer: each release wakes
    // only the contenders it unblocks (one writer, or all 25 readers after
    // the last writer), and no contender ever lists the queue.
    const WRITERS: usize = 25;
    const READERS: usize = 25;
    let server = TestServer::start_with(&["--max-connections-per-ip", "100"]);
    let holder = client(&server).await;
    let path = "/locks/herd";
    let held = RwLock::new(&holder, path).write().await.expect("written");
    let listed_before = listings(&server);
    let (granted_tx, mut granted_rx) = mpsc::channel(64);
    let (release_tx, _) = tokio::sync::broadcast::channel::<usize>(64);
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..WRITERS + READERS {
        let c = client(&server).await;
        let lock = RwLock::new(&c, path);
        let granted_tx = granted_tx.clone();
        let mut release_rx = release_tx.subscribe();
        tasks.push(tokio::spawn(async move {
            if i < WRITERS {
                let guard = lock.write().await.expect("written");
                granted_tx.send(i).await.expect("reported");
                while release_rx.recv().await.expect("test alive") != i {}
                guard.release().await.expect("released");
            } else {
                let guard = lock.read().await.expect("read");
                granted_tx.send(i).await.expect("reported");
                while release_rx.recv().await.expect("test alive") != i {}
                guard.release().await.expect("released");
            }
        }));
        clients.push(c);
        // Queue in a known order.
        queued(&holder, path, i as u32 + 2).await;
    }
    let events = |clients: &[arbor_client::Client]| -> u64 {
        clients.iter().map(|c| c.watch_events_received()).sum()
    };
    let mut before = events(&clients);
    held.release().await.expect("released");
    for want in 0..WRITERS {
        let i = tokio::time::timeout(Duration::from_secs(10), granted_rx.recv())
            .await
            .expect("granted in time")
            .expect("a grant");
        assert_eq!(i, want, "writers are granted in arrival order");
        tokio::time::sleep(Duration::from_millis(5)).await;
        let after = events(&clients);
        assert_eq!(
            after - before,
            1,
            "one wake for the release before grant {i}"
        );
        before = after;
        let _ = release_tx.send(i);
    }
    // The last writer's release unblocks every reader: each woke once.
    let mut readers = std::collections::BTreeSet::new();
    for _ in 0..READERS {
        let i = tokio::time::timeout(Duration::from_secs(10), granted_rx.recv())
            .await
            .expect("granted in time")
            .expect("a grant");
        readers.insert(i);
    }
    assert_eq!(readers, (WRITERS..WRITERS + READERS).collect());
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(
        events(&clients) - before,
        READERS as u64,
        "the readers, and only they, woke"
    );
    for i in WRITERS..WRITERS + READERS {
        let _ = release_tx.send(i);
    }
    for task in tasks {
        granted(task).await;
    }
    assert_eq!(
        listings(&server) - listed_before,
        0,
        "no contender listed the queue"
    );
    // The count can move: one listing shows in it. (Of the root: the lock's
    // directory is a container, which the server may have reaped by now.)
    holder.get_children("/").await.expect("listed");
    assert_eq!(listings(&server) - listed_before, 1, "a listing is counted");
}
