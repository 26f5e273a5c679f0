//! Client tests against a tiny fake server: a `TcpListener` on 127.0.0.1:0 that
//! speaks the protocol through `arbor_protocol`, scripted by each test. Tests
//! of reconnecting keep the listener and accept the client's next connection.

use std::time::Duration;

use arbor_protocol::codec;
use arbor_protocol::frame::{encode_frame, FrameDecoder, DEFAULT_FRAME_BYTES_MAX};
use arbor_protocol::{
    ClientMessage, ConnectRequest, ConnectResponse, Op, ServerMessage, SetWatches, PROTOCOL_VERSION,
};
use futures_util::FutureExt;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpListener;
use tokio_util::codec::FramedRead;

use crate::{
    multi, AddWatchMode, Client, ClientOptions, ConnectionState, CreateMode, Error, ErrorCode,
    EventType, MultiOpOutcome, OneshotWatch, OpResult, ServerLimits, SessionCredentials, Stat,
    StateStream, WatchEvent, WatcherKind,
};

/// How long a fake server waits for a frame before the test fails.
const PATIENCE: Duration = Duration::from_secs(2);

const SESSION_ID: u64 = 0x42;
const PASSWORD: [u8; 16] = [7; 16];
const HANDSHAKE_ZXID: u64 = 100;

/// The fake server's end of one connection.
struct Peer {
    reader: FramedRead<OwnedReadHalf, FrameDecoder>,
    writer: OwnedWriteHalf,
}

impl Peer {
    async fn accept(listener: &TcpListener) -> Peer {
        Peer::accept_limited(listener, DEFAULT_FRAME_BYTES_MAX).await
    }

    /// Accepts a connection whose client frames must stay within `frame_bytes_max`.
    async fn accept_limited(listener: &TcpListener, frame_bytes_max: usize) -> Peer {
        let (stream, _) = tokio::time::timeout(PATIENCE, listener.accept())
            .await
            .expect("client connects in time")
            .expect("accepts");
        let (read_half, writer) = stream.into_split();
        Peer {
            reader: FramedRead::new(read_half, FrameDecoder::new(frame_bytes_max)),
            writer,
        }
    }

    /// The next client message, or `None` at EOF.
    async fn recv(&mut self) -> Option<ClientMessage> {
        let frame = tokio::time::timeout(PATIENCE, self.reader.next())
            .await
            .expect("client sends in time")?;
        let payload = frame.ok()?;
        Some(codec::decode(&payload).expect("client frames decode"))
    }

    async fn request(&mut self) -> (u64, Op) {
        match self.recv().await {
            Some(ClientMessage::Request { xid, op }) => (xid, op),
            other => panic!("expected a request, got {other:?}"),
        }
    }

    async fn send(&mut self, message: ServerMessage) {
        let mut frame = Vec::new();
        encode_frame(&message, DEFAULT_FRAME_BYTES_MAX, &mut frame).expect("encodes");
        self.writer.write_all(&frame).await.expect("writes");
    }

    async fn reply(&mut self, xid: u64, zxid: u64, result: Result<OpResult, ErrorCode>) {
        self.send(ServerMessage::Reply { xid, zxid, result }).await;
    }

    async fn connect_request(&mut self) -> ConnectRequest {
        match self.recv().await {
            Some(ClientMessage::Connect(request)) => request,
            other => panic!("expected Connect, got {other:?}"),
        }
    }

    /// Answers the handshake, granting the timeout the client asked for.
    async fn handshake(&mut self, data_bytes_max: u32) -> ConnectRequest {
        self.handshake_limited(DEFAULT_FRAME_BYTES_MAX as u32, data_bytes_max)
            .await
    }

    async fn handshake_limited(
        &mut self,
        frame_bytes_max: u32,
        data_bytes_max: u32,
    ) -> ConnectRequest {
        let request = self.connect_request().await;
        assert_eq!(request.protocol_version, PROTOCOL_VERSION);
        self.send(ServerMessage::Connected(ConnectResponse {
            protocol_version: PROTOCOL_VERSION,
            session_id: SESSION_ID,
            password: PASSWORD,
            session_timeout_ms: request.session_timeout_ms,
            zxid: HANDSHAKE_ZXID,
            limits: ServerLimits {
                frame_bytes_max,
                data_bytes_max,
            },
        }))
        .await;
        request
    }

    /// Accepts the client's resume on `listener` and checks it carries the
    /// session's credentials and `last_zxid`.
    async fn resume(listener: &TcpListener, last_zxid: u64) -> Peer {
        let mut peer = Peer::accept(listener).await;
        let request = peer.handshake(1024 * 1024).await;
        assert_resume(&request, last_zxid);
        peer
    }
}

fn assert_resume(request: &ConnectRequest, last_zxid: u64) {
    let credentials = SessionCredentials {
        id: SESSION_ID,
        password: PASSWORD,
    };
    assert_eq!(request.session, Some(credentials));
    assert_eq!(request.last_zxid_seen, last_zxid);
}

/// The next state change, within the test's patience.
async fn next_state(states: &mut StateStream) -> Option<ConnectionState> {
    tokio::time::timeout(PATIENCE, states.next())
        .await
        .expect("state changes in time")
}

async fn listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let addr = listener.local_addr().expect("has an address").to_string();
    (listener, addr)
}

/// A connected client and the fake server's end of its connection.
async fn start_with(options: ClientOptions, data_bytes_max: u32) -> (Client, Peer) {
    let (client, peer, _listener) = start_listening(options, data_bytes_max).await;
    (client, peer)
}

