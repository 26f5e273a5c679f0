//! `arbord`: parses flags, sets up logging, and runs the server until SIGINT
//! or SIGTERM.

use std::io::{IsTerminal, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use arbor_server::config::EnsembleConfig;
use arbor_server::net::TlsFiles;
use arbor_server::server::Listeners;
use arbor_server::storage::txnlog::FsyncPolicy;
use arbor_server::zk::four_letter::Whitelist;
use arbor_server::{Config, Server};
use clap::Parser;
use tracing::warn;
use tracing_subscriber::EnvFilter;

/// mimalloc instead of the system allocator: a million znodes are several
/// million small allocations, and glibc's malloc spent about 40 % of a log
/// replay in allocation and consolidation (perf). Through our own binding:
/// see `allocator` for why not the `mimalloc` crate's.
#[global_allocator]
static ALLOCATOR: arbor_server::allocator::MiMalloc = arbor_server::allocator::MiMalloc;

/// mimalloc v3's `mi_option_purge_delay`: its index in `mi_option_e` of the
/// mimalloc sources bundled with libmimalloc-sys 0.1.49 (pinned by
/// Cargo.lock); the crate does not export the constant.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Returns freed pages to the OS at once instead of after a second: the
/// copy-on-write pages a snapshot leaves behind would otherwise stay
/// resident (measured: 484 B of RSS per znode instead of 405 after a 1 M-node
/// fill with snapshots).
fn purge_freed_memory_at_once() {
    // SAFETY: a plain setter of mimalloc's option table.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
}

/// Keeps transparent huge pages out of this process. mimalloc asks for them
/// on its arenas (`MADV_HUGEPAGE`), so where THP is `madvise` (Debian's
/// default) every 2 MiB region a thread touches became resident whole:
/// measured on 10 k znodes, 2 166 B of RSS per znode instead of 541, and on
/// 1 M, 194–198 B instead of 183. The faults that zero and compact huge pages
/// also sat in the tail: set at 64 in flight on 1 M znodes had a p999 of
/// 13–18 ms with them and 6–8 ms without, at the same or better throughput.
/// mimalloc read its own option before `main`, so this uses the process-wide
/// switch, which the kernel applies to every later fault.
fn refuse_huge_pages() -> std::io::Result<()> {
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and touches no memory
    // of ours; a kernel without it returns an error, which changes nothing.
    match unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[derive(Debug, Parser)]
#[command(name = "arbord", version, about = "The Arbor coordination server")]
struct Args {
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
    /// /ready, /commands/<name>), or `off`. Default: 127.0.0.1:7182 (given
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
    tls_listen: Option<SocketAddr>,
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
    #[arg(long, default_value = "./arbor-data")]
    data_dir: PathBuf,
    /// The tick: the unit of session timeouts, which clamp to [2, 20] ticks.
    #[arg(long, default_value_t = 2000)]
    tick_ms: u32,
    /// Largest frame payload accepted or sent, in bytes.
    #[arg(long, default_value_t = arbor_protocol::frame::DEFAULT_FRAME_BYTES_MAX)]
    max_frame_bytes: usize,
    /// Largest znode data, in bytes (default: the frame limit less room for
    /// the path and envelope).
    #[arg(long)]
    max_data_bytes: Option<usize>,
    /// Connections served at once.
    #[arg(long, default_value_t = 4096)]
    max_connections: usize,
    /// Connections served at once from one client address.
    #[arg(long, default_value_t = 60)]
    max_connections_per_ip: usize,
    /// How often containers and TTL nodes are checked for deletion.
    #[arg(long, default_value_t = 1000)]
    reap_interval_ms: u64,
    /// Shut down when standard input reaches end of file: a supervisor or
    /// test harness that dies takes its server with it.
    #[arg(long)]
    exit_on_stdin_close: bool,
    /// `always`: a write is acknowledged only after its log record is
    /// fsynced. `never`: for benchmarks and tests that say so; a crash loses
    /// acknowledged writes.
    #[arg(long, value_enum, default_value_t = Fsync::Always)]
    fsync: Fsync,
    /// Writes between snapshots, each op of a multi counting (each jittered
    /// down to as little as half).
    #[arg(long, default_value_t = 100_000)]
    snap_count: u64,
    /// Writes between snapshots are also at least this percentage of the
    /// tree's znodes: a snapshot rewrites every node, so this keeps its cost
    /// per write bounded as the tree grows. 0: --snap-count alone.
    #[arg(long, default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(0..=arbor_server::storage::snapshotter::SNAP_TREE_PERCENT_MAX))]
    snap_tree_percent: u64,
    /// The superuser's digest id, `user:base64(sha1("user:password"))` (as
    /// `arbor digest user:password` prints it): a session that proves those
    /// credentials passes every ACL check. Unset: no superuser.
    #[arg(long, value_name = "USER:DIGEST", value_parser = parse_super_digest)]
    super_digest: Option<String>,
    /// Snapshots kept; log segments older than the oldest are purged.
    #[arg(long, default_value_t = 3)]
    snap_retain: usize,
    /// Size at which the write-ahead log rolls to a new segment, in bytes.
    #[arg(long, default_value_t = arbor_server::storage::txnlog::SEGMENT_BYTES_DEFAULT)]
    segment_bytes: u64,
    /// Check the data directory's snapshots and log without changing them,
    /// print what was found, and exit (1 if the server would refuse to start).
    #[arg(long)]
    verify: bool,
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
    fn listen(&self, config: &Config) -> anyhow::Result<Option<SocketAddr>> {
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
    fn zk_listen(&self, config: &Config) -> anyhow::Result<Option<(SocketAddr, bool)>> {
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
    fn admin_listen(&self) -> anyhow::Result<Option<(SocketAddr, bool)>> {
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

    fn config(&self) -> anyhow::Result<Config> {
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

/// Arbor's own events at info; openraft logs every vote and state dump at
/// info, which would bury them (its warnings and errors still show).
/// `RUST_LOG` overrides this.
const DEFAULT_LOG_FILTER: &str = "info,openraft=warn";

fn main() -> ExitCode {
    purge_freed_memory_at_once();
    let huge_pages = refuse_huge_pages();
    match run(Args::parse(), huge_pages) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("arbord: {}", one_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// One readable line with the whole cause chain, never a backtrace. The
/// library's errors already spell out their source in their message, so a
/// cause whose text is already on the line is not repeated.
fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn run(args: Args, huge_pages: std::io::Result<()>) -> anyhow::Result<()> {
    if args.verify {
        return verify(&args.data_dir);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    if let Err(err) = huge_pages {
        // Not fatal: the server works the same, with more RSS and a longer tail.
        warn!(error = %err, "cannot turn transparent huge pages off");
    }
    let config = args.config().context("invalid settings")?;
    config.validate().context("invalid settings")?;
    let listen = args.listen(&config)?;
    let zk_listen = args.zk_listen(&config)?;
    let admin_listen = args.admin_listen()?;
    let four_letter_words = config.four_letter_words;
    let server = Server::open(config)?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let plain = match listen {
            Some(addr) => Some(bind(addr).await?),
            None => None,
        };
        let tls = match args.tls_listen {
            Some(addr) => Some(bind(addr).await?),
            None => None,
        };
        let zk = bind_optional(zk_listen, "ZooKeeper clients", "--zk-listen").await?;
        let admin = bind_optional(admin_listen, "the admin port", "--admin-listen").await?;
        if zk.is_some() {
            tracing::info!(words = %four_letter_words, "four-letter words answered on the ZooKeeper port");
        }
        // Printed once the data directory is recovered and the ports are
        // bound, plain first: tests start arbord on port 0 and read these
        // lines to find it.
        let listeners = [
            (&plain, ""),
            (&tls, "for TLS "),
            (&zk, "for ZooKeeper clients "),
            (&admin, "for admin requests "),
        ];
        for (listener, what) in listeners {
            if let Some(listener) = listener {
                let addr = listener
                    .local_addr()
                    .context("cannot read the listening address")?;
                println!("arbord listening {what}on {addr}");
            }
        }
        std::io::stdout()
            .flush()
            .context("cannot write to stdout")?;
        let stdin_closed = args.exit_on_stdin_close.then(stdin_closed);
        server
            .serve_on(
                Listeners {
                    plain,
                    tls,
                    zk,
                    admin,
                },
                shutdown_signal(stdin_closed),
            )
            .await?;
        Ok(())
    })
}

/// Binds an optional port: one named on the command line must be bound; a
/// default one is given up with a warning if another server has it.
async fn bind_optional(
    choice: Option<(SocketAddr, bool)>,
    what: &str,
    flag: &str,
) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    match choice {
        Some((addr, true)) => Ok(Some(bind(addr).await?)),
        Some((addr, false)) => match bind(addr).await {
            Ok(listener) => Ok(Some(listener)),
            Err(err) => {
                warn!(addr = %addr, error = %one_line(&err), "not serving {what}: the default port is taken ({flag} names another, or off)");
                Ok(None)
            }
        },
        None => Ok(None),
    }
}

async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))
}

/// `--verify`: prints the report; an error is what a start would refuse with.
fn verify(data_dir: &std::path::Path) -> anyhow::Result<()> {
    let report = arbor_server::storage::recovery::verify(data_dir)?;
    println!("{report}");
    println!("ok: arbord would start from {}", data_dir.display());
    Ok(())
}

/// Completes when standard input is closed (a reader thread, since tokio's
/// stdin would keep the runtime from stopping).
fn stdin_closed() -> tokio::sync::oneshot::Receiver<()> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut sink = [0u8; 256];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        let _ = tx.send(());
    });
    rx
}

/// Completes on SIGINT, SIGTERM, or (if asked) the end of standard input.
async fn shutdown_signal(stdin_closed: Option<tokio::sync::oneshot::Receiver<()>>) {
    let stdin_closed = async move {
        match stdin_closed {
            Some(rx) => {
                let _ = rx.await;
                tracing::info!("standard input closed");
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = signals() => tracing::info!("signal received"),
        () = stdin_closed => {}
    }
}

async fn signals() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
