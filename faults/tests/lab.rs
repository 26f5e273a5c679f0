//! The fault suite's pieces on this machine: labs of network namespaces and
//! their partitions, processes the suite signals, and a ZooKeeper ensemble
//! in a lab. They need root, `ip` and Debian's zookeeper package; where one
//! is missing the tests fail with what to install, they do not skip.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use arbor_faults::lab::Lab;
use arbor_faults::process::Proc;
use arbor_faults::zookeeper::{ZkEnsemble, ZkTiming};

/// The port of the echo servers the tests start in hosts.
const ECHO_PORT: u16 = 7000;

/// How long a single echo may take on a healthy connection.
const ECHO_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a test waits to be sure a cut connection stays silent.
const SILENCE: Duration = Duration::from_millis(1500);

/// How long a ZooKeeper ensemble may take to elect after a fault.
const ELECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// A threaded TCP echo server on the port given as its argument.
const ECHO_SERVER: &str = r#"
import socket, sys, threading
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(sys.argv[1])))
server.listen()
def echo(conn):
    while True:
        data = conn.recv(4096)
        if not data:
            break
        conn.sendall(data)
while True:
    conn, _ = server.accept()
    threading.Thread(target=echo, args=(conn,), daemon=True).start()
"#;

/// A client that opens one connection to argv[1]:argv[2], then obeys stdin:
/// `send WORD SECS` sends WORD and prints `delivered` once everything sent
/// so far has come back, or `stalled` after SECS; `connect - SECS` opens a
/// new connection and prints `connected` or `failed`.
const ECHO_CLIENT: &str = r#"
import socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
conn = socket.create_connection((host, port), timeout=5)
sent, got = b"", b""
print("connected", flush=True)
while True:
    line = sys.stdin.readline()
    if not line:
        break
    command, word, secs = line.split()
    deadline = time.monotonic() + float(secs)
    if command == "send":
        sent += word.encode()
        conn.sendall(word.encode())
        while got != sent and time.monotonic() < deadline:
            conn.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = conn.recv(4096)
            except socket.timeout:
                break
            if not data:
                break
            got += data
        print("delivered" if got == sent else "stalled", flush=True)
    elif command == "connect":
        try:
            socket.create_connection((host, port), timeout=float(secs)).close()
            print("connected", flush=True)
        except OSError:
            print("failed", flush=True)
"#;

// A cut stops an open connection and new ones between two hosts, not the root
// namespace's; heal_all restores them; dropping the lab removes its namespaces
// and bridge.
#[test]
fn cut_drops_open_connections_between_hosts_only() {
    let started = Instant::now();
    let lab = lab(3);
    let dir = scratch_dir("cut");
    let echo = echo_server(&lab, 2, &dir);
    let server = echo_addr(&lab, 2);
    assert!(echoes(server), "host 2 does not echo to the root namespace");
    let mut client = EchoClient::start(&lab, 1, server);
    assert_eq!(client.ask("send before 2"), "delivered");

    lab.cut(1, 2).expect("cut 1-2");
    lab.cut(2, 1).expect("a second cut is a no-op");
    assert_eq!(lab.cuts(), vec![(1, 2)]);
    let silence = SILENCE.as_secs_f64();
    assert_eq!(client.ask(&format!("send during {silence}")), "stalled");
    assert_eq!(client.ask(&format!("connect - {silence}")), "failed");
    assert!(echoes(server), "the cut reached the root namespace");

    lab.heal_all().expect("heal");
    lab.heal(1, 2).expect("a second heal is a no-op");
    assert!(lab.cuts().is_empty());
    // The stalled bytes come back once TCP retransmits, after its backoff.
    assert_eq!(client.ask("send after 15"), "delivered");
    assert_eq!(client.ask("connect - 5"), "connected");

    lab.isolate(3).expect("isolate 3");
    assert_eq!(lab.cuts(), vec![(1, 3), (2, 3)]);
    assert!(echoes(server), "isolating host 3 cut hosts 1 and 2");
    lab.heal_all().expect("heal");

    let (namespaces, bridge) = (lab_namespaces(&lab), lab.bridge().to_string());
    drop(client);
    drop(echo);
    drop(lab);
    assert_gone(&namespaces, &bridge);
    remove_scratch(&dir);
    eprintln!("cut test took {:?}", started.elapsed());
}