/// As [`start_with`], keeping the listener for the client's reconnects.
async fn start_listening(
    options: ClientOptions,
    data_bytes_max: u32,
) -> (Client, Peer, TcpListener) {
    let (listener, addr) = listener().await;
    let server = async {
        let mut peer = Peer::accept(&listener).await;
        peer.handshake(data_bytes_max).await;
        peer
    };
    let (client, peer) = tokio::join!(Client::connect(&addr, options), server);
    (client.expect("connects"), peer, listener)
}

/// Sets a one-shot watch through `call`, answering its request with `result`.
async fn set_watch<F>(peer: &mut Peer, call: F, zxid: u64, result: OpResult) -> OneshotWatch
where
    F: std::future::Future<Output = Result<OneshotWatch, Error>>,
{
    let (watch, ()) = tokio::join!(call, async {
        let (xid, _) = peer.request().await;
        peer.reply(xid, zxid, Ok(result)).await;
    });
    watch.expect("watch set")
}

async fn start() -> (Client, Peer) {
    start_with(ClientOptions::default(), 1024 * 1024).await
}

fn stat(version: i32) -> Stat {
    Stat {
        version,
        ..Stat::default()
    }
}

fn event(event_type: EventType, path: &str, zxid: u64) -> WatchEvent {
    WatchEvent {
        event_type,
        path: path.to_owned(),
        zxid,
    }
}

// Proves the handshake, and that several requests in flight each get their own reply.
#[tokio::test]
async fn replies_match_requests_in_flight() {
    let (client, mut peer) = start().await;
    assert_eq!(client.session_id(), SESSION_ID);
    assert_eq!(client.credentials().password, PASSWORD);
    assert_eq!(client.last_zxid(), HANDSHAKE_ZXID);
    assert_eq!(client.session_timeout(), Duration::from_secs(10));

    let server = async {
        let mut requests = Vec::new();
        for _ in 0..3 {
            requests.push(peer.request().await);
        }
        let xids: Vec<u64> = requests.iter().map(|(xid, _)| *xid).collect();
        assert!(xids.windows(2).all(|pair| pair[0] < pair[1]), "{xids:?}");
        // Decreasing zxids: the client's last_zxid must keep the maximum.
        for ((xid, op), zxid) in requests.into_iter().zip([150, 120, 110]) {
            let result = match op {
                Op::GetData { path, .. } => OpResult::Data {
                    data: path.into_bytes(),
                    stat: stat(1),
                },
                Op::Exists { .. } => OpResult::Exists(Some(stat(2))),
                Op::GetChildren { .. } => OpResult::Children {
                    names: vec!["x".to_owned()].into(),
                    stat: stat(3),
                },
                other => panic!("unexpected {other:?}"),
            };
            peer.reply(xid, zxid, Ok(result)).await;
        }
    };
    let (data, exists, children, ()) = tokio::join!(
        client.get_data("/a"),
        client.exists("/b"),
        client.get_children("/"),
        server
    );
    assert_eq!(data.expect("data").0, b"/a");
    assert_eq!(exists.expect("exists").map(|s| s.version), Some(2));
    assert_eq!(children.expect("children"), vec!["x".to_owned()]);
    assert_eq!(client.last_zxid(), 150);
}

// Proves an idle client pings after a third of the session timeout and stays up.
#[tokio::test]
async fn pings_when_idle() {
    let options = ClientOptions::default().with_session_timeout(Duration::from_millis(300));
    let (client, mut peer) = start_with(options, 1024).await;
    let started = std::time::Instant::now();
    let (xid, op) = peer.request().await;
    assert_eq!(op, Op::Ping);
    assert!(
        started.elapsed() >= Duration::from_millis(80),
        "{:?}",
        started.elapsed()
    );
    peer.reply(xid, 101, Ok(OpResult::Pong)).await;
    let (exists, ()) = tokio::join!(client.exists("/a"), async {
        loop {
            let (xid, op) = peer.request().await;
            let is_ping = op == Op::Ping;
            let result = if is_ping {
                OpResult::Pong
            } else {
                OpResult::Exists(None)
            };
            peer.reply(xid, 101, Ok(result)).await;
            if !is_ping {
                break;
            }
        }
    });
    assert_eq!(exists.expect("still connected"), None);
}

// Proves pings answered ahead of a reply still owed (as servers now do) keep the
// connection up and every reply in step: a caller's ping and our heartbeat.
#[tokio::test]
async fn pings_answered_ahead_of_owed_replies_keep_replies_in_step() {
    let options = ClientOptions::default().with_session_timeout(Duration::from_millis(600));
    let (client, mut peer) = start_with(options, 1024).await;
    let server = async {
        let (write, op) = peer.request().await;
        assert!(matches!(op, Op::GetData { .. }), "{op:?}");
        let (ping, op) = peer.request().await;
        assert_eq!(op, Op::Ping);
        // The caller's ping first, then (after the client's own heartbeat,
        // also answered at once) the reply it was sent behind.
        peer.reply(ping, 101, Ok(OpResult::Pong)).await;
        let (heartbeat, op) = peer.request().await;
        assert_eq!(op, Op::Ping);
        peer.reply(heartbeat, 102, Ok(OpResult::Pong)).await;
        let result = OpResult::Data {
            data: b"late".to_vec(),
            stat: stat(1),
        };
        peer.reply(write, 103, Ok(result)).await;
    };
    let late = client.get_data("/slow");
    let ping = async {
        tokio::task::yield_now().await;
        client.ping().await
    };
    let (late, pong, ()) = tokio::join!(late, ping, server);
    pong.expect("the ping is answered before the read");
    assert_eq!(late.expect("the read is answered after").0, b"late");
    assert_eq!(client.state(), ConnectionState::Connected);
}

