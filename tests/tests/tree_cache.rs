//! TreeCache against a real arbord: after 10 000 random changes from several
//! writers, with a server restart and dropped connections in the middle, the
//! cache equals the server's subtree node by node (data and full stat), and
//! its change stream replayed on its first snapshot gives the same tree.
//!
//! Replay a failing run with `TREE_CACHE_SEED=<seed printed by the test>`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use arbor_client::recipes::{
    TreeCache, TreeCacheError, TreeCacheOptions, TreeChanges, TreeEvent, TreeSnapshot,
};
use arbor_client::{
    Client, ClientOptions, ConnectionState, CreateMode, Error, MultiOp, Stat, WatcherKind,
};
use arbor_tests::{wait_for_state, TestServer};
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

/// Successful changes the writers make in the stress test.
const CHANGES: u64 = 10_000;
/// Writer clients, each with its own session.
const WRITERS: u64 = 3;
/// Requests each writer keeps in flight.
const WINDOW: usize = 16;
/// Names at each level of the random tree (`/tc/a/b/c/a` …).
const NAMES: [&str; 3] = ["a", "b", "c"];
/// Deepest random path below the root.
const DEPTH_MAX: u64 = 4;
const ROOT: &str = "/tc";
const SESSION_TIMEOUT: Duration = Duration::from_millis(4000);
/// Times the cache's thread is frozen during the stress run, and for how
/// long (well inside the session timeout).
const FREEZES: u64 = 8;
const FREEZE: Duration = Duration::from_millis(150);

/// A TCP forwarder between the cache's client and the server, to drop its
/// connection (and keep it away) while its session lives on.
struct Proxy {
    addr: String,
    links: Arc<StdMutex<Vec<AbortHandle>>>,
    refusing: Arc<AtomicBool>,
    accept: AbortHandle,
}

impl Proxy {
    async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("has an address").to_string();
        let links: Arc<StdMutex<Vec<AbortHandle>>> = Arc::default();
        let refusing = Arc::new(AtomicBool::new(false));
        let upstream = upstream.to_owned();
        let accept = {
            let (links, refusing) = (links.clone(), refusing.clone());
            tokio::spawn(async move {
                while let Ok((mut down, _)) = listener.accept().await {
                    if refusing.load(Ordering::SeqCst) {
                        continue; // dropped: the client tries again
                    }
                    let upstream = upstream.clone();
                    let link = tokio::spawn(async move {
                        if let Ok(mut up) = TcpStream::connect(&upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                        }
                    });
                    links
                        .lock()
                        .expect("not poisoned")
                        .push(link.abort_handle());
                }
            })
            .abort_handle()
        };
        Proxy {
            addr,
            links,
            refusing,
            accept,
        }
    }

    /// Drops every open connection; with `refuse`, new ones too until
    /// [`Proxy::admit`].
    fn cut(&self, refuse: bool) {
        self.refusing.store(refuse, Ordering::SeqCst);
        for link in self.links.lock().expect("not poisoned").drain(..) {
            link.abort();
        }
    }

    fn admit(&self) {
        self.refusing.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut(true);
    }
}

/// SplitMix64: small, seeded, good enough to pick operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn path(&mut self) -> String {
        let depth = 1 + self.below(DEPTH_MAX);
        let mut path = ROOT.to_owned();
        for _ in 0..depth {
            path.push('/');
            path.push_str(NAMES[self.below(NAMES.len() as u64) as usize]);
        }
        path
    }

    fn data(&mut self) -> Vec<u8> {
        let len = self.below(24) as usize;
        (0..len).map(|_| self.next() as u8).collect()
    }
}

fn seed() -> u64 {
    match std::env::var("TREE_CACHE_SEED") {
        Ok(seed) => seed.parse().expect("TREE_CACHE_SEED is a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch")
            .as_nanos() as u64,
    }
}

async fn connect(addr: &str) -> Client {
    let options = ClientOptions::default().with_session_timeout(SESSION_TIMEOUT);
    Client::connect(addr, options).await.expect("connects")
}

