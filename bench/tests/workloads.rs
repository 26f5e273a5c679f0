//! Runs every workload of the real `arbor-bench` binary briefly against a
//! real `arbord` and checks the one JSON line it prints.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use arbor_tests::{arbord_path, TempDir, TestServer};
use serde_json::Value;

/// Keys every workload's JSON line carries.
const COMMON_KEYS: &[&str] = &[
    "workload",
    "target",
    "server",
    "ops",
    "secs",
    "ops_per_s",
    "p50_us",
    "p99_us",
    "p999_us",
    "max_us",
];

/// Runs the binary; asserts success and exactly one JSON line on stdout.
fn bench(args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_arbor-bench"))
        .args(args)
        .output()
        .expect("arbor-bench runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{args:?} failed: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?} printed {stdout:?}");
    let report: Value = serde_json::from_str(lines[0]).expect("stdout is JSON");
    for key in COMMON_KEYS {
        assert!(report.get(key).is_some(), "{args:?}: no {key} in {report}");
    }
    let number = |key: &str| report[key].as_f64().unwrap_or(-1.0);
    assert!(number("ops") > 0.0, "{report}");
    assert!(number("p50_us") <= number("p99_us"), "{report}");
    assert!(number("p99_us") <= number("p999_us"), "{report}");
    assert!(number("p999_us") <= number("max_us"), "{report}");
    report
}

fn has_keys(report: &Value, keys: &[&str]) {
    for key in keys {
        assert!(report.get(key).is_some(), "no {key} in {report}");
    }
}

/// The five single-op workloads.
const LOAD_WORKLOADS: [&str; 5] = ["create", "get", "set", "delete", "mixed"];

/// A short run of a single-op workload, `target` flags first: 300 ops over
/// 50 keys, 8 in flight on 2 connections.
fn short_load(target: &[&str], workload: &str) -> Value {
    let mut args = target.to_vec();
    args.extend([
        workload,
        "--count",
        "300",
        "--keys",
        "50",
        "--conns",
        "2",
        "--concurrency",
        "8",
    ]);
    bench(&args)
}

// Proves the five single-op workloads run, clean up and report their fields.
#[test]
fn load_workloads_report_one_json_line() {
    let server = TestServer::start();
    for workload in LOAD_WORKLOADS {
        let report = short_load(&["--server", server.addr()], workload);
        assert_eq!(report["workload"], workload);
        assert_eq!(report["target"], "arbor");
        assert_eq!(report["ops"], 300);
        has_keys(&report, &["size", "concurrency", "conns", "count"]);
    }
}

// Proves the load workloads run over ZooKeeper's protocol with both
// ZooKeeper clients (against Arbor's ZooKeeper port): every op succeeds (a
// lost create would fail its delete, a missing key its get), the row says
// which client ran, and nothing is left behind.
#[test]
fn load_workloads_run_over_both_zookeeper_clients() {
    let server = TestServer::start();
    let before = root_children(server.addr());
    for client in ["lean", "crate"] {
        for workload in LOAD_WORKLOADS {
            let target = [
                "--target",
                "zookeeper",
                "--zk-client",
                client,
                "--server",
                server.zk_addr(),
            ];
            let report = short_load(&target, workload);
            assert_eq!(report["workload"], workload);
            assert_eq!(report["target"], "zookeeper");
            assert_eq!(report["zk_client"], client);
            assert_eq!(report["ops"], 300);
        }
    }
    assert_eq!(root_children(server.addr()), before);
}

// Proves a load row says what the server and the load generator spent.
#[test]
fn load_reports_cpu_per_op_of_server_and_load_generator() {
    let server = TestServer::start();
    let pid = server.pid().to_string();
    let report = bench(&[
        "--server",
        server.addr(),
        "set",
        "--count",
        "5000",
        "--keys",
        "50",
        "--server-pid",
        &pid,
    ]);
    let per_op = |key: &str| report[key].as_f64().unwrap_or(-1.0);
    // A set costs the server a syscall or two at least, and far less than
    // a millisecond of CPU.
    assert!(
        (1.0..1000.0).contains(&per_op("server_cpu_us_per_op")),
        "{report}"
    );
    assert!(per_op("bench_cpu_us_per_op") >= 0.0, "{report}");
    // compare.sh measures a row again on this figure; it must be there.
    assert!((0.0..=100.0).contains(&per_op("steal_percent")), "{report}");
    let without = bench(&["--server", server.addr(), "get", "--count", "100"]);
    assert!(without.get("server_cpu_us_per_op").is_none(), "{without}");
}