// Proves that a server that goes silent is given up after 2/3 of the session timeout.
#[tokio::test]
async fn silent_server_is_connection_loss() {
    let options = ClientOptions::default().with_session_timeout(Duration::from_millis(300));
    let (client, mut peer) = start_with(options, 1024).await;
    let started = std::time::Instant::now();
    let (result, _request) = tokio::join!(client.get_data("/a"), peer.request());
    assert!(matches!(result, Err(Error::ConnectionLoss)), "{result:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

// Proves a dropped socket fails the request in flight, then the client resumes the same session and carries on.
#[tokio::test]
async fn dropped_socket_suspends_then_resumes() {
    let (client, mut peer, listener) = start_listening(ClientOptions::default(), 1024).await;
    let mut states = client.state_changes();
    assert_eq!(client.state(), ConnectionState::Connected);
    let (first, ()) = tokio::join!(client.exists("/a"), async {
        let (xid, _) = peer.request().await;
        peer.reply(xid, 150, Ok(OpResult::Exists(None))).await;
    });
    assert_eq!(first.expect("exists"), None);
    let (result, ()) = tokio::join!(client.get_data("/a"), async {
        peer.request().await;
        drop(peer);
    });
    assert!(matches!(result, Err(Error::ConnectionLoss)), "{result:?}");
    assert_eq!(
        next_state(&mut states).await,
        Some(ConnectionState::Suspended)
    );

    let mut peer = Peer::resume(&listener, 150).await;
    assert_eq!(
        next_state(&mut states).await,
        Some(ConnectionState::Reconnected)
    );
    let (later, ()) = tokio::join!(client.exists("/b"), async {
        let (xid, op) = peer.request().await;
        assert_eq!(
            op,
            Op::Exists {
                path: "/b".into(),
                watch: false
            },
            "no request is re-sent, and no SetWatches without watches"
        );
        peer.reply(xid, 160, Ok(OpResult::Exists(Some(stat(1)))))
            .await;
    });
    assert_eq!(
        later.expect("works after the resume").map(|s| s.version),
        Some(1)
    );
    assert_eq!(client.state(), ConnectionState::Reconnected);
    assert_eq!(client.session_id(), SESSION_ID);
}

// Proves the resume re-registers every watch in the right SetWatches list before any request, and a fired event reaches its OneshotWatch.
#[tokio::test]
async fn resume_sets_watches_before_anything_else() {
    let (client, mut peer, listener) = start_listening(ClientOptions::default(), 1024).await;
    let data = OpResult::Data {
        data: Vec::new(),
        stat: stat(1),
    };
    let mut on_data = set_watch(
        &mut peer,
        async { Ok(client.get_data_watch("/d").await?.2) },
        101,
        data,
    )
    .await;
    let missing = OpResult::Exists(None);
    let on_missing = set_watch(
        &mut peer,
        async { Ok(client.exists_watch("/missing").await?.1) },
        102,
        missing,
    )
    .await;
    let present = OpResult::Exists(Some(stat(1)));
    let mut on_present = set_watch(
        &mut peer,
        async { Ok(client.exists_watch("/present").await?.1) },
        103,
        present,
    )
    .await;
    let children = OpResult::Children {
        names: Vec::new().into(),
        stat: stat(1),
    };
    let mut on_children = set_watch(
        &mut peer,
        async { Ok(client.get_children_watch("/c").await?.1) },
        104,
        children,
    )
    .await;
    let mut streams = Vec::new();
    for (path, mode) in [
        ("/p", AddWatchMode::Persistent),
        ("/r", AddWatchMode::PersistentRecursive),
    ] {
        let (watch, ()) = tokio::join!(client.watch(path, mode), async {
            let (xid, _) = peer.request().await;
            peer.reply(xid, 120, Ok(OpResult::WatchesChanged)).await;
        });
        streams.push(watch.expect("watch set"));
    }
    drop(peer);

    let mut peer = Peer::resume(&listener, 120).await;
    let (xid, op) = peer.request().await;
    let expected = SetWatches {
        relative_zxid: 120,
        data: vec!["/d".into(), "/present".into()],
        exist: vec!["/missing".into()],
        child: vec!["/c".into()],
        persistent: vec!["/p".into()],
        persistent_recursive: vec!["/r".into()],
    };
    assert_eq!(op, Op::SetWatches(expected));
    peer.send(ServerMessage::Event(event(
        EventType::NodeCreated,
        "/missing",
        130,
    )))
    .await;
    peer.send(ServerMessage::Event(event(
        EventType::NodeDataChanged,
        "/r/x",
        131,
    )))
    .await;
    peer.reply(xid, 131, Ok(OpResult::WatchesChanged)).await;

    let fired = tokio::time::timeout(PATIENCE, on_missing)
        .await
        .expect("fired");
    assert_eq!(fired.expect("event").event_type, EventType::NodeCreated);
    let streamed = streams[1]
        .next()
        .await
        .expect("recursive stream carries on");
    assert_eq!(streamed.path, "/r/x");
    assert!((&mut on_data).now_or_never().is_none(), "still armed");
    assert!((&mut on_present).now_or_never().is_none(), "still armed");
    assert!((&mut on_children).now_or_never().is_none(), "still armed");
    assert_eq!(client.watcher_count(), 5);
    assert_eq!(client.last_zxid(), 131);
}

// Proves many watches are re-registered in several SetWatches frames, each within the server's frame limit, covering every path.
#[tokio::test]
async fn set_watches_batches_respect_the_frame_limit() {
    const WATCHES: usize = 200;
    const FRAME_BYTES_MAX: usize = 1024;
    let (client, mut peer, listener) = start_listening(ClientOptions::default(), 1024).await;
    let mut watches = Vec::new();
    for i in 0..WATCHES {
        let path = format!("/watched/node-{i:04}");
        let call = async { Ok(client.exists_watch(&path).await?.1) };
        watches.push(set_watch(&mut peer, call, 101, OpResult::Exists(None)).await);
    }
    drop(peer);

    // Frames over the limit would fail this peer's decoder.
    let mut peer = Peer::accept_limited(&listener, FRAME_BYTES_MAX).await;
    let request = peer.handshake_limited(FRAME_BYTES_MAX as u32, 1024).await;
    assert_resume(&request, 101);
    let mut seen = Vec::new();
    let mut batches = 0;
    while seen.len() < WATCHES {
        let (xid, op) = peer.request().await;
        let Op::SetWatches(batch) = op else {
            panic!("expected SetWatches, got {op:?}");
        };
        assert_eq!(batch.relative_zxid, 101);
        assert_eq!(batch.len(), batch.exist.len(), "exists on missing nodes");
        seen.extend(batch.exist);
        batches += 1;
        peer.reply(xid, 101, Ok(OpResult::WatchesChanged)).await;
    }
    assert!(batches > 1, "{batches} batch(es)");
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), WATCHES);
    assert_eq!(client.watcher_count(), WATCHES);
}

