//! Containers and TTL nodes are deleted by the server when due, through the
//! log, with watch events.

use std::time::Duration;

use arbor_client::{CreateMode, Error, EventType};
use arbor_tests::{client, TestServer};

#[tokio::test]
async fn a_container_goes_once_its_last_child_goes() {
    let server = TestServer::start();
    let c = client(&server).await;
    c.create("/c", Vec::new(), CreateMode::Container)
        .await
        .expect("created");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        c.exists("/c").await.expect("checked").is_some(),
        "a container that never had children stays"
    );
    c.create("/c/x", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    let (_, gone) = c.exists_watch("/c").await.expect("armed");
    c.delete("/c/x", None).await.expect("deleted");
    let event = tokio::time::timeout(Duration::from_secs(5), gone)
        .await
        .expect("reaped")
        .expect("event");
    assert_eq!(
        (event.event_type, event.path.as_str()),
        (EventType::NodeDeleted, "/c")
    );
}

#[tokio::test]
async fn a_ttl_node_goes_once_childless_and_unmodified_for_its_ttl() {
    let server = TestServer::start();
    let c = client(&server).await;
    let ttl = CreateMode::PersistentWithTtl { ttl_ms: 600 };
    c.create("/t", Vec::new(), ttl).await.expect("created");
    c.create("/t/kid", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(
        c.exists("/t").await.expect("checked").is_some(),
        "a node with children stays"
    );
    c.delete("/t/kid", None).await.expect("deleted");
    // Deleting a child is not a modification of the node itself (ZooKeeper
    // looks at mtime), so the node is already due.
    // The reaper may take it before the watch is set: then exists says so.
    let (stat, gone) = c.exists_watch("/t").await.expect("armed");
    if stat.is_some() {
        tokio::time::timeout(Duration::from_secs(5), gone)
            .await
            .expect("reaped")
            .expect("event");
    }
    assert!(c.exists("/t").await.expect("checked").is_none(), "reaped");
    let zero = c
        .create(
            "/z",
            Vec::new(),
            CreateMode::PersistentWithTtl { ttl_ms: 0 },
        )
        .await;
    assert!(matches!(zero, Err(Error::BadArguments)), "{zero:?}");
}

#[tokio::test]
async fn dropping_a_client_closes_its_session_and_ephemerals() {
    let server = TestServer::start();
    let watcher = client(&server).await;
    let owner = client(&server).await;
    owner
        .create("/mine", Vec::new(), CreateMode::Ephemeral)
        .await
        .expect("created");
    let (_, gone) = watcher.exists_watch("/mine").await.expect("armed");
    drop(owner);
    // Well inside the 4 s session timeout: the close is explicit, not an expiry.
    let event = tokio::time::timeout(Duration::from_secs(2), gone)
        .await
        .expect("closed promptly")
        .expect("event");
    assert_eq!(event.event_type, EventType::NodeDeleted);
}
