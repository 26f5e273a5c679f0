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

// Proves children_below returns the nearest lower sequential children, highest first, capped by limit and the server maximum, skipping names without a sequence.
#[tokio::test]
async fn children_below_finds_the_nearest_lower_sequential_children() {
    let server = TestServer::start();
    let client = client(&server).await;
    client
        .create("/q", Vec::new(), CreateMode::Persistent)
        .await
        .expect("parent");
    let mut created = Vec::new();
    for i in 0..100 {
        // Two kinds of names, as a read-write lock's queue has.
        let name = if i % 3 == 0 {
            "/q/write-"
        } else {
            "/q/_c_0a-read-"
        };
        let path = client
            .create(name, Vec::new(), CreateMode::PersistentSequential)
            .await
            .expect("create");
        created.push(path);
    }
    client
        .create("/q/config", b"x".to_vec(), CreateMode::Persistent)
        .await
        .expect("a name without a sequence");
    // Delete some, as released or cancelled contenders would be.
    for i in [97, 98, 50, 10] {
        client.delete(&created[i], None).await.expect("delete");
    }
    let names = |entries: Vec<arbor_client::ChildEntry>| -> Vec<u64> {
        entries
            .iter()
            .map(|e| parse_sequence(&e.name).expect("sequential"))
            .collect()
    };
    assert_eq!(
        names(client.children_below("/q", 99, 3).await.expect("read")),
        [96, 95, 94]
    );
    assert_eq!(
        names(client.children_below("/q", 100, 2).await.expect("read")),
        [99, 96]
    );
    assert_eq!(
        names(client.children_below("/q", 51, 2).await.expect("read")),
        [49, 48]
    );
    assert_eq!(
        names(client.children_below("/q", 1, 5).await.expect("read")),
        [0]
    );
    assert!(client
        .children_below("/q", 0, 5)
        .await
        .expect("read")
        .is_empty());
    assert!(client
        .children_below("/q", 40, 0)
        .await
        .expect("read")
        .is_empty());
    let all = client
        .children_below("/q", u64::MAX, u32::MAX)
        .await
        .expect("read");
    assert_eq!(all.len(), arbor_protocol::CHILDREN_BELOW_MAX as usize);
    // Stats come with the entries: the czxid is the creation order.
    let top = client
        .children_below("/q", u64::MAX, 2)
        .await
        .expect("read");
    assert!(top[0].stat.czxid > top[1].stat.czxid);
    assert!(matches!(
        client.children_below("/missing", 5, 1).await,
        Err(arbor_client::Error::NoNode { .. })
    ));
    assert!(matches!(
        client.children_below("bad", 5, 1).await,
        Err(arbor_client::Error::InvalidPath { .. })
    ));
}
