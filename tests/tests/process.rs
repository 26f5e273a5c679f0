//! How `arbord` sets up its own process.

use std::time::Duration;

use arbor_client::CreateMode;
use arbor_protocol::ErrorCode;
use arbor_tests::{client, RawConnection, TestServer};

/// The `THP_enabled:` line of a process's status, where the kernel shows it
/// (Linux 5.0 on); `None` where it does not.
fn thp_enabled(pid: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("THP_enabled:"))
        .map(|value| value.trim().to_owned())
}

// Proves arbord turns transparent huge pages off for itself: with them, the
// allocator's arenas became resident 2 MiB at a time (a small tree cost four
// times its RSS per znode) and page compaction sat in the write tail.
#[test]
fn arbord_runs_without_transparent_huge_pages() {
    if thp_enabled("self").is_none() {
        eprintln!("this kernel does not report THP_enabled; nothing to check");
        return;
    }
    let server = TestServer::start();
    assert_eq!(
        thp_enabled(&server.pid().to_string()).as_deref(),
        Some("0"),
        "arbord's status should say THP_enabled: 0"
    );
}

/// The soft and hard `Max open files` of a process, as `/proc` shows them
/// (a number, or "unlimited"); `None` where there is no such file.
fn open_files_limits(pid: u32) -> Option<(String, String)> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))?;
    let mut fields = line.split_whitespace();
    Some((fields.next()?.to_owned(), fields.next()?.to_owned()))
}

// Proves arbord raises its soft open-files limit to the hard one, as the
// JVM does for ZooKeeper: started at a shell's usual soft limit of 1024 it
// would otherwise serve far fewer connections than max_connections.
#[test]
fn arbord_raises_its_open_files_limit_to_the_hard_one() {
    let Some((_, hard)) = open_files_limits(std::process::id()) else {
        eprintln!("no /proc/PID/limits here; nothing to check");
        return;
    };
    let expected_soft = if hard == "unlimited" {
        // Linux caps a soft limit at nr_open even under an unlimited hard one.
        std::fs::read_to_string("/proc/sys/fs/nr_open")
            .expect("nr_open")
            .trim()
            .to_owned()
    } else {
        hard.clone()
    };
    if expected_soft.parse::<u64>().is_ok_and(|limit| limit <= 256) {
        eprintln!("the hard open-files limit is {hard}: no room to show a raise");
        return;
    }
    let server = TestServer::start_under_ulimit("-Sn 256", &[]).expect("arbord starts");
    let (soft_after, hard_after) = open_files_limits(server.pid()).expect("arbord's limits");
    assert_eq!(hard_after, hard, "the hard limit is left as it was");
    assert_eq!(soft_after, expected_soft, "the soft limit is raised to it");
}

// Proves a limit that leaves no room for connections beside the server's
// own files stops arbord at start, saying so, rather than serving nobody.
#[test]
fn arbord_will_not_start_without_room_for_connections() {
    let refused = TestServer::start_under_ulimit("-n 100", &[]);
    let stderr = refused.err().expect("arbord refuses to start");
    assert!(
        stderr.contains(
            "the open-files limit is 100: no room for connections beside the 128 descriptors"
        ),
        "{stderr}"
    );
}

/// Descriptors a server started under `ulimit -n 192` gives connections:
/// the limit less the 128 it keeps for its own files.
const CONNECTIONS_UNDER_192: usize = 64;

// Proves connections stop short of the open-files limit, keeping descriptors
// for the server's own files: a client past it is told why, a flood of
// sockets is turned away, and log rolls and snapshots go on meanwhile.
// Before, connections took every descriptor, the next segment roll could
// not open the log's directory to sync it, the log failed and the server
// stopped.
#[tokio::test]
async fn connections_leave_the_server_descriptors_for_its_files() {
    let mut server = TestServer::start_under_ulimit(
        "-n 192",
        &[
            "--max-connections",
            "4096",
            "--max-connections-per-ip",
            "4096",
            // A roll every few dozen writes, a snapshot every few hundred.
            "--segment-bytes",
            "4096",
            "--snap-count",
            "200",
            "--snap-tree-percent",
            "0",
        ],
    )
    .expect("arbord starts");
    let (status, body) = server.admin_get("/commands/conf");
    assert_eq!(status, 200, "{body}");
    let conf: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(conf["open_files_limit"], 192);
    assert_eq!(conf["connections_allowed"], CONNECTIONS_UNDER_192);
    assert_eq!(conf["max_connections"], 4096);
    assert!(
        server
            .wait_for_log(&["open-files limit leaves room for fewer connections"])
            .contains("connections_allowed=64"),
        "a warning at start says so"
    );
    let writer = client(&server).await;
    let mut held = Vec::new();
    for _ in 1..CONNECTIONS_UNDER_192 {
        held.push(RawConnection::session(server.addr(), 20_000).await.0);
    }
    let mut over = RawConnection::open(server.addr()).await;
    let refused = over.handshake(20_000, None, 0).await;
    assert!(
        matches!(refused, Err((ErrorCode::LimitExceeded, ref message)) if message
            == "too many connections to this server (limit 64: the server's open-files limit 192 less 128 kept for its own files)"),
        "the connection past the limit is told why: {refused:?}"
    );
    // More sockets than the limit has descriptors for, all at once.
    let mut flood = Vec::new();
    for _ in 0..256 {
        flood.push(
            tokio::net::TcpStream::connect(server.addr())
                .await
                .expect("the kernel takes the connection"),
        );
    }

    const WRITES: usize = 600;
    for i in 0..WRITES {
        writer
            .create(&format!("/n{i}"), vec![7u8; 64], CreateMode::Persistent)
            .await
            .unwrap_or_else(|err| panic!("write {i} while the sockets are held: {err}"));
    }
    assert!(server.is_running(), "the server is still up");
    // Hundreds were refused; the log says so once, not once each.
    assert_eq!(
        server.log_lines_with(&["connection limit reached; refusing"]),
        1,
        "one line per interval for refusals"
    );
    let snapshots = std::fs::read_dir(server.data_dir().join("snapshots"))
        .expect("snapshot dir")
        .count();
    assert!(snapshots > 0, "snapshots were written meanwhile");

    // Once the sockets go, a new client gets in.
    drop((held, over, flood));
    let mut admitted = None;
    for _ in 0..50 {
        if let Ok(client) =
            arbor_client::Client::connect(server.addr(), arbor_client::ClientOptions::default())
                .await
        {
            admitted = Some(client);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reader = admitted.expect("a client connects once the sockets are closed");
    let names = reader.get_children("/").await.expect("lists");
    assert_eq!(
        names.iter().filter(|name| name.starts_with('n')).count(),
        WRITES
    );
    drop((reader, writer));

    // Everything acknowledged is there after a restart.
    server.restart();
    let reader = client(&server).await;
    let mut names = reader.get_children("/").await.expect("lists");
    names.retain(|name| name.starts_with('n'));
    assert_eq!(names.len(), WRITES);
}
