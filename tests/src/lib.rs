//! Test harness: real `arbord` processes on 127.0.0.1 ephemeral ports, and a
//! raw protocol connection for tests that must speak bytes the client never
//! would.
//!
//! Every server is started with `--exit-on-stdin-close`, so it stops by itself
//! when the test process goes away, however that happens.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use arbor_protocol::codec;
use arbor_protocol::frame::{encode_frame, FrameDecoder};
use arbor_protocol::{
    ClientMessage, ConnectRequest, ConnectResponse, ErrorCode, Op, OpResult, ServerMessage,
    SessionCredentials, WatchEvent, Zxid, PROTOCOL_VERSION,
};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::Decoder;

pub mod certs;

/// The tick tests run servers with: session timeouts clamp to [400, 4000] ms.
pub const TEST_TICK_MS: u32 = 200;

/// How long a test waits for any single answer before failing.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// A running `arbord` child process.
pub struct TestServer {
    child: Child,
    /// The leader this server last said it follows (ensemble members).
    leader_seen: std::sync::Arc<AtomicU64>,
    /// Snapshots this process logged as installed from its leader.
    snapshots_installed: std::sync::Arc<AtomicU64>,
    /// The last [`LOG_LINES_KEPT`] lines of its log.
    log: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
    _stdin: Option<ChildStdin>,
    /// The plain port's `host:port` (the TLS port's with `--listen off`).
    addr: String,
    /// The TLS port's, when started with `--tls-listen`.
    tls_addr: Option<String>,
    /// The port for ZooKeeper's protocol (`--zk-listen`), unless off.
    zk_addr: Option<String>,
    /// The admin port's `host:port`, unless it is off.
    admin_addr: Option<String>,
    data_dir: PathBuf,
    /// Flags given at start, reused by `restart`.
    extra: Vec<String>,
    /// Whether `drop` removes the data directory.
    owns_data: bool,
    /// The `ulimit` arguments it was started under, reused by `restart`.
    ulimit: Option<String>,
}

/// Where the `arbord` binary is: `ARBORD_BIN`, or beside the test executable
/// (`cargo test --workspace` builds it, because arbor-server has
/// integration tests).
pub fn arbord_path() -> PathBuf {
    if let Some(path) = std::env::var_os("ARBORD_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executables live in target/<profile>/deps");
    let path = dir.join(format!("arbord{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} is missing: run `cargo build -p arbor-server` (or `cargo test --workspace`) first",
        path.display()
    );
    assert_fresh(&path);
    path
}

/// Refuses to test a binary older than its sources: `cargo test -p
/// arbor-tests` alone does not rebuild `arbord`, and a stale one would make
/// tests pass or fail for code that no longer exists.
fn assert_fresh(binary: &Path) {
    let built = std::fs::metadata(binary)
        .and_then(|m| m.modified())
        .expect("binary has a modification time");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace");
    for crate_dir in ["server/src", "protocol/src"] {
        if let Some(newer) = newer_source(&workspace.join(crate_dir), built) {
            panic!(
                "{} is older than {}: run `cargo build -p arbor-server` (or `cargo test --workspace`)",
                binary.display(),
                newer.display()
            );
        }
    }
}

fn newer_source(dir: &Path, than: std::time::SystemTime) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(newer) = newer_source(&path, than) {
                return Some(newer);
            }
        } else if entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|m| m > than)
        {
            return Some(path);
        }
    }
    None
}

impl TestServer {
    /// Starts a server with the test tick and a fresh data directory.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra flags and a fresh data directory, removed
    /// when the server is dropped.
    pub fn start_with(extra: &[&str]) -> Self {
        let data_dir = fresh_data_dir();
        let mut server = Self::spawn(&data_dir, "127.0.0.1:0", extra);
        server.owns_data = true;
        server
    }

    /// Starts a server on an existing data directory, which it leaves in place.
    pub fn start_in(data_dir: &Path, extra: &[&str]) -> Self {
        Self::spawn(data_dir, "127.0.0.1:0", extra)
    }