// Proves a resume refused as expired expires the client: watches and later calls get SessionExpired.
#[tokio::test]
async fn refused_resume_expires_the_client() {
    let (client, mut peer, listener) = start_listening(ClientOptions::default(), 1024).await;
    let mut states = client.state_changes();
    let call = async { Ok(client.exists_watch("/w").await?.1) };
    let watch = set_watch(&mut peer, call, 101, OpResult::Exists(Some(stat(1)))).await;
    drop(peer);
    assert_eq!(
        next_state(&mut states).await,
        Some(ConnectionState::Suspended)
    );
    let mut peer = Peer::accept(&listener).await;
    assert_resume(&peer.connect_request().await, 101);
    peer.send(ServerMessage::Closing {
        code: ErrorCode::SessionExpired,
        message: "expired".into(),
    })
    .await;
    assert_eq!(
        next_state(&mut states).await,
        Some(ConnectionState::Expired)
    );
    assert_eq!(next_state(&mut states).await, None);
    assert!(matches!(watch.await, Err(Error::SessionExpired)));
    let later = client.exists("/a").await;
    assert!(matches!(later, Err(Error::SessionExpired)), "{later:?}");
    assert!(client.state_changes().next().await.is_none());
}

// Proves that with no server reachable the session expires once its timeout has passed since we last heard.
#[tokio::test]
async fn unreachable_servers_expire_the_session() {
    let timeout = Duration::from_millis(300);
    let options = ClientOptions::default().with_session_timeout(timeout);
    let (client, peer, listener) = start_listening(options, 1024).await;
    let mut states = client.state_changes();
    let heard = std::time::Instant::now();
    drop(listener);
    drop(peer);
    assert_eq!(
        next_state(&mut states).await,
        Some(ConnectionState::Suspended)
    );
    let during = client.exists("/a").await;
    assert!(matches!(during, Err(Error::ConnectionLoss)), "{during:?}");
    assert_eq!(
        next_state(&mut states).await,
        Some(ConnectionState::Expired)
    );
    let waited = heard.elapsed();
    assert!(waited >= timeout && waited < timeout * 4, "{waited:?}");
    assert!(matches!(client.ping().await, Err(Error::SessionExpired)));
}

// Proves the client resumes on another server of the connect string when its server goes away.
#[tokio::test]
async fn resumes_on_another_server() {
    let (first, first_addr) = listener().await;
    let (second, second_addr) = listener().await;
    let connect_string = format!("{first_addr},{second_addr}");
    // Whichever server the shuffle picks first gets the session.
    let server = async {
        tokio::select! {
            accepted = first.accept() => (accepted, true),
            accepted = second.accept() => (accepted, false),
        }
    };
    let (client, (old_peer, on_first)) = tokio::join!(
        Client::connect(&connect_string, ClientOptions::default()),
        async {
            let (accepted, on_first) = server.await;
            let (stream, _) = accepted.expect("accepts");
            let (read_half, writer) = stream.into_split();
            let mut peer = Peer {
                reader: FramedRead::new(read_half, FrameDecoder::new(DEFAULT_FRAME_BYTES_MAX)),
                writer,
            };
            peer.handshake(1024).await;
            (peer, on_first)
        }
    );
    let client = client.expect("connects");
    let mut states = client.state_changes();
    let (dead, alive) = if on_first {
        (first, second)
    } else {
        (second, first)
    };
    drop(dead);
    drop(old_peer);
    let mut peer = Peer::resume(&alive, HANDSHAKE_ZXID).await;
    assert_eq!(
        next_state(&mut states).await,
        Some(ConnectionState::Suspended)
    );
    assert_eq!(
        next_state(&mut states).await,
        Some(ConnectionState::Reconnected)
    );
    let (pong, ()) = tokio::join!(client.ping(), async {
        let (xid, op) = peer.request().await;
        assert_eq!(op, Op::Ping);
        peer.reply(xid, 101, Ok(OpResult::Pong)).await;
    });
    pong.expect("pings the other server");
    assert_eq!(client.state(), ConnectionState::Reconnected);
}

