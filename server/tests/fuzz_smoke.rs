//! The fuzz targets (`fuzz/`, run for long by `scripts/fuzz.sh` on nightly)
//! as a short stable smoke in every `cargo test`: the same target bodies
//! (`arbor_protocol::fuzzing`, `arbor_server::fuzzing`) on seeds taken from a
//! real server, and on a few thousand seeded mutations of them (bit flips,
//! bytes set, lengths forged huge, truncations, insertions, splices). A
//! panic fails the test.
//!
//! The seeds are real traffic and real files: the frames a session of every
//! op kind sends and receives over TCP, and the log segments and snapshots a
//! server wrote across two starts; for the ZooKeeper port, a request of every
//! op code it reads, framed as ZooKeeper 3.9 clients frame them, and the real
//! server messages as what it writes back. The same seeds are the fuzzers' starting
//! corpus, written by the ignored test here:
//!
//! ```text
//! ARBOR_FUZZ_CORPUS=fuzz/corpus cargo test -p arbor-server --test fuzz_smoke -- --ignored
//! ```
//!
//! A failing mutation is replayed with `ARBOR_FUZZ_SMOKE_SEED=<seed>`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use arbor_protocol::acl::{digest_id, Acl, Perms, DIGEST};
use arbor_protocol::frame::{encode_frame, FrameDecoder, DEFAULT_FRAME_BYTES_MAX};
use arbor_protocol::{fuzzing as protocol, OpResult};
use arbor_protocol::{
    AddWatchMode, ClientMessage, ConnectRequest, CreateMode, MultiOp, Op, ServerMessage,
    SessionCredentials, SetWatches, WatcherKind, PROTOCOL_VERSION,
};
use arbor_server::fuzzing as server;
use arbor_server::storage::snapshot;
use arbor_server::storage::txnlog::{self, FsyncPolicy};
use arbor_server::{Config, Server, ServerError};
use bytes::BytesMut;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::Decoder;

/// Mutations per target: a few seconds for all of them in a debug build.
const MUTATIONS_PER_TARGET: usize = 2_000;

/// The corpus stays small enough to commit if we ever want to, and to load
/// quickly: a seed larger than a few kilobytes slows every execution.
const SEEDS_BYTES_MAX: usize = 1024 * 1024;

/// How long the seed traffic may wait for any answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Writes between snapshots in the seed server: a few snapshots per start.
const SEED_SNAP_COUNT: u64 = 40;

/// Snapshots the seed server keeps: all of them, so that no log segment is
/// purged before it becomes a seed.
const SEED_SNAP_RETAIN: usize = 64;

/// Segment size in the seed server: several segments per start.
const SEED_SEGMENT_BYTES: u64 = 4 * 1024;

/// Zeros kept after a segment's last record: the clean end of a log is a
/// zero fill, but a seed needs only a taste of the megabytes preallocated.
const SEED_ZERO_FILL_BYTES: usize = 32;