    /// Starts a server in `data_dir`, or returns what it printed on stderr
    /// if it exits instead of listening.
    pub fn try_start_in(data_dir: &Path, extra: &[&str]) -> Result<Self, String> {
        Self::try_spawn(data_dir, "127.0.0.1:0", extra)
    }

    /// A server started by a shell that first runs `ulimit {ulimit}` (for
    /// example `-n 192`: soft and hard open-files limits; `-Sn 256`: the soft
    /// one alone), in a fresh data directory. [`TestServer::restart`] runs
    /// it under the same limits.
    pub fn start_under_ulimit(ulimit: &str, extra: &[&str]) -> Result<Self, String> {
        let data_dir = fresh_data_dir();
        match Self::try_launch(&data_dir, "127.0.0.1:0", extra, Some(ulimit.to_owned())) {
            Ok(mut server) => {
                server.owns_data = true;
                Ok(server)
            }
            Err(stderr) => {
                let _ = std::fs::remove_dir_all(&data_dir);
                Err(stderr)
            }
        }
    }

    /// Kills the process with SIGKILL (no shutdown at all) and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops the process with SIGSTOP: its sockets stay open but nothing
    /// answers, as a machine that hangs or a long GC pause.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn unpause(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Starts the server again on the same data directory and address (after
    /// `kill` or `terminate`), with the same flags.
    pub fn restart(&mut self) {
        self.kill();
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let next = Self::try_launch(&self.data_dir, &self.addr, &extra, self.ulimit.clone())
            .unwrap_or_else(|stderr| panic!("arbord did not start again: {stderr}"));
        let owns = self.owns_data;
        self.owns_data = false; // the old value's drop must not remove the data
        let old = std::mem::replace(self, next);
        drop(old);
        self.owns_data = owns;
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    fn spawn(data_dir: &Path, listen: &str, extra: &[&str]) -> Self {
        Self::try_spawn(data_dir, listen, extra)
            .unwrap_or_else(|stderr| panic!("arbord did not start: {stderr}"))
    }

    fn try_spawn(data_dir: &Path, listen: &str, extra: &[&str]) -> Result<Self, String> {
        Self::try_launch(data_dir, listen, extra, None)
    }

    fn try_launch(
        data_dir: &Path,
        listen: &str,
        extra: &[&str],
        ulimit: Option<String>,
    ) -> Result<Self, String> {
        let tick = TEST_TICK_MS.to_string();
        let dir = data_dir.to_string_lossy().into_owned();
        let mut args = vec!["--exit-on-stdin-close", "--data-dir", &dir];
        if !extra.contains(&"--listen") {
            args.extend_from_slice(&["--listen", listen]);
        }
        // Test defaults, unless the test sets them itself: a ZooKeeper port
        // of its own on every server (never ZooKeeper's 2181).
        let defaults = [
            ("--tick-ms", tick.as_str()),
            ("--reap-interval-ms", "100"),
            ("--zk-listen", "127.0.0.1:0"),
            ("--admin-listen", "127.0.0.1:0"),
        ];
        for (flag, value) in defaults {
            if !extra.contains(&flag) {
                args.extend_from_slice(&[flag, value]);
            }
        }
        args.extend_from_slice(extra);
        let log_to_terminal = std::env::var_os("ARBOR_TEST_LOG").is_some();
        let mut command = match &ulimit {
            // The shell sets the limits, then becomes arbord.
            Some(limits) => {
                let mut shell = Command::new("sh");
                shell
                    .arg("-c")
                    .arg(format!("ulimit {limits} && exec \"$0\" \"$@\""))
                    .arg(arbord_path());
                shell
            }
            None => Command::new(arbord_path()),
        };
        let mut child = command
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if log_to_terminal {
                Stdio::inherit()
            } else {
                Stdio::piped()
            })
            .spawn()
            .expect("arbord starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stdout = BufReader::new(stdout);
        // One line per listener, plain first.
        let plain_off = extra.windows(2).any(|pair| pair == ["--listen", "off"]);
        let wants_tls = extra.contains(&"--tls-listen");
        let zk_off = extra.windows(2).any(|pair| pair == ["--zk-listen", "off"]);
        let admin_off = extra
            .windows(2)
            .any(|pair| pair == ["--admin-listen", "off"]);
        let mut listening = |prefix: &str| {
            let mut line = String::new();
            let _ = stdout.read_line(&mut line);
            line.trim().strip_prefix(prefix).map(str::to_owned)
        };
        let plain = if plain_off {
            Some(None)
        } else {
            listening("arbord listening on ").map(Some)
        };
        let tls = if wants_tls {
            listening("arbord listening for TLS on ").map(Some)
        } else {
            Some(None)
        };
        let zk = if zk_off {
            Some(None)
        } else {
            listening("arbord listening for ZooKeeper clients on ").map(Some)
        };
        let admin = if admin_off {
            Some(None)
        } else {
            listening("arbord listening for admin requests on ").map(Some)
        };
        let (Some(plain), Some(tls_addr), Some(zk_addr), Some(admin_addr)) =
            (plain, tls, zk, admin)
        else {
            let _ = child.kill();
            let output = child.wait_with_output().expect("arbord exits");
            return Err(String::from_utf8_lossy(&output.stderr).into_owned());
        };
        let addr = plain.or_else(|| tls_addr.clone()).expect("a listener");
        let leader_seen = std::sync::Arc::new(AtomicU64::new(NO_LEADER_SEEN));
        let snapshots_installed = std::sync::Arc::new(AtomicU64::new(0));
        let log = std::sync::Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
        if !log_to_terminal {
            // Keep draining stderr so the server never blocks on a full pipe,
            // noting who it says leads.
            if let Some(stderr) = child.stderr.take() {
                let leader_seen = leader_seen.clone();
                let snapshots_installed = snapshots_installed.clone();
                let log = log.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(stderr).lines() {
                        let Ok(line) = line else { return };
                        if let Some(leader) = leader_in(&line) {
                            leader_seen.store(leader.unwrap_or(NO_LEADER_SEEN), Ordering::Release);
                        }
                        if line.contains("installed a snapshot from the leader") {
                            snapshots_installed.fetch_add(1, Ordering::AcqRel);
                        }
                        if let Ok(mut log) = log.lock() {
                            if log.len() == LOG_LINES_KEPT {
                                log.pop_front();
                            }
                            log.push_back(line);
                        }
                    }
                });
            }
        }
        let stdin = child.stdin.take();
        Ok(Self {
            child,
            leader_seen,
            snapshots_installed,
            log,
            _stdin: stdin,
            addr,
            tls_addr,
            zk_addr,
            admin_addr,
            data_dir: data_dir.to_owned(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            owns_data: false,
            ulimit,
        })
    }

