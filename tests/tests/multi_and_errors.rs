//! multi is all or nothing, and each error comes back where ZooKeeper
//! returns it.

use arbor_client::{multi, CreateMode, Error, ErrorCode, MultiOpOutcome, OpResult};
use arbor_tests::{client, TestServer};

#[tokio::test]
async fn a_multi_with_one_failing_op_applies_nothing() {
    let server = TestServer::start();
    let c = client(&server).await;
    c.create("/m", b"orig".to_vec(), CreateMode::Persistent)
        .await
        .expect("created");
    let before = c.get_data("/m").await.expect("read");
    let ops = vec![
        multi::create("/m/new", b"x".to_vec(), CreateMode::Persistent),
        multi::set_data("/m", b"changed".to_vec(), Some(0)),
        multi::delete("/absent", None),
        multi::create("/m/never", Vec::new(), CreateMode::Persistent),
    ];
    match c.multi(ops).await {
        Err(Error::MultiFailed {
            index,
            code,
            outcomes,
        }) => {
            assert_eq!((index, code), (2, ErrorCode::NoNode));
            assert_eq!(
                outcomes,
                vec![
                    MultiOpOutcome::RolledBack,
                    MultiOpOutcome::RolledBack,
                    MultiOpOutcome::Failed(ErrorCode::NoNode),
                    MultiOpOutcome::NotRun,
                ]
            );
        }
        other => panic!("expected MultiFailed, got {other:?}"),
    }
    assert_eq!(
        c.get_data("/m").await.expect("read"),
        before,
        "data and stat unchanged"
    );
    assert_eq!(c.exists("/m/new").await.expect("checked"), None);
}

#[tokio::test]
async fn a_successful_multi_applies_every_op_under_one_zxid_order() {
    let server = TestServer::start();
    let c = client(&server).await;
    let ops = vec![
        multi::create("/t", Vec::new(), CreateMode::Persistent),
        multi::create("/t/a", b"1".to_vec(), CreateMode::Persistent),
        multi::check("/t/a", Some(0)),
        multi::set_data("/t/a", b"2".to_vec(), Some(0)),
    ];
    let results = c.multi(ops).await.expect("applied");
    assert!(matches!(&results[0], OpResult::Created { path, .. } if path == "/t"));
    assert!(matches!(results[2], OpResult::Checked));
    let OpResult::SetData(stat) = results[3] else {
        panic!("{results:?}")
    };
    assert_eq!(stat.version, 1);
    let (data, _) = c.get_data("/t/a").await.expect("read");
    assert_eq!(data, b"2");
}