// Proves a write row with --admin says what the server's log did: every
// set was made durable by one of the syncs counted, and those syncs took
// time; a read-only row counts none. Asking ZooKeeper for it is refused.
#[test]
fn load_reports_the_logs_syncs_from_the_admin_port() {
    let server = TestServer::start();
    let sets = 3000.0;
    let report = bench(&[
        "--server",
        server.addr(),
        "set",
        "--count",
        "3000",
        "--keys",
        "50",
        "--admin",
        server.admin_addr(),
    ]);
    let figure = |key: &str| report[key].as_f64().unwrap_or(-1.0);
    let syncs = figure("log_syncs");
    assert!((1.0..=sets).contains(&syncs), "{report}");
    // The key space's creates before the timed window are not counted.
    let per_sync = figure("writes_per_log_sync");
    assert!(
        (per_sync * syncs - sets).abs() < 1.0,
        "every set, and nothing else, went through a counted sync: {report}"
    );
    assert!(figure("log_sync_mean_us") > 0.0, "{report}");
    assert!(
        (0.0..=100.0).contains(&figure("log_syncing_percent")),
        "{report}"
    );
    // The server holds a write for part of the client's round trip; the
    // rest is the way back. (The mean is whole microseconds.)
    let (in_server, round_trip) = (figure("server_write_mean_us"), figure("mean_us"));
    assert!(in_server > 0.0 && in_server <= round_trip + 0.5, "{report}");
    let way_back = figure("way_back_mean_us");
    assert!(
        (way_back - (round_trip - in_server)).abs() < 0.01 && way_back >= -0.5,
        "{report}"
    );

    let reads = bench(&[
        "--server",
        server.addr(),
        "get",
        "--count",
        "500",
        "--admin",
        server.admin_addr(),
    ]);
    assert_eq!(reads["log_syncs"], 0, "{reads}");
    assert_eq!(reads["server_write_mean_us"], 0.0, "{reads}");
    assert!(reads.get("way_back_mean_us").is_none(), "{reads}");

    let output = Command::new(env!("CARGO_BIN_EXE_arbor-bench"))
        .args(["--target", "zookeeper", "--server", server.zk_addr()])
        .args(["set", "--count", "10", "--admin", server.admin_addr()])
        .output()
        .expect("arbor-bench runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("measures Arbor only"), "{stderr}");
}

// Proves --secs alone bounds a run by time (no --count needed).
#[test]
fn secs_limits_a_run() {
    let server = TestServer::start();
    let started = Instant::now();
    let report = bench(&[
        "--server",
        server.addr(),
        "get",
        "--secs",
        "0.5",
        "--keys",
        "10",
    ]);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(report["secs"].as_f64().unwrap_or(0.0) < 2.0, "{report}");
}

// Proves lock reports acquire, release and cycle percentiles.
#[test]
fn lock_reports_acquire_release_and_cycle() {
    let server = TestServer::start();
    let report = bench(&["--server", server.addr(), "lock", "--count", "30"]);
    has_keys(
        &report,
        &[
            "acquire_p50_us",
            "acquire_p99_us",
            "release_p50_us",
            "release_p99_us",
            "cycle_p50_us",
            "cycle_p99_us",
        ],
    );
    assert_eq!(report["ops"], 30);
    assert_eq!(report["p50_us"], report["cycle_p50_us"]);
}

// Proves each release of the fair lock notifies exactly one waiter.
#[test]
fn handoff_notifies_one_waiter_per_release() {
    let server = TestServer::start();
    let report = bench(&[
        "--server",
        server.addr(),
        "handoff",
        "--waiters",
        "5",
        "--rounds",
        "2",
    ]);
    has_keys(
        &report,
        &["handoff_p50_us", "handoff_p99_us", "waiters", "rounds"],
    );
    assert_eq!(report["ops"], 10);
    assert_eq!(report["notifications_per_release"], 1.0, "{report}");
}

// Proves --herd makes every release notify many waiters.
#[test]
fn handoff_herd_notifies_many_waiters_per_release() {
    let server = TestServer::start();
    let report = bench(&[
        "--server",
        server.addr(),
        "handoff",
        "--waiters",
        "5",
        "--rounds",
        "2",
        "--herd",
    ]);
    let per_release = report["notifications_per_release"].as_f64().unwrap_or(0.0);
    assert!(per_release > 1.0, "{report}");
}

// Proves semaphore completes every cycle on each recipe (Arbor's library
// recipe; Curator's and kazoo's protocols over Arbor's ZooKeeper port)
// without ever holding more leases than permits (the run fails if it does),
// counts the watch events of the releases, and leaves nothing behind.
#[test]
fn semaphore_cycles_within_its_permits_on_every_recipe() {
    let server = TestServer::start();
    let before = root_children(server.addr());
    let targets = [
        ("arbor", server.addr(), "curator"),
        ("zookeeper", server.zk_addr(), "curator"),
        ("zookeeper", server.zk_addr(), "kazoo"),
    ];
    for (target, addr, recipe) in targets {
        let mut args = vec!["--target", target, "--server", addr, "semaphore"];
        args.extend(["--zk-recipe", recipe]); // (Arbor ignores it)
        args.extend([
            "--permits",
            "2",
            "--clients",
            "4",
            "--count",
            "40",
            "--hold-us",
            "2000",
        ]);
        let report = bench(&args);
        assert_eq!(report["workload"], "semaphore", "{report}");
        assert_eq!(report["ops"], 40, "{report}");
        has_keys(
            &report,
            &[
                "acquire_p50_us",
                "release_p50_us",
                "cycle_p50_us",
                "notifications_per_release",
            ],
        );
        let held = report["max_holders"].as_u64().unwrap_or(0);
        assert!((1..=2).contains(&held), "{report}");
        // Four clients contend for two permits: some waited and were woken.
        assert!(
            report["notifications"].as_u64().unwrap_or(0) > 0,
            "{report}"
        );
    }
    assert_eq!(root_children(server.addr()), before);
}

// Proves queue hands every item to exactly one consumer, on Arbor's recipe
// and on kazoo's LockingQueue protocol over Arbor's ZooKeeper port, and
// leaves nothing behind.
#[test]
fn queue_takes_every_item_exactly_once_on_both_recipes() {
    let server = TestServer::start();
    let before = root_children(server.addr());
    let targets = [
        ["--target", "arbor", "--server", server.addr()],
        ["--target", "zookeeper", "--server", server.zk_addr()],
    ];
    for target in targets {
        let mut args = target.to_vec();
        args.extend([
            "queue",
            "--items",
            "60",
            "--producers",
            "2",
            "--consumers",
            "3",
            "--max-backlog",
            "10",
        ]);
        let report = bench(&args);
        assert_eq!(report["workload"], "queue", "{report}");
        assert_eq!(report["ops"], 60, "{report}");
        assert_eq!(report["lost"], 0, "{report}");
        assert_eq!(report["duplicates"], 0, "{report}");
        has_keys(
            &report,
            &[
                "puts_per_s",
                "takes_per_s",
                "put_to_take_p50_us",
                "put_p50_us",
                "complete_p50_us",
                "notifications_per_item",
            ],
        );
    }
    assert_eq!(root_children(server.addr()), before);
}

// Proves memory reads the server's RSS and reports bytes per znode.
#[test]
fn memory_reports_bytes_per_znode() {
    let server = TestServer::start();
    let pid = server.pid().to_string();
    let report = bench(&[
        "--server",
        server.addr(),
        "memory",
        "--count",
        "20000",
        "--batch",
        "500",
        "--server-pid",
        &pid,
    ]);
    has_keys(
        &report,
        &["rss_before_bytes", "rss_halfway_bytes", "rss_after_bytes"],
    );
    assert!(
        report["bytes_per_znode"].as_f64().unwrap_or(0.0) > 0.0,
        "{report}"
    );
    // Measured over the second 20 of the 40 batches; RSS may even fall.
    assert!(
        report["marginal_bytes_per_znode"].as_f64().is_some(),
        "{report}"
    );
}

// Proves memory can spread its nodes over several parents and removes them
// all, parents included.
#[test]
fn memory_spreads_nodes_over_parents() {
    let server = TestServer::start();
    let pid = server.pid().to_string();
    let report = bench(&[
        "--server",
        server.addr(),
        "memory",
        "--count",
        "3000",
        "--batch",
        "500",
        "--parents",
        "7",
        "--server-pid",
        &pid,
    ]);
    assert_eq!(report["parents"], 7);
    assert_eq!(report["ops"], 3000);
    assert!(
        root_children(server.addr())
            .iter()
            .all(|name| !name.starts_with("bench-memory")),
        "left behind"
    );
}

/// The names under `/` of the server at `addr`.
fn root_children(addr: &str) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let client = arbor_client::Client::connect(addr, Default::default())
            .await
            .expect("connects");
        client.get_children("/").await.expect("lists /")
    })
}

