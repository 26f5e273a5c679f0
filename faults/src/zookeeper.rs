//! A three-server Apache ZooKeeper ensemble in a [`Lab`]: the reference the
//! suite holds Arbor against, run as a user's Debian service would run it.
//!
//! Server `i` runs in host `i`'s namespace, from Debian's `zookeeper`
//! package, with the JVM flags and logging of Debian's service (as
//! `bench/compare.sh` runs it): `-Xmx1000m`, Debian's `log4j.properties`,
//! INFO into a rolling `zookeeper.log` in the server's directory. Clients
//! use port [`CLIENT_PORT`] of each host; quorum and election use
//! [`QUORUM_PORT`] and [`ELECTION_PORT`] on each host's own address (each
//! server has its own namespace, so the ports never clash).
//!
//! Each server's directory, `<dir>/server<i>`, holds:
//! * `conf/zoo.cfg` and `conf/log4j.properties` (the classpath's first entry);
//! * `data/myid` and ZooKeeper's snapshots and transaction logs;
//! * `zookeeper.log` (log4j's) and `server.log` (the JVM's stdout and stderr).
//!
//! Invariants:
//! * The four-letter words the suite uses ([`FOUR_LETTER_WORDS`]) are the
//!   only ones whitelisted, and each is asked with short timeouts, so a
//!   stopped or cut server costs a poll at most [`WORD_TIMEOUT`] twice.
//! * A server that `start` returns serves and logs at INFO, never DEBUG
//!   (DEBUG logging would slow ZooKeeper and skew every comparison).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::lab::{netns_command, Lab};
use crate::process::{Proc, ProcError};

/// The client port on each host.
pub const CLIENT_PORT: u16 = 2181;
/// The port followers connect to the leader on.
pub const QUORUM_PORT: u16 = 2888;
/// The leader-election port.
pub const ELECTION_PORT: u16 = 3888;

/// The four-letter words whitelisted: `srvr` (mode), `ruok`, `mntr`, `cons`.
pub const FOUR_LETTER_WORDS: &str = "srvr,ruok,mntr,cons";

/// The connect, write and read timeout of one four-letter word.
pub const WORD_TIMEOUT: Duration = Duration::from_secs(1);

/// Debian's packaged jars, the configuration and the JVM a server needs.
const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
const DEBIAN_LOG4J: &str = "/etc/zookeeper/conf/log4j.properties";
const JAVA_PATHS: [&str; 2] = ["/usr/bin/java", "/usr/lib/jvm/default-java/bin/java"];

/// The jars beside `zookeeper.jar` on the classpath, as `bench/compare.sh`
/// lists them (each only if Debian ships it).
const CLASSPATH_JARS: [&str; 17] = [
    "zookeeper-jute",
    "slf4j-api",
    "slf4j-log4j12",
    "log4j-1.2",
    "netty-buffer",
    "netty-codec",
    "netty-common",
    "netty-handler",
    "netty-resolver",
    "netty-transport",
    "netty-transport-native-epoll",
    "netty-transport-native-unix-common",
    "commons-cli",
    "metrics-core",
    "snappy-java",
    "audience-annotations",
    "commons-io",
];

const INSTALL_COMMAND: &str =
    "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y zookeeper";

/// How often `wait_serving` asks the servers again.
const SERVING_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// How long `start` waits beyond the `initLimit` ticks it allows twice over:
/// three JVMs starting at once on two cores take seconds before they elect.
const START_SLACK: Duration = Duration::from_secs(30);

