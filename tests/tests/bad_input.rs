//! Bad input closes only the offending connection: other sessions carry on
//! and nothing stored changes.

use arbor_protocol::{ClientMessage, CreateMode, ErrorCode, Op, OpResult, Stat};
use arbor_tests::{RawConnection, TestServer};

/// The tree a test checks is untouched: `/keep`'s data and stat, and the
/// children of `/`.
async fn snapshot(conn: &mut RawConnection) -> (Vec<u8>, Stat, Vec<String>) {
    let (data, stat) = match conn
        .request(Op::GetData {
            path: "/keep".into(),
            watch: false,
        })
        .await
        .0
    {
        Ok(OpResult::Data { data, stat }) => (data, stat),
        other => panic!("get /keep: {other:?}"),
    };
    let names = match conn
        .request(Op::GetChildren {
            path: "/".into(),
            watch: false,
        })
        .await
        .0
    {
        Ok(OpResult::Children { names, .. }) => names.into_vec(),
        other => panic!("ls /: {other:?}"),
    };
    (data, stat, names)
}

async fn setup(server: &TestServer) -> RawConnection {
    let (mut conn, _) = RawConnection::session(server.addr(), 4000).await;
    let create = Op::Create {
        path: "/keep".into(),
        data: b"v1".to_vec(),
        mode: CreateMode::Persistent,
    };
    assert!(conn.request(create).await.0.is_ok());
    conn
}

/// Sends `bytes` on a fresh session's connection and returns what the server
/// said before closing it.
async fn offend(server: &TestServer, bytes: &[u8]) -> Option<(ErrorCode, String)> {
    let (mut bad, _) = RawConnection::session(server.addr(), 4000).await;
    bad.send_bytes(bytes).await;
    bad.closing().await
}

#[tokio::test]
async fn garbage_bytes_close_only_that_connection() {
    let server = TestServer::start();
    let mut good = setup(&server).await;
    let before = snapshot(&mut good).await;
    let said = offend(&server, &[0, 0, 0, 6, 0xde, 0xad, 0xbe, 0xef, 0xff, 0xff]).await;
    assert!(matches!(said, Some((ErrorCode::BadRequest, _))), "{said:?}");
    assert_eq!(snapshot(&mut good).await, before);
    let set = Op::SetData {
        path: "/keep".into(),
        data: b"v2".to_vec(),
        version: 0,
    };
    assert!(
        good.request(set).await.0.is_ok(),
        "the other session still writes"
    );
}

#[tokio::test]
async fn an_oversized_frame_closes_only_that_connection() {
    let server = TestServer::start_with(&["--max-frame-bytes", "65536"]);
    let mut good = setup(&server).await;
    let before = snapshot(&mut good).await;
    // The length alone is over the limit: refused before any body is read.
    let said = offend(&server, &(65_537u32).to_be_bytes()).await;
    let (code, message) = said.expect("the server says why");
    assert_eq!(code, ErrorCode::TooLarge);
    assert!(
        message.contains("65537") && message.contains("65536"),
        "{message}"
    );
    assert_eq!(snapshot(&mut good).await, before);
}

#[tokio::test]
async fn an_unknown_op_closes_the_connection() {
    let server = TestServer::start();
    let mut good = setup(&server).await;
    let before = snapshot(&mut good).await;
    // ClientMessage::Request (variant 1), xid 1, op variant 200 (no such op).
    let body = [1u8, 1, 200];
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    let said = offend(&server, &frame).await;
    assert!(
        matches!(said, Some((ErrorCode::BadRequest, ref m)) if m.contains("decode")),
        "{said:?}"
    );
    assert_eq!(snapshot(&mut good).await, before);
}

#[tokio::test]
async fn a_request_before_the_handshake_is_refused() {
    let server = TestServer::start();
    let mut conn = RawConnection::open(server.addr()).await;
    conn.send(&ClientMessage::Request {
        xid: 1,
        op: Op::Ping,
    })
    .await;
    let said = conn.closing().await;
    assert!(
        matches!(said, Some((ErrorCode::BadRequest, ref m)) if m.contains("handshake")),
        "{said:?}"
    );
}