// Proves children lists a node holding exactly the children it created, and
// removes them afterwards.
#[test]
fn children_lists_every_child_and_cleans_up() {
    let server = TestServer::start();
    let report = bench(&[
        "--server",
        server.addr(),
        "children",
        "--children",
        "2500",
        "--batch",
        "1000",
        "--count",
        "20",
    ]);
    assert_eq!(report["workload"], "children");
    assert_eq!(report["children"], 2500);
    assert_eq!(report["ops"], 20);
    let steal = report["steal_percent"].as_f64().unwrap_or(-1.0);
    assert!((0.0..=100.0).contains(&steal), "{report}");
    let left = root_children(server.addr());
    assert!(
        left.iter().all(|name| !name.starts_with("bench-children")),
        "left behind: {left:?}"
    );
}

// Proves idle-memory keeps its sessions alive while idle and reports bytes
// per connection.
#[test]
fn idle_memory_reports_bytes_per_connection() {
    let server = TestServer::start_with(&["--max-connections-per-ip", "256"]);
    let pid = server.pid().to_string();
    let report = bench(&[
        "--server",
        server.addr(),
        "idle-memory",
        "--conns",
        "64",
        "--server-pid",
        &pid,
    ]);
    has_keys(&report, &["rss_before_bytes", "rss_after_bytes", "idle_ms"]);
    assert_eq!(report["conns"], 64);
    // Heartbeats cost something, but nowhere near a core.
    let idle_cpu = report["idle_server_cpu_ms_per_s"]
        .as_f64()
        .unwrap_or(f64::NAN);
    assert!((0.0..1000.0).contains(&idle_cpu), "{report}");
    assert_eq!(report["ops"], 64);
    // Far less than a megabyte per session; growth itself is not asserted,
    // as RSS also moves with what the allocator returns.
    let per_connection = report["bytes_per_connection"].as_f64().unwrap_or(f64::NAN);
    assert!(per_connection < 1_048_576.0, "{report}");
    assert!(
        report["rss_before_bytes"].as_f64().unwrap_or(0.0) > 0.0,
        "{report}"
    );
}