/// Why an ensemble could not be started or did not serve.
#[derive(Debug, thiserror::Error)]
pub enum ZkError {
    #[error("{missing} is missing: install Debian's zookeeper package: {INSTALL_COMMAND}")]
    NotInstalled { missing: PathBuf },
    #[error("no java at {JAVA_PATHS:?} (Debian's zookeeper package depends on one)")]
    JavaMissing,
    #[error("an ensemble needs at least 2 servers; the lab has {hosts} hosts")]
    TooFewServers { hosts: usize },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start ZooKeeper server {server}: {source}")]
    Spawn { server: usize, source: ProcError },
    #[error("no ZooKeeper server is up (each exited or is paused); see the logs under {dir}")]
    NoneRunning { dir: PathBuf },
    #[error("ZooKeeper server {server} exited; see {log}")]
    Exited { server: usize, log: PathBuf },
    #[error("no ZooKeeper leader served within {timeout:?}: {states}")]
    NotServing { timeout: Duration, states: String },
    #[error("{log}: {problem}")]
    Logging { log: PathBuf, problem: &'static str },
}

/// ZooKeeper's timing: as Debian ships it, or tuned for fast failure
/// detection.
#[derive(Debug, Clone)]
pub struct ZkTiming {
    pub tick_ms: u32,
    /// Ticks a follower may take to connect and sync to a leader.
    pub init_limit: u32,
    /// Ticks a follower may fall behind (or stay silent) before it is dropped.
    pub sync_limit: u32,
}

impl ZkTiming {
    /// Debian's zoo.cfg: tickTime 2000, initLimit 10, syncLimit 5.
    pub fn shipped() -> Self {
        Self {
            tick_ms: 2000,
            init_limit: 10,
            sync_limit: 5,
        }
    }

    /// The fastest that stays sane on a loaded 2-core machine: tickTime 500,
    /// initLimit 10, syncLimit 2.
    ///
    /// * `syncLimit × tickTime` = 1 s is how long a silent leader or follower
    ///   goes unnoticed. Measured here (three servers in a lab, 200 kB writes
    ///   back to back, 2 cores): 1 s held for 2 minutes beside 8 busy
    ///   processes without a single re-election, while 400 ms (tickTime
    ///   200) dropped a healthy follower within a minute beside 3. So 1 s
    ///   keeps a 2.5× margin over what starvation breaks.
    /// * `initLimit × tickTime` = 5 s lets a restarted follower load and
    ///   sync the suite's small data before the leader gives up on it.
    /// * Session timeouts are clamped to 2..20 ticks = 1 s..10 s; a shorter
    ///   tick would cap the sessions clients may ask for lower still.
    pub fn tuned() -> Self {
        Self {
            tick_ms: 500,
            init_limit: 10,
            sync_limit: 2,
        }
    }

    /// How long `start` waits for the ensemble to serve.
    fn start_timeout(&self) -> Duration {
        let init_ms = u64::from(self.tick_ms) * u64::from(self.init_limit);
        START_SLACK + Duration::from_millis(2 * init_ms)
    }
}

/// One server: where it runs and its process.
#[derive(Debug)]
struct ZkServer {
    namespace: String,
    address: Ipv4Addr,
    dir: PathBuf,
    /// Behind a lock so `&self` queries can poll it (`try_wait` needs `&mut`).
    proc: Mutex<Proc>,
}

impl ZkServer {
    fn proc(&self) -> std::sync::MutexGuard<'_, Proc> {
        // A Proc's state is a few fields set together: a panic leaves it whole.
        self.proc.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Running and not paused: a server that should answer.
    fn is_up(&self) -> bool {
        let mut proc = self.proc();
        !proc.is_paused() && proc.is_running()
    }
}

/// Servers 1..=lab.hosts(), server i on host i, clients on port 2181 of each
/// host.
#[derive(Debug)]
pub struct ZkEnsemble {
    /// Server i at index i - 1.
    servers: Vec<ZkServer>,
    dir: PathBuf,
    classpath: String,
    java: &'static str,
}

impl ZkEnsemble {
    /// Ok if Debian's zookeeper package is installed; else an error naming
    /// the apt-get command.
    pub fn check_installed() -> Result<(), ZkError> {
        for path in [ZOOKEEPER_JAR, DEBIAN_LOG4J] {
            if !Path::new(path).exists() {
                return Err(ZkError::NotInstalled {
                    missing: path.into(),
                });
            }
        }
        java().map(drop)
    }

    /// Writes each server's zoo.cfg / myid / data dir under `dir` (replacing
    /// what an earlier ensemble left there), starts them with the JVM and
    /// logging a Debian service uses, and waits until one leads, every
    /// server serves and every server logs at INFO and not DEBUG.
    pub fn start(lab: &Lab, dir: &Path, timing: &ZkTiming) -> Result<ZkEnsemble, ZkError> {
        Self::check_installed()?;
        if lab.hosts() < 2 {
            return Err(ZkError::TooFewServers { hosts: lab.hosts() });
        }
        let addresses: Vec<Ipv4Addr> = (1..=lab.hosts()).map(|host| lab.ip(host)).collect();
        let mut ensemble = ZkEnsemble {
            servers: Vec::with_capacity(lab.hosts()),
            dir: dir.to_path_buf(),
            classpath: classpath(),
            java: java()?,
        };
        for server in 1..=lab.hosts() {
            ensemble.add_server(lab, server, &addresses, timing)?;
        }
        let leader = ensemble.wait_serving(timing.start_timeout())?;
        ensemble.check_started()?;
        tracing::info!(
            leader,
            servers = ensemble.servers(),
            "ZooKeeper ensemble serves"
        );
        Ok(ensemble)
    }