// Proves close() while suspended ends the client at once instead of waiting for a reconnect.
#[tokio::test]
async fn close_while_suspended_does_not_wait() {
    let (client, peer, listener) = start_listening(ClientOptions::default(), 1024).await;
    let mut states = client.state_changes();
    drop(listener);
    drop(peer);
    assert_eq!(
        next_state(&mut states).await,
        Some(ConnectionState::Suspended)
    );
    let other = client.clone();
    let closed = tokio::time::timeout(PATIENCE, client.close())
        .await
        .expect("close does not wait");
    assert!(matches!(closed, Err(Error::ConnectionLoss)), "{closed:?}");
    assert_eq!(next_state(&mut states).await, Some(ConnectionState::Closed));
    assert!(matches!(other.exists("/a").await, Err(Error::Closed)));
}

// Proves a request past its timeout fails with Timeout, and its late reply is matched and dropped without breaking later requests.
#[tokio::test]
async fn request_timeout_keeps_replies_in_step() {
    let options = ClientOptions::default().with_request_timeout(Duration::from_millis(100));
    let (client, mut peer) = start_with(options, 1024).await;
    let (slow, (slow_xid, _)) = tokio::join!(client.get_data("/slow"), peer.request());
    assert!(matches!(slow, Err(Error::Timeout)), "{slow:?}");
    let late = OpResult::Data {
        data: b"late".to_vec(),
        stat: stat(1),
    };
    peer.reply(slow_xid, 101, Ok(late)).await;
    let (next, ()) = tokio::join!(client.exists("/b"), async {
        let (xid, op) = peer.request().await;
        assert!(xid > slow_xid);
        assert!(matches!(op, Op::Exists { .. }), "{op:?}");
        peer.reply(xid, 102, Ok(OpResult::Exists(None))).await;
    });
    assert_eq!(next.expect("later request answered"), None);
    assert_eq!(client.state(), ConnectionState::Connected);
    assert_eq!(client.last_zxid(), 102);
}

/// Generous slack for a deadline checked every `DEADLINE_TICK` on a busy machine.
const LATENESS_MAX: Duration = Duration::from_secs(2);

/// `call`'s outcome; fails the test instead of hanging if it never ends.
async fn ends<F: std::future::Future>(call: F) -> F::Output {
    tokio::time::timeout(PATIENCE + LATENESS_MAX, call)
        .await
        .expect("the call ends")
}

/// Asserts `elapsed` is at least `timeout`, and not much more.
fn assert_timed_out_at(elapsed: Duration, timeout: Duration) {
    assert!(
        elapsed >= timeout,
        "failed early: {elapsed:?} < {timeout:?}"
    );
    assert!(
        elapsed <= timeout + LATENESS_MAX,
        "failed late: {elapsed:?} past {timeout:?}"
    );
}

// Proves an unanswered request fails with Timeout at its deadline (not before), and its late reply neither answers the request behind it nor leaves a watcher.
#[tokio::test]
async fn unanswered_request_fails_at_its_deadline() {
    let timeout = Duration::from_millis(200);
    let options = ClientOptions::default().with_request_timeout(timeout);
    let (client, mut peer) = start_with(options, 1024).await;
    let started = std::time::Instant::now();
    let (slow, (slow_xid, _)) = tokio::join!(ends(client.get_data_watch("/slow")), peer.request());
    assert!(matches!(slow, Err(Error::Timeout)), "{slow:?}");
    assert_timed_out_at(started.elapsed(), timeout);

    // The next request is sent before the late reply comes, behind it.
    let (next, ()) = tokio::join!(client.exists("/b"), async {
        let (xid, op) = peer.request().await;
        assert_eq!(xid, slow_xid + 1);
        assert!(matches!(op, Op::Exists { .. }), "{op:?}");
        let late = OpResult::Data {
            data: b"late".to_vec(),
            stat: stat(1),
        };
        peer.reply(slow_xid, 101, Ok(late)).await;
        peer.reply(xid, 102, Ok(OpResult::Exists(Some(stat(7)))))
            .await;
    });
    assert_eq!(next.expect("answered").map(|s| s.version), Some(7));
    assert_eq!(client.watcher_count(), 0, "the late reply set no watcher");
    assert_eq!(client.state(), ConnectionState::Connected);
    assert_eq!(client.last_zxid(), 102);
}

// Proves a call waiting for an in-flight slot times out, and a timed-out request keeps its slot until its late reply.
#[tokio::test]
async fn request_waiting_for_a_slot_times_out() {
    let timeout = Duration::from_millis(200);
    let options = ClientOptions::default()
        .with_request_timeout(timeout)
        .with_max_in_flight(1);
    let (client, mut peer) = start_with(options, 1024).await;
    let started = std::time::Instant::now();
    let ((first, waiting), first_xid) = tokio::join!(
        async { tokio::join!(ends(client.exists("/1")), ends(client.exists("/2"))) },
        async {
            let (xid, _) = peer.request().await;
            // Past both deadlines: the first still holds the only slot.
            let second = tokio::time::timeout(timeout * 2, peer.reader.next()).await;
            assert!(second.is_err(), "a request was sent without a free slot");
            xid
        }
    );
    assert!(matches!(first, Err(Error::Timeout)), "{first:?}");
    assert!(matches!(waiting, Err(Error::Timeout)), "{waiting:?}");
    assert_timed_out_at(started.elapsed(), timeout);

    peer.reply(first_xid, 101, Ok(OpResult::Exists(None))).await;
    let (next, ()) = tokio::join!(client.exists("/3"), async {
        let (xid, op) = peer.request().await;
        assert_eq!(xid, first_xid + 1, "the waiting call was never sent");
        assert_eq!(
            op,
            Op::Exists {
                path: "/3".into(),
                watch: false
            }
        );
        peer.reply(xid, 102, Ok(OpResult::Exists(None))).await;
    });
    assert_eq!(next.expect("the late reply freed the slot"), None);
}