/// A target: its name (as `fuzz/fuzz_targets/<name>.rs`) and its body.
type Target = (&'static str, fn(&[u8]));

const TARGETS: [Target; 9] = [
    ("frames", protocol::frames),
    ("client_message", protocol::client_message),
    ("server_message", protocol::server_message),
    ("handshake", server::handshake),
    ("txnlog", server::txnlog),
    ("snapshot", server::snapshot),
    ("certificate", server::certificate),
    ("zk_request", server::zk_request),
    ("zk_reply", server::zk_reply),
];

// Proves every target returns on real inputs and on mutations of them.
#[test]
fn every_target_survives_its_seeds_and_their_mutations() {
    let seeds = seeds();
    seeds_are_real(&seeds);
    let seed = std::env::var("ARBOR_FUZZ_SMOKE_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or(0x5eed_u64);
    for (name, target) in TARGETS {
        let mine: Vec<&[u8]> = seeds
            .iter()
            .filter(|(target, _)| *target == name)
            .map(|(_, seed)| seed.as_slice())
            .collect();
        assert!(!mine.is_empty(), "no seeds for {name}");
        target(&[]);
        for seed in &mine {
            target(seed);
        }
        let mut rng = StdRng::seed_from_u64(seed);
        for k in 0..MUTATIONS_PER_TARGET {
            let input = mutate(mine[k % mine.len()], &mine, &mut rng);
            target(&input);
        }
    }
}

/// Writes the seeds where `scripts/fuzz.sh` starts the fuzzers from: one
/// directory per target under `$ARBOR_FUZZ_CORPUS`.
#[test]
#[ignore = "writes the fuzz corpus: run by scripts/fuzz.sh"]
fn write_seed_corpus() {
    let dir = PathBuf::from(
        std::env::var_os("ARBOR_FUZZ_CORPUS").expect("ARBOR_FUZZ_CORPUS names the corpus"),
    );
    for (k, (name, seed)) in seeds().into_iter().enumerate() {
        let target_dir = dir.join(name);
        std::fs::create_dir_all(&target_dir).expect("corpus directory");
        std::fs::write(target_dir.join(format!("seed-{k:03}")), seed).expect("write seed");
    }
}

/// Seeds per target.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let data_dir = scratch_dir();
    let mut seeds = Vec::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // Two starts: the second opens a new epoch, so the log crosses one.
    for start in 0..2 {
        let running = RunningServer::start(&data_dir);
        let traffic = runtime.block_on(session_traffic(running.addr, start));
        running.stop();
        seeds.extend(traffic);
    }
    seeds.extend(file_seeds(&data_dir));
    seeds.extend(certificate_seeds());
    seeds.extend(zk_request_seeds());
    let _ = std::fs::remove_dir_all(&data_dir);
    seeds
}

fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("arbor-fuzz-seeds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A real server on 127.0.0.1, on its own thread and runtime.
struct RunningServer {
    addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: JoinHandle<Result<(), ServerError>>,
}

impl RunningServer {
    fn start(data_dir: &Path) -> RunningServer {
        let config = Config {
            data_dir: data_dir.to_owned(),
            tick_ms: 200,
            fsync: FsyncPolicy::Never,
            snap_count: SEED_SNAP_COUNT,
            snap_tree_percent: 0,
            snap_retain: SEED_SNAP_RETAIN,
            segment_bytes_max: SEED_SEGMENT_BYTES,
            ..Config::default()
        };
        let (ready, bound) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let server = Server::open(config)?;
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                ready
                    .send(listener.local_addr().expect("address"))
                    .expect("the test waits");
                server
                    .serve(listener, async {
                        let _ = stopped.await;
                    })
                    .await
            })
        });
        let addr = bound.recv().expect("the server starts");
        RunningServer { addr, stop, thread }
    }

    fn stop(self) {
        let _ = self.stop.send(());
        let ended = self
            .thread
            .join()
            .expect("the server thread does not panic");
        ended.expect("the server ends cleanly");
    }
}

/// One session's traffic as seeds: a first connection that writes enough
/// for snapshots, then a second that resumes the session, sends every op
/// kind and closes it. Everything sent and received is kept.
async fn session_traffic(addr: SocketAddr, start: u64) -> Vec<(&'static str, Vec<u8>)> {
    let mut first = Recorded::connect(addr).await;
    let connect = connect_request(None);
    let Some(ServerMessage::Connected(connected)) = first.call(&connect).await else {
        panic!("the handshake failed");
    };
    for (xid, op) in history_ops(start).into_iter().enumerate() {
        first.request(xid as u64 + 1, op).await;
    }
    let credentials = SessionCredentials {
        id: connected.session_id,
        password: connected.password,
    };
    let mut second = Recorded::connect(addr).await;
    second.call(&connect_request(Some(credentials))).await;
    let ops = every_op(start);
    let count = ops.len() as u64;
    for (xid, op) in ops.into_iter().enumerate() {
        second.request(xid as u64 + 1, op).await;
    }
    second.request(count + 1, Op::CloseSession).await;

    let connect_alone = first_frame(&first.sent);
    let mut seeds = Vec::new();
    for sent in [&connect_alone, &first.sent, &second.sent] {
        seeds.push(("handshake", sent.clone()));
        for piece in [1u8, 7, 255] {
            seeds.push(("frames", [&[piece][..], sent].concat()));
        }
    }
    for connection in [&first, &second] {
        seeds.extend(payloads(&connection.sent).map(|payload| ("client_message", payload)));
        seeds.extend(payloads(&connection.received).map(|payload| ("server_message", payload)));
        // What the ZooKeeper port would write for the same messages.
        seeds.extend(payloads(&connection.received).map(|payload| ("zk_reply", payload)));
        seeds.push(("frames", [&[64u8][..], &connection.received].concat()));
    }
    seeds
}