    pub fn servers(&self) -> usize {
        self.servers.len()
    }

    pub fn client_addr(&self, server: usize) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self.server(server).address, CLIENT_PORT))
    }

    /// Every server's client address, comma-separated.
    pub fn connect_string(&self) -> String {
        (1..=self.servers())
            .map(|server| self.client_addr(server).to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Asks each running, unpaused server `srvr` (short timeouts) and returns
    /// the one whose Mode is leader, if exactly one says so.
    pub fn leader(&self) -> Option<usize> {
        let leaders: Vec<usize> = (1..=self.servers())
            .filter(|&server| self.server(server).is_up())
            .filter(|&server| self.mode(server).as_deref() == Some("leader"))
            .collect();
        match leaders[..] {
            [leader] => Some(leader),
            _ => None,
        }
    }

    /// Waits until a leader serves and every running unpaused server answers
    /// `srvr` with a Mode of leader/follower; error after `timeout`, or at
    /// once if no server runs.
    pub fn wait_serving(&self, timeout: Duration) -> Result<usize, ZkError> {
        let deadline = Instant::now() + timeout;
        loop {
            let states = self.states();
            if states.iter().all(|state| state.is_none()) {
                return Err(ZkError::NoneRunning {
                    dir: self.dir.clone(),
                });
            }
            if let Some(leader) = serving_leader(&states) {
                return Ok(leader);
            }
            if Instant::now() >= deadline {
                return Err(ZkError::NotServing {
                    timeout,
                    states: describe(&states),
                });
            }
            std::thread::sleep(SERVING_POLL_INTERVAL);
        }
    }

    /// SIGKILL to server `server`, reaped before this returns.
    pub fn kill9(&mut self, server: usize) {
        self.proc(server).kill9();
    }

    /// Starts server `server` again, same directory and configuration (after
    /// [`Self::kill9`]; a server still running is killed first). Returns at
    /// once: [`Self::wait_serving`] tells when it serves.
    pub fn restart(&mut self, server: usize) -> Result<(), ZkError> {
        self.kill9(server);
        let (namespace, dir) = {
            let entry = self.server(server);
            (entry.namespace.clone(), entry.dir.clone())
        };
        let proc = self.spawn(server, &namespace, &dir)?;
        *self.proc(server) = proc;
        Ok(())
    }

    /// SIGSTOP to server `server`.
    pub fn pause(&mut self, server: usize) {
        self.proc(server).pause();
    }

    /// SIGCONT to server `server`.
    pub fn resume(&mut self, server: usize) {
        self.proc(server).resume();
    }

    pub fn proc(&mut self, server: usize) -> &mut Proc {
        let index = self.index(server);
        self.servers[index]
            .proc
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Server `server`'s directory, where its `zookeeper.log` is.
    pub fn log_dir(&self, server: usize) -> PathBuf {
        self.server(server).dir.clone()
    }

    fn index(&self, server: usize) -> usize {
        assert!(
            (1..=self.servers()).contains(&server),
            "server {server} is not in this ensemble of {}",
            self.servers()
        );
        server - 1
    }

    fn server(&self, server: usize) -> &ZkServer {
        &self.servers[self.index(server)]
    }

    /// Writes server `server`'s files in a fresh directory and starts it.
    fn add_server(
        &mut self,
        lab: &Lab,
        server: usize,
        addresses: &[Ipv4Addr],
        timing: &ZkTiming,
    ) -> Result<(), ZkError> {
        let dir = self.dir.join(format!("server{server}"));
        write_server_files(&dir, server, addresses, timing)?;
        let namespace = lab.namespace(server).to_string();
        let proc = self.spawn(server, &namespace, &dir)?;
        self.servers.push(ZkServer {
            namespace,
            address: lab.ip(server),
            dir,
            proc: Mutex::new(proc),
        });
        Ok(())
    }

    /// `srvr`'s Mode from server `server`, or None if it does not serve.
    fn mode(&self, server: usize) -> Option<String> {
        mode(self.client_addr(server))
    }

    /// Each server's state: None if it is not up (exited or paused), else
    /// its Mode, or "" if it does not answer with one.
    fn states(&self) -> Vec<Option<String>> {
        self.servers
            .iter()
            .enumerate()
            .map(|(index, entry)| {
                entry
                    .is_up()
                    .then(|| self.mode(index + 1).unwrap_or_default())
            })
            .collect()
    }

    /// The JVM of a Debian service, in `namespace`, for the server in `dir`.
    fn spawn(&self, server: usize, namespace: &str, dir: &Path) -> Result<Proc, ZkError> {
        let mut command = netns_command(namespace, self.java);
        command
            .arg("-Xmx1000m")
            .arg("-Dzookeeper.root.logger=INFO,ROLLINGFILE")
            .arg(format!("-Dzookeeper.log.dir={}", dir.display()))
            .arg("-cp")
            .arg(format!("{}:{}", dir.join("conf").display(), self.classpath))
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(dir.join("conf").join("zoo.cfg"))
            .current_dir(dir);
        Proc::spawn(command, &dir.join("server.log"))
            .map_err(|source| ZkError::Spawn { server, source })
    }

    /// After the first `wait_serving`: every server runs and logs at INFO.
    fn check_started(&self) -> Result<(), ZkError> {
        for (index, entry) in self.servers.iter().enumerate() {
            if !entry.proc().is_running() {
                return Err(ZkError::Exited {
                    server: index + 1,
                    log: entry.dir.join("zookeeper.log"),
                });
            }
            check_log(&entry.dir.join("zookeeper.log"))?;
        }
        Ok(())
    }
}

/// The leader, if every up server answered leader or follower and exactly
/// one said leader.
fn serving_leader(states: &[Option<String>]) -> Option<usize> {
    let mut leader = None;
    for (index, state) in states.iter().enumerate() {
        match state.as_deref() {
            None | Some("follower") => {}
            Some("leader") if leader.is_none() => leader = Some(index + 1),
            Some(_) => return None,
        }
    }
    leader
}

fn describe(states: &[Option<String>]) -> String {
    let each = states.iter().enumerate().map(|(index, state)| {
        let state = match state.as_deref() {
            None => "down or paused",
            Some("") => "not serving",
            Some(mode) => mode,
        };
        format!("server {}: {state}", index + 1)
    });
    each.collect::<Vec<_>>().join("; ")
}

/// The Mode `srvr` reports at `addr` (`leader`, `follower`, ...), if it
/// answers: ZooKeeper's and arbord's ZooKeeper port alike.
pub fn mode(addr: SocketAddr) -> Option<String> {
    let answer = four_letter_word(addr, "srvr")?;
    answer
        .lines()
        .find_map(|line| line.strip_prefix("Mode: "))
        .map(|mode| mode.trim().to_string())
}

/// Sends `word` to a ZooKeeper client port and reads the answer to EOF;
/// None if the server does not answer within [`WORD_TIMEOUT`]s.
pub fn four_letter_word(addr: SocketAddr, word: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, WORD_TIMEOUT).ok()?;
    stream.set_read_timeout(Some(WORD_TIMEOUT)).ok()?;
    stream.set_write_timeout(Some(WORD_TIMEOUT)).ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

/// The first java found, as Debian's service would run it.
fn java() -> Result<&'static str, ZkError> {
    JAVA_PATHS
        .into_iter()
        .find(|path| Path::new(path).exists())
        .ok_or(ZkError::JavaMissing)
}

/// `zookeeper.jar` and the jars of [`CLASSPATH_JARS`] that are installed.
fn classpath() -> String {
    let jars = CLASSPATH_JARS
        .iter()
        .map(|jar| format!("/usr/share/java/{jar}.jar"))
        .filter(|path| Path::new(path).exists());
    std::iter::once(ZOOKEEPER_JAR.to_string())
        .chain(jars)
        .collect::<Vec<_>>()
        .join(":")
}

/// A fresh `dir` with `conf/zoo.cfg`, `conf/log4j.properties` (Debian's)
/// and `data/myid`.
fn write_server_files(
    dir: &Path,
    server: usize,
    addresses: &[Ipv4Addr],
    timing: &ZkTiming,
) -> Result<(), ZkError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ZkError::Write { path, source }
    };
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(io(dir))?;
    }
    let (conf, data) = (dir.join("conf"), dir.join("data"));
    for made in [&conf, &data] {
        std::fs::create_dir_all(made).map_err(io(made))?;
    }
    let files = [
        (
            conf.join("zoo.cfg"),
            zoo_cfg(&data, server, addresses, timing),
        ),
        (data.join("myid"), format!("{server}\n")),
    ];
    for (path, text) in files {
        std::fs::write(&path, text).map_err(io(&path))?;
    }
    let log4j = conf.join("log4j.properties");
    std::fs::copy(DEBIAN_LOG4J, &log4j).map_err(io(&log4j))?;
    Ok(())
}

