//! Watches survive a reconnect: SetWatches registers them on the new
//! connection and fires at once those whose node changed meanwhile.

use arbor_protocol::{
    ConnectResponse, CreateMode, EventType, Op, OpResult, ServerMessage, SessionCredentials,
    SetWatches,
};
use arbor_tests::{RawConnection, TestServer};

/// Resumes the session `granted` on a new connection, sends `watches`
/// (relative to `seen`), and returns the connection and the events that
/// arrived before the reply, sorted by path.
async fn resume_with(
    server: &TestServer,
    granted: &ConnectResponse,
    seen: u64,
    watches: SetWatches,
) -> (RawConnection, Vec<(EventType, String)>) {
    let mut client = RawConnection::open(server.addr()).await;
    let credentials = SessionCredentials {
        id: granted.session_id,
        password: granted.password,
    };
    client
        .handshake(4000, Some(credentials), seen)
        .await
        .expect("resumes");
    assert_eq!(watches.relative_zxid, seen);
    let (result, _) = client.request(Op::SetWatches(watches)).await;
    assert_eq!(result, Ok(OpResult::WatchesChanged));
    let mut fired: Vec<(EventType, String)> = client
        .events
        .drain(..)
        .map(|e| (e.event_type, e.path))
        .collect();
    fired.sort_by(|a, b| a.1.cmp(&b.1));
    (client, fired)
}

#[tokio::test]
async fn changes_made_while_disconnected_fire_on_reconnect_and_the_rest_stay_armed() {
    let server = TestServer::start();
    let (mut writer, _) = RawConnection::session(server.addr(), 4000).await;
    for path in ["/changed", "/same", "/dir", "/gone"] {
        let create = Op::Create {
            path: path.into(),
            data: vec![],
            mode: CreateMode::Persistent,
        };
        assert!(writer.request(create).await.0.is_ok());
    }
    let (mut client, granted) = RawConnection::session(server.addr(), 4000).await;
    let (_, seen) = client.request(Op::Ping).await;
    drop(client); // the connection goes; the session lives on

    let set = |path: &str| Op::SetData {
        path: path.into(),
        data: b"new".to_vec(),
        version: -1,
    };
    assert!(writer.request(set("/changed")).await.0.is_ok());
    let child = Op::Create {
        path: "/dir/kid".into(),
        data: vec![],
        mode: CreateMode::Persistent,
    };
    assert!(writer.request(child).await.0.is_ok());
    assert!(writer
        .request(Op::Delete {
            path: "/gone".into(),
            version: -1
        })
        .await
        .0
        .is_ok());
    let born = Op::Create {
        path: "/born".into(),
        data: vec![],
        mode: CreateMode::Persistent,
    };
    assert!(writer.request(born).await.0.is_ok());

    let watches = SetWatches {
        relative_zxid: seen,
        data: vec!["/changed".into(), "/same".into(), "/gone".into()],
        exist: vec!["/born".into(), "/unborn".into()],
        child: vec!["/dir".into()],
        persistent: vec![],
        persistent_recursive: vec![],
    };
    let (mut client, fired) = resume_with(&server, &granted, seen, watches).await;
    assert_eq!(
        fired,
        vec![
            (EventType::NodeCreated, "/born".to_owned()),
            (EventType::NodeDataChanged, "/changed".to_owned()),
            (EventType::NodeChildrenChanged, "/dir".to_owned()),
            (EventType::NodeDeleted, "/gone".to_owned()),
        ],
        "each change made while disconnected fires once, before the reply"
    );
    // The unchanged ones are armed again on this connection.
    assert!(writer.request(set("/same")).await.0.is_ok());
    let unborn = Op::Create {
        path: "/unborn".into(),
        data: vec![],
        mode: CreateMode::Persistent,
    };
    assert!(writer.request(unborn).await.0.is_ok());
    let mut later = Vec::new();
    while later.len() < 2 {
        match client.recv().await.expect("connected") {
            ServerMessage::Event(event) => later.push((event.event_type, event.path)),
            other => panic!("unexpected {other:?}"),
        }
    }
    later.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(
        later,
        vec![
            (EventType::NodeDataChanged, "/same".to_owned()),
            (EventType::NodeCreated, "/unborn".to_owned())
        ]
    );
}

#[tokio::test]
async fn a_change_replayed_to_several_watch_kinds_is_one_event() {
    // A client that watched /gone with data, child and persistent watches
    // and /changed with data and persistent ones gets one event per change,
    // as a live trigger would send: the client routes it to every kind.
    let server = TestServer::start();
    let (mut writer, _) = RawConnection::session(server.addr(), 4000).await;
    for path in ["/gone", "/changed"] {
        let create = Op::Create {
            path: path.into(),
            data: vec![],
            mode: CreateMode::Persistent,
        };
        assert!(writer.request(create).await.0.is_ok());
    }
    let (mut client, granted) = RawConnection::session(server.addr(), 4000).await;
    let (_, seen) = client.request(Op::Ping).await;
    drop(client);
    let delete = Op::Delete {
        path: "/gone".into(),
        version: -1,
    };
    assert!(writer.request(delete).await.0.is_ok());
    let set = Op::SetData {
        path: "/changed".into(),
        data: b"new".to_vec(),
        version: -1,
    };
    assert!(writer.request(set).await.0.is_ok());

    let watches = SetWatches {
        relative_zxid: seen,
        data: vec!["/changed".into(), "/gone".into()],
        exist: vec![],
        child: vec!["/gone".into()],
        persistent: vec!["/changed".into(), "/gone".into()],
        persistent_recursive: vec![],
    };
    let (_client, fired) = resume_with(&server, &granted, seen, watches).await;
    assert_eq!(
        fired,
        vec![
            (EventType::NodeDataChanged, "/changed".to_owned()),
            (EventType::NodeDeleted, "/gone".to_owned()),
        ]
    );
}
