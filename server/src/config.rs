//! Server settings and the limits that protect it. `validate` checks each
//! limit and how they relate before anything starts.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use arbor_protocol::codec::DECODE_INPUT_BYTES_MAX;
use arbor_protocol::frame::DEFAULT_FRAME_BYTES_MAX;
use arbor_protocol::path::PATH_BYTES_MAX;

use crate::cluster::records::{MemberAddr, MemberId};
use crate::net::open_files::OpenFilesLimit;
use crate::storage::txnlog::{FsyncPolicy, SEGMENT_BYTES_DEFAULT};

/// Room a frame needs beyond a znode's data and path (op tag, versions, xid).
pub const FRAME_ENVELOPE_BYTES: usize = 1024;

/// Limits on the session timeout, in ticks (ZooKeeper's defaults).
pub const SESSION_TIMEOUT_TICKS_MIN: u32 = 2;
pub const SESSION_TIMEOUT_TICKS_MAX: u32 = 20;

/// The longest TTL a node may have (ZooKeeper's limit, about 35 years).
pub const TTL_MS_MAX: u64 = 0xFF_FFFF_FFFF;

/// Ops in one multi.
pub const MULTI_OPS_MAX: usize = 1000;

#[derive(Debug, Clone)]
pub struct Config {
    /// Where the write-ahead log and snapshots live.
    pub data_dir: PathBuf,
    /// The unit of session timeouts and of expiry checks.
    pub tick_ms: u32,
    /// Largest frame payload accepted or sent.
    pub frame_bytes_max: usize,
    /// Largest znode data.
    pub data_bytes_max: usize,
    pub connections_max: usize,
    pub connections_per_ip_max: usize,
    /// Requests one connection may have unanswered; past it we stop reading
    /// its socket (back-pressure, not memory).
    pub requests_in_flight_per_connection_max: usize,
    /// Watch events queued for one connection; a client that falls further
    /// behind is disconnected (its session lives on).
    pub events_queued_per_connection_max: usize,
    pub watches_per_session_max: usize,
    /// Writes queued for the commit log.
    pub commit_queue_max: usize,
    /// Txns the committer makes durable together.
    pub commit_batch_max: usize,
    /// How often containers and TTL nodes are checked for deletion.
    pub reap_interval_ms: u64,
    /// Deletions proposed per reap pass.
    pub reap_batch_max: usize,
    /// A connection must complete its handshake within this.
    pub handshake_timeout_ms: u64,
    /// How long shutdown waits for in-flight requests.
    pub shutdown_grace_ms: u64,
    /// Whether a write waits for fdatasync before it is acknowledged.
    pub fsync: FsyncPolicy,
    /// Writes (ops, a multi counting each) between snapshots (jittered down to
    /// half of it).
    pub snap_count: u64,
    /// Writes between snapshots are also at least this percentage of the
    /// tree's znodes (0: `snap_count` alone; see
    /// [`crate::storage::snapshotter::writes_between`]).
    pub snap_tree_percent: u64,
    /// Snapshots kept; the log is kept from the oldest of them on.
    pub snap_retain: usize,
    /// Size at which the log rolls to a new segment.
    pub segment_bytes_max: u64,
    /// Set when this server is a member of an ensemble; `None` standalone.
    pub ensemble: Option<EnsembleConfig>,
    /// The digest id (`user:base64(sha1(user:password))`) whose session may
    /// do anything whatever the ACLs; `None`: no superuser.
    pub super_digest: Option<String>,
    /// The certificate and key of the TLS client port, and the CA of
    /// client certificates for mutual TLS; `None`: no TLS port.
    pub tls: Option<crate::net::TlsFiles>,
    /// The certificate, key and CA of ensemble peer TLS (mutual, always);
    /// `None`: peers talk plain TCP.
    pub peer_tls: Option<crate::net::TlsFiles>,
    /// The four-letter words the ZooKeeper port answers (`--4lw`).
    pub four_letter_words: crate::zk::four_letter::Whitelist,
}

/// Who this member is and who the others are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnsembleConfig {
    pub member_id: MemberId,
    /// Every voting member, this one included.
    pub members: BTreeMap<MemberId, MemberAddr>,
    /// Joining a running ensemble (to be added with `arbor cluster add`):
    /// wait for the leader instead of forming a new ensemble.
    pub join: bool,
}

/// Members of an ensemble at most: each write waits for a majority, and
/// more members only add latency.
pub const ENSEMBLE_MEMBERS_MAX: usize = 7;