/// Server `server`'s zoo.cfg. Beyond the timing and addresses:
/// `admin.enableServer=false` (no Jetty port to clash or to wait on), the
/// suite's four-letter words, and `maxClientCnxns=0` because every client
/// of the lab comes from the root namespace's one address, where a real
/// deployment's come from many (Debian's default, 60 per address, would
/// refuse the suite's sessions).
fn zoo_cfg(data: &Path, server: usize, addresses: &[Ipv4Addr], timing: &ZkTiming) -> String {
    let mut cfg = format!(
        "tickTime={}\ninitLimit={}\nsyncLimit={}\n",
        timing.tick_ms, timing.init_limit, timing.sync_limit
    );
    cfg += &format!("dataDir={}\n", data.display());
    cfg += &format!("clientPort={CLIENT_PORT}\n");
    cfg += &format!("clientPortAddress={}\n", addresses[server - 1]);
    for (index, address) in addresses.iter().enumerate() {
        let id = index + 1;
        cfg += &format!("server.{id}={address}:{QUORUM_PORT}:{ELECTION_PORT}\n");
    }
    cfg += "admin.enableServer=false\n";
    cfg += &format!("4lw.commands.whitelist={FOUR_LETTER_WORDS}\n");
    cfg += "forceSync=yes\nmaxClientCnxns=0\n";
    cfg
}

