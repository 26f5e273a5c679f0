//! arbord's ZooKeeper port, driven by a ZooKeeper client that is not ours
//! (the `zookeeper-client` crate) against a real server over TCP, beside
//! Arbor's own client on the native port of the same server: one tree, one
//! set of sessions, watches and locks, whichever protocol a client speaks.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use arbor_client::recipes::Mutex;
use arbor_client::CreateMode;
use arbor_tests::{client, TestServer};
use zookeeper_client as zk;

/// How long a test waits for something that should happen at once.
const SOON: Duration = Duration::from_secs(10);

async fn zk_client(server: &TestServer) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(server.zk_addr())
        .await
        .expect("a ZooKeeper client connects to arbord")
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

fn ephemeral() -> zk::CreateOptions<'static> {
    zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())
}

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(SOON, future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within {SOON:?}"))
}

#[tokio::test]
async fn both_protocols_see_one_tree_and_one_session_table() {
    let server = TestServer::start();
    let zookeeper = zk_client(&server).await;
    let native = client(&server).await;

    let (stat, _) = zookeeper
        .create("/shared", b"from zk", &persistent())
        .await
        .expect("created over ZooKeeper's protocol");
    let (data, native_stat) = native.get_data("/shared").await.expect("read natively");
    assert_eq!(data, b"from zk");
    assert_eq!(native_stat.czxid as i64, stat.czxid);
    assert_eq!(native_stat.version, stat.version);

    native
        .set_data("/shared", b"from arbor".to_vec(), Some(0))
        .await
        .expect("set natively");
    let (data, stat) = zookeeper.get_data("/shared").await.expect("read");
    assert_eq!((data.as_slice(), stat.version), (&b"from arbor"[..], 1));
    assert!(matches!(
        zookeeper.set_data("/shared", b"stale", Some(0)).await,
        Err(zk::Error::BadVersion)
    ));
    assert!(matches!(
        zookeeper.create("/shared", b"", &persistent()).await,
        Err(zk::Error::NodeExists)
    ));
    assert!(matches!(
        zookeeper.get_data("/missing").await,
        Err(zk::Error::NoNode)
    ));
    assert_eq!(
        zookeeper.check_stat("/missing").await.expect("exists"),
        None
    );

    // Sequential names are ZooKeeper's: ten digits.
    let sequential = zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
    let (_, sequence) = zookeeper
        .create("/shared/job-", b"", &sequential)
        .await
        .expect("sequential");
    let children = native.get_children("/shared").await.expect("listed");
    assert_eq!(children, vec![format!("job-{sequence}")]);
    assert_eq!(children[0].len(), "job-".len() + 10);

    // An ephemeral of a ZooKeeper session is owned by that session, and goes
    // with it, for native readers too.
    zookeeper
        .create("/shared/worker", b"", &ephemeral())
        .await
        .expect("ephemeral");
    let owner = native
        .get_data("/shared/worker")
        .await
        .expect("read")
        .1
        .ephemeral_owner;
    assert_eq!(owner as i64, zookeeper.session_id().0);
    drop(zookeeper);
    let gone = async {
        while native
            .exists("/shared/worker")
            .await
            .expect("exists")
            .is_some()
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    within("the closed session's ephemeral going", gone).await;
}

#[tokio::test]
async fn watches_fire_across_the_two_protocols() {
    let server = TestServer::start();
    let zookeeper = zk_client(&server).await;
    let native = client(&server).await;
    native
        .create("/w", b"0".to_vec(), CreateMode::Persistent)
        .await
        .expect("created");

    // A ZooKeeper one-shot data watch, fired by a native write.
    let (_, _, watcher) = zookeeper.get_and_watch_data("/w").await.expect("watch");
    native
        .set_data("/w", b"1".to_vec(), None)
        .await
        .expect("set");
    let event = within("the data watch", watcher.changed()).await;
    assert_eq!(
        (event.event_type, event.path.as_str()),
        (zk::EventType::NodeDataChanged, "/w")
    );

    // An exists watch on a missing node, fired by its creation.
    let (stat, watcher) = zookeeper
        .check_and_watch_stat("/w/child")
        .await
        .expect("watch");
    assert_eq!(stat, None);
    native
        .create("/w/child", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    let event = within("the exists watch", watcher.changed()).await;
    assert_eq!(event.event_type, zk::EventType::NodeCreated);

    // A persistent recursive watch sees every change below, in order.
    let mut recursive = zookeeper
        .watch("/w", zk::AddWatchMode::PersistentRecursive)
        .await
        .expect("addWatch");
    native
        .create("/w/child/deep", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    native.delete("/w/child/deep", None).await.expect("deleted");
    let first = within("the recursive watch", recursive.changed()).await;
    let second = within("the recursive watch", recursive.changed()).await;
    assert_eq!(
        [
            (first.event_type, first.path.as_str()),
            (second.event_type, second.path.as_str())
        ],
        [
            (zk::EventType::NodeCreated, "/w/child/deep"),
            (zk::EventType::NodeDeleted, "/w/child/deep")
        ]
    );

    // And the other way: a native watch fired by a ZooKeeper client's write.
    let (_, _, native_watch) = native.get_data_watch("/w").await.expect("watch");
    zookeeper
        .set_data("/w", b"2", None)
        .await
        .expect("set over ZooKeeper's protocol");
    let event = within("the native watch", native_watch)
        .await
        .expect("an event");
    assert_eq!(event.path, "/w");
}

#[tokio::test]
async fn multi_answers_as_zookeeper_does() {
    let server = TestServer::start();
    let zookeeper = zk_client(&server).await;

    let mut writer = zookeeper.new_multi_writer();
    writer
        .add_create("/m", b"a", &persistent())
        .expect("create");
    writer.add_set_data("/m", b"b", Some(0)).expect("set");
    writer.add_check_version("/m", 1).expect("check");
    writer
        .add_create("/m/child", b"", &persistent())
        .expect("create");
    writer.add_delete("/m/child", Some(0)).expect("delete");
    let results = writer.commit().await.expect("the multi commits");
    assert_eq!(results.len(), 5);
    assert!(matches!(&results[0], zk::MultiWriteResult::Create { path, .. } if path == "/m"));
    assert!(matches!(results[1], zk::MultiWriteResult::SetData { stat } if stat.version == 1));
    assert!(matches!(results[2], zk::MultiWriteResult::Check));
    assert!(matches!(results[4], zk::MultiWriteResult::Delete));

    // A failing op fails the whole multi, and the client learns which.
    let mut writer = zookeeper.new_multi_writer();
    writer.add_set_data("/m", b"c", None).expect("set");
    writer.add_check_version("/m", 7).expect("check");
    writer.add_delete("/m", None).expect("delete");
    match writer.commit().await {
        Err(zk::MultiWriteError::OperationFailed { index, source }) => {
            assert_eq!(index, 1);
            assert!(matches!(source, zk::Error::BadVersion), "{source:?}");
        }
        other => panic!("the multi did not fail at its check: {other:?}"),
    }
    let (data, stat) = zookeeper.get_data("/m").await.expect("still there");
    assert_eq!(
        (data.as_slice(), stat.version),
        (&b"b"[..], 1),
        "nothing applied"
    );
}

#[tokio::test]
async fn a_session_resumes_on_a_new_connection_with_its_ephemerals() {
    let server = TestServer::start();
    // Detached: dropping the first client leaves its session open, as a
    // client that lost its connection does.
    let first = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .with_detached()
        .connect(server.zk_addr())
        .await
        .expect("connects");
    first
        .create("/mine", b"", &ephemeral())
        .await
        .expect("ephemeral");
    let session = first.session().clone();
    let id = first.session_id();
    drop(first);
    let resumed = zk::Client::connector()
        .with_session(session)
        .connect(server.zk_addr())
        .await
        .expect("the session resumes");
    assert_eq!(resumed.session_id(), id);
    let (_, stat) = resumed.get_data("/mine").await.expect("still there");
    assert_eq!(stat.ephemeral_owner, id.0);

    // A wrong password is an expired session, as ZooKeeper answers it: a
    // handshake answer with a timeout of 0 and no session.
    let answer = exchange(server.zk_addr(), &connect_frame(id.0, &[1; 16]));
    assert_eq!(answer.len(), CONNECT_RESPONSE_BYTES);
    assert_eq!(&answer[4..8], &0i32.to_be_bytes(), "timeout 0");
    assert_eq!(&answer[8..16], &0i64.to_be_bytes(), "session 0");
    // The right one is still the session's.
    let (_, stat) = resumed.get_data("/mine").await.expect("still there");
    assert_eq!(stat.ephemeral_owner, id.0);
}

#[tokio::test]
async fn locks_taken_through_both_protocols_queue_together() {
    let server = TestServer::start();
    let zookeeper = zk_client(&server).await;
    let native = client(&server).await;
    native
        .create("/locks", Vec::new(), CreateMode::Persistent)
        .await
        .expect("parent");

    // A Curator-style lock (the zookeeper-client crate's) holds /locks/job.
    let prefix = zk::LockPrefix::new_curator("/locks/job", "lock-").expect("prefix");
    let options = zk::LockOptions::new(zk::Acls::anyone_all())
        .with_ancestor_options(persistent())
        .expect("options");
    let held = zookeeper
        .lock(prefix, b"", options)
        .await
        .expect("the ZooKeeper client takes the lock");

    // Arbor's Mutex on the same path queues behind it...
    let mutex = Mutex::new(&native, "/locks/job");
    let waiting = tokio::spawn(async move { mutex.lock().await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "both held the lock at once");
    let nodes = native.get_children("/locks/job").await.expect("listed");
    assert_eq!(nodes.len(), 2, "one queue of two: {nodes:?}");

    // ...and is granted it when the ZooKeeper client lets go.
    drop(held);
    let guard = within("the native lock", waiting)
        .await
        .expect("joined")
        .expect("granted");

    // The other way round: the ZooKeeper client waits for Arbor's holder.
    let prefix = zk::LockPrefix::new_curator("/locks/job", "lock-").expect("prefix");
    let options = zk::LockOptions::new(zk::Acls::anyone_all());
    let contender = {
        let zookeeper = zookeeper.clone();
        tokio::spawn(async move {
            let lock = zookeeper.lock(prefix, b"", options).await.map(|_| ());
            lock
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!contender.is_finished(), "both held the lock at once");
    guard.release().await.expect("released");
    within("the ZooKeeper lock", contender)
        .await
        .expect("joined")
        .expect("granted after the native holder let go");
}

/// A framed `ConnectRequest` (protocol 0, a 10 s timeout) for `session_id`
/// (0: a new session) with `password`.
fn connect_frame(session_id: i64, password: &[u8]) -> Vec<u8> {
    let mut request = Vec::new();
    request.extend_from_slice(&0i32.to_be_bytes());
    request.extend_from_slice(&0i64.to_be_bytes());
    request.extend_from_slice(&10_000i32.to_be_bytes());
    request.extend_from_slice(&session_id.to_be_bytes());
    request.extend_from_slice(&(password.len() as i32).to_be_bytes());
    request.extend_from_slice(password);
    let mut frame = (request.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&request);
    frame
}

/// A framed `ConnectResponse`: length, protocol version, timeout, session
/// id, a 16-byte password, the read-only flag.
const CONNECT_RESPONSE_BYTES: usize = 4 + 4 + 4 + 8 + 4 + 16 + 1;

/// Sends `bytes` on a fresh connection to `addr` and returns all the server
/// says before it closes the connection (which it must, within [`SOON`]).
fn exchange(addr: &str, bytes: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream.set_read_timeout(Some(SOON)).expect("timeout");
    stream.write_all(bytes).expect("sends");
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .expect("the server ends the connection, in time");
    answer
}

#[tokio::test]
async fn four_letter_words_and_bad_input_on_the_zookeeper_port() {
    let server = TestServer::start();
    let addr = server.zk_addr().to_owned();
    let text = |word: &str| String::from_utf8(exchange(&addr, word.as_bytes())).expect("text");
    assert_eq!(text("ruok"), "imok");
    assert_eq!(text("isro"), "rw");
    let srvr = text("srvr");
    assert!(srvr.contains("Mode: standalone"), "{srvr}");
    assert!(srvr.contains("Node count: 1"), "{srvr}");
    let envi = text("envi");
    let version = envi
        .lines()
        .find_map(|line| line.strip_prefix("zookeeper.version="))
        .expect("envi names a ZooKeeper version, as kazoo reads it");
    let digits: Vec<u32> = version
        .split('-')
        .next()
        .expect("version")
        .split('.')
        .map(|part| part.parse().expect("a number"))
        .collect();
    assert!(digits >= vec![3, 5, 0], "{version}");
    assert!(text("mntr").contains("zk_server_state\tstandalone"));
    // The default --4lw list leaves out the words that list sessions.
    for word in ["cons", "dump"] {
        assert_eq!(
            text(word),
            format!("{word} is not executed because it is not in the whitelist.\n")
        );
    }

    // A frame longer than the limit, a handshake that is not one, a
    // truncated request after a good handshake: each connection is closed,
    // and the server serves the next client as before.
    assert!(exchange(&addr, &u32::MAX.to_be_bytes()).is_empty());
    assert!(exchange(&addr, &[0, 0, 0, 3, 1, 2, 3]).is_empty());
    let mut frames = connect_frame(0, &[0; 16]);
    // A getData request whose path length points past the frame.
    let bad_request = [
        &1i32.to_be_bytes()[..],
        &4i32.to_be_bytes(),
        &1000i32.to_be_bytes(),
    ]
    .concat();
    frames.extend_from_slice(&(bad_request.len() as u32).to_be_bytes());
    frames.extend_from_slice(&bad_request);
    let answer = exchange(&addr, &frames);
    assert_eq!(
        answer.len(),
        CONNECT_RESPONSE_BYTES,
        "a handshake answer, then the end"
    );

    let zookeeper = zk_client(&server).await;
    zookeeper
        .create("/after", b"", &persistent())
        .await
        .expect("served after the bad input");
}

// Proves that with `--4lw '*'` the listings show a live session's watch,
// connection and ephemeral by its id (the default list refuses them: see
// four_letter_words_and_bad_input_on_the_zookeeper_port).
#[tokio::test]
async fn listings_name_the_sessions_watches_and_ephemerals() {
    let server = TestServer::start_with(&["--4lw", "*"]);
    let zookeeper = zk_client(&server).await;
    zookeeper
        .create("/watched", b"", &persistent())
        .await
        .expect("created");
    let (_, _, _watcher) = zookeeper
        .get_and_watch_data("/watched")
        .await
        .expect("a data watch");
    zookeeper
        .create("/mine", b"", &ephemeral())
        .await
        .expect("an ephemeral");
    let session = format!("{:#x}", zookeeper.session_id().0 as u64);
    let addr = server.zk_addr().to_owned();
    let text = |word: &str| String::from_utf8(exchange(&addr, word.as_bytes())).expect("text");

    let wchc = text("wchc");
    assert!(wchc.contains(&format!("{session}\n\t/watched\n")), "{wchc}");
    let wchp = text("wchp");
    assert!(wchp.contains(&format!("/watched\n\t{session}\n")), "{wchp}");
    assert_eq!(
        text("wchs"),
        "1 connections watching 1 paths\nTotal watches:1\n"
    );
    let cons = text("cons");
    let line = cons
        .lines()
        .find(|line| line.contains(&format!("sid={session}")))
        .unwrap_or_else(|| panic!("no connection of {session} in {cons:?}"));
    assert!(line.starts_with(" /127.0.0.1:"), "{line}");
    let timeout_ms = zookeeper.session_timeout().as_millis();
    assert!(line.contains(&format!(",to={timeout_ms})")), "{line}");
    let dump = text("dump");
    assert!(dump.contains("Sessions with Ephemerals (1):"), "{dump}");
    assert!(dump.contains(&format!("{session}:\n\t/mine\n")), "{dump}");
    assert!(
        dump.contains(&format!("{session}\t{timeout_ms}ms")),
        "{dump}"
    );
}

#[tokio::test]
async fn reads_only_zookeepers_protocol_asks_for() {
    let server = TestServer::start();
    let zookeeper = zk_client(&server).await;
    let other = zk_client(&server).await;
    for path in ["/r", "/r/a", "/r/a/x", "/r/b", "/rb"] {
        zookeeper
            .create(path, b"", &persistent())
            .await
            .expect("created");
    }
    for path in ["/r/a/mine", "/rb/mine"] {
        zookeeper
            .create(path, b"", &ephemeral())
            .await
            .expect("ephemeral");
    }
    other
        .create("/r/theirs", b"", &ephemeral())
        .await
        .expect("another session's");

    // getAllChildrenNumber: every node below, at any depth.
    assert_eq!(zookeeper.count_descendants_number("/r").await, Ok(5));
    assert_eq!(zookeeper.count_descendants_number("/r/a/x").await, Ok(0));
    assert!(matches!(
        zookeeper.count_descendants_number("/nothing").await,
        Err(zk::Error::NoNode)
    ));

    // getEphemerals: this session's only, matched as a string prefix.
    assert_eq!(
        zookeeper.list_ephemerals("/r").await,
        Ok(vec!["/r/a/mine".to_owned(), "/rb/mine".to_owned()])
    );
    assert_eq!(
        zookeeper.list_ephemerals("/r/a").await,
        Ok(vec!["/r/a/mine".to_owned()])
    );
    assert_eq!(
        other.list_ephemerals("/").await,
        Ok(vec!["/r/theirs".to_owned()])
    );

    // multiRead: each read answered on its own.
    let mut reader = zookeeper.new_multi_reader();
    reader.add_get_data("/r/a").expect("read");
    reader.add_get_children("/r").expect("read");
    reader.add_get_data("/missing").expect("read");
    let results = reader.commit().await.expect("the reads run");
    assert!(
        matches!(&results[0], zk::MultiReadResult::Data { stat, .. } if stat.num_children == 2)
    );
    match &results[1] {
        zk::MultiReadResult::Children { children } => {
            assert_eq!(children, &["a", "b", "theirs"]);
        }
        other => panic!("not a listing: {other:?}"),
    }
    assert!(matches!(
        &results[2],
        zk::MultiReadResult::Error {
            err: zk::Error::NoNode
        }
    ));
}

/// Lists a watched node this many times while other sessions change it.
const WATCH_RACE_ROUNDS: usize = 3000;
const WATCH_RACE_WRITERS: usize = 3;

// Proves a watch set by a read never fires ahead of the read's answer.
// ZooKeeper's clients attach a watcher when the answer comes: an event that
// overtook it was lost, and a kazoo semaphore waited for it for good. Here
// one session lists a node's children with a watch, again and again, while
// others add and remove children as fast as they can: every watch must
// fire, soon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_set_by_a_read_fires_after_the_reads_answer() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let server = TestServer::start();
    let reader = zk_client(&server).await;
    reader
        .create("/race", b"", &persistent())
        .await
        .expect("created");
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for writer_id in 0..WATCH_RACE_WRITERS {
        let writer = zk_client(&server).await;
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let path = format!("/race/w{writer_id}-{i}");
                writer
                    .create(&path, b"", &ephemeral())
                    .await
                    .expect("added");
                writer.delete(&path, None).await.expect("removed");
                i += 1;
            }
        }));
    }
    for round in 0..WATCH_RACE_ROUNDS {
        let (_, watcher) = reader
            .list_and_watch_children("/race")
            .await
            .expect("listed");
        within(
            &format!("round {round}: the children watch firing"),
            watcher.changed(),
        )
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.expect("the writer ran");
    }
}