/// Frames as ZooKeeper clients send them (the payload, without the length
/// prefix): a handshake, new and resumed, and a request of every op code
/// the ZooKeeper port reads, with the records ZooKeeper 3.9 gives them.
fn zk_request_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use arbor_server::zk::codes::{create_flags, op};
    use arbor_server::zk::jute::Write;

    let mut frames = Vec::new();
    for (session_id, password) in [(0i64, [0u8; 16]), (0x1234, [7; 16])] {
        let mut connect = Vec::new();
        connect.put_int(0);
        connect.put_long(42);
        connect.put_int(10_000);
        connect.put_long(session_id);
        connect.put_bytes(&password);
        connect.put_bool(false);
        frames.push(connect);
    }
    let header = |xid: i32, op_code: i32| {
        let mut out = Vec::new();
        out.put_int(xid);
        out.put_int(op_code);
        out
    };
    let acl = |out: &mut Vec<u8>| {
        out.put_count(2);
        out.put_int(31);
        out.put_string("world");
        out.put_string("anyone");
        out.put_int(1);
        out.put_string("digest");
        out.put_string("alice:D/InIHSb7yEEbrWz8b9l71RjZJU=");
    };
    let create_body = |out: &mut Vec<u8>, path: &str, flags: i32| {
        out.put_string(path);
        out.put_bytes(b"data");
        acl(out);
        out.put_int(flags);
    };
    for (op_code, flags) in [
        (op::CREATE, create_flags::PERSISTENT),
        (op::CREATE2, create_flags::EPHEMERAL_SEQUENTIAL),
        (op::CREATE_CONTAINER, create_flags::CONTAINER),
    ] {
        let mut frame = header(1, op_code);
        create_body(&mut frame, "/a/b", flags);
        frames.push(frame);
    }
    let mut ttl = header(2, op::CREATE_TTL);
    create_body(&mut ttl, "/t", create_flags::PERSISTENT_WITH_TTL);
    ttl.put_long(60_000);
    frames.push(ttl);
    for (op_code, tail) in [
        (op::DELETE, Some(3)),
        (op::EXISTS, None),
        (op::GET_DATA, None),
        (op::GET_CHILDREN, None),
        (op::GET_CHILDREN2, None),
        (op::CHECK, Some(0)),
        (op::REMOVE_WATCHES, Some(3)),
        (op::CHECK_WATCHES, Some(2)),
        (op::ADD_WATCH, Some(1)),
    ] {
        let mut frame = header(3, op_code);
        frame.put_string("/a");
        match tail {
            Some(value) => frame.put_int(value),
            None => frame.put_bool(true),
        }
        frames.push(frame);
    }
    for op_code in [
        op::GET_ACL,
        op::SYNC,
        op::GET_EPHEMERALS,
        op::GET_ALL_CHILDREN_NUMBER,
    ] {
        let mut frame = header(4, op_code);
        frame.put_string("/a");
        frames.push(frame);
    }
    let mut set = header(5, op::SET_DATA);
    set.put_string("/a");
    set.put_bytes(b"new");
    set.put_int(-1);
    frames.push(set);
    let mut set_acl = header(6, op::SET_ACL);
    set_acl.put_string("/a");
    acl(&mut set_acl);
    set_acl.put_int(0);
    frames.push(set_acl);
    for op_code in [op::PING, op::CLOSE_SESSION, op::WHO_AM_I, op::RECONFIG] {
        frames.push(header(-2, op_code));
    }
    let mut auth = header(-4, op::AUTH);
    auth.put_int(0);
    auth.put_string("digest");
    auth.put_bytes(b"alice:secret");
    frames.push(auth);
    let mut watches = header(-8, op::SET_WATCHES2);
    watches.put_long(7);
    for paths in [&["/a"][..], &["/b"], &["/c", "/d"], &[], &["/"]] {
        watches.put_count(paths.len());
        for path in paths {
            watches.put_string(path);
        }
    }
    frames.push(watches);
    let sub = |out: &mut Vec<u8>, op_code: i32, done: bool| {
        out.put_int(op_code);
        out.put_bool(done);
        out.put_int(-1);
    };
    let mut multi = header(7, op::MULTI);
    sub(&mut multi, op::CREATE, false);
    create_body(&mut multi, "/m", create_flags::PERSISTENT);
    sub(&mut multi, op::SET_DATA, false);
    multi.put_string("/m");
    multi.put_bytes(b"x");
    multi.put_int(0);
    sub(&mut multi, op::CHECK, false);
    multi.put_string("/m");
    multi.put_int(1);
    sub(&mut multi, op::DELETE, false);
    multi.put_string("/m");
    multi.put_int(-1);
    sub(&mut multi, op::ERROR, true);
    frames.push(multi);
    let mut reads = header(8, op::MULTI_READ);
    for op_code in [op::GET_DATA, op::GET_CHILDREN] {
        sub(&mut reads, op_code, false);
        reads.put_string("/m");
        reads.put_bool(false);
    }
    sub(&mut reads, op::ERROR, true);
    frames.push(reads);
    frames
        .into_iter()
        .map(|frame| ("zk_request", frame))
        .collect()
}