// Proves a call made while a close is in flight (so it cannot be sent) still times out at its deadline, and is never sent.
#[tokio::test]
async fn request_held_behind_a_close_times_out() {
    let timeout = Duration::from_millis(200);
    let options = ClientOptions::default().with_request_timeout(timeout);
    let (client, mut peer) = start_with(options, 1024).await;
    let other = client.clone();
    let (closed, (close_xid, held, held_elapsed)) = tokio::join!(ends(client.close()), async {
        let (xid, op) = peer.request().await;
        assert_eq!(op, Op::CloseSession);
        let asked = std::time::Instant::now();
        let held = ends(other.exists("/a")).await;
        (xid, held, asked.elapsed())
    });
    assert!(matches!(closed, Err(Error::Timeout)), "{closed:?}");
    assert!(matches!(held, Err(Error::Timeout)), "{held:?}");
    assert_timed_out_at(held_elapsed, timeout);

    peer.reply(close_xid, 101, Ok(OpResult::SessionClosed))
        .await;
    assert!(
        peer.recv().await.is_none(),
        "the held call is never sent, and the late close reply closes"
    );
    assert!(matches!(other.exists("/a").await, Err(Error::Closed)));
}

// Proves a caller that drops its call (before or after its deadline) leaves the replies in step.
#[tokio::test]
async fn abandoned_calls_keep_replies_in_step() {
    let timeout = Duration::from_millis(200);
    let options = ClientOptions::default().with_request_timeout(timeout);
    let (client, mut peer) = start_with(options, 1024).await;
    let give_up = Duration::from_millis(20);
    let started = tokio::time::Instant::now();
    let (first, (first_xid, _)) = tokio::join!(
        tokio::time::timeout(give_up, client.get_data_watch("/first")),
        peer.request()
    );
    assert!(first.is_err(), "the caller gave up first");
    // Both are answered after the first one's deadline and (unless the
    // machine is very slow) before the second one's.
    tokio::time::sleep_until(started + timeout * 3 / 4).await;
    let (second, (second_xid, _)) = tokio::join!(
        tokio::time::timeout(give_up, client.get_data_watch("/second")),
        peer.request()
    );
    assert!(second.is_err(), "the caller gave up first");
    tokio::time::sleep_until(started + timeout + timeout / 4).await;
    let data = OpResult::Data {
        data: Vec::new(),
        stat: stat(1),
    };
    peer.reply(first_xid, 101, Ok(data.clone())).await;
    peer.reply(second_xid, 102, Ok(data)).await;
    let (next, ()) = tokio::join!(client.exists("/b"), async {
        let (xid, _) = peer.request().await;
        peer.reply(xid, 103, Ok(OpResult::Exists(None))).await;
    });
    assert_eq!(next.expect("later request answered"), None);
    assert_eq!(client.watcher_count(), 0);
    assert_eq!(client.state(), ConnectionState::Connected);
}

// Proves Closing{SessionExpired} expires the client: in-flight and later calls get SessionExpired.
#[tokio::test]
async fn closing_session_expired_expires_client() {
    let (client, mut peer) = start().await;
    let (result, ()) = tokio::join!(client.get_data("/a"), async {
        peer.request().await;
        peer.send(ServerMessage::Closing {
            code: ErrorCode::SessionExpired,
            message: "expired".into(),
        })
        .await;
    });
    assert!(matches!(result, Err(Error::SessionExpired)), "{result:?}");
    let later = client.create("/b", Vec::new(), CreateMode::Ephemeral).await;
    assert!(matches!(later, Err(Error::SessionExpired)), "{later:?}");
}

// Proves a SessionExpired reply also expires the whole client.
#[tokio::test]
async fn session_expired_reply_expires_client() {
    let (client, mut peer) = start().await;
    let (result, ()) = tokio::join!(client.exists("/a"), async {
        let (xid, _) = peer.request().await;
        peer.reply(xid, 101, Err(ErrorCode::SessionExpired)).await;
    });
    assert!(matches!(result, Err(Error::SessionExpired)), "{result:?}");
    assert!(matches!(client.ping().await, Err(Error::SessionExpired)));
}

// Proves a resume the server refuses is SessionExpired from connect.
#[tokio::test]
async fn refused_resume_is_session_expired() {
    let (listener, addr) = listener().await;
    let credentials = SessionCredentials {
        id: 9,
        password: [1; 16],
    };
    let options = ClientOptions::default().with_resume(credentials);
    let server = async {
        let mut peer = Peer::accept(&listener).await;
        let request = peer.connect_request().await;
        assert_eq!(request.session, Some(credentials));
        peer.send(ServerMessage::Closing {
            code: ErrorCode::SessionExpired,
            message: "unknown session".into(),
        })
        .await;
    };
    let (result, ()) = tokio::join!(Client::connect(&addr, options), server);
    assert!(matches!(result, Err(Error::SessionExpired)), "{result:?}");
}

