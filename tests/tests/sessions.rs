//! Sessions: expiry after silence, resumption within the timeout, close,
//! clean shutdown on SIGTERM, and the per-address connection limit.

use std::time::{Duration, Instant};

use arbor_client::{Client, ClientOptions};
use arbor_protocol::{
    ClientMessage, CreateMode, ErrorCode, EventType, Op, OpResult, SessionCredentials,
};
use arbor_tests::{client, RawConnection, TestServer, TEST_TICK_MS};

async fn create_ephemeral(conn: &mut RawConnection, path: &str) {
    let create = Op::Create {
        path: path.into(),
        data: vec![],
        mode: CreateMode::Ephemeral,
    };
    assert!(conn.request(create).await.0.is_ok(), "create {path}");
}

async fn exists(conn: &mut RawConnection, path: &str) -> bool {
    match conn
        .request(Op::Exists {
            path: path.into(),
            watch: false,
        })
        .await
        .0
    {
        Ok(OpResult::Exists(stat)) => stat.is_some(),
        other => panic!("exists {path}: {other:?}"),
    }
}

#[tokio::test]
async fn a_silent_session_expires_within_timeout_plus_one_tick() {
    let server = TestServer::start();
    let (mut silent, granted) = RawConnection::session(server.addr(), 1000).await;
    assert_eq!(granted.session_timeout_ms, 1000);
    create_ephemeral(&mut silent, "/worker").await;
    let (mut watcher, _) = RawConnection::session(server.addr(), 4000).await;
    let armed = watcher
        .request(Op::Exists {
            path: "/worker".into(),
            watch: true,
        })
        .await
        .0;
    assert!(matches!(armed, Ok(OpResult::Exists(Some(_)))));
    // The silent client keeps its socket open but stops heartbeating.
    let stopped = Instant::now();
    let event = match watcher.recv().await.expect("watcher stays connected") {
        arbor_protocol::ServerMessage::Event(event) => event,
        other => panic!("unexpected {other:?}"),
    };
    let waited = stopped.elapsed();
    assert_eq!(
        (event.event_type, event.path.as_str()),
        (EventType::NodeDeleted, "/worker")
    );
    let bound = Duration::from_millis(1000 + u64::from(TEST_TICK_MS));
    assert!(
        waited <= bound + Duration::from_millis(150),
        "expired after {waited:?}, bound {bound:?}"
    );
    assert!(
        waited >= Duration::from_millis(1000) - Duration::from_millis(50),
        "expired early: {waited:?}"
    );
    assert_eq!(
        silent.closing().await.map(|c| c.0),
        Some(ErrorCode::SessionExpired)
    );
}

#[tokio::test]
async fn resuming_in_time_keeps_the_session_and_its_ephemerals() {
    let server = TestServer::start();
    let (mut first, granted) = RawConnection::session(server.addr(), 1000).await;
    create_ephemeral(&mut first, "/mine").await;
    drop(first);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let credentials = SessionCredentials {
        id: granted.session_id,
        password: granted.password,
    };
    let mut second = RawConnection::open(server.addr()).await;
    let resumed = second
        .handshake(1000, Some(credentials), granted.zxid)
        .await
        .expect("resumes");
    assert_eq!(resumed.session_id, granted.session_id);
    // Heartbeat past the original deadline: the ephemeral must survive.
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(second.request(Op::Ping).await.0, Ok(OpResult::Pong));
    }
    assert!(exists(&mut second, "/mine").await);
}

#[tokio::test]
async fn resuming_too_late_or_with_a_wrong_password_is_refused() {
    let server = TestServer::start();
    let (mut first, granted) = RawConnection::session(server.addr(), 400).await;
    create_ephemeral(&mut first, "/gone").await;
    drop(first);
    let mut wrong = RawConnection::open(server.addr()).await;
    let bad = SessionCredentials {
        id: granted.session_id,
        password: [0; 16],
    };
    assert!(matches!(
        wrong.handshake(400, Some(bad), 0).await,
        Err((ErrorCode::AuthFailed, _))
    ));
    tokio::time::sleep(Duration::from_millis(400 + 2 * u64::from(TEST_TICK_MS))).await;
    let mut late = RawConnection::open(server.addr()).await;
    let credentials = SessionCredentials {
        id: granted.session_id,
        password: granted.password,
    };
    let refused = late.handshake(400, Some(credentials), 0).await;
    assert!(
        matches!(refused, Err((ErrorCode::SessionExpired, _))),
        "{refused:?}"
    );
    let (mut other, _) = RawConnection::session(server.addr(), 4000).await;
    assert!(!exists(&mut other, "/gone").await);
}

#[tokio::test]
async fn closing_a_session_deletes_its_ephemerals_at_once() {
    let server = TestServer::start();
    let (mut owner, _) = RawConnection::session(server.addr(), 4000).await;
    create_ephemeral(&mut owner, "/e").await;
    let (mut watcher, _) = RawConnection::session(server.addr(), 4000).await;
    let armed = watcher
        .request(Op::Exists {
            path: "/e".into(),
            watch: true,
        })
        .await;
    assert!(matches!(armed.0, Ok(OpResult::Exists(Some(_)))));
    assert_eq!(
        owner.request(Op::CloseSession).await.0,
        Ok(OpResult::SessionClosed)
    );
    assert!(
        owner.recv().await.is_none(),
        "the server closes the connection after the close"
    );
    match watcher.recv().await {
        Some(arbor_protocol::ServerMessage::Event(event)) => {
            assert_eq!(event.event_type, EventType::NodeDeleted)
        }
        other => panic!("expected the deletion event, got {other:?}"),
    }
    assert!(!exists(&mut watcher, "/e").await);
}