impl EnsembleConfig {
    /// Parses `ID=CLIENT_ADDR/PEER_ADDR`, as `--member` takes it.
    pub fn parse_member(text: &str) -> Result<(MemberId, MemberAddr), ConfigError> {
        let bad = || ConfigError::Member {
            text: text.to_owned(),
        };
        let (id, addrs) = text.split_once('=').ok_or_else(bad)?;
        let (client, peer) = addrs.split_once('/').ok_or_else(bad)?;
        let id: MemberId = id.trim().parse().map_err(|_| bad())?;
        if id == 0 || client.is_empty() || peer.is_empty() {
            return Err(bad());
        }
        Ok((
            id,
            MemberAddr {
                client: client.to_owned(),
                peer: peer.to_owned(),
            },
        ))
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("arbor-data"),
            tick_ms: 2000,
            frame_bytes_max: DEFAULT_FRAME_BYTES_MAX,
            data_bytes_max: DEFAULT_FRAME_BYTES_MAX - PATH_BYTES_MAX - FRAME_ENVELOPE_BYTES,
            connections_max: 4096,
            connections_per_ip_max: 60,
            requests_in_flight_per_connection_max: 1024,
            events_queued_per_connection_max: 16 * 1024,
            watches_per_session_max: 100_000,
            commit_queue_max: 16 * 1024,
            commit_batch_max: 1024,
            reap_interval_ms: 1000,
            reap_batch_max: 1000,
            handshake_timeout_ms: 10_000,
            shutdown_grace_ms: 5_000,
            fsync: FsyncPolicy::Always,
            snap_count: 100_000,
            snap_tree_percent: 100,
            snap_retain: 3,
            segment_bytes_max: SEGMENT_BYTES_DEFAULT,
            ensemble: None,
            super_digest: None,
            tls: None,
            peer_tls: None,
            four_letter_words: crate::zk::four_letter::Whitelist::default(),
        }
    }
}

/// The limits a running server takes again without a restart (arbord
/// reloads them on SIGHUP); the accept loop reads them for each connection.
#[derive(Debug)]
pub struct LiveLimits {
    connections_max: AtomicUsize,
    connections_per_ip_max: AtomicUsize,
    /// The process's open-files limit as the server started (`None` if it
    /// could not be read): connections stop short of it.
    open_files: Option<OpenFilesLimit>,
}

impl LiveLimits {
    /// The config's connection limits, under the open-files limit the
    /// process has now.
    pub fn new(config: &Config) -> Self {
        Self::with_open_files(config, OpenFilesLimit::current().ok())
    }

    /// The config's connection limits under `open_files` (`None`: no cap).
    pub fn with_open_files(config: &Config, open_files: Option<OpenFilesLimit>) -> Self {
        Self {
            connections_max: AtomicUsize::new(config.connections_max),
            connections_per_ip_max: AtomicUsize::new(config.connections_per_ip_max),
            open_files,
        }
    }

    /// The connection limit configured (`max_connections`).
    pub fn connections_max(&self) -> usize {
        self.connections_max.load(Ordering::Relaxed)
    }

    /// The open-files limit connections stop short of.
    pub fn open_files(&self) -> Option<OpenFilesLimit> {
        self.open_files
    }

    /// The open-files limit, when it leaves room for fewer connections than
    /// configured: worth a warning at start and after a reload.
    pub fn connections_capped_by_open_files(&self) -> Option<OpenFilesLimit> {
        let files = self.open_files?;
        (files.connections_allowed() < self.connections_max()).then_some(files)
    }

    /// Connections the server accepts: the configured limit, or fewer if the
    /// open-files limit leaves room for fewer (see [`crate::net::open_files`]).
    pub fn connections_allowed(&self) -> usize {
        let by_files = self
            .open_files
            .map_or(usize::MAX, |files| files.connections_allowed());
        self.connections_max().min(by_files)
    }

    pub fn connections_per_ip_max(&self) -> usize {
        self.connections_per_ip_max.load(Ordering::Relaxed)
    }

    /// Takes new connection limits, checked as [`Config::validate`] checks
    /// them. Connections already open stay open; new ones are refused
    /// until the count is under the limit.
    pub fn set_connections(&self, total: usize, per_ip: usize) -> Result<(), ConfigError> {
        if total == 0 {
            return Err(ConfigError::Zero {
                name: "connections_max",
            });
        }
        if per_ip == 0 {
            return Err(ConfigError::Zero {
                name: "connections_per_ip_max",
            });
        }
        if per_ip > total {
            return Err(ConfigError::PerIpLimit { per_ip, total });
        }
        self.connections_max.store(total, Ordering::Relaxed);
        self.connections_per_ip_max.store(per_ip, Ordering::Relaxed);
        Ok(())
    }
}