// Proves the connect string is tried in order, past an address that refuses.
#[tokio::test]
async fn connect_tries_each_address() {
    let (dead, dead_addr) = listener().await;
    drop(dead);
    let (listener, addr) = listener().await;
    let server = async {
        let mut peer = Peer::accept(&listener).await;
        peer.handshake(1024).await;
        peer
    };
    let connect_string = format!("{dead_addr}, {addr}");
    let (client, _peer) = tokio::join!(
        Client::connect(&connect_string, ClientOptions::default()),
        server
    );
    assert_eq!(
        client.expect("second address works").session_id(),
        SESSION_ID
    );
    let none = Client::connect(" , ", ClientOptions::default()).await;
    assert!(matches!(none, Err(Error::Connect { .. })), "{none:?}");
}

// Proves data over the server's limit and bad paths are refused locally, without sending.
#[tokio::test]
async fn local_checks_do_not_send() {
    let (client, mut peer) = start_with(ClientOptions::default(), 16).await;
    let big = vec![0u8; 17];
    let create = client
        .create("/a", big.clone(), CreateMode::Persistent)
        .await;
    assert!(
        matches!(
            create,
            Err(Error::TooLarge {
                bytes: Some(17),
                max: Some(16)
            })
        ),
        "{create:?}"
    );
    let set = client.set_data("/a", big.clone(), None).await;
    assert!(matches!(set, Err(Error::TooLarge { .. })), "{set:?}");
    let batch = client.multi(vec![multi::set_data("/a", big, None)]).await;
    assert!(matches!(batch, Err(Error::TooLarge { .. })), "{batch:?}");
    let bad = client.get_data("a/b").await;
    assert!(
        matches!(
            bad,
            Err(Error::InvalidPath {
                reason: Some(_),
                ..
            })
        ),
        "{bad:?}"
    );
    let bad_seq = client
        .create("/locks//", Vec::new(), CreateMode::EphemeralSequential)
        .await;
    assert!(
        matches!(bad_seq, Err(Error::InvalidPath { .. })),
        "{bad_seq:?}"
    );

    // The first request the server sees is the one after the refused ones.
    let (exists, ()) = tokio::join!(client.exists("/x"), async {
        let (xid, op) = peer.request().await;
        assert_eq!(xid, 1);
        assert_eq!(
            op,
            Op::Exists {
                path: "/x".into(),
                watch: false
            }
        );
        peer.reply(xid, 101, Ok(OpResult::Exists(None))).await;
    });
    assert_eq!(exists.expect("exists"), None);
}

// Proves a reply whose xid is not the oldest request's drops the connection: the call gets ConnectionLoss and the client is Suspended.
#[tokio::test]
async fn mismatched_xid_is_connection_loss() {
    let (client, mut peer) = start().await;
    let (result, ()) = tokio::join!(client.get_data("/a"), async {
        let (xid, _) = peer.request().await;
        peer.reply(xid + 5, 101, Ok(OpResult::Pong)).await;
    });
    assert!(matches!(result, Err(Error::ConnectionLoss)), "{result:?}");
    assert_eq!(client.state(), ConnectionState::Suspended);
    assert!(matches!(client.ping().await, Err(Error::ConnectionLoss)));
}

// Proves a watch event that overtakes the reply still fires the new one-shot watch.
#[tokio::test]
async fn event_before_reply_fires_the_watch() {
    let (client, mut peer) = start().await;
    let (result, ()) = tokio::join!(client.get_data_watch("/a"), async {
        let (xid, op) = peer.request().await;
        assert_eq!(
            op,
            Op::GetData {
                path: "/a".into(),
                watch: true
            }
        );
        peer.send(ServerMessage::Event(event(
            EventType::NodeDataChanged,
            "/a",
            200,
        )))
        .await;
        let data = OpResult::Data {
            data: b"v".to_vec(),
            stat: stat(1),
        };
        peer.reply(xid, 200, Ok(data)).await;
    });
    let (data, _, watch) = result.expect("get_data_watch");
    assert_eq!(data, b"v");
    let fired = tokio::time::timeout(PATIENCE, watch).await.expect("fired");
    assert_eq!(fired.expect("event").event_type, EventType::NodeDataChanged);
    assert_eq!(client.last_zxid(), 200);
    assert_eq!(client.watcher_count(), 0);
}

// Proves a watching call that fails leaves no provisional watcher behind.
#[tokio::test]
async fn failed_watch_call_removes_its_watcher() {
    let (client, mut peer) = start().await;
    let (result, ()) = tokio::join!(client.get_children_watch("/missing"), async {
        let (xid, _) = peer.request().await;
        peer.reply(xid, 101, Err(ErrorCode::NoNode)).await;
    });
    assert!(
        matches!(&result, Err(Error::NoNode { path }) if path == "/missing"),
        "{result:?}"
    );
    assert_eq!(client.watcher_count(), 0);
}