#[tokio::test]
async fn errors_come_back_where_zookeeper_returns_them() {
    let server = TestServer::start();
    let c = client(&server).await;
    c.create("/a", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    c.create("/a/b", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    c.create("/eph", Vec::new(), CreateMode::Ephemeral)
        .await
        .expect("created");

    let exists = c.create("/a", Vec::new(), CreateMode::Persistent).await;
    assert!(
        matches!(exists, Err(Error::NodeExists { ref path }) if path == "/a"),
        "{exists:?}"
    );
    let no_parent = c.create("/x/y", Vec::new(), CreateMode::Persistent).await;
    assert!(
        matches!(no_parent, Err(Error::NoNode { .. })),
        "{no_parent:?}"
    );
    let under_ephemeral = c
        .create("/eph/child", Vec::new(), CreateMode::Persistent)
        .await;
    assert!(
        matches!(under_ephemeral, Err(Error::NoChildrenForEphemerals { .. })),
        "{under_ephemeral:?}"
    );
    let not_empty = c.delete("/a", None).await;
    assert!(
        matches!(not_empty, Err(Error::NotEmpty { .. })),
        "{not_empty:?}"
    );
    let bad_version = c.set_data("/a/b", b"v".to_vec(), Some(7)).await;
    assert!(
        matches!(bad_version, Err(Error::BadVersion { .. })),
        "{bad_version:?}"
    );
    let bad_delete = c.delete("/a/b", Some(3)).await;
    assert!(
        matches!(bad_delete, Err(Error::BadVersion { .. })),
        "{bad_delete:?}"
    );
    assert!(matches!(
        c.get_data("/nope").await,
        Err(Error::NoNode { .. })
    ));
    assert!(matches!(
        c.get_children("/nope").await,
        Err(Error::NoNode { .. })
    ));
    assert!(matches!(
        c.set_data("/nope", Vec::new(), None).await,
        Err(Error::NoNode { .. })
    ));
    assert!(matches!(
        c.delete("/nope", None).await,
        Err(Error::NoNode { .. })
    ));
    assert_eq!(
        c.exists("/nope").await.expect("exists is not an error"),
        None
    );
    let invalid = c.create("/a//b", Vec::new(), CreateMode::Persistent).await;
    assert!(
        matches!(invalid, Err(Error::InvalidPath { .. })),
        "{invalid:?}"
    );
    let stat = c
        .set_data("/a/b", b"v".to_vec(), Some(0))
        .await
        .expect("matching version");
    assert_eq!(stat.version, 1);
    c.delete("/a/b", Some(1)).await.expect("matching version");
}

#[tokio::test]
async fn multi_reports_each_error_code_at_the_failing_op() {
    let server = TestServer::start();
    let c = client(&server).await;
    c.create("/full", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    c.create("/full/kid", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    c.create("/e", Vec::new(), CreateMode::Ephemeral)
        .await
        .expect("created");
    let cases = [
        (multi::check("/full", Some(5)), ErrorCode::BadVersion),
        (multi::delete("/full", None), ErrorCode::NotEmpty),
        (
            multi::create("/e/x", Vec::new(), CreateMode::Persistent),
            ErrorCode::NoChildrenForEphemerals,
        ),
        (
            multi::create("/full", Vec::new(), CreateMode::Persistent),
            ErrorCode::NodeExists,
        ),
        (
            multi::set_data("/missing", Vec::new(), None),
            ErrorCode::NoNode,
        ),
    ];
    for (op, want) in cases {
        let ops = vec![
            multi::create("/side", Vec::new(), CreateMode::Persistent),
            op,
        ];
        match c.multi(ops).await {
            Err(Error::MultiFailed { index, code, .. }) => assert_eq!((index, code), (1, want)),
            other => panic!("expected {want:?}, got {other:?}"),
        }
        assert_eq!(
            c.exists("/side").await.expect("checked"),
            None,
            "rolled back"
        );
    }
}

#[tokio::test]
async fn stat_fields_follow_zookeeper() {
    let server = TestServer::start();
    let c = client(&server).await;
    let (_, created) = c
        .create_with_stat("/s", b"abc".to_vec(), CreateMode::Persistent)
        .await
        .expect("created");
    assert_eq!(
        (created.czxid, created.mzxid, created.pzxid),
        (created.czxid, created.czxid, created.czxid)
    );
    assert_eq!(
        (created.version, created.cversion, created.aversion),
        (0, 0, 0)
    );
    assert_eq!(
        (
            created.data_length,
            created.num_children,
            created.ephemeral_owner
        ),
        (3, 0, 0)
    );
    assert!(created.ctime_ms > 1_600_000_000_000 && created.ctime_ms == created.mtime_ms);
    let (_, child) = c
        .create_with_stat("/s/e", Vec::new(), CreateMode::Ephemeral)
        .await
        .expect("created");
    assert_eq!(child.ephemeral_owner, c.session_id());
    let set = c
        .set_data("/s", b"abcdef".to_vec(), None)
        .await
        .expect("set");
    let (_, now) = c.get_data("/s").await.expect("read");
    assert_eq!(now, set);
    assert_eq!(
        (now.version, now.cversion, now.num_children, now.data_length),
        (1, 1, 1, 6)
    );
    assert_eq!(now.pzxid, child.czxid, "pzxid is the last child change");
    assert!(now.mzxid > child.czxid && now.czxid == created.czxid);
}

#[tokio::test]
async fn a_thousand_children_list_with_their_stats() {
    // Decoding limits count memory, not wire bytes: a reply of many small
    // entries must still decode on both sides.
    let server = TestServer::start();
    let c = client(&server).await;
    c.create("/many", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    let ops = (0..1000)
        .map(|i| multi::create(format!("/many/{i}"), Vec::new(), CreateMode::Persistent))
        .collect();
    c.multi(ops).await.expect("created");
    let (children, stat) = c.get_children_with_stat("/many").await.expect("listed");
    assert_eq!((children.len(), stat.num_children), (1000, 1000));
    assert!(children
        .iter()
        .all(|child| child.stat.czxid == children[0].stat.czxid));
}
