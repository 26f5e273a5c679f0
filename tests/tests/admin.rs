//! The admin port of a real arbord: `/metrics` read by a Prometheus text
//! parser moves with the load, `/health` and `/ready` flip when storage
//! goes and when an ensemble loses its quorum, and the JSON commands name
//! the sessions a client holds.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use arbor_client::{AddWatchMode, Client, ClientOptions, CreateMode, Hex};
use arbor_tests::{client, TestEnsemble, TestServer};
use prometheus_parse::{LineInfo, Scrape, Value};

/// How long a probe may take to notice a change.
const FLIP_TIMEOUT: Duration = Duration::from_secs(20);

/// One scrape: every line is checked to be a comment or a sample the
/// parser reads, and the samples are kept by name and labels.
struct Metrics {
    scrape: Scrape,
}

impl Metrics {
    fn scrape(server: &TestServer) -> Self {
        let (status, body) = server.admin_get("/metrics");
        assert_eq!(status, 200, "{body}");
        for line in body.lines() {
            let parsed = LineInfo::parse(line);
            let known = matches!(
                parsed,
                LineInfo::Doc { .. } | LineInfo::Type { .. } | LineInfo::Sample { .. }
            );
            assert!(known, "a line Prometheus would not read: {line:?}");
        }
        let scrape = Scrape::parse(body.lines().map(|line| Ok(line.to_owned()))).expect("parsed");
        // Every family is documented.
        for sample in &scrape.samples {
            let family = sample
                .metric
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(
                scrape.docs.contains_key(&sample.metric) || scrape.docs.contains_key(family),
                "{} has no HELP",
                sample.metric
            );
        }
        Self { scrape }
    }

    /// The value of the counter or gauge `name` with exactly `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.find(name, labels)
            .map(|value| match value {
                Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
                other => panic!("{name} is not a number: {other:?}"),
            })
            .unwrap_or(0.0)
    }

    /// A histogram's buckets, `le` to cumulative count.
    fn buckets(&self, name: &str, labels: &[(&str, &str)]) -> Vec<(f64, f64)> {
        match self.find(name, labels) {
            Some(Value::Histogram(buckets)) => {
                buckets.iter().map(|b| (b.less_than, b.count)).collect()
            }
            other => panic!("{name} {labels:?} is not a histogram: {other:?}"),
        }
    }

    fn find(&self, name: &str, labels: &[(&str, &str)]) -> Option<&Value> {
        let wanted: HashMap<&str, &str> = labels.iter().copied().collect();
        self.scrape
            .samples
            .iter()
            .find(|sample| {
                sample.metric == name && {
                    let have: HashMap<&str, &str> = sample
                        .labels
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect();
                    have == wanted
                }
            })
            .map(|sample| &sample.value)
    }
}