#[tokio::test]
async fn timeouts_are_clamped_to_two_and_twenty_ticks() {
    let server = TestServer::start();
    let (_, low) = RawConnection::session(server.addr(), 1).await;
    let (_, high) = RawConnection::session(server.addr(), 1_000_000).await;
    assert_eq!(low.session_timeout_ms, 2 * TEST_TICK_MS);
    assert_eq!(high.session_timeout_ms, 20 * TEST_TICK_MS);
}

#[tokio::test]
async fn sigterm_answers_in_flight_requests_and_exits_cleanly() {
    let mut server = TestServer::start();
    let (mut conn, _) = RawConnection::session(server.addr(), 4000).await;
    // Pipeline writes and signal while they are still arriving: whatever the
    // server took in must be answered, in order, before it says goodbye.
    let count = 2000u64;
    for xid in 1..=count {
        let op = Op::Create {
            path: format!("/n{xid}"),
            data: vec![],
            mode: CreateMode::Persistent,
        };
        conn.send(&arbor_protocol::ClientMessage::Request { xid, op })
            .await;
        if xid == count / 2 {
            let pid = server.pid().to_string();
            std::process::Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .expect("kill runs");
        }
    }
    let mut answered = 0;
    let mut said_goodbye = false;
    while let Some(message) = conn.recv().await {
        match message {
            arbor_protocol::ServerMessage::Reply { xid, result, .. } => {
                assert!(!said_goodbye, "no reply after the goodbye");
                answered += 1;
                assert_eq!(xid, answered, "answers form a gapless prefix, in order");
                assert!(result.is_ok(), "{result:?}");
            }
            arbor_protocol::ServerMessage::Closing { code, .. } => {
                assert_eq!(code, ErrorCode::Unavailable);
                said_goodbye = true;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(said_goodbye, "the server says it is shutting down");
    assert!(
        answered > 0,
        "requests read before the signal were answered"
    );
    let status = tokio::task::spawn_blocking(move || server.terminate_wait())
        .await
        .expect("joins");
    assert!(status.success(), "clean exit: {status:?}");
}

#[tokio::test]
async fn connections_per_address_are_limited() {
    let server =
        TestServer::start_with(&["--max-connections-per-ip", "3", "--max-connections", "10"]);
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(RawConnection::session(server.addr(), 4000).await.0);
    }
    let mut fourth = RawConnection::open(server.addr()).await;
    let refused = fourth.handshake(4000, None, 0).await;
    assert!(
        matches!(refused, Err((ErrorCode::LimitExceeded, ref m)) if m == "too many connections from this address (limit 3)"),
        "the fourth connection is told why: {refused:?}"
    );
    drop(open.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (mut again, _) = RawConnection::session(server.addr(), 4000).await;
    assert_eq!(again.request(Op::Ping).await.0, Ok(OpResult::Pong));
}

// Proves the client library reports a connection over the per-address
// limit as a refusal that names the limit, not as an unreachable server.
#[tokio::test]
async fn a_client_over_the_limit_is_told_so() {
    let server = TestServer::start_with(&["--max-connections-per-ip", "1"]);
    let _first = client(&server).await;
    let refused = Client::connect(server.addr(), ClientOptions::default()).await;
    match refused {
        Err(err @ arbor_client::Error::Refused { .. }) => {
            assert_eq!(
                err.to_string(),
                "the server refused the connection: too many connections from this address (limit 1)"
            );
            assert_eq!(err.code(), Some(ErrorCode::LimitExceeded));
        }
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
}

async fn children(conn: &mut RawConnection, path: &str) -> Vec<String> {
    let list = Op::GetChildren {
        path: path.into(),
        watch: false,
    };
    match conn.request(list).await.0 {
        Ok(OpResult::Children { names, .. }) => {
            let mut names = names.into_vec();
            names.sort();
            names
        }
        other => panic!("children of {path}: {other:?}"),
    }
}

#[tokio::test]
async fn a_resume_is_ordered_after_everything_the_old_connection_sent() {
    // The client's old connection dies with writes in flight (their replies
    // lost). On its new connection the session must already see every one
    // of them that will ever land, in order, and none may land later: a
    // retry after a lost reply (the lock recipe's protected create) relies
    // on it, or it makes its node twice and waits on itself.
    let server = TestServer::start();
    let (mut setup, _) = RawConnection::session(server.addr(), 4000).await;
    let dir = Op::Create {
        path: "/d".into(),
        data: vec![],
        mode: CreateMode::Persistent,
    };
    assert!(setup.request(dir).await.0.is_ok());
    for round in 0..5 {
        let (mut old, granted) = RawConnection::session(server.addr(), 4000).await;
        for n in 0..300 {
            let create = Op::Create {
                path: format!("/d/r{round}-{n:04}"),
                data: vec![0; 64],
                mode: CreateMode::Persistent,
            };
            old.send(&ClientMessage::Request {
                xid: n + 1,
                op: create,
            })
            .await;
        }
        let credentials = SessionCredentials {
            id: granted.session_id,
            password: granted.password,
        };
        let mut new = RawConnection::open(server.addr()).await;
        new.handshake(4000, Some(credentials), 0)
            .await
            .expect("resumes");
        let prefix = format!("r{round}-");
        let seen: Vec<String> = children(&mut new, "/d")
            .await
            .into_iter()
            .filter(|name| name.starts_with(&prefix))
            .collect();
        let in_order: Vec<String> = (0..seen.len()).map(|n| format!("{prefix}{n:04}")).collect();
        assert_eq!(seen, in_order, "a prefix of what was sent, in order");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let later = children(&mut new, "/d")
            .await
            .into_iter()
            .filter(|name| name.starts_with(&prefix))
            .count();
        assert_eq!(
            later,
            seen.len(),
            "round {round}: a write of the old connection landed after the resume"
        );
    }
}