// Proves watch-memory sets one watch per (session, node), sees each fire on
// cleanup, and reports bytes per watch (first on a path, added, overall)
// against the path length.
#[test]
fn watch_memory_reports_bytes_per_watch_and_path_bytes() {
    let server = TestServer::start();
    let pid = server.pid().to_string();
    let report = bench(&[
        "--server",
        server.addr(),
        "watch-memory",
        "--nodes",
        "4000",
        "--watchers",
        "5",
        "--path-bytes",
        "1024",
        "--server-pid",
        &pid,
    ]);
    assert_eq!(report["path_bytes"], 1024);
    assert_eq!(report["watches"], 20_000);
    assert_eq!(report["ops"], 20_000);
    assert_eq!(report["watches_fired"], 20_000, "{report}");
    let number = |key: &str| report[key].as_f64().unwrap_or(f64::NAN);
    // RSS growth itself is not asserted: a server that frees connection
    // buffers between phases can shrink while the watches are set (seen on
    // a debug build). The readings must be there and the figures consistent.
    for key in ["rss_before_bytes", "rss_first_bytes", "rss_after_bytes"] {
        assert!(number(key) > 0.0, "{key}: {report}");
    }
    for key in [
        "bytes_per_first_watch",
        "bytes_per_watch",
        "bytes_per_added_watch",
    ] {
        assert!(number(key).is_finite(), "{key}: {report}");
    }
    let over_path = number("bytes_per_watch_over_path");
    assert!(
        (over_path - (number("bytes_per_first_watch") - 1024.0)).abs() < 0.01,
        "{report}"
    );
}