/// A setting that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{name} must be positive")]
    Zero { name: &'static str },
    #[error("frame limit {value} must be between {min} and {max} bytes")]
    FrameLimit {
        value: usize,
        min: usize,
        max: usize,
    },
    #[error("data limit {data} plus path and envelope must fit in the frame limit {frame}")]
    DataLimit { data: usize, frame: usize },
    #[error("per-ip connection limit {per_ip} exceeds the total limit {total}")]
    PerIpLimit { per_ip: usize, total: usize },
    #[error("--member {text:?} is not ID=CLIENT_ADDR/PEER_ADDR with a positive ID (e.g. 1=127.0.0.1:7181/127.0.0.1:7191)")]
    Member { text: String },
    #[error("--member-id {member_id} is not one of the --member entries ({known:?})")]
    NotAMember {
        member_id: MemberId,
        known: Vec<MemberId>,
    },
    #[error("an ensemble has 1 to {ENSEMBLE_MEMBERS_MAX} members, not {count}")]
    MemberCount { count: usize },
    #[error("peer TLS is for ensemble members: give --member-id and --member too")]
    PeerTlsStandalone,
}

impl Config {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("tick_ms", self.tick_ms as usize),
            ("connections_max", self.connections_max),
            ("connections_per_ip_max", self.connections_per_ip_max),
            (
                "requests_in_flight_per_connection_max",
                self.requests_in_flight_per_connection_max,
            ),
            (
                "events_queued_per_connection_max",
                self.events_queued_per_connection_max,
            ),
            ("watches_per_session_max", self.watches_per_session_max),
            ("commit_queue_max", self.commit_queue_max),
            ("commit_batch_max", self.commit_batch_max),
            ("reap_interval_ms", self.reap_interval_ms as usize),
            ("reap_batch_max", self.reap_batch_max),
            ("snap_count", self.snap_count as usize),
            ("snap_retain", self.snap_retain),
            ("segment_bytes_max", self.segment_bytes_max as usize),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Zero { name });
        }
        let frame_min = PATH_BYTES_MAX + 2 * FRAME_ENVELOPE_BYTES;
        if !(frame_min..=DECODE_INPUT_BYTES_MAX).contains(&self.frame_bytes_max) {
            return Err(ConfigError::FrameLimit {
                value: self.frame_bytes_max,
                min: frame_min,
                max: DECODE_INPUT_BYTES_MAX,
            });
        }
        if self.data_bytes_max + PATH_BYTES_MAX + FRAME_ENVELOPE_BYTES > self.frame_bytes_max {
            return Err(ConfigError::DataLimit {
                data: self.data_bytes_max,
                frame: self.frame_bytes_max,
            });
        }
        if self.connections_per_ip_max > self.connections_max {
            return Err(ConfigError::PerIpLimit {
                per_ip: self.connections_per_ip_max,
                total: self.connections_max,
            });
        }
        if self.peer_tls.is_some() && self.ensemble.is_none() {
            return Err(ConfigError::PeerTlsStandalone);
        }
        if let Some(ensemble) = &self.ensemble {
            if !(1..=ENSEMBLE_MEMBERS_MAX).contains(&ensemble.members.len()) {
                return Err(ConfigError::MemberCount {
                    count: ensemble.members.len(),
                });
            }
            if !ensemble.members.contains_key(&ensemble.member_id) {
                return Err(ConfigError::NotAMember {
                    member_id: ensemble.member_id,
                    known: ensemble.members.keys().copied().collect(),
                });
            }
        }
        Ok(())
    }

    /// The data limit that goes with a frame limit.
    pub fn data_bytes_max_for(frame_bytes_max: usize) -> usize {
        frame_bytes_max.saturating_sub(PATH_BYTES_MAX + FRAME_ENVELOPE_BYTES)
    }

    pub fn session_timeout_range_ms(&self) -> (u32, u32) {
        (
            self.tick_ms.saturating_mul(SESSION_TIMEOUT_TICKS_MIN),
            self.tick_ms.saturating_mul(SESSION_TIMEOUT_TICKS_MAX),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Config::default().validate().expect("valid");
    }

    #[test]
    fn connections_stop_at_the_lower_of_the_setting_and_the_open_files_limit() {
        let config = Config::default(); // max_connections 4096
        let files = OpenFilesLimit {
            soft: 1024,
            hard: 1024,
        };
        let capped = LiveLimits::with_open_files(&config, Some(files));
        assert_eq!(capped.connections_allowed(), 1024 - 128);
        assert_eq!(capped.connections_capped_by_open_files(), Some(files));

        capped.set_connections(500, 60).expect("valid limits");
        assert_eq!(capped.connections_allowed(), 500);
        assert_eq!(capped.connections_capped_by_open_files(), None);

        let unknown = LiveLimits::with_open_files(&config, None);
        assert_eq!(unknown.connections_allowed(), 4096);
    }

    #[test]
    fn data_must_fit_in_a_frame() {
        let config = Config {
            data_bytes_max: DEFAULT_FRAME_BYTES_MAX,
            ..Config::default()
        };
        assert!(matches!(
            config.validate(),
            Err(ConfigError::DataLimit { .. })
        ));
    }

    #[test]
    fn per_ip_limit_cannot_exceed_total() {
        let config = Config {
            connections_max: 10,
            ..Config::default()
        };
        assert!(matches!(
            config.validate(),
            Err(ConfigError::PerIpLimit { .. })
        ));
    }
}
