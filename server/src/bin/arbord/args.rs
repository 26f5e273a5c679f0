//! arbord's flags: each one also a key of `--config` (see
//! [`crate::config_file`]), with its default taken from
//! [`Config::default`], the one source of them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::Context;
use arbor_server::config::EnsembleConfig;
use arbor_server::net::idle_spin::{IDLE_SPIN_DEFAULT, IDLE_SPIN_MAX};
use arbor_server::net::TlsFiles;
use arbor_server::storage::txnlog::FsyncPolicy;
use arbor_server::zk::four_letter::Whitelist;
use arbor_server::Config;
use clap::Parser;

/// Most worker threads `--worker-threads` takes: far past any machine's
/// cores, but a typo of a thousandfold is refused.
const WORKER_THREADS_MAX: u16 = 1024;

/// The defaults of every setting, made once.
pub fn defaults() -> &'static Config {
    static DEFAULTS: OnceLock<Config> = OnceLock::new();
    DEFAULTS.get_or_init(Config::default)
}

#[derive(Debug, Parser)]
#[command(name = "arbord", version, about = "The Arbor coordination server")]
pub struct Args {
    #[command(subcommand)]
    pub action: Option<Action>,
    /// Read settings from this TOML file: each key is a flag's name with `_`
    /// for `-` (`data_dir = "/var/lib/arbor"`, `tick_ms = 2000`); a flag on
    /// the command line wins over the file. See deploy/arbor.toml.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// What to log: a level (`info`, `debug`) or a tracing filter
    /// (`info,arbor_server::net=debug`). Default: info (openraft at warn),
    /// or RUST_LOG if set. Reloaded on SIGHUP.
    #[arg(long, value_name = "FILTER", value_parser = crate::logging::parse_level)]
    pub log_level: Option<String>,
    /// `text` (one readable line per event) or `json` (one object per line,
    /// for log shippers).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Address to listen on for clients (port 0 picks a free port), or `off`
    /// to take TLS clients only. Default: 127.0.0.1:7181, or an ensemble
    /// member's client address from --member.
    #[arg(long, value_parser = parse_listen)]
    listen: Option<Listen>,
    /// Address to listen on for ZooKeeper clients (ZooKeeper's own wire
    /// protocol: kazoo, Curator, zkCli.sh), or `off`. Default: 127.0.0.1:2181
    /// standalone; off in an ensemble, whose members each name their own.
    #[arg(long, value_parser = parse_listen)]
    zk_listen: Option<Listen>,
    /// Address of the admin port (HTTP: /metrics for Prometheus, /health,
    /// /ready, /commands/NAME), or `off`. Default: 127.0.0.1:7182 (given
    /// up with a warning if another server has it).
    #[arg(long, value_parser = parse_listen)]
    admin_listen: Option<Listen>,
    /// The four-letter words the ZooKeeper port answers, comma-separated,
    /// or `*` for all (ZooKeeper's `4lw.commands.whitelist`; `srvr` is
    /// always on). Others get "… is not in the whitelist". Default:
    /// ruok,srvr,stat,mntr,envi,conf,isro, leaving out cons, wchc, wchp,
    /// wchs and dump, which list sessions and their watches.
    #[arg(long = "4lw", value_name = "LIST", value_parser = Whitelist::parse)]
    four_letter_words: Option<Whitelist>,
    /// Address to listen on for TLS clients, beside (or, with `--listen
    /// off`, instead of) the plain port. Needs --tls-cert and --tls-key.
    #[arg(long, requires_all = ["tls_cert", "tls_key"])]
    pub tls_listen: Option<SocketAddr>,
    /// The TLS port's certificate chain (PEM, the server's own first).
    #[arg(long, value_name = "PEM", requires = "tls_listen")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "PEM", requires = "tls_listen")]
    tls_key: Option<PathBuf>,
    /// Mutual TLS: TLS clients must present a certificate this CA (PEM)
    /// issued; its subject becomes the session's `x509` id.
    #[arg(long, value_name = "PEM", requires = "tls_listen")]
    tls_client_ca: Option<PathBuf>,
    /// Ensemble peers speak TLS with this certificate (PEM), which names
    /// this member: a DNS subject alternative name `arbor-member-ID`.
    #[arg(long, value_name = "PEM", requires_all = ["member_id", "peer_tls_key", "peer_tls_ca"])]
    peer_tls_cert: Option<PathBuf>,
    /// The private key of --peer-tls-cert.
    #[arg(long, value_name = "PEM", requires = "peer_tls_cert")]
    peer_tls_key: Option<PathBuf>,
    /// The CA (PEM) that issued every member's peer certificate: a peer is
    /// accepted only with a certificate it issued naming a current member.
    #[arg(long, value_name = "PEM", requires = "peer_tls_cert")]
    peer_tls_ca: Option<PathBuf>,
    /// This server's id in an ensemble (one of the --member ids). Without
    /// it, the server runs standalone.
    #[arg(long, requires = "member")]
    member_id: Option<u64>,
    /// An ensemble member, as ID=CLIENT_ADDR/PEER_ADDR (e.g.
    /// 1=127.0.0.1:7181/127.0.0.1:7191); once per member, this one included.
    #[arg(long, requires = "member_id")]
    member: Vec<String>,
    /// Join a running ensemble instead of forming a new one: start with an
    /// empty data directory, then add this member from any member
    /// (`arbor cluster add ID=CLIENT_ADDR/PEER_ADDR`).
    #[arg(long, requires = "member_id")]
    join: bool,
    /// Directory for the write-ahead log and snapshots (created if missing).
    #[arg(long, default_value_os_t = defaults().data_dir.clone())]
    pub data_dir: PathBuf,
    /// The tick: the unit of session timeouts, which clamp to [2, 20] ticks.
    #[arg(long, default_value_t = defaults().tick_ms)]
    tick_ms: u32,
    /// Largest frame payload accepted or sent, in bytes.
    #[arg(long, default_value_t = defaults().frame_bytes_max)]
    max_frame_bytes: usize,
    /// Largest znode data, in bytes (default: the frame limit less room for
    /// the path and envelope).
    #[arg(long)]
    max_data_bytes: Option<usize>,
    /// Connections served at once (fewer if the open-files limit, less 128
    /// kept for the server's own files, leaves room for fewer).
    #[arg(long, default_value_t = defaults().connections_max)]
    pub max_connections: usize,
    /// Connections served at once from one client address.
    #[arg(long, default_value_t = defaults().connections_per_ip_max)]
    pub max_connections_per_ip: usize,
    /// How often containers and TTL nodes are checked for deletion.
    #[arg(long, default_value_t = defaults().reap_interval_ms)]
    reap_interval_ms: u64,
    /// Shut down when standard input reaches end of file: a supervisor or
    /// test harness that dies takes its server with it.
    #[arg(long)]
    pub exit_on_stdin_close: bool,
    /// `always`: a write is acknowledged only after its log record is
    /// fsynced. `never`: for benchmarks and tests that say so; a crash loses
    /// acknowledged writes.
    #[arg(long, value_enum, default_value_t = Fsync::from(defaults().fsync))]
    fsync: Fsync,
    /// Writes between snapshots, each op of a multi counting (each jittered
    /// down to as little as half).
    #[arg(long, default_value_t = defaults().snap_count)]
    snap_count: u64,
    /// Writes between snapshots are also at least this percentage of the
    /// tree's znodes: a snapshot rewrites every node, so this keeps its cost
    /// per write bounded as the tree grows. 0: --snap-count alone.
    #[arg(long, default_value_t = defaults().snap_tree_percent,
          value_parser = clap::value_parser!(u64).range(0..=arbor_server::storage::snapshotter::SNAP_TREE_PERCENT_MAX))]
    snap_tree_percent: u64,
    /// The superuser's digest id, `user:base64(sha1("user:password"))` (as
    /// `arbor digest user:password` prints it): a session that proves those
    /// credentials passes every ACL check. Unset: no superuser.
    #[arg(long, value_name = "USER:DIGEST", value_parser = parse_super_digest)]
    super_digest: Option<String>,
    /// Snapshots kept; log segments older than the oldest are purged.
    #[arg(long, default_value_t = defaults().snap_retain)]
    snap_retain: usize,
    /// Size at which the write-ahead log rolls to a new segment, in bytes.
    #[arg(long, default_value_t = defaults().segment_bytes_max)]
    segment_bytes: u64,
    /// Threads serving client connections. Default: one per CPU this
    /// process may use. The commit and snapshot threads come on top.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=WORKER_THREADS_MAX as i64))]
    pub worker_threads: Option<u16>,
    /// Microseconds the last busy worker thread polls for the next request
    /// before it sleeps (0: never): a wake-up saved per request of a lone
    /// client, for some idle CPU. See docs/operations.md.
    #[arg(
        long,
        value_name = "MICROS",
        default_value_t = IDLE_SPIN_DEFAULT.as_micros() as u64,
        value_parser = clap::value_parser!(u64).range(0..=IDLE_SPIN_MAX.as_micros() as u64)
    )]
    pub idle_spin_us: u64,
    /// Check the data directory's snapshots and log without changing them,
    /// print what was found, and exit (1 if the server would refuse to start).
    #[arg(long)]
    pub verify: bool,
}