// Proves a blackholed session expires no sooner than its timeout.
#[test]
fn expiry_observes_at_least_the_session_timeout() {
    let server = TestServer::start();
    let report = bench(&[
        "--server",
        server.addr(),
        "expiry",
        "--session-timeout-ms",
        "1000",
        "--rounds",
        "1",
    ]);
    assert_eq!(report["negotiated_timeout_ms"], 1000);
    let observed = report["observed_ms"].as_array().expect("observed_ms array");
    assert_eq!(observed.len(), 1);
    for ms in observed {
        assert!(ms.as_f64().unwrap_or(0.0) >= 1000.0, "{report}");
    }
}

/// An `arbord` started in the background by shell commands (as a restart
/// command would), killed through its PID file when dropped.
struct ShellServer {
    pid_file: std::path::PathBuf,
}

impl Drop for ShellServer {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.pid_file) {
            let _ = Command::new("kill").args(["-9", pid.trim()]).status();
        }
    }
}

fn free_port() -> u16 {
    let addr = arbor_tests::free_addr();
    addr.rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .expect("an address with a port")
}

fn wait_listening(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "arbord never listened on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sh(script: &str) {
    let status = Command::new("sh")
        .arg("-c")
        .arg(script)
        .status()
        .expect("sh");
    assert!(status.success(), "{script} failed");
}

// Proves recovery runs the restart command and times the server's return.
#[test]
fn recovery_times_a_restart() {
    let dir = TempDir::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let pid_file = dir.path().join("arbord.pid");
    let start = format!(
        "{} --listen {addr} --zk-listen off --data-dir {} --tick-ms 200 >/dev/null 2>&1 & echo $! > {}",
        arbord_path().display(),
        dir.path().join("data").display(),
        pid_file.display()
    );
    let _server = ShellServer {
        pid_file: pid_file.clone(),
    };
    sh(&start);
    wait_listening(&addr);
    let restart = format!(
        "pid=$(cat {pids}); kill -9 $pid; while kill -0 $pid 2>/dev/null; do sleep 0.01; done; {start}",
        pids = pid_file.display()
    );
    let run = |expect_filled: bool| {
        let report = bench(&[
            "--server",
            &addr,
            "recovery",
            "--count",
            "3000",
            "--restart-cmd",
            &restart,
            "--timeout-secs",
            "30",
        ]);
        assert!(
            report["recovery_ms"].as_f64().unwrap_or(0.0) > 0.0,
            "{report}"
        );
        assert_eq!(report["filled"], expect_filled, "{report}");
    };
    run(true);
    // The data survived the restart: a second run skips the fill.
    run(false);
    assert!(Path::new(&pid_file).exists());
}

// Proves a failure is one error line on stderr, nothing on stdout, exit 1.
#[test]
fn failure_is_one_line_and_nonzero() {
    let port = free_port();
    let output = Command::new(env!("CARGO_BIN_EXE_arbor-bench"))
        .args([
            "--server",
            &format!("127.0.0.1:{port}"),
            "get",
            "--count",
            "1",
        ])
        .output()
        .expect("arbor-bench runs");
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("arbor-bench: error: "), "{stderr}");
}

// Proves fsync-probe reports write + fdatasync latencies.
#[test]
fn fsync_probe_reports_latencies() {
    let dir = TempDir::new();
    let output = Command::new(env!("CARGO_BIN_EXE_arbor-bench"))
        .args(["fsync-probe", "--count", "20", "--dir"])
        .arg(dir.path())
        .output()
        .expect("arbor-bench runs");
    assert!(output.status.success());
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["ops"], 20);
    assert!(report["p50_us"].as_u64().unwrap_or(0) <= report["max_us"].as_u64().unwrap_or(0));
}