/// Polls `path` until it answers `status`; the last body.
fn wait_for_status(server: &TestServer, path: &str, status: u16) -> String {
    let deadline = Instant::now() + FLIP_TIMEOUT;
    loop {
        let (got, body) = server.admin_get(path);
        if got == status {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{path} still answers {got} ({body:?}), not {status}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

// Proves the counters, histograms and gauges of /metrics move with what
// clients do, as Prometheus reads them.
#[tokio::test]
async fn metrics_move_with_load() {
    let server = TestServer::start();
    let before = Metrics::scrape(&server);
    let c = client(&server).await;
    const WRITES: usize = 40;
    for i in 0..WRITES {
        c.create(&format!("/n{i}"), vec![7; 10], CreateMode::Persistent)
            .await
            .expect("created");
        c.get_data(&format!("/n{i}")).await.expect("read");
    }
    assert!(c.get_data("/missing").await.is_err());
    c.create("/e", Vec::new(), CreateMode::Ephemeral)
        .await
        .expect("created");
    let _watch = c
        .watch("/", AddWatchMode::PersistentRecursive)
        .await
        .expect("watched");
    let after = Metrics::scrape(&server);

    let moved = |name: &str, labels: &[(&str, &str)]| {
        after.value(name, labels) - before.value(name, labels)
    };
    let create_ok = [("op", "create"), ("result", "ok")];
    let get_ok = [("op", "get_data"), ("result", "ok")];
    let get_missing = [("op", "get_data"), ("result", "no_node")];
    assert_eq!(
        moved("arbor_requests_total", &create_ok),
        WRITES as f64 + 1.0
    );
    assert_eq!(moved("arbor_requests_total", &get_ok), WRITES as f64);
    assert_eq!(moved("arbor_requests_total", &get_missing), 1.0);
    assert_eq!(moved("arbor_znodes", &[]), WRITES as f64 + 1.0);
    assert_eq!(moved("arbor_data_bytes", &[]), WRITES as f64 * 10.0);
    assert_eq!(after.value("arbor_ephemerals", &[]), 1.0);
    assert!(after.value("arbor_sessions", &[]) >= 1.0);
    assert!(after.value("arbor_connections", &[]) >= 1.0);
    assert_eq!(
        after.value("arbor_watches", &[("kind", "persistent_recursive")]),
        1.0
    );
    assert_eq!(after.value("arbor_requests_outstanding", &[]), 0.0);

    // Each write went through one durable batch at least, and the
    // histograms are cumulative and end with +Inf equal to their count.
    let writes = after.buckets("arbor_request_duration_seconds", &[("class", "write")]);
    let reads = after.buckets("arbor_request_duration_seconds", &[("class", "read")]);
    for buckets in [&writes, &reads] {
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{buckets:?}");
        assert_eq!(buckets.last().map(|b| b.0), Some(f64::INFINITY));
    }
    let total = |buckets: &Vec<(f64, f64)>| buckets.last().map_or(0.0, |b| b.1);
    assert!(total(&writes) >= WRITES as f64 + 1.0, "{writes:?}");
    assert!(total(&reads) >= WRITES as f64 + 1.0, "{reads:?}");
    assert_eq!(
        after.value(
            "arbor_request_duration_seconds_count",
            &[("class", "write")]
        ),
        total(&writes)
    );
    let batches = after.buckets("arbor_commit_batch_txns", &[]);
    let synced = after.value("arbor_commit_batch_txns_sum", &[]);
    assert!(synced >= WRITES as f64 + 1.0, "{batches:?}");
    assert!(total(&after.buckets("arbor_log_sync_duration_seconds", &[])) >= 1.0);
    assert!(after.value("arbor_last_zxid", &[]) > before.value("arbor_last_zxid", &[]));
    assert!(after.value("arbor_uptime_seconds", &[]) > 0.0);
    assert!(after.value("process_resident_memory_bytes", &[]) > 0.0);
}

// Proves a server with one worker thread for its connections still syncs
// writes from many clients together: a lone client's writes are committed
// on its connection's thread (no hand-off), but once several connections
// are open every write goes through the commit thread, and batches hold
// more than one. Committed inline there, each write got a sync of its own
// while the only worker, blocked in it, read nobody else's.
#[tokio::test]
async fn one_worker_thread_still_commits_many_clients_writes_together() {
    const LONE_WRITES: usize = 20;
    const CLIENTS: usize = 8;
    const WRITES_PER_CLIENT: usize = 50;
    let server = TestServer::start_with(&["--worker-threads", "1"]);
    let (_, conf) = server.admin_get("/commands/conf");
    let conf: serde_json::Value = serde_json::from_str(&conf).expect("JSON");
    assert_eq!(conf["worker_threads"], 1, "{conf}");

    let lone = client(&server).await;
    let before = Metrics::scrape(&server);
    for i in 0..LONE_WRITES {
        lone.create(&format!("/lone{i}"), Vec::new(), CreateMode::Persistent)
            .await
            .expect("created");
    }
    let after_lone = Metrics::scrape(&server);
    let inline = |m: &Metrics| m.value("arbor_commits_inline_total", &[]);
    assert!(
        inline(&after_lone) - inline(&before) >= LONE_WRITES as f64 / 2.0,
        "a lone client's writes skip the commit thread: {} of {LONE_WRITES}",
        inline(&after_lone) - inline(&before)
    );

    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(client(&server).await);
    }
    let writers = clients
        .into_iter()
        .enumerate()
        .map(|(c, writer)| async move {
            for i in 0..WRITES_PER_CLIENT {
                writer
                    .create(&format!("/c{c}-{i}"), vec![1; 16], CreateMode::Persistent)
                    .await
                    .expect("created");
            }
            writer
        });
    let _clients = futures_util::future::join_all(writers).await;
    let after = Metrics::scrape(&server);
    assert_eq!(
        inline(&after),
        inline(&after_lone),
        "with several connections no write is committed inline"
    );
    assert_batched(&after_lone, &after, CLIENTS * WRITES_PER_CLIENT);
}

// Proves the idle spin saves a lone client's wake-ups: with a window no
// next request misses, nearly every read of a client reading one after
// another is found by the worker still polling, not by a wake-up; and that
// `--idle-spin-us` sets the window, 0 turning the spin off.
#[tokio::test]
async fn a_lone_clients_next_request_is_found_by_the_idle_spin() {
    const READS: usize = 200;
    let spin_us = |server: &TestServer| {
        let (_, conf) = server.admin_get("/commands/conf");
        let conf: serde_json::Value = serde_json::from_str(&conf).expect("JSON");
        conf["idle_spin_us"].as_u64().expect("idle_spin_us")
    };
    let found = |m: &Metrics| m.value("arbor_idle_spins_total", &[("ended", "work")]);

    let server = TestServer::start_with(&["--idle-spin-us", "10000"]);
    assert_eq!(spin_us(&server), 10_000);
    let lone = client(&server).await;
    lone.create("/spin", vec![1; 16], CreateMode::Persistent)
        .await
        .expect("created");
    let before = Metrics::scrape(&server);
    for _ in 0..READS {
        lone.get_data("/spin").await.expect("read");
    }
    let after = Metrics::scrape(&server);
    let saved = found(&after) - found(&before);
    assert!(
        saved >= (READS / 2) as f64,
        "reads found by the spin: {saved} of {READS}"
    );
    assert!(after.value("arbor_idle_spin_seconds_total", &[]) > 0.0);

    let off = TestServer::start_with(&["--idle-spin-us", "0"]);
    assert_eq!(spin_us(&off), 0);
    let quiet = client(&off).await;
    quiet.get_data("/").await.expect("read");
    let metrics = Metrics::scrape(&off);
    assert!(metrics
        .find("arbor_idle_spins_total", &[("ended", "work")])
        .is_none());

    let default = TestServer::start();
    assert_eq!(spin_us(&default), 100);
}

// Proves heartbeats alone do not make the server spin: with idle sessions
// pinging, the last worker parks at once after each ping (counted as
// skipped) instead of polling out its window, which cost CPU for nothing.
#[tokio::test]
async fn idle_sessions_heartbeats_do_not_make_the_server_spin() {
    const SESSIONS: usize = 20;
    const IDLE: Duration = Duration::from_secs(3);
    let server = TestServer::start_with(&["--idle-spin-us", "1000", "--reap-interval-ms", "10000"]);
    let options = ClientOptions::default().with_session_timeout(Duration::from_millis(600));
    let mut idle = Vec::with_capacity(SESSIONS);
    for _ in 0..SESSIONS {
        let session = Client::connect(server.addr(), options.clone())
            .await
            .expect("connects");
        idle.push(session);
    }
    let before = Metrics::scrape(&server);
    tokio::time::sleep(IDLE).await;
    let after = Metrics::scrape(&server);
    let moved = |name: &str, labels: &[(&str, &str)]| {
        after.value(name, labels) - before.value(name, labels)
    };
    let pings = moved("arbor_requests_total", &[("op", "ping"), ("result", "ok")]);
    let spins: f64 = ["work", "worker_woke", "window"]
        .iter()
        .map(|ended| moved("arbor_idle_spins_total", &[("ended", ended)]))
        .sum();
    let skipped = moved("arbor_idle_spins_skipped_total", &[]);
    // Each session pings every 200 ms: about 300 in all.
    assert!(pings >= 100.0, "{pings} pings in {IDLE:?}");
    assert!(
        skipped >= pings / 4.0,
        "{skipped} parks without a spin after {pings} pings"
    );
    // What still spins follows the server's own timers, not the pings.
    assert!(spins < pings / 2.0, "{spins} spins after {pings} pings");
    drop(idle);
}

// Proves writes sent together on one connection are synced together: a
// client whose tasks share one connection, 64 writes in flight, gets batches
// of more than one write. Once each write was committed on the reader's
// thread as it was read, one sync each, while the next ones waited unread.
#[tokio::test]
async fn writes_in_flight_on_one_connection_are_committed_together() {
    const IN_FLIGHT: usize = 64;
    const ROUNDS: usize = 5;
    let server = TestServer::start();
    let shared = client(&server).await;
    let before = Metrics::scrape(&server);
    for round in 0..ROUNDS {
        let writes = (0..IN_FLIGHT).map(|i| {
            let shared = &shared;
            async move {
                shared
                    .create(
                        &format!("/r{round}-{i}"),
                        vec![2; 16],
                        CreateMode::Persistent,
                    )
                    .await
                    .expect("created")
            }
        });
        futures_util::future::join_all(writes).await;
    }
    let after = Metrics::scrape(&server);
    let txns = assert_batched(&before, &after, IN_FLIGHT * ROUNDS);
    // The first write of a round may go inline, alone; the rest arrive
    // while it syncs, and are read together.
    let inline = after.value("arbor_commits_inline_total", &[])
        - before.value("arbor_commits_inline_total", &[]);
    assert!(
        inline <= (IN_FLIGHT * ROUNDS / 8) as f64,
        "{inline} of {txns} writes committed inline"
    );
}

// Proves a lone lock contender's create is committed on its connection's
// thread although the look at the queue rides along with it: the look is
// a read, answered after the create anyway. Once any request read behind a
// write sent the write to the commit thread, so every acquire paid two
// thread hand-offs (only the releases' deletes went inline: half).
#[tokio::test]
async fn a_write_with_only_reads_behind_it_is_committed_inline() {
    const CYCLES: usize = 100;
    let server = TestServer::start();
    let contender = client(&server).await;
    let mutex = arbor_client::recipes::Mutex::new(&contender, "/locks/inline");
    // The first acquire also makes the lock's directory.
    mutex
        .lock()
        .await
        .expect("locked")
        .release()
        .await
        .expect("released");
    let before = Metrics::scrape(&server);
    for _ in 0..CYCLES {
        let guard = mutex.lock().await.expect("locked");
        guard.release().await.expect("released");
    }
    let after = Metrics::scrape(&server);
    let moved = |name: &str| after.value(name, &[]) - before.value(name, &[]);
    // A create and a delete per cycle, and the lock's empty directory may
    // be reaped and made again.
    let (writes, txns) = ((2 * CYCLES) as f64, moved("arbor_commit_batch_txns_sum"));
    assert!(txns >= writes, "{txns} txns for {writes} lock writes");
    // A look split across two reads still sends its create to the queue.
    let inline = moved("arbor_commits_inline_total");
    assert!(
        inline >= writes * 0.9,
        "{inline} of {txns} writes committed inline"
    );
}

/// Asserts that at least `writes` txns were made durable between the two
/// scrapes, and that some batch held more than one; the txns.
fn assert_batched(before: &Metrics, after: &Metrics, writes: usize) -> f64 {
    let moved = |name: &str| after.value(name, &[]) - before.value(name, &[]);
    let (txns, batches) = (
        moved("arbor_commit_batch_txns_sum"),
        moved("arbor_commit_batch_txns_count"),
    );
    assert!(txns >= writes as f64, "{txns} txns for {writes} writes");
    assert!(
        txns > batches,
        "some batch held more than one write: {txns} writes in {batches} syncs"
    );
    txns
}

// Proves the JSON commands name this client's session (in the CLI's hex
// form) with its peer, ephemerals and watches.
#[tokio::test]
async fn commands_name_the_sessions_and_their_holdings() {
    let server = TestServer::start();
    let c = client(&server).await;
    c.create("/mine", Vec::new(), CreateMode::Ephemeral)
        .await
        .expect("created");
    let _watch = c
        .watch("/", AddWatchMode::Persistent)
        .await
        .expect("watched");
    let session = Hex(c.session_id()).to_string();

    let (status, body) = server.admin_get("/commands/sessions");
    assert_eq!(status, 200);
    let page: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let sessions = page["sessions"].as_array().expect("a list");
    let mine = sessions
        .iter()
        .find(|s| s["session_id"] == session.as_str())
        .unwrap_or_else(|| panic!("{session} is not in {body}"));
    assert_eq!(mine["ephemerals"], 1);
    assert_eq!(mine["watches"], 1);
    assert!(mine["peer"]
        .as_str()
        .is_some_and(|p| p.starts_with("127.0.0.1:")));

    let (_, body) = server.admin_get("/commands/cons");
    assert!(body.contains(&session), "{body}");
    let (_, body) = server.admin_get("/commands/watches");
    let page: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(page["by_kind"]["persistent"], 1);
    let (_, body) = server.admin_get("/commands/stat");
    let page: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(page["mode"], "standalone");
    assert_eq!(page["ephemerals"], 1);
    let (status, body) = server.admin_get("/commands/nope");
    assert_eq!(status, 404);
    assert!(
        body.contains("stat, conf, cons, sessions, watches"),
        "{body}"
    );
}

// Proves /health and /ready answer 503 with the reason once the data
// directory can no longer be written (here: it is gone, as when a volume
// is unmounted under a running server).
#[test]
fn health_and_ready_fail_when_storage_does() {
    let server = TestServer::start();
    assert_eq!(server.admin_get("/health"), (200, "ok\n".into()));
    assert_eq!(server.admin_get("/ready"), (200, "ready\n".into()));
    std::fs::remove_dir_all(server.data_dir()).expect("data dir removed");
    let (status, body) = server.admin_get("/health");
    assert_eq!(status, 503);
    assert!(body.contains("storage is not writable"), "{body}");
    let (status, body) = server.admin_get("/ready");
    assert_eq!(status, 503);
    assert!(body.contains("storage is not writable"), "{body}");
}

// Proves a member that loses its quorum stops being ready, says why, and
// is ready again once a quorum is back; and that members report their role.
#[test]
fn ready_follows_the_quorum() {
    let mut ensemble = TestEnsemble::start(3);
    let leader = ensemble.wait_for_leader(None);
    for id in 1..=3 {
        wait_for_status(ensemble.member(id), "/ready", 200);
    }
    let role = Metrics::scrape(ensemble.member(leader));
    assert_eq!(
        role.value("arbor_ensemble_role", &[("role", "leader")]),
        1.0
    );
    // The survivor is a follower: the member most tests' clients forget.
    let survivor = (1..=3).find(|id| *id != leader).expect("a follower");
    let other = (1..=3)
        .find(|id| *id != leader && *id != survivor)
        .expect("another follower");
    ensemble.member(leader).kill();
    ensemble.member(other).kill();
    let body = wait_for_status(ensemble.member(survivor), "/ready", 503);
    assert!(
        body.contains("no leader") || body.contains("no quorum"),
        "{body}"
    );
    // Still healthy: the process and its disk are fine.
    assert_eq!(ensemble.member(survivor).admin_get("/health").0, 200);
    ensemble.member(other).restart();
    wait_for_status(ensemble.member(survivor), "/ready", 200);
}

// Proves the admin commands over the native protocol: the same reports as
// the admin port, an operator's eviction of another session (its ephemeral
// goes, its client is told it expired), and ADMIN on `/` required once
// the root's ACL is locked down.
#[tokio::test]
async fn native_admin_commands_report_evict_and_need_admin() {
    use arbor_client::{acl::Acl, Client, ClientOptions, Error, ServerReport};
    let server = TestServer::start();
    let operator = client(&server).await;
    let stuck = client(&server).await;
    stuck
        .create("/held", Vec::new(), CreateMode::Ephemeral)
        .await
        .expect("created");
    let stuck_id = Hex(stuck.session_id()).to_string();
    let report = operator
        .server_report(ServerReport::Sessions)
        .await
        .expect("report");
    let page: serde_json::Value = serde_json::from_str(&report).expect("JSON");
    assert!(
        page["sessions"]
            .as_array()
            .is_some_and(|all| all.iter().any(|s| s["session_id"] == stuck_id.as_str())),
        "{report}"
    );
    let stat = operator
        .server_report(ServerReport::Stat)
        .await
        .expect("report");
    assert!(stat.contains("\"mode\": \"standalone\""), "{stat}");

    operator
        .evict_session(stuck.session_id())
        .await
        .expect("evicted");
    assert!(matches!(operator.exists("/held").await, Ok(None)));
    assert!(matches!(
        stuck.get_data("/").await,
        Err(Error::SessionExpired)
    ));
    assert!(matches!(
        operator.evict_session(stuck.session_id()).await,
        Err(Error::NoNode { .. })
    ));

    // Only alice may administer once `/` says so.
    let alice = Client::connect(
        server.addr(),
        ClientOptions::default().with_auth("digest", "alice:secret"),
    )
    .await
    .expect("connects");
    let id = arbor_client::acl::digest_id("alice:secret").expect("digest");
    let locked = vec![
        Acl::parse(&format!("digest:{id}:cdrwa")).expect("ACL"),
        Acl::parse("world:anyone:cdrw").expect("ACL"),
    ];
    alice.set_acl("/", locked, None).await.expect("set");
    assert!(matches!(
        operator.server_report(ServerReport::Stat).await,
        Err(Error::NoAuth)
    ));
    assert!(alice.server_report(ServerReport::Stat).await.is_ok());
}