    /// `host:port` of the server.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// `host:port` of the server's TLS port.
    pub fn tls_addr(&self) -> &str {
        self.tls_addr
            .as_deref()
            .expect("the server was started with --tls-listen")
    }

    /// `host:port` of the server's admin port.
    pub fn admin_addr(&self) -> &str {
        self.admin_addr
            .as_deref()
            .expect("the server was started without --admin-listen off")
    }

    /// `GET path` on the admin port: the status and the body.
    pub fn admin_get(&self, path: &str) -> (u16, String) {
        http_get(self.admin_addr(), path)
    }

    /// `host:port` of the server's ZooKeeper port.
    pub fn zk_addr(&self) -> &str {
        self.zk_addr
            .as_deref()
            .expect("the server was started without --zk-listen off")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits for the process to exit; returns its status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -TERM failed");
        self.child.wait().expect("arbord exits")
    }

    /// Waits for a process already signalled to exit.
    pub fn terminate_wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().expect("arbord exits")
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// How many of the log lines kept hold every one of `parts` (none
    /// with `ARBOR_TEST_LOG`, which sends the log to the terminal).
    pub fn log_lines_with(&self, parts: &[&str]) -> usize {
        self.log.lock().map_or(0, |log| {
            log.iter()
                .filter(|line| parts.iter().all(|part| line.contains(part)))
                .count()
        })
    }