/// Where plain clients are taken: an address, or nowhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listen {
    On(SocketAddr),
    Off,
}

fn parse_listen(text: &str) -> Result<Listen, String> {
    if text == "off" {
        return Ok(Listen::Off);
    }
    text.parse()
        .map(Listen::On)
        .map_err(|_| format!("{text:?} is not IP:PORT or `off`"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Fsync {
    Always,
    Never,
}

impl From<FsyncPolicy> for Fsync {
    fn from(policy: FsyncPolicy) -> Self {
        match policy {
            FsyncPolicy::Always => Fsync::Always,
            FsyncPolicy::Never => Fsync::Never,
        }
    }
}

/// What arbord does instead of serving.
#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Make a data directory from a backup (the file `arbor backup` wrote):
    /// checks every checksum of the backup, then writes it as the
    /// directory's snapshot. The directory must be empty or missing; start
    /// the server on it afterwards with `arbord --data-dir DIR`.
    Restore {
        /// The backup file.
        backup: PathBuf,
        /// The new data directory.
        #[arg(long)]
        data_dir: PathBuf,
    },
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The client port of a standalone server.
const LISTEN_DEFAULT: &str = "127.0.0.1:7181";

/// Where ZooKeeper clients connect unless told otherwise: ZooKeeper's port.
const ZK_LISTEN_DEFAULT: &str = "127.0.0.1:2181";

/// The admin port unless told otherwise: next to the native one, loopback
/// only (what it shows is for the operator, not for every client).
const ADMIN_LISTEN_DEFAULT: &str = "127.0.0.1:7182";

impl Args {
    fn ensemble(&self) -> anyhow::Result<Option<EnsembleConfig>> {
        let Some(member_id) = self.member_id else {
            return Ok(None);
        };
        let mut members = std::collections::BTreeMap::new();
        for text in &self.member {
            let (id, addr) = EnsembleConfig::parse_member(text)?;
            if members.insert(id, addr).is_some() {
                anyhow::bail!("--member {id} is given twice");
            }
        }
        Ok(Some(EnsembleConfig {
            member_id,
            members,
            join: self.join,
        }))
    }

    /// Where plain clients connect: --listen, else a member's own client
    /// address; `None` with `--listen off`.
    pub fn listen(&self, config: &Config) -> anyhow::Result<Option<SocketAddr>> {
        match self.listen {
            Some(Listen::On(addr)) => return Ok(Some(addr)),
            Some(Listen::Off)
                if self.tls_listen.is_none() && !matches!(self.zk_listen, Some(Listen::On(_))) =>
            {
                anyhow::bail!(
                    "--listen off needs --tls-listen or --zk-listen: the server would take no clients"
                )
            }
            Some(Listen::Off) => return Ok(None),
            None => {}
        }
        let text = match &config.ensemble {
            Some(ensemble) => ensemble
                .members
                .get(&ensemble.member_id)
                .map_or(LISTEN_DEFAULT, |addr| addr.client.as_str()),
            None => LISTEN_DEFAULT,
        };
        text.parse()
            .map(Some)
            .with_context(|| format!("client address {text:?} is not IP:PORT"))
    }

    /// Where ZooKeeper clients connect, and whether it was asked for (an
    /// address named on the command line must be bound; the default is
    /// given up with a warning if another server already has it).
    pub fn zk_listen(&self, config: &Config) -> anyhow::Result<Option<(SocketAddr, bool)>> {
        match self.zk_listen {
            Some(Listen::On(addr)) => Ok(Some((addr, true))),
            Some(Listen::Off) => Ok(None),
            None if config.ensemble.is_some() => Ok(None),
            None => {
                let addr = ZK_LISTEN_DEFAULT
                    .parse()
                    .context("the default ZooKeeper address")?;
                Ok(Some((addr, false)))
            }
        }
    }

    /// Where the admin port listens, and whether it was asked for (as
    /// [`Args::zk_listen`]).
    pub fn admin_listen(&self) -> anyhow::Result<Option<(SocketAddr, bool)>> {
        match self.admin_listen {
            Some(Listen::On(addr)) => Ok(Some((addr, true))),
            Some(Listen::Off) => Ok(None),
            None => {
                let addr = ADMIN_LISTEN_DEFAULT
                    .parse()
                    .context("the default admin address")?;
                Ok(Some((addr, false)))
            }
        }
    }

    fn tls(&self) -> Option<TlsFiles> {
        Some(TlsFiles {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            client_ca: self.tls_client_ca.clone(),
        })
    }

    fn peer_tls(&self) -> Option<TlsFiles> {
        Some(TlsFiles {
            cert: self.peer_tls_cert.clone()?,
            key: self.peer_tls_key.clone()?,
            client_ca: Some(self.peer_tls_ca.clone()?),
        })
    }

    pub fn config(&self) -> anyhow::Result<Config> {
        Ok(Config {
            data_dir: self.data_dir.clone(),
            tick_ms: self.tick_ms,
            frame_bytes_max: self.max_frame_bytes,
            data_bytes_max: self
                .max_data_bytes
                .unwrap_or_else(|| Config::data_bytes_max_for(self.max_frame_bytes)),
            connections_max: self.max_connections,
            connections_per_ip_max: self.max_connections_per_ip,
            reap_interval_ms: self.reap_interval_ms,
            fsync: match self.fsync {
                Fsync::Always => FsyncPolicy::Always,
                Fsync::Never => FsyncPolicy::Never,
            },
            snap_count: self.snap_count,
            snap_tree_percent: self.snap_tree_percent,
            snap_retain: self.snap_retain,
            segment_bytes_max: self.segment_bytes,
            ensemble: self.ensemble()?,
            super_digest: self.super_digest.clone(),
            tls: self.tls(),
            peer_tls: self.peer_tls(),
            four_letter_words: self.four_letter_words.unwrap_or_default(),
            ..Config::default()
        })
    }
}

/// A digest id's shape: a user, a colon, a base64 SHA-1 (28 characters).
fn parse_super_digest(text: &str) -> Result<String, String> {
    let (user, hash) = text.split_once(':').ok_or_else(|| {
        "expected USER:DIGEST, as `arbor digest user:password` prints it".to_owned()
    })?;
    let base64 = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=');
    if user.is_empty() || hash.len() != 28 || !hash.chars().all(base64) {
        return Err(format!(
            "{user}:… is not a digest id: the part after the colon is the base64 SHA-1 of \"user:password\" (28 characters), as `arbor digest user:password` prints it"
        ));
    }
    Ok(text.to_owned())
}