// Proves a persistent-recursive stream gets routed events and ends when its watch is removed.
#[tokio::test]
async fn persistent_watch_streams_until_removed() {
    let (client, mut peer) = start().await;
    let (watch, ()) = tokio::join!(
        client.watch("/a", AddWatchMode::PersistentRecursive),
        async {
            let (xid, op) = peer.request().await;
            assert!(matches!(op, Op::AddWatch { .. }), "{op:?}");
            peer.reply(xid, 101, Ok(OpResult::WatchesChanged)).await;
        }
    );
    let mut watch = watch.expect("watch set");
    peer.send(ServerMessage::Event(event(
        EventType::NodeCreated,
        "/a/b",
        102,
    )))
    .await;
    peer.send(ServerMessage::Event(event(
        EventType::NodeChildrenChanged,
        "/a",
        102,
    )))
    .await;
    peer.send(ServerMessage::Event(event(
        EventType::NodeDeleted,
        "/a/b",
        103,
    )))
    .await;
    let first = watch.next().await.expect("created");
    assert_eq!(
        (first.event_type, first.path.as_str()),
        (EventType::NodeCreated, "/a/b")
    );
    let second = watch.next().await.expect("deleted");
    assert_eq!(second.event_type, EventType::NodeDeleted);

    let (removed, ()) = tokio::join!(
        client.remove_watches("/a", WatcherKind::PersistentRecursive),
        async {
            let (xid, _) = peer.request().await;
            peer.reply(xid, 103, Ok(OpResult::WatchesChanged)).await;
        }
    );
    removed.expect("removed");
    assert!(matches!(watch.next().await, Err(Error::WatchRemoved)));
    assert!(matches!(watch.next().await, Err(Error::WatchRemoved)));
}

// Proves a refused multi reports the failing op's index and code with every outcome.
#[tokio::test]
async fn multi_failure_names_the_failing_op() {
    let (client, mut peer) = start().await;
    let ops = vec![
        multi::create("/a", Vec::new(), CreateMode::Persistent),
        multi::check("/b", Some(3)),
        multi::delete("/c", None),
    ];
    let (result, ()) = tokio::join!(client.multi(ops), async {
        let (xid, _) = peer.request().await;
        let outcomes = vec![
            MultiOpOutcome::RolledBack,
            MultiOpOutcome::Failed(ErrorCode::BadVersion),
            MultiOpOutcome::NotRun,
        ];
        peer.reply(xid, 101, Ok(OpResult::Multi(outcomes))).await;
    });
    match result {
        Err(Error::MultiFailed {
            index,
            code,
            outcomes,
        }) => {
            assert_eq!((index, code), (1, ErrorCode::BadVersion));
            assert_eq!(outcomes.len(), 3);
        }
        other => panic!("expected MultiFailed, got {other:?}"),
    }
}

// Proves callers past max_in_flight wait for a slot instead of sending.
#[tokio::test]
async fn max_in_flight_applies_back_pressure() {
    let options = ClientOptions::default().with_max_in_flight(2);
    let (client, mut peer) = start_with(options, 1024).await;
    let calls = async {
        tokio::join!(
            client.exists("/1"),
            client.exists("/2"),
            client.exists("/3")
        )
    };
    let server = async {
        let (first, _) = peer.request().await;
        let (second, _) = peer.request().await;
        let third = tokio::time::timeout(Duration::from_millis(100), peer.reader.next()).await;
        assert!(
            third.is_err(),
            "a third request was sent while two were in flight"
        );
        peer.reply(first, 101, Ok(OpResult::Exists(None))).await;
        let (third, _) = peer.request().await;
        peer.reply(second, 101, Ok(OpResult::Exists(None))).await;
        peer.reply(third, 101, Ok(OpResult::Exists(None))).await;
    };
    let ((a, b, c), ()) = tokio::join!(calls, server);
    assert!(a.is_ok() && b.is_ok() && c.is_ok());
}

// Proves close() waits for SessionClosed and every clone then gets Closed.
#[tokio::test]
async fn close_ends_every_clone() {
    let (client, mut peer) = start().await;
    let other = client.clone();
    let (closed, ()) = tokio::join!(client.close(), async {
        let (xid, op) = peer.request().await;
        assert_eq!(op, Op::CloseSession);
        peer.reply(xid, 101, Ok(OpResult::SessionClosed)).await;
    });
    closed.expect("closed");
    assert!(matches!(other.exists("/a").await, Err(Error::Closed)));
    assert!(peer.recv().await.is_none(), "client closes the socket");
}

// Proves dropping the last clone sends CloseSession and then closes the socket.
#[tokio::test]
async fn dropping_last_clone_closes_the_session() {
    let (client, mut peer) = start().await;
    let other = client.clone();
    drop(client);
    let (xid, op) = tokio::time::timeout(Duration::from_secs(1), async {
        drop(other);
        peer.request().await
    })
    .await
    .expect("CloseSession comes promptly");
    assert_eq!(op, Op::CloseSession);
    peer.reply(xid, 101, Ok(OpResult::SessionClosed)).await;
    assert!(peer.recv().await.is_none(), "client closes the socket");
}

// Proves handles, watches and call futures can move across threads (e.g. into tokio::spawn).
#[test]
fn handles_and_futures_are_send() {
    fn send_sync<T: Send + Sync + 'static>() {}
    fn send<T: Send + 'static>() {}
    fn future_is_send<F: std::future::Future + Send>(_: F) {}
    fn calls(client: &Client) {
        future_is_send(client.get_data_watch("/a"));
        future_is_send(client.watch("/a", AddWatchMode::Persistent));
        future_is_send(client.multi(Vec::new()));
        future_is_send(client.clone().close());
    }
    send_sync::<Client>();
    send_sync::<Error>();
    send::<crate::OneshotWatch>();
    send::<crate::PersistentWatch>();
    let _ = calls;
}