// Pause stops a process in a namespace from answering and resume brings it
// back; kill9 ends it; dropping a Proc, even a paused one, leaves no process.
#[test]
fn proc_pause_resume_kill_and_drop() {
    let started = Instant::now();
    let lab = lab(1);
    let dir = scratch_dir("proc");
    let addr = echo_addr(&lab, 1);
    let mut server = echo_server(&lab, 1, &dir);
    let pid = server.pid();
    assert!(echoes(addr));

    server.pause();
    assert!(server.is_paused() && server.is_running());
    assert!(!echoes(addr), "a paused server answered");
    server.resume();
    assert!(!server.is_paused());
    assert!(echoes(addr), "a resumed server does not answer");

    server.kill9();
    server.kill9();
    assert!(!server.is_running());
    assert!(!process_exists(pid), "kill9 left process {pid}");
    assert!(!echoes(addr));
    drop(server);

    let mut paused = echo_server(&lab, 1, &dir);
    let pid = paused.pid();
    paused.pause();
    drop(paused);
    assert!(!process_exists(pid), "drop left the paused process {pid}");
    drop(lab);
    remove_scratch(&dir);
    eprintln!("proc test took {:?}", started.elapsed());
}

// A ZooKeeper ensemble in a lab elects a leader, serves a write and a read,
// elects another leader after the leader's kill -9, and takes it back.
#[test]
fn zookeeper_ensemble_fails_over_and_recovers() {
    let started = Instant::now();
    ZkEnsemble::check_installed().unwrap_or_else(|error| panic!("{error}"));
    let lab = lab(3);
    let dir = scratch_dir("zookeeper");
    let mut zk = ZkEnsemble::start(&lab, &dir, &ZkTiming::tuned())
        .unwrap_or_else(|error| panic!("ZooKeeper did not start: {error}"));
    eprintln!("ensemble serves after {:?}", started.elapsed());
    let leader = zk.leader().expect("a serving ensemble has one leader");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let connect = zk.connect_string();
    runtime.block_on(write_then_read(&connect, b"before"));

    let killed_at = Instant::now();
    zk.kill9(leader);
    let next = zk
        .wait_serving(ELECTION_TIMEOUT)
        .unwrap_or_else(|error| panic!("no new leader: {error}"));
    assert_ne!(next, leader);
    eprintln!(
        "server {next} leads {:?} after the kill",
        killed_at.elapsed()
    );
    runtime.block_on(write_then_read(&connect, b"after"));

    let restarted_at = Instant::now();
    zk.restart(leader).expect("restart");
    zk.wait_serving(ELECTION_TIMEOUT)
        .unwrap_or_else(|error| panic!("the restarted server does not serve: {error}"));
    for server in 1..=zk.servers() {
        assert!(zk.proc(server).is_running(), "server {server} is down");
    }
    eprintln!("all serve {:?} after the restart", restarted_at.elapsed());

    let pids: Vec<u32> = (1..=zk.servers())
        .map(|server| zk.proc(server).pid())
        .collect();
    drop(zk);
    for pid in pids {
        assert!(
            !process_exists(pid),
            "ZooKeeper server {pid} outlived its ensemble"
        );
    }
    drop(lab);
    remove_scratch(&dir);
    eprintln!("zookeeper test took {:?}", started.elapsed());
}

// Lab::new removes what a lab whose owner died left behind: its namespace
// (killing what runs in it), its bridge and its veth.
#[test]
fn new_lab_removes_a_dead_owners_leftovers() {
    let _ = lab(1);
    let dead = dead_pid();
    let (ns, bridge) = (format!("arborlab-{dead}-200-1"), format!("a{dead}n200"));
    let veth = format!("{bridge}h1");
    ip(&["netns", "add", &ns]);
    ip(&["link", "add", &bridge, "type", "bridge"]);
    ip(&[
        "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
    ]);
    ip(&["link", "set", &veth, "master", &bridge]);
    let mut orphan = Command::new("ip")
        .args(["netns", "exec", &ns, "sleep", "60"])
        .spawn()
        .expect("start sleep");
    let deadline = Instant::now() + Duration::from_secs(5);
    while ip(&["netns", "pids", &ns]).trim().is_empty() {
        assert!(Instant::now() < deadline, "sleep did not enter {ns}");
        std::thread::sleep(Duration::from_millis(10));
    }

    let lab = lab(1);
    let status = orphan.wait().expect("reap sleep");
    assert!(!status.success(), "sleep in {ns} was not killed");
    assert_gone(&[ns], &bridge);
    drop(lab);
}

