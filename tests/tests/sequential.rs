//! Sequential nodes: concurrent creates under one parent get distinct,
//! contiguous suffixes, and the suffix order is the zxid order.

use arbor_client::CreateMode;
use arbor_protocol::path::parse_sequence;
use arbor_tests::{client, TestServer};

#[tokio::test]
async fn ten_clients_times_ten_concurrent_creates_get_contiguous_suffixes() {
    let server = TestServer::start();
    let admin = client(&server).await;
    admin
        .create("/q", Vec::new(), CreateMode::Persistent)
        .await
        .expect("parent");
    let mut clients = Vec::new();
    for _ in 0..10 {
        clients.push(client(&server).await);
    }
    let mut tasks = Vec::new();
    for c in &clients {
        for _ in 0..10 {
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                c.create_with_stat("/q/n-", Vec::new(), CreateMode::EphemeralSequential)
                    .await
                    .expect("created")
            }));
        }
    }
    let mut created = Vec::new();
    for task in tasks {
        let (path, stat) = task.await.expect("joins");
        let name = path.strip_prefix("/q/n-").expect("under the prefix");
        assert_eq!(name.len(), 10, "ten digits: {path}");
        created.push((parse_sequence(&path).expect("numbered"), stat.czxid));
    }
    created.sort_unstable();
    let suffixes: Vec<u64> = created.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(
        suffixes,
        (0..100).collect::<Vec<u64>>(),
        "distinct and contiguous"
    );
    assert!(
        created.windows(2).all(|w| w[0].1 < w[1].1),
        "czxid order is suffix order"
    );
    let children = admin.get_children("/q").await.expect("listed");
    assert_eq!(children.len(), 100);
}

#[tokio::test]
async fn the_suffix_counter_is_the_parents_and_survives_deletes() {
    let server = TestServer::start();
    let c = client(&server).await;
    c.create("/p", Vec::new(), CreateMode::Persistent)
        .await
        .expect("parent");
    let first = c
        .create("/p/a-", Vec::new(), CreateMode::PersistentSequential)
        .await
        .expect("created");
    c.delete(&first, None).await.expect("deleted");
    c.create("/p/plain", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    let second = c
        .create("/p/b-", Vec::new(), CreateMode::PersistentSequential)
        .await
        .expect("created");
    let bare = c
        .create("/p/", Vec::new(), CreateMode::PersistentSequential)
        .await
        .expect("created");
    assert_eq!(first, "/p/a-0000000000");
    assert_eq!(
        second, "/p/b-0000000001",
        "one counter per parent, never reused"
    );
    assert_eq!(bare, "/p/0000000002");
}
