//! A three-member Arbor ensemble in a [`Lab`]: real `arbord` processes,
//! member `i` in host `i`'s namespace, with the settings a user runs
//! (fsync on, the default tick unless told otherwise, INFO logging).
//!
//! Each member listens on its host's address: [`NATIVE_PORT`] for Arbor's
//! clients, [`ZK_PORT`] for ZooKeeper's, [`PEER_PORT`] for the other
//! members and [`ADMIN_PORT`] for HTTP (`/ready`, which says whether it
//! knows a leader that holds a quorum and has caught up). Its directory
//! `<dir>/member<i>` holds `data/` and `arbord.log`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::lab::Lab;
use crate::process::{Proc, ProcError};

pub const NATIVE_PORT: u16 = 7181;
pub const ZK_PORT: u16 = 2181;
pub const PEER_PORT: u16 = 7191;
pub const ADMIN_PORT: u16 = 7182;

/// How long one admin request may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(1);
/// How often [`ArborEnsemble::wait_serving`] looks.
const SERVING_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How long a fresh ensemble may take to serve.
const START_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ArborError {
    #[error("cannot prepare {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Process(#[from] ProcError),
    #[error("no member led a serving ensemble within {timeout:?}: {states}")]
    NotServing { timeout: Duration, states: String },
}

/// How the members run.
#[derive(Debug, Clone)]
pub struct ArborOptions {
    /// The `arbord` to run.
    pub binary: PathBuf,
    pub tick_ms: u32,
}

struct Member {
    address: Ipv4Addr,
    dir: PathBuf,
    /// `None` after a kill, until the restart.
    proc: Option<Proc>,
}

/// Members 1..=lab.hosts(), member i on host i.
pub struct ArborEnsemble {
    members: Vec<Member>,
    namespaces: Vec<String>,
    options: ArborOptions,
}

impl ArborEnsemble {
    /// Starts a member on every host of `lab`, each with a fresh data
    /// directory under `dir`, and waits until they serve.
    pub fn start(lab: &Lab, dir: &Path, options: &ArborOptions) -> Result<Self, ArborError> {
        let mut ensemble = ArborEnsemble {
            members: Vec::new(),
            namespaces: (1..=lab.hosts())
                .map(|host| lab.namespace(host).to_owned())
                .collect(),
            options: options.clone(),
        };
        for host in 1..=lab.hosts() {
            let member_dir = dir.join(format!("member{host}"));
            let data = member_dir.join("data");
            if member_dir.exists() {
                std::fs::remove_dir_all(&member_dir).map_err(|source| ArborError::Io {
                    path: member_dir.clone(),
                    source,
                })?;
            }
            std::fs::create_dir_all(&data).map_err(|source| ArborError::Io {
                path: data.clone(),
                source,
            })?;
            ensemble.members.push(Member {
                address: lab.ip(host),
                dir: member_dir,
                proc: None,
            });
        }
        for member in 1..=ensemble.members() {
            ensemble.restart(member)?;
        }
        ensemble.wait_serving(START_TIMEOUT)?;
        Ok(ensemble)
    }

    pub fn members(&self) -> usize {
        self.members.len()
    }

    pub fn native_addr(&self, member: usize) -> SocketAddr {
        self.addr(member, NATIVE_PORT)
    }

    pub fn zk_addr(&self, member: usize) -> SocketAddr {
        self.addr(member, ZK_PORT)
    }