/// The pid of a process that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().expect("start true");
    child.wait().expect("reap true");
    child.id()
}

/// Sets `/arbor-faults-lab` to `value` through the ensemble and reads it back.
async fn write_then_read(connect: &str, value: &[u8]) {
    let client = zookeeper_client::Client::connector()
        .with_session_timeout(Duration::from_secs(6))
        .connect(connect)
        .await
        .unwrap_or_else(|error| panic!("cannot connect to {connect}: {error}"));
    let path = "/arbor-faults-lab";
    let options =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    match client.create(path, value, &options).await {
        Ok(_) => {}
        Err(zookeeper_client::Error::NodeExists) => {
            client.set_data(path, value, None).await.expect("set");
        }
        Err(error) => panic!("create {path}: {error}"),
    }
    let (data, _) = client.get_data(path).await.expect("read back");
    assert_eq!(data, value);
}

/// A lab of `hosts`, or a failure that says what this machine lacks.
fn lab(hosts: usize) -> Lab {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    Lab::check_available().unwrap_or_else(|error| panic!("these tests need network labs: {error}"));
    Lab::new(hosts).unwrap_or_else(|error| panic!("cannot make a lab: {error}"))
}

/// An echo server in `host`'s namespace, answering once this returns.
fn echo_server(lab: &Lab, host: usize, dir: &Path) -> Proc {
    let mut command = lab.command(host, "python3");
    command.args(["-c", ECHO_SERVER]).arg(ECHO_PORT.to_string());
    let log = dir.join(format!("echo{host}.log"));
    let server = Proc::spawn(command, &log).expect("start python3");
    let addr = echo_addr(lab, host);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !echoes(addr) {
        assert!(
            Instant::now() < deadline,
            "echo server on {addr} did not start; see {log:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

fn echo_addr(lab: &Lab, host: usize) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(lab.ip(host), ECHO_PORT))
}

/// Whether a new connection from this (the root) namespace to `addr` echoes.
fn echoes(addr: SocketAddr) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let mut stream = TcpStream::connect_timeout(&addr, ECHO_TIMEOUT)?;
        stream.set_read_timeout(Some(ECHO_TIMEOUT))?;
        stream.write_all(b"ping")?;
        let mut answer = [0; 4];
        stream.read_exact(&mut answer)?;
        Ok(&answer == b"ping")
    };
    attempt().unwrap_or(false)
}

/// [`ECHO_CLIENT`] running in a host's namespace, driven line by line.
struct EchoClient {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl EchoClient {
    fn start(lab: &Lab, host: usize, server: SocketAddr) -> Self {
        let mut child = lab
            .command(host, "python3")
            .args(["-c", ECHO_CLIENT])
            .arg(server.ip().to_string())
            .arg(server.port().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start python3");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut client = EchoClient {
            child,
            stdin,
            stdout,
        };
        assert_eq!(
            client.read_line(),
            "connected",
            "host {host} cannot reach {server}"
        );
        client
    }

    /// Sends one command line and returns the client's answer.
    fn ask(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").expect("write to the echo client");
        self.read_line()
    }

    fn read_line(&mut self) -> String {
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("read the echo client");
        line.trim().to_string()
    }
}

impl Drop for EchoClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lab_namespaces(lab: &Lab) -> Vec<String> {
    (1..=lab.hosts())
        .map(|host| lab.namespace(host).to_string())
        .collect()
}

/// Fails unless the namespaces and the bridge are gone.
fn assert_gone(namespaces: &[String], bridge: &str) {
    let listed = ip(&["netns", "list"]);
    for ns in namespaces {
        let still = listed
            .lines()
            .any(|line| line.split_whitespace().next() == Some(ns));
        assert!(!still, "namespace {ns} outlived its lab");
    }
    let links = ip(&["-o", "link", "show"]);
    assert!(
        !links.contains(&format!(" {bridge}:")) && !links.contains(&format!("{bridge}h")),
        "the bridge {bridge} or a veth outlived its lab:\n{links}"
    );
}

fn ip(args: &[&str]) -> String {
    let output = Command::new("ip").args(args).output().expect("run ip");
    assert!(output.status.success(), "ip {args:?} failed");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn process_exists(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// A fresh directory for one test's logs, kept if the test fails.
fn scratch_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("arbor-faults-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("make a scratch directory");
    dir
}

fn remove_scratch(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}