/// The first frame of `stream`: a connection's handshake alone.
fn first_frame(stream: &[u8]) -> Vec<u8> {
    let mut buffer = BytesMut::from(stream);
    FrameDecoder::new(DEFAULT_FRAME_BYTES_MAX)
        .decode(&mut buffer)
        .expect("a frame")
        .expect("whole");
    stream[..stream.len() - buffer.len()].to_vec()
}

fn connect_request(session: Option<SessionCredentials>) -> ClientMessage {
    ClientMessage::Connect(ConnectRequest {
        protocol_version: PROTOCOL_VERSION,
        last_zxid_seen: 0,
        session_timeout_ms: 4_000,
        session,
    })
}

/// Writes of every kind, enough for a few snapshots and segments.
fn history_ops(start: u64) -> Vec<Op> {
    let root = format!("/h{start}");
    let mut ops = vec![Op::Create {
        path: root.clone(),
        data: b"history".to_vec(),
        mode: CreateMode::Persistent,
    }];
    for k in 0..40u8 {
        let path = format!("{root}/n{k}");
        ops.push(Op::Create {
            path: path.clone(),
            data: vec![k; 64],
            mode: CreateMode::Persistent,
        });
        ops.push(Op::SetData {
            path,
            data: vec![k; 8],
            version: -1,
        });
    }
    ops.push(Op::Create {
        path: format!("{root}/e-"),
        data: Vec::new(),
        mode: CreateMode::EphemeralSequential,
    });
    ops
}