    fn addr(&self, member: usize, port: u16) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self.members[member - 1].address, port))
    }

    pub fn log_path(&self, member: usize) -> PathBuf {
        self.members[member - 1].dir.join("arbord.log")
    }

    /// The flags of member `member`.
    fn args(&self, member: usize) -> Vec<String> {
        let own = &self.members[member - 1];
        let mut args = vec![
            "--exit-on-stdin-close".to_owned(),
            "--member-id".to_owned(),
            member.to_string(),
            "--data-dir".to_owned(),
            own.dir.join("data").display().to_string(),
            "--tick-ms".to_owned(),
            self.options.tick_ms.to_string(),
            "--zk-listen".to_owned(),
            SocketAddrV4::new(own.address, ZK_PORT).to_string(),
            "--admin-listen".to_owned(),
            SocketAddrV4::new(own.address, ADMIN_PORT).to_string(),
        ];
        for (index, other) in self.members.iter().enumerate() {
            args.push("--member".to_owned());
            args.push(format!(
                "{}={}/{}",
                index + 1,
                SocketAddrV4::new(other.address, NATIVE_PORT),
                SocketAddrV4::new(other.address, PEER_PORT),
            ));
        }
        args
    }

    /// Starts member `member` on its data directory (killing it first if
    /// it runs). Returns at once.
    pub fn restart(&mut self, member: usize) -> Result<(), ArborError> {
        self.kill9(member);
        let mut command =
            crate::lab::netns_command(&self.namespaces[member - 1], &self.options.binary);
        command.args(self.args(member));
        let proc = Proc::spawn(command, &self.log_path(member))?;
        self.members[member - 1].proc = Some(proc);
        Ok(())
    }

    pub fn kill9(&mut self, member: usize) {
        if let Some(mut proc) = self.members[member - 1].proc.take() {
            proc.kill9();
        }
    }

    pub fn pause(&mut self, member: usize) {
        if let Some(proc) = &mut self.members[member - 1].proc {
            proc.pause();
        }
    }

    pub fn resume(&mut self, member: usize) {
        if let Some(proc) = &mut self.members[member - 1].proc {
            proc.resume();
        }
    }

    /// Whether member `member` runs and is not paused.
    fn is_up(&mut self, member: usize) -> bool {
        match &mut self.members[member - 1].proc {
            Some(proc) => !proc.is_paused() && proc.is_running(),
            None => false,
        }
    }

    /// The member that says it leads and is ready (a quorum acknowledged
    /// it lately), if exactly one does.
    pub fn leader(&mut self) -> Option<usize> {
        let up: Vec<usize> = (1..=self.members()).filter(|&m| self.is_up(m)).collect();
        let leaders: Vec<usize> = up
            .into_iter()
            .filter(|&member| self.mode(member).as_deref() == Some("leader"))
            .filter(|&member| self.ready(member))
            .collect();
        match leaders[..] {
            [leader] => Some(leader),
            _ => None,
        }
    }

    /// Waits until one member leads and every member that runs unpaused is
    /// ready; the leader.
    pub fn wait_serving(&mut self, timeout: Duration) -> Result<usize, ArborError> {
        let deadline = Instant::now() + timeout;
        loop {
            let up: Vec<usize> = (1..=self.members()).filter(|&m| self.is_up(m)).collect();
            let all_ready = up.iter().all(|&member| self.ready(member));
            if let (true, Some(leader)) = (all_ready, self.leader()) {
                return Ok(leader);
            }
            if Instant::now() >= deadline {
                let states = (1..=self.members())
                    .map(|m| format!("member {m}: {:?}, ready {}", self.mode(m), self.ready(m)))
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(ArborError::NotServing { timeout, states });
            }
            std::thread::sleep(SERVING_POLL_INTERVAL);
        }
    }

    /// `leader` or `follower`, as `srvr` on the ZooKeeper port says.
    fn mode(&self, member: usize) -> Option<String> {
        crate::zookeeper::mode(self.zk_addr(member))
    }

    /// Whether the admin port's `/ready` answers 200.
    fn ready(&self, member: usize) -> bool {
        admin_status(self.addr(member, ADMIN_PORT), "/ready") == Some(200)
    }
}

/// The HTTP status of `GET path` on an admin port.
fn admin_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(&addr, ADMIN_TIMEOUT).ok()?;
    stream.set_read_timeout(Some(ADMIN_TIMEOUT)).ok()?;
    stream.set_write_timeout(Some(ADMIN_TIMEOUT)).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: arbord\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace().nth(1)?.parse().ok()
}
