//! A client that asks and never reads its socket must not make the server
//! hold its answers without bound (found by trying: 25 000 reads of a 64 KiB
//! node held 1.09 GiB for one connection), and must not slow anybody else.

use std::time::{Duration, Instant};

use arbor_client::CreateMode;
use arbor_protocol::frame::encode_frame;
use arbor_protocol::{ClientMessage, Op};
use arbor_tests::{client, RawConnection, TestServer};

/// The node's data: 64 KiB.
const DATA_BYTES: usize = 64 * 1024;

/// Requests the hostile client sends: 1.6 GB of answers if all were held.
const REQUESTS: u64 = 25_000;

/// What the server may grow by while the hostile client does it: its
/// queue's limit (4 MiB) and socket buffers, with room to spare; held
/// answers would be a thousand times this.
const RSS_GROWTH_MAX: u64 = 96 * 1024 * 1024;

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kb: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kb| kb.parse().ok())
        .expect("VmRSS");
    kb * 1024
}

#[tokio::test]
async fn a_client_that_never_reads_holds_a_bounded_backlog_and_others_are_served() {
    let server = TestServer::start();
    let good = client(&server).await;
    good.create("/big", vec![7u8; DATA_BYTES], CreateMode::Persistent)
        .await
        .expect("creates");
    let before = rss_bytes(server.pid());

    let (mut hostile, _) = RawConnection::session(server.addr(), 10_000).await;
    let mut frames = Vec::new();
    for xid in 1..=REQUESTS {
        let request = ClientMessage::Request {
            xid,
            op: Op::GetData {
                path: "/big".into(),
                watch: false,
            },
        };
        encode_frame(&request, usize::MAX, &mut frames).expect("encodes");
    }
    // The server stops reading once it owes enough; the rest waits in the
    // socket buffers (the write may block once they are full).
    let _ = tokio::time::timeout(Duration::from_secs(3), hostile.send_bytes(&frames)).await;

    // Meanwhile a client that reads its answers is served as usual.
    let started = Instant::now();
    for _ in 0..20 {
        let (data, _) = good.get_data("/big").await.expect("served");
        assert_eq!(data.len(), DATA_BYTES);
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the reading client waited {:?}",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let during = rss_bytes(server.pid());
    assert!(
        during.saturating_sub(before) < RSS_GROWTH_MAX,
        "server RSS grew {} MB (from {} MB) for one client that reads nothing",
        (during - before) >> 20,
        before >> 20
    );

    // Once it reads, it gets every answer, in order.
    let mut answered = 0u64;
    while answered < 64 {
        match hostile.recv().await {
            Some(arbor_protocol::ServerMessage::Reply { xid, result, .. }) => {
                answered += 1;
                assert_eq!(xid, answered, "replies in request order");
                assert!(result.is_ok(), "{result:?}");
            }
            other => panic!("expected a reply, got {other:?}"),
        }
    }
}

/// Watches are limited by the bytes of their paths as well as by count:
/// 100 000 watches on 4 KB paths held ~820 MB for one session before.
#[tokio::test]
async fn a_session_watching_long_paths_is_stopped_at_its_path_bytes() {
    use futures_util::future::join_all;
    let server = TestServer::start();
    let c = client(&server).await;
    let before = rss_bytes(server.pid());
    let long = "w".repeat(4000);
    let mut set = 0usize;
    let mut refused = false;
    'batches: for batch in 0..64 {
        let paths: Vec<String> = (0..512)
            .map(|i| format!("/{long}-{batch:03}-{i:04}"))
            .collect();
        let answers = join_all(paths.iter().map(|path| c.exists_watch(path))).await;
        for answer in answers {
            match answer {
                Ok(_) => set += 1,
                Err(arbor_client::Error::LimitExceeded) => {
                    refused = true;
                    break 'batches;
                }
                Err(err) => panic!("exists_watch: {err}"),
            }
        }
    }
    assert!(refused, "{set} watches of 4 KB paths and no limit");
    // 64 MiB of paths: about 16 000 watches of these, not 100 000.
    assert!((15_000..=17_500).contains(&set), "{set} watches set");
    let grown = rss_bytes(server.pid()).saturating_sub(before);
    assert!(
        grown < 200 * 1024 * 1024,
        "server RSS grew {} MB",
        grown >> 20
    );
    // The session still works.
    c.create("/after", Vec::new(), CreateMode::Persistent)
        .await
        .expect("creates");
}
