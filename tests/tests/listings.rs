//! Listings: a node's children come back in name order, and a big parent's
//! listing follows every change. (The server keeps a big parent's sorted
//! order between listings and must drop it on each add and remove, whatever
//! removed the child: a delete, a multi, a closed session's ephemerals.)

use arbor_client::{multi, CreateMode};
use arbor_tests::{client, TestServer};

/// More children than the server keeps a sorted order for (256).
const BIG: usize = 300;

#[tokio::test]
async fn a_big_parents_listing_follows_every_change() {
    let server = TestServer::start();
    let c = client(&server).await;
    c.create("/big", Vec::new(), CreateMode::Persistent)
        .await
        .expect("parent");
    // Created out of name order, so a listing that did not sort would show it.
    let mut expected: Vec<String> = (0..BIG)
        .map(|i| format!("m-{:04}", (i * 37) % BIG))
        .collect();
    for batch in expected.chunks(100) {
        let ops = batch
            .iter()
            .map(|name| multi::create(format!("/big/{name}"), Vec::new(), CreateMode::Persistent))
            .collect();
        c.multi(ops).await.expect("created");
    }
    expected.sort();
    let listed = |expected: &Vec<String>| {
        let (c, expected) = (c.clone(), expected.clone());
        async move {
            assert_eq!(c.get_children("/big").await.expect("listed"), expected);
            let (with_stat, _) = c.get_children_with_stat("/big").await.expect("listed");
            let names: Vec<String> = with_stat.into_iter().map(|entry| entry.name).collect();
            assert_eq!(names, expected);
        }
    };
    listed(&expected).await;
    listed(&expected).await;

    c.create("/big/m-0100a", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    expected.push("m-0100a".into());
    expected.sort();
    listed(&expected).await;

    c.delete("/big/m-0000", None).await.expect("deleted");
    expected.retain(|name| name != "m-0000");
    listed(&expected).await;
    // A node elsewhere may take the deleted child's slot: a kept order
    // that still held it would list a stranger.
    c.create("/elsewhere", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    listed(&expected).await;

    c.multi(vec![
        multi::delete("/big/m-0299", None),
        multi::create("/big/a-first", Vec::new(), CreateMode::Persistent),
    ])
    .await
    .expect("committed");
    expected.retain(|name| name != "m-0299");
    expected.insert(0, "a-first".into());
    listed(&expected).await;

    let other = client(&server).await;
    other
        .create("/big/z-ephemeral", Vec::new(), CreateMode::Ephemeral)
        .await
        .expect("created");
    expected.push("z-ephemeral".into());
    listed(&expected).await;
    other.close().await.expect("closed");
    expected.pop();
    listed(&expected).await;
}