/// Three `arbord` members started by scripts in `dir` (`start{k}.sh`, each
/// writing `m{k}.pid`), as failover's start command runs them; their client
/// addresses and the handles that kill them.
fn start_ensemble(dir: &TempDir) -> (Vec<String>, Vec<ShellServer>) {
    let clients: Vec<String> = (0..3).map(|_| arbor_tests::free_addr()).collect();
    let peers: Vec<String> = (0..3).map(|_| arbor_tests::free_addr()).collect();
    let members: String = (0..3)
        .map(|k| format!(" --member {}={}/{}", k + 1, clients[k], peers[k]))
        .collect();
    let mut servers = Vec::new();
    for k in 1..=3 {
        let pid_file = dir.path().join(format!("m{k}.pid"));
        let start = dir.path().join(format!("start{k}.sh"));
        let script = format!(
            "{arbord} --listen {client} --data-dir {data} --member-id {k}{members} >/dev/null 2>&1 &\necho $! > {pid}\n",
            arbord = arbord_path().display(),
            client = clients[k - 1],
            data = dir.path().join(format!("data{k}")).display(),
            pid = pid_file.display(),
        );
        std::fs::write(&start, script).expect("start script");
        servers.push(ShellServer { pid_file });
        sh(&format!("sh {}", start.display()));
    }
    for addr in &clients {
        wait_listening(addr);
    }
    (clients, servers)
}

/// Runs `arbor-bench failover` against the members at `clients` with
/// `flags`; its report and its stderr, once it has succeeded.
fn failover(clients: &[String], kill: &str, start: &str, flags: &[&str]) -> (Value, String) {
    let servers = clients.join(",");
    let mut args = vec!["--server", &servers, "failover"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--kill-cmd", kill, "--start-cmd", start]);
    let output = Command::new(env!("CARGO_BIN_EXE_arbor-bench"))
        .args(&args)
        .output()
        .expect("arbor-bench runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "failover failed: {stderr}");
    let report = serde_json::from_slice(&output.stdout).expect("stdout is one JSON line");
    (report, stderr)
}

// Proves failover kills the leader each round, waits for the writers to be
// acknowledged again, restarts the member and reports both delays.
#[test]
fn failover_times_leader_kills() {
    let dir = TempDir::new();
    let (clients, servers) = start_ensemble(&dir);
    let kill = format!(
        "pid=$(cat {dir}/m{{member}}.pid); kill -9 $pid; while kill -0 $pid 2>/dev/null; do sleep 0.01; done",
        dir = dir.path().display()
    );
    let start = format!("sh {}/start{{member}}.sh", dir.path().display());
    let (report, stderr) = failover(
        &clients,
        &kill,
        &start,
        &["--kills", "2", "--settle-ms", "200"],
    );
    let kills = report["first_write_ms"].as_array().expect("samples");
    assert_eq!(kills.len(), 2, "{report}");
    for ms in kills {
        assert!(ms.as_f64().unwrap_or(0.0) > 0.0, "{report}");
    }
    let (first, all) = (
        report["first_write_p50_ms"].as_f64().unwrap_or(-1.0),
        report["all_writers_p50_ms"].as_f64().unwrap_or(-1.0),
    );
    assert!(0.0 < first && first <= all, "{report}");
    assert_eq!(stderr.matches("failover: kill ").count(), 2, "{stderr}");
    drop(servers);
}

// Proves a writer whose session cannot outlive the outage opens a new one:
// the kill takes the leader and a second member, which comes back only
// after OUTAGE_SECS, longer than the writers' 10 s sessions. Writers that
// kept their first session never wrote again (the run failed after its
// 60 s limit).
#[test]
fn failover_writers_open_new_sessions_after_an_outage_longer_than_their_timeout() {
    const OUTAGE_SECS: u64 = 12;
    let dir = TempDir::new();
    let (clients, servers) = start_ensemble(&dir);
    let kill = format!(
        "pid=$(cat {dir}/m{{member}}.pid); other=$(( {{member}} % 3 + 1 )); opid=$(cat {dir}/m$other.pid); \
         kill -9 $pid $opid; while kill -0 $pid 2>/dev/null || kill -0 $opid 2>/dev/null; do sleep 0.01; done; \
         (sleep {OUTAGE_SECS}; sh {dir}/start$other.sh) >/dev/null 2>&1 &",
        dir = dir.path().display()
    );
    let start = format!("sh {}/start{{member}}.sh", dir.path().display());
    let (report, _) = failover(&clients, &kill, &start, &["--kills", "1"]);
    let first = report["first_write_p50_ms"].as_f64().unwrap_or(-1.0);
    // No write can be acknowledged while only one member is up.
    assert!(first >= (OUTAGE_SECS * 1000) as f64, "{report}");
    drop(servers);
}