/// Every op a client can send, in an order a server answers.
fn every_op(start: u64) -> Vec<Op> {
    let root = format!("/o{start}");
    let child = format!("{root}/c");
    let alice = digest_id("alice:secret").expect("digest");
    let alice_only = vec![Acl::new(Perms::ALL, DIGEST, alice)];
    vec![
        Op::Auth {
            scheme: DIGEST.into(),
            credentials: b"alice:secret".to_vec(),
        },
        Op::WhoAmI,
        Op::Create {
            path: root.clone(),
            data: b"r".to_vec(),
            mode: CreateMode::Container,
        },
        Op::CreateWithAcl {
            path: child.clone(),
            data: b"c".to_vec(),
            mode: CreateMode::Persistent,
            acl: alice_only.clone(),
        },
        Op::Create {
            path: format!("{root}/ttl"),
            data: Vec::new(),
            mode: CreateMode::PersistentWithTtl { ttl_ms: 60_000 },
        },
        Op::Create {
            path: format!("{root}/lock-"),
            data: Vec::new(),
            mode: CreateMode::EphemeralSequential,
        },
        Op::GetData {
            path: child.clone(),
            watch: true,
        },
        Op::Exists {
            path: format!("{root}/missing"),
            watch: true,
        },
        Op::GetChildren {
            path: root.clone(),
            watch: true,
        },
        Op::GetChildrenWithStat {
            path: root.clone(),
            watch: false,
        },
        Op::ChildrenBelow {
            path: root.clone(),
            sequence: 10,
            limit: 2,
        },
        Op::SetData {
            path: child.clone(),
            data: b"changed".to_vec(),
            version: 0,
        },
        Op::Multi {
            ops: vec![
                MultiOp::Check {
                    path: child.clone(),
                    version: 1,
                },
                MultiOp::Create {
                    path: format!("{root}/m"),
                    data: b"m".to_vec(),
                    mode: CreateMode::PersistentSequential,
                },
                MultiOp::CreateWithAcl {
                    path: format!("{root}/ma"),
                    data: Vec::new(),
                    mode: CreateMode::Persistent,
                    acl: Acl::read_only(),
                },
                MultiOp::SetData {
                    path: child.clone(),
                    data: b"multi".to_vec(),
                    version: -1,
                },
                MultiOp::Delete {
                    path: format!("{root}/ma"),
                    version: -1,
                },
            ],
        },
        Op::AddWatch {
            path: root.clone(),
            mode: AddWatchMode::PersistentRecursive,
        },
        Op::RemoveWatches {
            path: root.clone(),
            kind: WatcherKind::Any,
        },
        Op::SetWatches(SetWatches {
            relative_zxid: 1,
            data: vec![child.clone()],
            exist: vec![format!("{root}/later")],
            child: vec![root.clone()],
            persistent: vec![root.clone()],
            persistent_recursive: vec!["/".into()],
        }),
        Op::GetAcl {
            path: child.clone(),
        },
        Op::SetAcl {
            path: child.clone(),
            acl: Acl::parse_list("world:anyone:r,auth::cdrwa").expect("ACL"),
            version: 0,
        },
        Op::Sync { path: "/".into() },
        Op::Ping,
        Op::ClusterStatus,
        Op::AddMember {
            id: 2,
            client_addr: "127.0.0.1:2181".into(),
            peer_addr: "127.0.0.1:2888".into(),
        },
        Op::RemoveMember { id: 2 },
        Op::Delete {
            path: child,
            version: -1,
        },
    ]
}

/// A TCP connection that keeps every byte it sent and received.
struct Recorded {
    stream: TcpStream,
    sent: Vec<u8>,
    received: Vec<u8>,
    buffer: BytesMut,
}

impl Recorded {
    async fn connect(addr: SocketAddr) -> Recorded {
        Recorded {
            stream: TcpStream::connect(addr).await.expect("connect"),
            sent: Vec::new(),
            received: Vec::new(),
            buffer: BytesMut::new(),
        }
    }

    async fn request(&mut self, xid: u64, op: Op) {
        let is_close = matches!(op, Op::CloseSession);
        match self.call(&ClientMessage::Request { xid, op }).await {
            Some(ServerMessage::Reply { xid: got, .. }) => assert_eq!(got, xid),
            None if is_close => {}
            other => panic!("request {xid}: {other:?}"),
        }
    }

    /// Sends `message` and returns the next answer that is not an event.
    async fn call(&mut self, message: &ClientMessage) -> Option<ServerMessage> {
        let mut frame = Vec::new();
        encode_frame(message, DEFAULT_FRAME_BYTES_MAX, &mut frame).expect("encodes");
        self.stream.write_all(&frame).await.expect("send");
        self.sent.extend_from_slice(&frame);
        loop {
            match tokio::time::timeout(ANSWER_TIMEOUT, self.next()).await {
                Ok(Some(ServerMessage::Event(_))) => continue,
                Ok(answer) => return answer,
                Err(_) => panic!("no answer to {message:?}"),
            }
        }
    }