/// Fails unless `log` exists, has INFO lines and no DEBUG line.
fn check_log(log: &Path) -> Result<(), ZkError> {
    let problem = |problem| ZkError::Logging {
        log: log.to_path_buf(),
        problem,
    };
    let text = std::fs::read_to_string(log)
        .map_err(|_| problem("missing: ZooKeeper is not logging as Debian's service does"))?;
    if !text.contains(" INFO ") {
        return Err(problem("no INFO line: ZooKeeper is not logging at INFO"));
    }
    if text.contains(" DEBUG ") {
        return Err(problem(
            "DEBUG lines: ZooKeeper logs at DEBUG, which slows it down",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // A leader is found only when every up server leads or follows and one leads.
    #[test]
    fn serving_leader_needs_one_leader_and_only_followers() {
        let state = |mode: &str| Some(mode.to_string());
        let serving = [state("follower"), state("leader"), None];
        assert_eq!(serving_leader(&serving), Some(2));
        assert_eq!(serving_leader(&[state("follower"), state("")]), None);
        assert_eq!(serving_leader(&[state("leader"), state("leader")]), None);
        assert_eq!(serving_leader(&[state("follower"), None]), None);
        assert_eq!(serving_leader(&[state("standalone")]), None);
    }

    // zoo.cfg lists every server on its host's address and whitelists the words.
    #[test]
    fn zoo_cfg_names_every_server() {
        let addresses = [1, 2, 3].map(|i| Ipv4Addr::new(10, 200, 0, i));
        let cfg = zoo_cfg(Path::new("/d"), 2, &addresses, &ZkTiming::tuned());
        assert!(cfg.contains("tickTime=500\n"));
        assert!(cfg.contains("clientPortAddress=10.200.0.2\n"));
        assert!(cfg.contains("server.3=10.200.0.3:2888:3888\n"));
        assert!(cfg.contains("4lw.commands.whitelist=srvr,ruok,mntr,cons\n"));
    }
}
