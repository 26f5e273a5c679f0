//! Watches over real TCP: one-shot watches fire once, predecessor watches
//! wake exactly one waiter per release, persistent watches keep firing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arbor_client::{AddWatchMode, CreateMode, Error, EventType, WatcherKind};
use arbor_tests::{client, TestServer};

#[tokio::test]
async fn a_one_shot_watch_fires_exactly_once() {
    let server = TestServer::start();
    let c = client(&server).await;
    c.create("/w", b"0".to_vec(), CreateMode::Persistent)
        .await
        .expect("created");
    let (_, _, watch) = c.get_data_watch("/w").await.expect("armed");
    // Persistent watch alongside, to count how many changes really happened.
    let mut all = c
        .watch("/w", AddWatchMode::Persistent)
        .await
        .expect("armed");
    for i in 1..=3u8 {
        c.set_data("/w", vec![i], None).await.expect("set");
    }
    let event = tokio::time::timeout(Duration::from_secs(5), watch)
        .await
        .expect("fires")
        .expect("event");
    assert_eq!(
        (event.event_type, event.path.as_str()),
        (EventType::NodeDataChanged, "/w")
    );
    for _ in 0..3 {
        let event = all.next().await.expect("persistent event");
        assert_eq!(event.event_type, EventType::NodeDataChanged);
    }
    // A second one-shot set after the first fired sees only later changes.
    let (_, _, again) = c.get_data_watch("/w").await.expect("armed");
    c.delete("/w", None).await.expect("deleted");
    assert_eq!(
        again.await.expect("event").event_type,
        EventType::NodeDeleted
    );
}

#[tokio::test]
async fn an_exists_watch_on_a_lock_predecessor_fires_on_its_deletion() {
    let server = TestServer::start();
    let holder = client(&server).await;
    let waiter = client(&server).await;
    holder
        .create("/lock", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    let first = holder
        .create("/lock/n-", Vec::new(), CreateMode::EphemeralSequential)
        .await
        .expect("created");
    let (stat, watch) = waiter.exists_watch(&first).await.expect("armed");
    assert!(stat.is_some());
    drop(holder); // closes the session: the ephemeral goes
    let event = tokio::time::timeout(Duration::from_secs(5), watch)
        .await
        .expect("fires")
        .expect("event");
    assert_eq!(
        (event.event_type, event.path),
        (EventType::NodeDeleted, first)
    );
}

#[tokio::test]
async fn a_hundred_predecessor_waiters_get_one_notification_per_release() {
    let server = TestServer::start_with(&[
        "--max-connections-per-ip",
        "200",
        "--max-connections",
        "400",
    ]);
    let setup = client(&server).await;
    setup
        .create("/lock", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    let waiters = 100;
    let mut sessions = Vec::new();
    for _ in 0..=waiters {
        let c = client(&server).await;
        let node = c
            .create("/lock/n-", Vec::new(), CreateMode::EphemeralSequential)
            .await
            .expect("queued");
        sessions.push((c, node));
    }
    let notifications = Arc::new(AtomicUsize::new(0));
    let mut woken = Vec::new();
    for i in 1..=waiters {
        let predecessor = sessions[i - 1].1.clone();
        let (stat, watch) = sessions[i]
            .0
            .exists_watch(&predecessor)
            .await
            .expect("armed");
        assert!(stat.is_some());
        let count = notifications.clone();
        woken.push(tokio::spawn(async move {
            let event = watch.await.expect("fires");
            count.fetch_add(1, Ordering::SeqCst);
            event
        }));
    }
    for released in 1..=waiters {
        let (holder, node) = &sessions[released - 1];
        holder.delete(node, None).await.expect("released");
        let event = tokio::time::timeout(Duration::from_secs(5), &mut woken[released - 1])
            .await
            .expect("the next waiter wakes")
            .expect("joins");
        assert_eq!(
            (event.event_type, &event.path),
            (EventType::NodeDeleted, node)
        );
        // Give any stray notification time to arrive before counting.
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(
            notifications.load(Ordering::SeqCst),
            released,
            "exactly one per release"
        );
    }
}

#[tokio::test]
async fn child_watches_fire_on_child_changes_and_recursive_watches_see_descendants() {
    let server = TestServer::start();
    let c = client(&server).await;
    c.create("/dir", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    let (children, watch) = c.get_children_watch("/dir").await.expect("armed");
    assert!(children.is_empty());
    let mut tree = c
        .watch("/dir", AddWatchMode::PersistentRecursive)
        .await
        .expect("armed");
    c.create("/dir/a", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    c.create("/dir/a/b", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    let event = watch.await.expect("fires");
    assert_eq!(
        (event.event_type, event.path.as_str()),
        (EventType::NodeChildrenChanged, "/dir")
    );
    let first = tree.next().await.expect("event");
    let second = tree.next().await.expect("event");
    assert_eq!(
        (first.event_type, first.path.as_str()),
        (EventType::NodeCreated, "/dir/a")
    );
    assert_eq!(
        (second.event_type, second.path.as_str()),
        (EventType::NodeCreated, "/dir/a/b")
    );
    c.remove_watches("/dir", WatcherKind::PersistentRecursive)
        .await
        .expect("removed");
    assert!(matches!(tree.next().await, Err(Error::WatchRemoved)));
    let again = c
        .remove_watches("/dir", WatcherKind::PersistentRecursive)
        .await;
    assert!(matches!(again, Err(Error::NoWatcher { .. })), "{again:?}");
}

#[tokio::test]
async fn exists_watches_fire_on_creation_of_a_missing_node() {
    let server = TestServer::start();
    let watcher = client(&server).await;
    let writer = client(&server).await;
    let (stat, watch) = watcher.exists_watch("/later").await.expect("armed");
    assert!(stat.is_none());
    writer
        .create("/later", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    assert_eq!(
        watch.await.expect("fires").event_type,
        EventType::NodeCreated
    );
}