/// Waits (up to 20 s) until `client` can send requests again.
async fn until_connected(client: &Client) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !client.state().is_connected() {
        assert!(
            !client.state().is_terminal(),
            "session ended: {:?}",
            client.state()
        );
        assert!(tokio::time::Instant::now() < deadline, "not reconnected");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What one random operation came to.
enum Outcome {
    Changed,
    Refused,
    Unknown,
}

fn outcome<T>(result: Result<T, Error>) -> Outcome {
    match result {
        Ok(_) => Outcome::Changed,
        Err(
            Error::NoNode { .. }
            | Error::NodeExists { .. }
            | Error::NotEmpty { .. }
            | Error::NoChildrenForEphemerals { .. }
            | Error::MultiFailed { .. },
        ) => Outcome::Refused,
        Err(Error::ConnectionLoss | Error::Timeout | Error::Unavailable) => Outcome::Unknown,
        Err(err) => panic!("unexpected error: {err:?}"),
    }
}

/// Deletes the subtree at `path` in one multi, deepest first (refused if a
/// writer changes it between the listing and the multi).
async fn delete_subtree(client: &Client, path: &str) -> Result<(), Error> {
    let mut ops = Vec::new();
    let mut stack = vec![path.to_owned()];
    while let Some(at) = stack.pop() {
        for child in client.get_children(&at).await? {
            stack.push(format!("{at}/{child}"));
        }
        ops.push(MultiOp::Delete {
            path: at,
            version: -1,
        });
    }
    ops.reverse();
    client.multi(ops).await.map(|_| ())
}

/// One random change: create (some ephemeral), set, delete, or delete a
/// whole subtree.
async fn random_op(client: Client, path: String, pick: u64, data: Vec<u8>) -> Outcome {
    let result = match pick {
        0..=34 => outcome(client.set_data(&path, data, None).await),
        35..=69 => outcome(client.create(&path, data, CreateMode::Persistent).await),
        70..=74 => outcome(client.create(&path, data, CreateMode::Ephemeral).await),
        75..=94 => outcome(client.delete(&path, None).await),
        // Whole subtrees, but not often the root's children: the tree
        // stays big enough to compare.
        _ if path.matches('/').count() > 2 => outcome(delete_subtree(&client, &path).await),
        _ => outcome(client.delete(&path, None).await),
    };
    if matches!(result, Outcome::Unknown) {
        until_connected(&client).await;
    }
    result
}

/// What the writers share with the test: the changes made, a gate that
/// holds them still for a mid-run comparison, and their requests in flight.
#[derive(Default)]
struct Traffic {
    changed: AtomicU64,
    held: AtomicBool,
    in_flight: AtomicU64,
}

impl Traffic {
    async fn reach(&self, changes: u64) {
        while self.changed.load(Ordering::SeqCst) < changes {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Holds the writers and waits until none of their requests is out.
    async fn hold(&self) {
        self.held.store(true, Ordering::SeqCst);
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn release(&self) {
        self.held.store(false, Ordering::SeqCst);
    }
}

/// A writer: random changes with `WINDOW` in flight until `CHANGES` are made.
async fn writer(client: Client, seed: u64, traffic: Arc<Traffic>) {
    let mut rng = Rng(seed);
    let mut in_flight = FuturesUnordered::new();
    loop {
        let done = traffic.changed.load(Ordering::SeqCst) >= CHANGES;
        while !done && !traffic.held.load(Ordering::SeqCst) && in_flight.len() < WINDOW {
            let (path, pick, data) = (rng.path(), rng.below(100), rng.data());
            traffic.in_flight.fetch_add(1, Ordering::SeqCst);
            in_flight.push(random_op(client.clone(), path, pick, data));
        }
        if in_flight.is_empty() {
            if done {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        if let Some(Outcome::Changed) = in_flight.next().await {
            traffic.changed.fetch_add(1, Ordering::SeqCst);
        }
        traffic.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Waits until the cache has every write the writers made, and compares it
/// with the server node by node; returns the server's tree.
async fn compare(
    what: &str,
    cache: &CacheThread,
    writers: &[Client],
) -> BTreeMap<String, (Vec<u8>, Stat)> {
    let mut last_zxid = 0;
    for client in writers {
        client.sync(ROOT).await.expect("synced");
        last_zxid = last_zxid.max(client.last_zxid());
    }
    let caught = cache.catch_up().await;
    assert!(
        caught.last_zxid >= last_zxid,
        "{what}: the cache's client saw every write"
    );
    let server_view = server_tree(&writers[0], ROOT).await;
    assert_same(what, &cached_tree(&caught.snapshot), &server_view);
    let mut on_server = writers[0].get_children(ROOT).await.expect("lists");
    on_server.sort();
    assert_eq!(caught.root_children, Some(on_server), "{what}: children()");
    server_view
}

/// What the cache thread reports once caught up.
struct Caught {
    snapshot: TreeSnapshot,
    last_zxid: u64,
    root_children: Option<Vec<String>>,
}

enum CacheCommand {
    /// Blocks the cache's thread, client and all, like a GC pause: replies
    /// and events pile up and are then handled together.
    Freeze(Duration),
    CatchUp(oneshot::Sender<Caught>),
    Close(oneshot::Sender<Result<(), TreeCacheError>>),
}

/// The watcher client and its cache on a thread of their own with a
/// current-thread runtime, so the test can freeze them.
struct CacheThread {
    commands: mpsc::UnboundedSender<CacheCommand>,
    thread: Option<std::thread::JoinHandle<()>>,
    reconnects: Arc<AtomicU64>,
}

impl CacheThread {
    /// Starts the cache on `addr` and returns it with its first snapshot
    /// and the stream of changes after it.
    async fn start(addr: &str) -> (CacheThread, TreeSnapshot, TreeChanges) {
        let (commands, mut received) = mpsc::unbounded_channel();
        let (started_tx, started) = oneshot::channel();
        let reconnects = Arc::new(AtomicU64::new(0));
        let (addr, counter) = (addr.to_owned(), reconnects.clone());
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let watcher = connect(&addr).await;
                let mut states = watcher.state_changes();
                tokio::spawn(async move {
                    while let Some(state) = states.next().await {
                        if state == ConnectionState::Reconnected {
                            counter.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
                // Room for every change, so the replay sees them all.
                let options = TreeCacheOptions::default().with_changes_max(1 << 17);
                let cache = TreeCache::start_with(&watcher, ROOT, options)
                    .await
                    .expect("starts");
                let (first, changes) = cache.snapshot_and_changes().expect("alive");
                cache.initialized().await.expect("initialized");
                let _ = started_tx.send((first, changes));
                while let Some(command) = received.recv().await {
                    match command {
                        CacheCommand::Freeze(pause) => std::thread::sleep(pause),
                        CacheCommand::CatchUp(reply) => {
                            cache.sync().await.expect("caught up");
                            let snapshot = cache.snapshot().expect("alive");
                            for (path, node) in snapshot.iter() {
                                let got = cache.get(path).expect("alive");
                                assert_eq!(got.as_ref(), Some(node), "get({path})");
                            }
                            let _ = reply.send(Caught {
                                root_children: cache.children(ROOT).expect("alive"),
                                last_zxid: watcher.last_zxid(),
                                snapshot,
                            });
                        }
                        CacheCommand::Close(reply) => {
                            let _ = reply.send(cache.close().await);
                            return;
                        }
                    }
                }
            });
        });
        let (first, changes) = started.await.expect("the cache started");
        let cache = CacheThread {
            commands,
            thread: Some(thread),
            reconnects,
        };
        (cache, first, changes)
    }

    /// Waits (up to 10 s) until the cache's client has reconnected more than
    /// `before` times.
    async fn reconnected_after(&self, before: u64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while self.reconnects.load(Ordering::SeqCst) <= before {
            assert!(tokio::time::Instant::now() < deadline, "no reconnect");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn freeze(&self, pause: Duration) {
        let _ = self.commands.send(CacheCommand::Freeze(pause));
    }

    async fn catch_up(&self) -> Caught {
        let (reply, answer) = oneshot::channel();
        let _ = self.commands.send(CacheCommand::CatchUp(reply));
        answer.await.expect("the cache thread answers")
    }

    async fn close(mut self) -> Result<(), TreeCacheError> {
        let (reply, answer) = oneshot::channel();
        let _ = self.commands.send(CacheCommand::Close(reply));
        let closed = answer.await.expect("the cache thread answers");
        if let Some(thread) = self.thread.take() {
            tokio::task::block_in_place(|| thread.join()).expect("the cache thread ran");
        }
        closed
    }
}

/// The server's subtree at `root`: every node's data and stat, by path.
async fn server_tree(client: &Client, root: &str) -> BTreeMap<String, (Vec<u8>, Stat)> {
    let mut tree = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(path) = stack.pop() {
        let (data, stat) = match client.get_data(&path).await {
            Ok(read) => read,
            Err(Error::NoNode { .. }) => continue,
            Err(err) => panic!("reading {path}: {err:?}"),
        };
        for child in client.get_children(&path).await.expect("lists") {
            stack.push(format!("{path}/{child}"));
        }
        tree.insert(path, (data, stat));
    }
    tree
}

fn cached_tree(snapshot: &TreeSnapshot) -> BTreeMap<String, (Vec<u8>, Stat)> {
    snapshot
        .iter()
        .map(|(path, node)| (path.to_owned(), (node.data.to_vec(), node.stat)))
        .collect()
}

/// Asserts the two trees are equal, naming the first differences.
fn assert_same(
    what: &str,
    got: &BTreeMap<String, (Vec<u8>, Stat)>,
    want: &BTreeMap<String, (Vec<u8>, Stat)>,
) {
    let mut differences = Vec::new();
    for (path, node) in want {
        match got.get(path) {
            None => differences.push(format!("missing {path}")),
            Some(cached) if cached != node => {
                differences.push(format!("{path}: cached {cached:?}, server {node:?}"))
            }
            Some(_) => {}
        }
    }
    for path in got.keys().filter(|path| !want.contains_key(*path)) {
        differences.push(format!("extra {path}"));
    }
    assert!(
        differences.is_empty(),
        "{what}: {} of {} nodes differ, first: {:#?}",
        differences.len(),
        want.len(),
        &differences[..differences.len().min(10)]
    );
}

/// Applies a change stream to a map, checking each change makes sense
/// where it lands (Added on an absent path, Updated/Removed on a present one).
fn replay(tree: &mut BTreeMap<String, (Vec<u8>, Stat)>, change: TreeEvent) {
    match change {
        TreeEvent::Added { path, data, stat } => {
            let before = tree.insert(path.to_string(), (data.to_vec(), stat));
            assert!(before.is_none(), "Added {path} over {before:?}");
        }
        TreeEvent::Updated { path, data, stat } => {
            let before = tree.insert(path.to_string(), (data.to_vec(), stat));
            let before = before.unwrap_or_else(|| panic!("Updated {path}, not cached"));
            assert_eq!(
                before.1.czxid, stat.czxid,
                "Updated {path} across incarnations"
            );
        }
        TreeEvent::Removed { path, .. } => {
            assert!(tree.remove(&*path).is_some(), "Removed {path}, not cached");
        }
    }
}

// Proves the cache equals the server node by node after 10 000 random changes from 3 writers
// with a server restart and two dropped connections (one held down while writers go on),
// and that its change stream replayed on its first snapshot reproduces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_equals_the_server_after_random_changes_and_reconnects() {
    let seed = seed();
    println!("TREE_CACHE_SEED={seed}");
    let mut server = TestServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let setup = connect(server.addr()).await;
    setup
        .create(ROOT, Vec::new(), CreateMode::Persistent)
        .await
        .expect("root made");
    let (cache, first, mut changes) = CacheThread::start(&proxy.addr).await;
    let replayed = tokio::spawn(async move {
        let mut tree = cached_tree(&first);
        loop {
            match changes.next().await {
                Ok(change) => replay(&mut tree, change),
                Err(end) => return (tree, end),
            }
        }
    });

    let traffic = Arc::new(Traffic::default());
    let mut writers = vec![setup];
    for _ in 1..WRITERS {
        writers.push(connect(server.addr()).await);
    }
    let mut tasks = Vec::new();
    for (w, client) in (0..).zip(&writers) {
        let seed = seed ^ (w + 1);
        tasks.push(tokio::spawn(writer(client.clone(), seed, traffic.clone())));
    }
    let started = std::time::Instant::now();
    // Frozen now and then, the cache meets piled-up answers and events at once.
    let freezes = {
        let (traffic, commands) = (traffic.clone(), cache.commands.clone());
        tokio::spawn(async move {
            for step in 1..=FREEZES {
                traffic.reach(CHANGES * step / (FREEZES + 1)).await;
                let _ = commands.send(CacheCommand::Freeze(FREEZE));
            }
        })
    };
    traffic.reach(CHANGES * 3 / 10).await;
    // Every session is resumed from the server's disk.
    tokio::task::block_in_place(|| server.restart());
    cache.reconnected_after(0).await;
    traffic.reach(CHANGES * 4 / 10).await;
    traffic.hold().await;
    let mid = compare("after the restart", &cache, &writers).await;
    traffic.release();
    traffic.reach(CHANGES * 5 / 10).await;
    proxy.cut(false);
    cache.reconnected_after(1).await;
    traffic.reach(CHANGES * 7 / 10).await;
    // The cache's connection stays down while the writers go on: changes
    // under a recursive watch are not replayed, the cache must find them.
    proxy.cut(true);
    // Well inside the session timeout, however slow the writers are.
    let _ =
        tokio::time::timeout(Duration::from_millis(1500), traffic.reach(CHANGES * 8 / 10)).await;
    // Compared with nothing touched since: each change missed must be found.
    traffic.hold().await;
    proxy.admit();
    cache.reconnected_after(2).await;
    compare("after the connection was held down", &cache, &writers).await;
    traffic.release();
    for task in tasks {
        task.await.expect("writer ran");
    }
    freezes.await.expect("freezes sent");
    let writing = started.elapsed();
    cache.freeze(FREEZE);
    let server_view = compare("at the end", &cache, &writers).await;
    assert!(
        server_view.len().max(mid.len()) > 10,
        "trees worth comparing: {} and {} nodes",
        mid.len(),
        server_view.len()
    );

    let reconnects = cache.reconnects.load(Ordering::SeqCst);
    cache.close().await.expect("closed");
    let (replayed, end) = replayed.await.expect("replay ran");
    assert!(matches!(end, TreeCacheError::Closed), "{end:?}");
    assert_same("replayed stream", &replayed, &server_view);
    assert!(reconnects >= 3, "reconnected {reconnects} times");
    println!(
        "{CHANGES} changes in {writing:?}; {} nodes at the end; {reconnects} reconnects",
        server_view.len()
    );
}

// Proves changes made while the cache's connection was down — a data change, a new node under
// a new parent, a deleted subtree, a path deleted and made again — are found by the walk
// after the reconnect, with the right change events.
#[tokio::test]
async fn a_reconnect_finds_what_changed_while_away() {
    let server = TestServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let watcher = connect(&proxy.addr).await;
    let writer = connect(server.addr()).await;
    for path in [
        "/w",
        "/w/same",
        "/w/set",
        "/w/gone",
        "/w/gone/kid",
        "/w/again",
    ] {
        writer
            .create(path, b"v1".to_vec(), CreateMode::Persistent)
            .await
            .expect("made");
    }
    let cache = TreeCache::start(&watcher, "/w").await.expect("starts");
    cache.initialized().await.expect("initialized");
    let same = cache.get("/w/same").expect("alive").expect("cached");
    let mut changes = cache.changes();

    proxy.cut(true);
    wait_for_state(&watcher, ConnectionState::Suspended).await;
    writer
        .set_data("/w/set", b"v2".to_vec(), None)
        .await
        .expect("set");
    delete_subtree(&writer, "/w/gone").await.expect("deleted");
    writer.delete("/w/again", None).await.expect("deleted");
    writer
        .create("/w/again", b"v3".to_vec(), CreateMode::Persistent)
        .await
        .expect("made again");
    writer
        .create("/w/new", Vec::new(), CreateMode::Persistent)
        .await
        .expect("made");
    writer
        .create("/w/new/deep", b"d".to_vec(), CreateMode::Persistent)
        .await
        .expect("made");
    proxy.admit();
    wait_for_state(&watcher, ConnectionState::Reconnected).await;

    cache.sync().await.expect("caught up");
    let snapshot = cache.snapshot().expect("alive");
    assert_same(
        "cache",
        &cached_tree(&snapshot),
        &server_tree(&writer, "/w").await,
    );
    assert_eq!(
        cache.get("/w/same").expect("alive"),
        Some(same),
        "untouched"
    );
    let mut seen = Vec::new();
    while let Some(change) = futures_util::FutureExt::now_or_never(changes.next()) {
        let change = change.expect("no lag");
        let kind = match &change {
            TreeEvent::Added { .. } => "added",
            TreeEvent::Updated { .. } => "updated",
            TreeEvent::Removed { .. } => "removed",
        };
        seen.push(format!("{kind} {}", change.path()));
    }
    for expected in [
        "updated /w/set",
        "removed /w/gone",
        "removed /w/gone/kid",
        "removed /w/again",
        "added /w/again",
        "added /w/new",
        "added /w/new/deep",
        "updated /w",
    ] {
        assert!(
            seen.iter().any(|s| s == expected),
            "no {expected:?} in {seen:#?}"
        );
    }
    assert!(
        !seen.iter().any(|s| s.ends_with("/w/same")),
        "an unchanged node is not reported: {seen:#?}"
    );
    cache.close().await.expect("closed");
}

// Proves a change stream that falls behind ends with Lagged while the cache stays equal to
// the server, and a fresh snapshot and stream pick up from there.
#[tokio::test]
async fn a_lagging_stream_ends_and_the_cache_stays_right() {
    let server = TestServer::start();
    let client = connect(server.addr()).await;
    client
        .create("/l", Vec::new(), CreateMode::Persistent)
        .await
        .expect("made");
    let options = TreeCacheOptions::default().with_changes_max(4);
    let cache = TreeCache::start_with(&client, "/l", options)
        .await
        .expect("starts");
    cache.initialized().await.expect("initialized");
    let mut slow = cache.changes();
    for i in 0..20 {
        client
            .create(&format!("/l/n{i}"), vec![i], CreateMode::Persistent)
            .await
            .expect("made");
    }
    cache.sync().await.expect("caught up");
    let mut received = 0;
    let end = loop {
        match slow.next().await {
            Ok(_) => received += 1,
            Err(end) => break end,
        }
    };
    assert!(matches!(end, TreeCacheError::Lagged { .. }), "{end:?}");
    assert!(received <= 4, "{received} changes buffered");
    assert!(
        matches!(slow.next().await, Err(TreeCacheError::Lagged { .. })),
        "the end repeats"
    );
    assert_same(
        "cache",
        &cached_tree(&cache.snapshot().expect("alive")),
        &server_tree(&client, "/l").await,
    );
    let (snapshot, mut fresh) = cache.snapshot_and_changes().expect("alive");
    client.delete("/l/n0", None).await.expect("deleted");
    let change = fresh.next().await.expect("a change");
    let mut tree = cached_tree(&snapshot);
    replay(&mut tree, change);
    assert!(!tree.contains_key("/l/n0"));
    cache.close().await.expect("closed");
}

// Proves the node limit ends the cache with TooManyNodes, and that reads then fail.
#[tokio::test]
async fn the_node_limit_ends_the_cache() {
    let server = TestServer::start();
    let client = connect(server.addr()).await;
    client
        .create("/m", Vec::new(), CreateMode::Persistent)
        .await
        .expect("made");
    for i in 0..5 {
        client
            .create(&format!("/m/n{i}"), Vec::new(), CreateMode::Persistent)
            .await
            .expect("made");
    }
    let options = TreeCacheOptions::default().with_nodes_max(4);
    let cache = TreeCache::start_with(&client, "/m", options)
        .await
        .expect("starts");
    let end = cache.initialized().await.expect_err("too big");
    assert!(
        matches!(end, TreeCacheError::TooManyNodes { limit: 4 }),
        "{end:?}"
    );
    assert!(matches!(
        cache.get("/m"),
        Err(TreeCacheError::TooManyNodes { .. })
    ));
    assert!(matches!(
        cache.close().await,
        Err(TreeCacheError::TooManyNodes { .. })
    ));
}

// Proves a session expiry ends the cache with SessionExpired, and that close removes the
// watch (no more events reach the client).
#[tokio::test]
async fn expiry_ends_the_cache_and_close_removes_the_watch() {
    let server = TestServer::start();
    let proxy = Proxy::start(server.addr()).await;
    let options = ClientOptions::default().with_session_timeout(Duration::from_millis(400));
    let doomed = Client::connect(&proxy.addr, options)
        .await
        .expect("connects");
    let writer = connect(server.addr()).await;
    writer
        .create("/e", Vec::new(), CreateMode::Persistent)
        .await
        .expect("made");
    let cache = TreeCache::start(&doomed, "/e").await.expect("starts");
    cache.initialized().await.expect("initialized");
    proxy.cut(true);
    wait_for_state(&doomed, ConnectionState::Expired).await;
    let end = cache.sync().await.expect_err("ended");
    assert!(
        matches!(end, TreeCacheError::Client(Error::SessionExpired)),
        "{end:?}"
    );
    assert!(matches!(
        cache.snapshot(),
        Err(TreeCacheError::Client(Error::SessionExpired))
    ));

    let watcher = connect(server.addr()).await;
    let cache = TreeCache::start(&watcher, "/e").await.expect("starts");
    cache.initialized().await.expect("initialized");
    writer
        .create("/e/one", Vec::new(), CreateMode::Persistent)
        .await
        .expect("made");
    cache.sync().await.expect("caught up");
    let before = watcher.watch_events_received();
    assert!(before > 0, "the watch delivered events");
    cache.close().await.expect("closed");
    assert!(
        matches!(
            watcher
                .remove_watches("/e", WatcherKind::PersistentRecursive)
                .await,
            Err(Error::NoWatcher { .. })
        ),
        "the server holds no watch any more"
    );
    writer
        .create("/e/two", Vec::new(), CreateMode::Persistent)
        .await
        .expect("made");
    watcher.sync("/e").await.expect("synced");
    assert_eq!(watcher.watch_events_received(), before);
}
