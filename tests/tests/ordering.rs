//! Ordering guarantees: zxids only grow, a session's replies come in request
//! order, and a watch event arrives before any reply reflecting the change.

use std::collections::HashSet;

use arbor_protocol::{ClientMessage, CreateMode, EventType, Op, OpResult, ServerMessage};
use arbor_tests::{RawConnection, TestServer};

#[tokio::test]
async fn zxid_strictly_increases_over_writes_and_never_decreases_in_replies() {
    let server = TestServer::start();
    let mut tasks = Vec::new();
    for worker in 0..4 {
        let addr = server.addr().to_owned();
        tasks.push(tokio::spawn(async move {
            let (mut conn, granted) = RawConnection::session(&addr, 4000).await;
            let mut last_reply_zxid = granted.zxid;
            let mut last_write_zxid = 0;
            let mut write_zxids = Vec::new();
            for i in 0..100 {
                let path = format!("/w{worker}-{i}");
                let ops = [
                    Op::Create {
                        path: path.clone(),
                        data: vec![],
                        mode: CreateMode::Persistent,
                    },
                    Op::GetData {
                        path: path.clone(),
                        watch: false,
                    },
                    Op::SetData {
                        path: path.clone(),
                        data: vec![1],
                        version: 0,
                    },
                ];
                for op in ops {
                    let (result, zxid) = conn.request(op).await;
                    assert!(
                        zxid >= last_reply_zxid,
                        "reply zxid went back: {zxid} < {last_reply_zxid}"
                    );
                    last_reply_zxid = zxid;
                    let written = match result.expect("succeeds") {
                        OpResult::Created { stat, .. } => Some(stat.czxid),
                        OpResult::SetData(stat) => Some(stat.mzxid),
                        _ => None,
                    };
                    if let Some(write_zxid) = written {
                        assert!(
                            write_zxid > last_write_zxid,
                            "a session's writes are ordered"
                        );
                        assert!(zxid >= write_zxid, "the reply reflects its own write");
                        last_write_zxid = write_zxid;
                        write_zxids.push(write_zxid);
                    }
                }
            }
            write_zxids
        }));
    }
    let mut all = HashSet::new();
    for task in tasks {
        for zxid in task.await.expect("worker finishes") {
            assert!(all.insert(zxid), "zxid {zxid} given to two writes");
        }
    }
    assert_eq!(all.len(), 800);
}

#[tokio::test]
async fn replies_to_pipelined_requests_come_in_request_order() {
    let server = TestServer::start();
    let (mut conn, _) = RawConnection::session(server.addr(), 4000).await;
    // Alternate writes and reads so some answers wait on the log and some do not.
    for xid in 1..=500u64 {
        let op = if xid % 2 == 1 {
            Op::Create {
                path: format!("/p{xid}"),
                data: vec![],
                mode: CreateMode::Persistent,
            }
        } else {
            Op::Exists {
                path: format!("/p{}", xid - 1),
                watch: false,
            }
        };
        conn.send(&ClientMessage::Request { xid, op }).await;
    }
    for want in 1..=500u64 {
        match conn.recv().await {
            Some(ServerMessage::Reply { xid, result, .. }) => {
                assert_eq!(xid, want);
                if want % 2 == 0 {
                    // The read follows its own session's write, so it sees it.
                    assert!(
                        matches!(result, Ok(OpResult::Exists(Some(_)))),
                        "{result:?}"
                    );
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_watch_event_arrives_before_any_reply_that_reflects_the_change() {
    let server = TestServer::start();
    let (mut reader, _) = RawConnection::session(server.addr(), 4000).await;
    let (mut writer, _) = RawConnection::session(server.addr(), 4000).await;
    let create = Op::Create {
        path: "/x".into(),
        data: vec![],
        mode: CreateMode::Persistent,
    };
    assert!(writer.request(create).await.0.is_ok());
    for round in 0..50 {
        reader.events.clear();
        let (armed, _) = reader
            .request(Op::GetData {
                path: "/x".into(),
                watch: true,
            })
            .await;
        let Ok(OpResult::Data { stat, .. }) = armed else {
            panic!("{armed:?}")
        };
        let seen = stat.version;
        let write = tokio::spawn(async move {
            let set = Op::SetData {
                path: "/x".into(),
                data: vec![round],
                version: -1,
            };
            assert!(writer.request(set).await.0.is_ok());
            writer
        });
        // Poll until a reply shows the new version; the event must already be in.
        loop {
            let (result, _) = reader
                .request(Op::GetData {
                    path: "/x".into(),
                    watch: false,
                })
                .await;
            let Ok(OpResult::Data { stat, .. }) = result else {
                panic!("{result:?}")
            };
            if stat.version > seen {
                let announced = reader
                    .events
                    .iter()
                    .any(|e| e.event_type == EventType::NodeDataChanged && e.path == "/x");
                assert!(
                    announced,
                    "round {round}: reply showed version {} before the event",
                    stat.version
                );
                break;
            }
        }
        writer = write.await.expect("writer finishes");
    }
}
