//! Time the tests drive: an in-process server on a manual clock, so session
//! expiry and TTLs happen when the test moves the clock, not when a slow
//! machine happens to get there. Also shows the server running inside a
//! current-thread runtime, and stopping (threads joined) when dropped.

use std::time::Duration;

use arbor_protocol::{CreateMode, ErrorCode, Op, OpResult};
use arbor_server::clock::Clock;
use arbor_server::TemporaryServer;
use arbor_tests::RawConnection;

/// The embedded server's tick: a deadline passed is acted on within one.
const TICK: Duration = Duration::from_millis(200);

async fn exists(conn: &mut RawConnection, path: &str) -> bool {
    let exists = Op::Exists {
        path: path.into(),
        watch: false,
    };
    match conn.request(exists).await.0 {
        Ok(OpResult::Exists(stat)) => stat.is_some(),
        other => panic!("exists {path}: {other:?}"),
    }
}

/// How often containers and TTL nodes are looked at (real time), by default.
const REAP_INTERVAL: Duration = Duration::from_millis(1000);

/// Waits, in real time, until `path` is gone; false if it outlasts `limit`.
async fn gone_within(conn: &mut RawConnection, path: &str, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if !exists(conn, path).await {
            return true;
        }
        tokio::time::sleep(TICK / 4).await;
    }
    false
}

#[tokio::test(flavor = "current_thread")]
async fn a_silent_session_expires_when_the_clock_passes_its_deadline_and_not_before() {
    let (clock, time) = Clock::manual(1_800_000_000_000);
    let server = TemporaryServer::start_with_clock(clock)
        .await
        .expect("starts");
    let (mut silent, granted) = RawConnection::session(server.addr(), 1000).await;
    assert_eq!(granted.session_timeout_ms, 1000);
    let create = Op::Create {
        path: "/worker".into(),
        data: vec![],
        mode: CreateMode::Ephemeral,
    };
    assert!(silent.request(create).await.0.is_ok());
    let (mut observer, _) = RawConnection::session(server.addr(), 60_000).await;

    // Twice the timeout of real silence, but the clock stands still.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(exists(&mut observer, "/worker").await);

    // Just short of the deadline (timeout, rounded up to the next tick).
    time.advance(Duration::from_millis(900));
    tokio::time::sleep(3 * TICK).await;
    assert!(exists(&mut observer, "/worker").await, "expired early");

    time.advance(TICK * 2);
    assert!(
        gone_within(&mut observer, "/worker", 5 * TICK).await,
        "the session outlived its deadline"
    );
    assert_eq!(
        silent.closing().await.map(|closing| closing.0),
        Some(ErrorCode::SessionExpired)
    );
    server.stop().expect("stops cleanly");
}

#[tokio::test(flavor = "current_thread")]
async fn a_ttl_node_is_reaped_once_the_wall_clock_passes_its_ttl() {
    let (clock, time) = Clock::manual(1_800_000_000_000);
    let server = TemporaryServer::start_with_clock(clock)
        .await
        .expect("starts");
    let (mut conn, _) = RawConnection::session(server.addr(), 60_000).await;
    let ttl = Duration::from_secs(600);
    let create = Op::Create {
        path: "/lease".into(),
        data: vec![],
        mode: CreateMode::PersistentWithTtl {
            ttl_ms: ttl.as_millis() as u64,
        },
    };
    assert!(conn.request(create).await.0.is_ok());
    match conn
        .request(Op::GetData {
            path: "/lease".into(),
            watch: false,
        })
        .await
        .0
    {
        Ok(OpResult::Data { stat, .. }) => assert_eq!(stat.mtime_ms, 1_800_000_000_000),
        other => panic!("get /lease: {other:?}"),
    }

    // Ten minutes in 20 s steps, each followed by a request that keeps the
    // session (timeout one minute at most) alive as a live client's pings would.
    let step = Duration::from_secs(20);
    for _ in 1..ttl.as_secs() / step.as_secs() {
        time.advance(step);
        assert_eq!(conn.request(Op::Ping).await.0, Ok(OpResult::Pong));
    }
    tokio::time::sleep(REAP_INTERVAL + TICK).await;
    assert!(exists(&mut conn, "/lease").await, "reaped before its TTL");

    time.advance(step);
    assert!(
        gone_within(&mut conn, "/lease", 3 * REAP_INTERVAL).await,
        "not reaped after its TTL"
    );
}