#[tokio::test]
async fn a_second_handshake_closes_the_connection() {
    let server = TestServer::start();
    let (mut conn, _) = RawConnection::session(server.addr(), 4000).await;
    assert!(conn.handshake(4000, None, 0).await.is_err());
}

#[tokio::test]
async fn data_over_the_limit_is_too_large_and_the_session_stays() {
    let server =
        TestServer::start_with(&["--max-frame-bytes", "65536", "--max-data-bytes", "1000"]);
    let mut conn = setup(&server).await;
    let before = snapshot(&mut conn).await;
    let create = Op::Create {
        path: "/big".into(),
        data: vec![7; 1001],
        mode: CreateMode::Persistent,
    };
    assert_eq!(conn.request(create).await.0, Err(ErrorCode::TooLarge));
    let set = Op::SetData {
        path: "/keep".into(),
        data: vec![7; 1001],
        version: -1,
    };
    assert_eq!(conn.request(set).await.0, Err(ErrorCode::TooLarge));
    assert_eq!(
        snapshot(&mut conn).await,
        before,
        "same connection, nothing changed"
    );
    let fits = Op::Create {
        path: "/big".into(),
        data: vec![7; 1000],
        mode: CreateMode::Persistent,
    };
    assert!(conn.request(fits).await.0.is_ok());
}

#[tokio::test]
async fn invalid_paths_are_invalid_path_and_never_crash() {
    let server = TestServer::start();
    let (mut conn, _) = RawConnection::session(server.addr(), 4000).await;
    for path in [
        "",
        "relative",
        "/trailing/",
        "/a//b",
        "/a/./b",
        "/a/../b",
        "/nul\u{0}",
        "/bell\u{7}",
    ] {
        let create = Op::Create {
            path: path.into(),
            data: vec![],
            mode: CreateMode::Persistent,
        };
        assert_eq!(
            conn.request(create).await.0,
            Err(ErrorCode::InvalidPath),
            "create {path:?}"
        );
        let get = Op::GetData {
            path: path.into(),
            watch: true,
        };
        assert_eq!(
            conn.request(get).await.0,
            Err(ErrorCode::InvalidPath),
            "get {path:?}"
        );
        let delete = Op::Delete {
            path: path.into(),
            version: -1,
        };
        assert_eq!(
            conn.request(delete).await.0,
            Err(ErrorCode::InvalidPath),
            "delete {path:?}"
        );
    }
    assert_eq!(conn.request(Op::Ping).await.0, Ok(OpResult::Pong));
}

/// What a raw TCP peer gets back after sending `bytes` (until the server
/// closes).
async fn answer_to(server: &TestServer, bytes: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connects");
    stream.write_all(bytes).await.expect("sent");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.read_to_end(&mut answer),
    )
    .await;
    assert!(read.is_ok(), "the server answers at once, not at a timeout");
    String::from_utf8_lossy(&answer).into_owned()
}

// Proves a browser or curl on the native port gets an HTTP answer that
// names the admin port, and a four-letter word (sent alone, as `nc` does)
// gets a line naming the ZooKeeper port: not a frame-size error. Arbor
// clients are served as before.
#[tokio::test]
async fn other_protocols_on_the_native_port_are_told_which_port_they_want() {
    let server = TestServer::start();
    let http = answer_to(&server, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(http.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{http}");
    assert!(http.contains("admin port (--admin-listen"), "{http}");
    let word = answer_to(&server, b"ruok").await;
    assert!(
        word.contains("four-letter words use the ZooKeeper port"),
        "{word}"
    );
    let mut conn = setup(&server).await;
    assert_eq!(snapshot(&mut conn).await.0, b"v1".to_vec());
}