    async fn next(&mut self) -> Option<ServerMessage> {
        let mut decoder = FrameDecoder::new(DEFAULT_FRAME_BYTES_MAX);
        loop {
            if let Some(frame) = decoder.decode(&mut self.buffer).expect("valid frames") {
                return Some(arbor_protocol::codec::decode(&frame).expect("decodes"));
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            self.received.extend_from_slice(&chunk[..n]);
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }
}

/// The payloads of the frames in `stream`.
fn payloads(stream: &[u8]) -> impl Iterator<Item = Vec<u8>> {
    let mut decoder = FrameDecoder::new(DEFAULT_FRAME_BYTES_MAX);
    let mut buffer = BytesMut::from(stream);
    let mut payloads = Vec::new();
    while let Some(frame) = decoder.decode(&mut buffer).expect("valid frames") {
        payloads.push(frame.to_vec());
    }
    payloads.into_iter()
}

/// The log segments and snapshots the server wrote, as the txnlog and
/// snapshot targets take them: the file after a mode byte of 0, and its
/// record bodies after a mode byte of 1.
fn file_seeds(data_dir: &Path) -> Vec<(&'static str, Vec<u8>)> {
    const SEGMENT_HEADER_BYTES: usize = 24;
    const SNAPSHOT_HEADER_BYTES: usize = 24;
    let log_dir = data_dir.join("log");
    let tail = txnlog::read_log(&log_dir, 0, |_| Ok(())).expect("the seed log reads");
    assert!(tail.torn.is_none() && tail.segments.len() > 2, "{tail:?}");
    let mut seeds = Vec::new();
    let mut segments = Vec::new();
    for path in files_in(&log_dir) {
        let bytes = std::fs::read(&path).expect("read segment");
        let bytes = trim_zero_fill(&bytes);
        seeds.push(("txnlog", [&[0u8][..], &bytes].concat()));
        seeds.push(("txnlog", record_bodies(&bytes, SEGMENT_HEADER_BYTES, 1)));
        segments.push(bytes);
    }
    // Whole logs of up to four segments: the rules across segments.
    for window in segments.windows(4.min(segments.len())) {
        seeds.push(("txnlog", several_segments(window)));
    }
    let snapshots = files_in(&data_dir.join("snapshots"));
    assert!(!snapshots.is_empty(), "the seed server took no snapshot");
    for path in snapshots {
        snapshot::load(&path).expect("the seed snapshot loads");
        let bytes = std::fs::read(&path).expect("read snapshot");
        seeds.push(("snapshot", [&[0u8][..], &bytes].concat()));
        seeds.push(("snapshot", record_bodies(&bytes, SNAPSHOT_HEADER_BYTES, 1)));
    }
    seeds
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default();
    files.retain(|path| !path.to_string_lossy().ends_with(".tmp"));
    files.sort();
    files
}

fn trim_zero_fill(bytes: &[u8]) -> Vec<u8> {
    let end = bytes
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |last| last + 1);
    bytes[..(end + SEED_ZERO_FILL_BYTES).min(bytes.len())].to_vec()
}

/// The txnlog target's input for a log of several segments (mode bits 1–2:
/// the count less one; each but the last behind a two-byte length).
fn several_segments(segments: &[Vec<u8>]) -> Vec<u8> {
    let mode = u8::try_from((segments.len() - 1) << 1).expect("at most four segments");
    let mut out = vec![mode];
    for (k, segment) in segments.iter().enumerate() {
        if k + 1 < segments.len() {
            let len = u16::try_from(segment.len()).expect("seed segments are small");
            out.extend_from_slice(&len.to_be_bytes());
        }
        out.extend_from_slice(segment);
    }
    out
}

/// A file's record bodies after a `header`-byte header, each behind a
/// two-byte length, after `mode`: the framed mode of the storage targets.
fn record_bodies(file: &[u8], header: usize, mode: u8) -> Vec<u8> {
    let mut out = vec![mode];
    let mut rest = &file[header.min(file.len())..];
    while rest.len() >= 8 {
        let length = u32::from_be_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
        let (Some(body), Ok(short)) = (rest.get(8..8 + length), u16::try_from(length)) else {
            break;
        };
        if length == 0 {
            break;
        }
        out.extend_from_slice(&short.to_be_bytes());
        out.extend_from_slice(body);
        rest = &rest[8 + length..];
    }
    out
}

/// DER certificates as the server is handed them: a CA's, a member's (with
/// its DNS names) and a client's (a subject of many attributes).
fn certificate_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa,
        KeyPair, SanType,
    };
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = DistinguishedName::new();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "fuzz-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("key"))
        .expect("CA certificate");
    let mut member = CertificateParams::default();
    member.distinguished_name = DistinguishedName::new();
    member
        .distinguished_name
        .push(DnType::CommonName, "member-2");
    member.subject_alt_names = vec![
        SanType::DnsName("arbor-member-2".try_into().expect("a DNS name")),
        SanType::IpAddress([127, 0, 0, 1].into()),
    ];
    let mut client = CertificateParams::default();
    client.distinguished_name = DistinguishedName::new();
    for (kind, value) in [
        (DnType::CountryName, "NL"),
        (DnType::OrganizationName, "Example, Inc."),
        (DnType::OrganizationalUnitName, "eng+ops"),
        (DnType::CommonName, "alice \"a\" <x>"),
    ] {
        client.distinguished_name.push(kind, value);
    }
    let mut seeds = vec![("certificate", ca.der().to_vec())];
    for params in [member, client] {
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &ca).expect("certificate");
        seeds.push(("certificate", cert.der().to_vec()));
    }
    seeds
}