    /// Waits until a line of the server's log contains every one of
    /// `parts` (not with `ARBOR_TEST_LOG`, which sends the log to the
    /// terminal); that line.
    pub fn wait_for_log(&self, parts: &[&str]) -> String {
        let deadline = std::time::Instant::now() + ANSWER_TIMEOUT;
        loop {
            if let Ok(log) = self.log.lock() {
                let found = log
                    .iter()
                    .find(|line| parts.iter().all(|part| line.contains(part)));
                if let Some(line) = found {
                    return line.clone();
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no log line with {parts:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// How many snapshots this ensemble member logged as installed from
    /// its leader.
    pub fn snapshots_installed(&self) -> u64 {
        self.snapshots_installed.load(Ordering::Acquire)
    }

    /// The member this ensemble member last logged as its leader.
    pub fn leader_seen(&self) -> Option<u64> {
        match self.leader_seen.load(Ordering::Acquire) {
            NO_LEADER_SEEN => None,
            leader => Some(leader),
        }
    }
}

const NO_LEADER_SEEN: u64 = u64::MAX;

/// Lines of a server's log a test can look through.
pub const LOG_LINES_KEPT: usize = 2000;

/// `Some(leader)` from an arbord "leader changed" log line.
fn leader_in(line: &str) -> Option<Option<u64>> {
    if !line.contains("leader changed") {
        return None;
    }
    let after = line.split("leader=").nth(1)?;
    if after.starts_with("None") {
        return Some(None);
    }
    let digits: String = after
        .strip_prefix("Some(")?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok().map(Some)
}

/// An ensemble of `arbord` processes on 127.0.0.1: member i (from 1) is
/// `members[i - 1]`, each with its own data directory and peer port.
pub struct TestEnsemble {
    pub members: Vec<TestServer>,
    /// `ID=CLIENT/PEER` of every member started so far.
    specs: Vec<String>,
    dirs: Vec<TempDir>,
}

impl TestEnsemble {
    /// Starts `count` members and waits until they agree on a leader.
    pub fn start(count: usize) -> Self {
        Self::start_with(count, &[])
    }

    /// Starts `count` members with `extra` flags each, and waits until they
    /// agree on a leader.
    pub fn start_with(count: usize, extra_flags: &[&str]) -> Self {
        Self::start_with_member_flags(count, extra_flags, |_| Vec::new())
    }

    /// Like [`TestEnsemble::start_with`], and member `id` (from 1) also gets
    /// `member_flags(id)` (its own certificate, say).
    pub fn start_with_member_flags(
        count: usize,
        extra_flags: &[&str],
        member_flags: impl Fn(u64) -> Vec<String>,
    ) -> Self {
        let peers: Vec<String> = (0..count).map(|_| free_addr()).collect();
        let clients: Vec<String> = (0..count).map(|_| free_addr()).collect();
        let mut flags = Vec::new();
        for (k, (client, peer)) in clients.iter().zip(&peers).enumerate() {
            flags.push("--member".to_owned());
            flags.push(format!("{}={client}/{peer}", k + 1));
        }
        let dirs: Vec<TempDir> = (0..count).map(|_| TempDir::new()).collect();
        let members = (0..count)
            .map(|k| {
                let id = (k + 1).to_string();
                let own = member_flags(k as u64 + 1);
                let mut extra: Vec<&str> = vec!["--member-id", &id];
                extra.extend(flags.iter().map(String::as_str));
                extra.extend_from_slice(extra_flags);
                extra.extend(own.iter().map(String::as_str));
                TestServer::spawn(dirs[k].path(), &clients[k], &extra)
            })
            .collect();
        let specs = (0..count)
            .map(|k| format!("{}={}/{}", k + 1, clients[k], peers[k]))
            .collect();
        let ensemble = Self {
            members,
            specs,
            dirs,
        };
        // Every member, not a majority: each member of a fresh ensemble
        // starts an election as soon as it has initialized, and one that
        // starts late campaigns without having heard of the leader the
        // others elected. In openraft's order its vote for itself outranks
        // that leader's when its id is higher (same term), so the leader
        // steps down and a write in flight ends in ConnectionLoss (seen in
        // the peer-TLS test, about once in 40 runs on two busy cores). Once
        // every member has heard from one leader, none has such an
        // election left to start.
        ensemble.wait_until_followed_by(ensemble.members.len(), None);
        ensemble
    }

    /// Every member's client address, comma-separated, as clients take them.
    pub fn addrs(&self) -> String {
        let addrs: Vec<&str> = self.members.iter().map(TestServer::addr).collect();
        addrs.join(",")
    }

    /// Every member's ZooKeeper port (`--zk-listen`, on by default in
    /// tests), comma-separated: a ZooKeeper connect string.
    pub fn zk_addrs(&self) -> String {
        let addrs: Vec<&str> = self.members.iter().map(TestServer::zk_addr).collect();
        addrs.join(",")
    }

    /// The member (from 1) that a majority of the running members follow,
    /// other than `not`; waits up to 10 s for one.
    pub fn wait_for_leader(&self, not: Option<u64>) -> u64 {
        self.wait_until_followed_by(self.members.len() / 2 + 1, not)
    }

    /// Waits up to 10 s until at least `followers` members follow one
    /// leader other than `not`; that leader.
    fn wait_until_followed_by(&self, followers: usize, not: Option<u64>) -> u64 {
        let deadline = std::time::Instant::now() + ANSWER_TIMEOUT;
        loop {
            let mut votes = std::collections::HashMap::new();
            for member in &self.members {
                if let Some(leader) = member.leader_seen() {
                    *votes.entry(leader).or_insert(0usize) += 1;
                }
            }
            if let Some((leader, _)) = votes
                .into_iter()
                .find(|(leader, count)| *count >= followers && Some(*leader) != not)
            {
                return leader;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no leader followed by {followers} members within {ANSWER_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Member `id` (from 1).
    pub fn member(&mut self, id: u64) -> &mut TestServer {
        &mut self.members[id as usize - 1]
    }

    /// Starts a process that claims to be member `id` (its id and
    /// addresses, stopped first by the caller) from `data_dir`, with
    /// `extra` flags of its own: an impostor.
    pub fn spawn_as(&self, id: u64, data_dir: &Path, extra: &[&str]) -> TestServer {
        let id_text = id.to_string();
        let mut flags: Vec<&str> = vec!["--member-id", &id_text];
        for spec in &self.specs {
            flags.extend(["--member", spec.as_str()]);
        }
        flags.extend_from_slice(extra);
        let client = self.members[id as usize - 1].addr().to_owned();
        TestServer::spawn(data_dir, &client, &flags)
    }

    /// Starts one more member with `--join` (not yet in the membership:
    /// add it with `Client::add_member`); returns its id, client address
    /// and peer address.
    pub fn start_joining(&mut self) -> (u64, String, String) {
        let id = self.members.len() as u64 + 1;
        let (client, peer) = (free_addr(), free_addr());
        self.specs.push(format!("{id}={client}/{peer}"));
        let dir = TempDir::new();
        let id_text = id.to_string();
        let mut extra: Vec<&str> = vec!["--member-id", &id_text, "--join"];
        for spec in &self.specs {
            extra.extend(["--member", spec.as_str()]);
        }
        let member = TestServer::spawn(dir.path(), &client, &extra);
        self.members.push(member);
        self.dirs.push(dir);
        (id, client, peer)
    }
}

/// A built example: `cargo test --workspace` puts it in target/<profile>/examples.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test path");
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} missing: `cargo test --workspace` builds examples",
        path.display()
    );
    path
}

/// Ports handed to ensemble members come from below Linux's default
/// ephemeral range (32768–60999): a port taken from the ephemeral range is
/// free when asked, but any outbound connection of a parallel test may take
/// it before the member binds it (CI saw exactly that).
const MEMBER_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// Next candidate in `MEMBER_PORTS`; starts at a per-process offset so two
/// test binaries run back to back do not walk the same ports.
static NEXT_PORT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Client options for tests against an ensemble: sessions outlive a
/// failover (4 s), and a request gives up after 3 s.
pub fn ensemble_client_options() -> arbor_client::ClientOptions {
    arbor_client::ClientOptions::default()
        .with_session_timeout(Duration::from_millis(4000))
        .with_request_timeout(Duration::from_secs(3))
}

/// A port on 127.0.0.1 that was free when asked and that no other caller in
/// this process will be given.
pub fn free_addr() -> String {
    let span = usize::from(MEMBER_PORTS.end - MEMBER_PORTS.start);
    let start = (std::process::id() as usize).wrapping_mul(7919) % span;
    let _ = NEXT_PORT.compare_exchange(usize::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..span {
        let offset = NEXT_PORT.fetch_add(1, Ordering::Relaxed) % span;
        let port = MEMBER_PORTS.start + offset as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return format!("127.0.0.1:{port}");
        }
    }
    panic!("no free port in {MEMBER_PORTS:?}");
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if self.owns_data {
            let _ = std::fs::remove_dir_all(&self.data_dir);
        }
    }
}

/// A new, empty, unique directory under the system temp dir.
pub fn fresh_data_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "arbor-test-{}-{}",
        std::process::id(),
        NEXT_DIR.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Removes a directory when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> Self {
        Self(fresh_data_dir())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Default for TempDir {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A connection that speaks the wire protocol directly.
pub struct RawConnection {
    stream: TcpStream,
    decoder: FrameDecoder,
    buf: BytesMut,
    /// Events received while waiting for replies.
    pub events: Vec<WatchEvent>,
    next_xid: u64,
}

/// What a raw handshake produced.
pub type Handshake = Result<ConnectResponse, (ErrorCode, String)>;

impl RawConnection {
    /// Opens a TCP connection without a handshake.
    pub async fn open(addr: &str) -> Self {
        let stream = TcpStream::connect(addr).await.expect("connects");
        Self {
            stream,
            decoder: FrameDecoder::new(64 * 1024 * 1024),
            buf: BytesMut::new(),
            events: Vec::new(),
            next_xid: 1,
        }
    }

    /// Opens a connection and a new session.
    pub async fn session(addr: &str, timeout_ms: u32) -> (Self, ConnectResponse) {
        let mut conn = Self::open(addr).await;
        let response = conn
            .handshake(timeout_ms, None, 0)
            .await
            .expect("session opens");
        (conn, response)
    }

    /// Sends the handshake and reads its answer.
    pub async fn handshake(
        &mut self,
        timeout_ms: u32,
        resume: Option<SessionCredentials>,
        last_zxid_seen: Zxid,
    ) -> Handshake {
        self.send(&ClientMessage::Connect(ConnectRequest {
            protocol_version: PROTOCOL_VERSION,
            last_zxid_seen,
            session_timeout_ms: timeout_ms,
            session: resume,
        }))
        .await;
        match self.recv().await {
            Some(ServerMessage::Connected(response)) => Ok(response),
            Some(ServerMessage::Closing { code, message }) => Err((code, message)),
            other => panic!("unexpected handshake answer {other:?}"),
        }
    }

    pub async fn send(&mut self, message: &ClientMessage) {
        let mut out = Vec::new();
        encode_frame(message, usize::MAX, &mut out).expect("encodes");
        self.send_bytes(&out).await;
    }

    /// Writes raw bytes; errors are ignored (the server may have closed).
    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes).await;
    }

    /// The next message, or `None` once the server closed the connection.
    pub async fn recv(&mut self) -> Option<ServerMessage> {
        loop {
            if let Some(frame) = self.decoder.decode(&mut self.buf).expect("valid frame") {
                return Some(codec::decode(&frame).expect("valid message"));
            }
            let read = tokio::time::timeout(ANSWER_TIMEOUT, self.stream.read_buf(&mut self.buf))
                .await
                .expect("server answers in time");
            match read {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    /// Sends a request and waits for its reply, keeping events on the side.
    pub async fn request(&mut self, op: Op) -> (Result<OpResult, ErrorCode>, Zxid) {
        let xid = self.next_xid;
        self.next_xid += 1;
        self.send(&ClientMessage::Request { xid, op }).await;
        loop {
            match self.recv().await {
                Some(ServerMessage::Reply {
                    xid: got,
                    zxid,
                    result,
                }) => {
                    assert_eq!(got, xid, "replies come in request order");
                    return (result, zxid);
                }
                Some(ServerMessage::Event(event)) => self.events.push(event),
                other => panic!("unexpected message {other:?}"),
            }
        }
    }

    /// Reads until the server closes; returns the `Closing` it sent, if any.
    pub async fn closing(&mut self) -> Option<(ErrorCode, String)> {
        let mut said = None;
        while let Some(message) = self.recv().await {
            if let ServerMessage::Closing { code, message } = message {
                said = Some((code, message));
            }
        }
        said
    }
}

/// A client session with the default options and a 4 s timeout.
pub async fn client(server: &TestServer) -> arbor_client::Client {
    let options =
        arbor_client::ClientOptions::default().with_session_timeout(Duration::from_millis(4000));
    arbor_client::Client::connect(server.addr(), options)
        .await
        .expect("client connects")
}

/// A client session of `session_timeout` on `addr`, trying again every
/// 10 ms until the server answers (it may be starting, or restarting after
/// a kill): for workers that reconnect after their session expired.
pub async fn connect_when_up(addr: &str, session_timeout: Duration) -> arbor_client::Client {
    let options = arbor_client::ClientOptions::default().with_session_timeout(session_timeout);
    loop {
        match arbor_client::Client::connect(addr, options.clone()).await {
            Ok(client) => return client,
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Waits (up to 10 s) until `client` is in state `want`.
pub async fn wait_for_state(client: &arbor_client::Client, want: arbor_client::ConnectionState) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while client.state() != want {
        assert!(
            tokio::time::Instant::now() < deadline,
            "state {:?}, wanted {want:?}",
            client.state()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Listings `server` answered so far (`get_children` and
/// `get_children_with_stat`, any result), from its `/metrics`: how a test
/// proves that waiters never list their queue.
pub fn listings(server: &TestServer) -> u64 {
    let (status, page) = server.admin_get("/metrics");
    assert_eq!(status, 200, "/metrics answers");
    page.lines()
        .filter(|line| {
            line.starts_with("arbor_requests_total{op=\"get_children\"")
                || line.starts_with("arbor_requests_total{op=\"get_children_with_stat\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Waits (up to 10 s) until `path` has exactly `len` children: a queue of
/// lock waiters or election candidates has formed.
pub async fn wait_for_children(client: &arbor_client::Client, path: &str, len: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = client.get_children(path).await.map_or(0, |c| c.len());
        if now == len {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} has {now} children, wanted {len}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Runs arbord to completion with `args` (a one-shot action such as
/// `--verify` or `restore`): whether it succeeded, and its stdout then
/// stderr.
pub fn run_arbord<I, S>(args: I) -> (bool, String)
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let output = Command::new(arbord_path())
        .args(args)
        .output()
        .expect("arbord runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// `GET path` from an HTTP server at `addr`, as a scraper sends it: the
/// status and the body (empty if the server could not be reached).
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return (0, String::new());
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: */*\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let length: Option<usize> = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    });
    assert_eq!(
        length,
        Some(body.len()),
        "Content-Length must match the body: {head}"
    );
    (status, body.to_owned())
}