/// One to four mutations of `seed`, of the kinds a fuzzer's cheapest
/// mutators make, plus forged lengths and splices with other seeds.
fn mutate(seed: &[u8], others: &[&[u8]], rng: &mut StdRng) -> Vec<u8> {
    /// Values a forged length field takes: the frame, record and codec
    /// limits and the largest values of each width.
    const HUGE: [u32; 6] = [
        u32::MAX,
        0x7fff_ffff,
        0x0400_0001,
        0x0010_0001,
        0x0001_0001,
        256,
    ];
    let mut bytes = seed.to_vec();
    for _ in 0..rng.gen_range(1..=4) {
        if bytes.is_empty() {
            bytes.push(rng.gen());
            continue;
        }
        let at = rng.gen_range(0..bytes.len());
        match rng.gen_range(0..8) {
            0 => bytes[at] ^= 1 << rng.gen_range(0..8),
            1 => bytes[at] = rng.gen(),
            2 => {
                let huge = HUGE[rng.gen_range(0..HUGE.len())].to_be_bytes();
                let end = (at + 4).min(bytes.len());
                bytes[at..end].copy_from_slice(&huge[..end - at]);
            }
            3 => {
                // A bincode varint marker (u16/u32/u64/u128 follows) and 0xff.
                bytes[at] = rng.gen_range(251..=255);
                let end = (at + 9).min(bytes.len());
                bytes[at + 1..end].fill(0xff);
            }
            4 => bytes.truncate(at),
            5 => {
                let extra: Vec<u8> = (0..rng.gen_range(1..16)).map(|_| rng.gen()).collect();
                bytes.splice(at..at, extra);
            }
            6 => {
                let other = others[rng.gen_range(0..others.len())];
                let from = rng.gen_range(0..=other.len());
                bytes.truncate(at);
                bytes.extend_from_slice(&other[from..]);
            }
            _ => bytes[at] = [0x00, 0x01, 0x7f, 0x80, 0xff][rng.gen_range(0..5)],
        }
    }
    bytes
}

/// The seeds are what they claim: some for every target, small, and from a
/// server that answered every op (each start's session closed).
fn seeds_are_real(seeds: &[(&'static str, Vec<u8>)]) {
    for (name, _) in TARGETS {
        assert!(
            seeds.iter().any(|(target, _)| *target == name),
            "no seeds for {name}"
        );
    }
    let total: usize = seeds.iter().map(|(_, seed)| seed.len()).sum();
    assert!(total < SEEDS_BYTES_MAX, "seeds of {total} bytes");
    let closed = seeds
        .iter()
        .filter(|(target, _)| *target == "server_message")
        .filter_map(|(_, seed)| arbor_protocol::codec::decode::<ServerMessage>(seed).ok())
        .filter(|message| {
            matches!(
                message,
                ServerMessage::Reply {
                    result: Ok(OpResult::SessionClosed),
                    ..
                }
            )
        })
        .count();
    assert_eq!(closed, 2, "each start's session closed");
}
