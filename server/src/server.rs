//! Wiring: the committer, the background tasks and the accept loop, and an
//! orderly shutdown.

use std::collections::HashMap;
use std::fs::File;
use std::future::Future;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arbor_protocol::frame::encode_frame;
use arbor_protocol::Hex;
use arbor_protocol::{ErrorCode, ServerMessage};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use crate::admin;
use crate::clock::Clock;
use crate::cluster::bootstrap::{self, MemberStorage, RunningMember};
use crate::config::{Config, ConfigError, LiveLimits};
use crate::context::Shared;
use crate::housekeeping;
use crate::net::log_throttle::{LogThrottle, REFUSAL_LOG_INTERVAL};
use crate::net::open_files::{OPEN_FILES_RESERVED, REFUSALS_IN_FLIGHT_MAX};
use crate::net::{self, Listener, TlsAcceptor, Wire};
use crate::pipeline::apply::StateMachine;
use crate::pipeline::commit::{run_committer, Committer, InlineCommits};
use crate::stats::Stats;
use crate::storage::error::StorageError;
use crate::storage::recovery::{self, DataLayout, RecoveryError};
use crate::storage::snapshot;
use crate::storage::snapshotter::{self, SnapshotPolicy, SnapshotThread, Snapshotter};
use crate::storage::txnlog::{FsyncPolicy, TxnLogOptions, TxnLogWriter};

/// How long a refused connection may take to receive its explanation.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Bytes of a refused client's input read and dropped before its socket
/// is closed (its handshake is well under this).
const REFUSAL_DRAIN_BYTES_MAX: usize = 64 * 1024;

/// Pause after a failed accept (for example, out of file descriptors), so the
/// loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("cannot start from the data directory: {0}")]
    Recovery(#[from] RecoveryError),
    #[error("write-ahead log: {0}")]
    Storage(#[from] StorageError),
    #[error("{path} is in use by another arbord (its LOCK file is held); stop that server or use another --data-dir")]
    Locked { path: PathBuf },
    #[error("the open-files limit is {soft}: no room for connections beside the {reserved} descriptors the server keeps for its own files; raise it (ulimit -n, or LimitNOFILE= for a service)")]
    OpenFilesTooFew { soft: u64, reserved: u64 },
    #[error("cannot start the committer thread: {0}")]
    Committer(#[source] std::io::Error),
    #[error("ensemble member: {0}")]
    Member(#[from] crate::cluster::bootstrap::MemberError),
    #[error("TLS: {0}")]
    Tls(#[from] crate::net::TlsError),
    #[error("a TLS listener needs a certificate and key (--tls-cert, --tls-key)")]
    TlsWithoutCertificate,
    #[error("no listener: serve plain clients, TLS clients, or both")]
    NoListener,
    #[error("the write-ahead log failed (its error is logged above); the server stopped rather than acknowledge writes it cannot make durable")]
    LogFailed,
    #[error("i/o error on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A server whose data directory is open and recovered, ready to serve.
pub struct Server {
    config: Config,
    clock: Clock,
    storage: OpenedStorage,
    /// Loaded from `config.tls`, if set.
    tls: Option<TlsAcceptor>,
    limits: Arc<LiveLimits>,
}

/// Where a server takes clients: a plain listener, a TLS one (with the
/// certificate of [`Config::tls`]), one for ZooKeeper's protocol, or any
/// of them together.
pub struct Listeners<L> {
    pub plain: Option<L>,
    pub tls: Option<tokio::net::TcpListener>,
    /// ZooKeeper clients (plain TCP, jute: see [`crate::zk`]).
    pub zk: Option<tokio::net::TcpListener>,
    /// The admin port: metrics, health and commands over HTTP (see
    /// [`crate::admin`]).
    pub admin: Option<tokio::net::TcpListener>,
}

impl Server {
    /// Validates the configuration, locks the data directory, recovers the
    /// state and opens the log. Blocking: call it before serving, so that a
    /// server that prints its address is one that can answer.
    pub fn open(config: Config) -> Result<Self, ServerError> {
        config.validate()?;
        // Before the data directory: a bad certificate is a setting to fix,
        // found without touching the data.
        let tls = config.tls.as_ref().map(TlsAcceptor::load).transpose()?;
        let limits = Arc::new(LiveLimits::new(&config));
        if let Some(files) = limits.open_files() {
            if files.connections_allowed() == 0 {
                return Err(ServerError::OpenFilesTooFew {
                    soft: files.soft,
                    reserved: OPEN_FILES_RESERVED,
                });
            }
        }
        let storage = open_storage(&config)?;
        Ok(Self {
            limits,
            config,
            clock: Clock::system(),
            storage,
            tls,
        })
    }

    /// Serves with `clock` instead of the system's: for tests that move
    /// time themselves ([`Clock::manual`]).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The connection limits the server will serve with: setting them
    /// takes effect at once, also while it serves (SIGHUP).
    pub fn limits(&self) -> Arc<LiveLimits> {
        self.limits.clone()
    }

    /// The last zxid recovered from the data directory.
    pub fn last_zxid(&self) -> arbor_protocol::Zxid {
        self.storage.state.last_zxid()
    }

    /// Serves `listener` until `shutdown` completes (or a fatal log error),
    /// then stops taking requests, answers those in flight (within the grace
    /// period) and returns. Sessions are not expired by a shutdown.
    pub async fn serve<L: Listener>(
        self,
        listener: L,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServerError> {
        let listeners = Listeners {
            plain: Some(listener),
            tls: None,
            zk: None,
            admin: None,
        };
        self.serve_on(listeners, shutdown).await
    }

    /// [`Server::serve`] on plain, TLS and ZooKeeper listeners: a TLS
    /// listener needs [`Config::tls`].
    pub async fn serve_on<L: Listener>(
        self,
        listeners: Listeners<L>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServerError> {
        let tls = match (listeners.tls, self.tls) {
            (Some(listener), Some(acceptor)) => Some((listener, acceptor)),
            (Some(_), None) => return Err(ServerError::TlsWithoutCertificate),
            (None, _) => None,
        };
        if listeners.plain.is_none() && tls.is_none() && listeners.zk.is_none() {
            return Err(ServerError::NoListener);
        }
        let listeners = Serving {
            plain: listeners.plain,
            tls,
            zk: listeners.zk,
            admin: listeners.admin,
        };
        let Server {
            config,
            clock,
            storage,
            limits,
            ..
        } = self;
        serve(config, clock, storage, limits, listeners, shutdown).await
    }
}

/// Opens the data directory and serves `listener` until `shutdown`; see
/// [`Server::open`] and [`Server::serve`].
pub async fn run<L: Listener>(
    listener: L,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    // On a blocking thread, so that any runtime (a current-thread one too)
    // keeps running its other tasks while the directory is recovered.
    let data_dir = config.data_dir.clone();
    let server = tokio::task::spawn_blocking(move || Server::open(config))
        .await
        .map_err(|err| ServerError::Io {
            path: data_dir,
            source: std::io::Error::other(err),
        })??;
    server.serve(listener, shutdown).await
}

/// The listeners a server accepts on, with the TLS one's acceptor.
struct Serving<L> {
    plain: Option<L>,
    tls: Option<(tokio::net::TcpListener, TlsAcceptor)>,
    zk: Option<tokio::net::TcpListener>,
    admin: Option<tokio::net::TcpListener>,
}

/// A connection just accepted, before any TLS handshake.
enum Accepted<S> {
    Plain(S),
    Tls(tokio::net::TcpStream, TlsAcceptor),
    ZooKeeper(tokio::net::TcpStream),
}

/// The next connection of the TLS listener, with the acceptor for its
/// handshake; never, if there is none.
async fn accept_tls<S>(
    tls: &mut Option<(tokio::net::TcpListener, TlsAcceptor)>,
) -> std::io::Result<(Accepted<S>, std::net::SocketAddr)> {
    match tls {
        Some((listener, acceptor)) => {
            let (stream, peer) = Listener::accept(listener).await?;
            Ok((Accepted::Tls(stream, acceptor.clone()), peer))
        }
        None => std::future::pending().await,
    }
}

/// The next connection of `listener`; never, if there is none.
async fn accept_on<L: Listener>(
    listener: &mut Option<L>,
) -> std::io::Result<(L::Stream, std::net::SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

async fn serve<L: Listener>(
    config: Config,
    clock: Clock,
    storage: OpenedStorage,
    limits: Arc<LiveLimits>,
    listeners: Serving<L>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let Serving {
        mut plain,
        mut tls,
        mut zk,
        admin,
    } = listeners;
    let OpenedStorage {
        stats,
        state,
        mode,
        lock,
    } = storage;
    let (proposals_tx, proposals_rx) = mpsc::channel(config.commit_queue_max);
    let (committer, starting) = match mode {
        Mode::Standalone {
            epoch,
            commit_log,
            snapshotter,
            snapshot_thread,
        } => {
            let committer =
                Committer::new(commit_log, epoch << 32, Some(snapshotter), proposals_tx);
            // Connections run on the runtime serving this future.
            let workers = tokio::runtime::Handle::current().metrics().num_workers();
            let inline = InlineCommits::for_workers(workers);
            debug!(
                workers,
                ?inline,
                "writes committed on a connection's thread"
            );
            let committer = committer.with_inline_commits(inline);
            (committer, Starting::Standalone { snapshot_thread })
        }
        Mode::Member(storage) => (
            Committer::replicated(proposals_tx),
            Starting::Member(storage),
        ),
    };
    let shared = Arc::new(
        Shared::new(config, clock, state, committer)
            .with_stats(stats)
            .with_limits(limits),
    );
    {
        // After a restart every session gets a full timeout to reconnect.
        let now_ms = shared.clock.monotonic_ms();
        let state = shared.state.read();
        let mut tracker = shared.tracker.lock();
        for (session_id, record) in state.sessions() {
            tracker.add(session_id, record.timeout_ms, now_ms);
        }
    }
    let running = match starting {
        Starting::Standalone { snapshot_thread } => {
            let stop = CancellationToken::new();
            let commit_thread = {
                let shared = shared.clone();
                let stop = stop.clone();
                // Its own thread with its own small runtime: the log's blocking
                // fdatasync never occupies an async worker, and a batch goes from
                // the queue to the disk to the tree without changing threads.
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .map_err(ServerError::Committer)?;
                std::thread::Builder::new()
                    .name("arbor-commit".into())
                    .spawn(move || runtime.block_on(run_committer(proposals_rx, shared, stop)))
                    .map_err(ServerError::Committer)?
            };
            Running::Standalone {
                stop,
                commit_thread,
                snapshot_thread,
            }
        }
        Starting::Member(storage) => {
            let ensemble = shared
                .config
                .ensemble
                .clone()
                .expect("member storage is opened only for an ensemble");
            Running::Member(bootstrap::start(&shared, &ensemble, storage, proposals_rx).await?)
        }
    };
    let background = TaskTracker::new();
    background.spawn(housekeeping::expire_sessions(shared.clone()));
    background.spawn(housekeeping::reap_nodes(shared.clone()));
    let admin_addr = admin
        .as_ref()
        .and_then(|listener| listener.local_addr().ok());
    if let Some(listener) = admin {
        background.spawn(admin::serve(listener, shared.clone()));
    }

    let connections = TaskTracker::new();
    let per_ip = Arc::new(PerIpLimit::new(shared.limits.clone()));
    let plain_addr = plain
        .as_ref()
        .and_then(|listener| listener.local_addr().ok());
    let tls_addr = tls
        .as_ref()
        .and_then(|(listener, _)| listener.local_addr().ok());
    let zk_addr = zk.as_ref().and_then(|listener| listener.local_addr().ok());
    info!(addr = ?plain_addr, tls_addr = ?tls_addr, zk_addr = ?zk_addr, admin_addr = ?admin_addr, "serving");
    warn_if_open_files_cap(&shared.limits);
    let refusals = Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT_MAX));
    // One line per interval for refusals (left_out: those since the last
    // line); the metrics count them all.
    let mut refusals_logged = LogThrottle::new(REFUSAL_LOG_INTERVAL);
    let tls_handshake_timeout = Duration::from_millis(shared.config.handshake_timeout_ms);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            () = shared.shutdown.cancelled() => break,
            accepted = accept_on(&mut plain) => {
                accepted.map(|(stream, peer)| (Accepted::Plain(stream), peer))
            }
            accepted = accept_tls(&mut tls) => accepted,
            accepted = accept_on(&mut zk) => {
                accepted.map(|(stream, peer)| (Accepted::ZooKeeper(stream), peer))
            }
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                warn!(error = %err, "accept failed");
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
        };
        let limit = shared.limits.connections_allowed();
        // Counted when the task is spawned, in this same loop: nothing
        // else opens one between the check and the count.
        if shared.stats.connections().open >= limit as u64 {
            if let Some(left_out) = refusals_logged.admit(Instant::now()) {
                warn!(%peer, limit, left_out, "connection limit reached; refusing");
            }
            shared.stats.connection_refused(false);
            let why = match shared.limits.connections_capped_by_open_files() {
                Some(files) => format!(
                    "limit {limit}: the server's open-files limit {} less {OPEN_FILES_RESERVED} kept for its own files",
                    files.soft
                ),
                None => format!("limit {limit}"),
            };
            refuse(
                stream,
                format!("too many connections to this server ({why})"),
                &refusals,
            );
            continue;
        }
        let Some(ip_slot) = PerIpLimit::acquire(&per_ip, peer.ip()) else {
            let limit = shared.limits.connections_per_ip_max();
            if let Some(left_out) = refusals_logged.admit(Instant::now()) {
                warn!(%peer, limit, left_out, "per-address connection limit reached; refusing");
            }
            shared.stats.connection_refused(true);
            refuse(
                stream,
                format!("too many connections from this address (limit {limit})"),
                &refusals,
            );
            continue;
        };
        let shared = shared.clone();
        let open = OpenConnection::new(shared.stats.clone());
        // One task type per kind of connection: a task keeps room for its
        // future's largest state, and a TLS stream (rustls' buffers) in the
        // same future cost every plain connection kilobytes while it idled.
        match stream {
            Accepted::Plain(stream) => connections.spawn(async move {
                net::serve(stream, peer, None, Wire::Native, shared).await;
                drop((ip_slot, open));
            }),
            Accepted::Tls(stream, acceptor) => connections.spawn(async move {
                if let Some(secured) = acceptor.accept(stream, peer, tls_handshake_timeout).await {
                    let subject = secured.subject;
                    net::serve(secured.stream, peer, subject, Wire::Native, shared).await;
                }
                drop((ip_slot, open));
            }),
            Accepted::ZooKeeper(stream) => connections.spawn(async move {
                net::serve(stream, peer, None, Wire::ZooKeeper, shared).await;
                drop((ip_slot, open));
            }),
        };
    }

    info!("shutting down: answering requests in flight");
    shared.shutdown.cancel();
    connections.close();
    background.close();
    let grace = Duration::from_millis(shared.config.shutdown_grace_ms);
    if tokio::time::timeout(grace, connections.wait())
        .await
        .is_err()
    {
        warn!("some connections did not finish within the grace period");
    }
    background.wait().await;
    match running {
        Running::Standalone {
            stop,
            commit_thread,
            snapshot_thread,
        } => {
            stop.cancel();
            // The committer finishes the queued batches, then drops the log and the
            // snapshotter; then a snapshot in progress is let finish.
            tokio::task::spawn_blocking(move || {
                if commit_thread.join().is_err() {
                    error!("the committer thread panicked");
                }
                snapshot_thread.join()
            })
            .await
            .ok();
        }
        Running::Member(member) => member.stop().await,
    }
    info!(last_zxid = %Hex(shared.last_zxid()), "stopped");
    drop(lock);
    if shared.stats.has_log_failed() {
        // A failure, not a stop: a supervisor must see it (and may restart
        // the server, whose recovery loses nothing acknowledged).
        return Err(ServerError::LogFailed);
    }
    Ok(())
}

/// Everything `run` needs from the data directory.
struct OpenedStorage {
    /// Counted from the start (the snapshot thread has a copy).
    stats: Arc<Stats>,
    state: StateMachine,
    mode: Mode,
    /// Held (locked) for as long as the server runs.
    lock: File,
}

/// How writes are made durable and ordered.
enum Mode {
    /// The local write-ahead log.
    Standalone {
        epoch: u64,
        commit_log: TxnLogWriter,
        snapshotter: Snapshotter,
        snapshot_thread: SnapshotThread,
    },
    /// The replicated log of an ensemble.
    Member(MemberStorage),
}

enum Starting {
    Standalone { snapshot_thread: SnapshotThread },
    Member(MemberStorage),
}

enum Running {
    Standalone {
        stop: CancellationToken,
        commit_thread: std::thread::JoinHandle<()>,
        snapshot_thread: SnapshotThread,
    },
    Member(RunningMember),
}

/// Locks the data directory, recovers the state, repairs a torn log tail and
/// opens the log for appending.
fn open_storage(config: &Config) -> Result<OpenedStorage, ServerError> {
    let layout = DataLayout::new(&config.data_dir);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| ServerError::Io { path, source }
    };
    for dir in [&layout.data_dir, &layout.log_dir, &layout.snapshot_dir] {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let stats = Arc::new(Stats::new());
    let lock = File::create(&layout.lock_file).map_err(io(&layout.lock_file))?;
    if lock.try_lock().is_err() {
        return Err(ServerError::Locked {
            path: layout.data_dir.clone(),
        });
    }
    // Backups an earlier run prepared and nobody read.
    admin::backup::clear(&layout.data_dir).map_err(io(&layout.data_dir))?;
    for removed in
        snapshot::remove_temporaries(&layout.snapshot_dir).map_err(RecoveryError::from)?
    {
        info!(path = %removed.display(), "removed an unfinished snapshot");
    }
    if let Some(ensemble) = &config.ensemble {
        let (state, storage) =
            bootstrap::open_storage(config, ensemble, &layout.log_dir, &layout.snapshot_dir)?;
        info!(
            member = ensemble.member_id,
            last_zxid = %Hex(state.last_zxid()),
            nodes = state.tree.len(),
            "opened the member's storage"
        );
        return Ok(OpenedStorage {
            stats,
            state,
            mode: Mode::Member(storage),
            lock,
        });
    }
    bootstrap::refuse_member_data(&layout.data_dir)?;
    let started = Instant::now();
    let recovery = recovery::recover(&layout)?;
    for skipped in &recovery.skipped {
        warn!(path = %skipped.path.display(), reason = %skipped.reason, "skipped a snapshot that does not verify");
    }
    info!(
        snapshot_zxid = ?recovery.snapshot.as_ref().map(|s| Hex(s.zxid)),
        replayed = recovery.replayed,
        last_zxid = %Hex(recovery.state.last_zxid()),
        nodes = recovery.state.tree.len(),
        sessions = recovery.state.session_count(),
        epoch = recovery.epoch,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "recovered"
    );
    let options = TxnLogOptions {
        segment_bytes_max: config.segment_bytes_max,
        fsync: config.fsync,
        ..TxnLogOptions::default()
    };
    if config.fsync == FsyncPolicy::Never {
        warn!(
            "--fsync never: writes are acknowledged before they are durable; a crash can lose them"
        );
    }
    let writer = TxnLogWriter::open(&layout.log_dir, &recovery.tail, options)?;
    let (snapshotter, snapshot_thread) = snapshotter::start(SnapshotPolicy {
        snapshot_dir: layout.snapshot_dir.clone(),
        log_dir: layout.log_dir.clone(),
        snap_count: config.snap_count,
        snap_tree_percent: config.snap_tree_percent,
        snap_retain: config.snap_retain,
        stats: stats.clone(),
    })
    .map_err(io(&layout.snapshot_dir))?;
    Ok(OpenedStorage {
        stats,
        state: recovery.state,
        mode: Mode::Standalone {
            epoch: recovery.epoch,
            commit_log: writer,
            snapshotter,
            snapshot_thread,
        },
        lock,
    })
}

/// Warns when the open-files limit, not `max_connections`, caps the
/// connections the server will accept (at start, and after a reload).
pub fn warn_if_open_files_cap(limits: &LiveLimits) {
    if let Some(files) = limits.connections_capped_by_open_files() {
        warn!(
            max_connections = limits.connections_max(),
            connections_allowed = limits.connections_allowed(),
            open_files_limit = files.soft,
            open_files_hard_limit = files.hard,
            reserved = OPEN_FILES_RESERVED,
            "the open-files limit leaves room for fewer connections than max_connections; raise it (ulimit -n, LimitNOFILE=) to serve more"
        );
    }
}

/// Tells a refused client why, then closes: the frame goes out before the
/// handshake, which the protocol allows for `Closing`. `LimitExceeded`
/// tells the client it reached the server, which turned it away (not
/// "unreachable"), and the message says which limit.
fn refuse<S: AsyncRead + AsyncWrite + Send + Unpin + 'static>(
    stream: Accepted<S>,
    message: String,
    refusals: &Arc<Semaphore>,
) {
    // Before its handshake a TLS client cannot read anything we say, and a
    // ZooKeeper client has no message for it: it is just closed. So is any
    // client while many refusals are still being written: each holds a
    // descriptor.
    let Accepted::Plain(mut stream) = stream else {
        return;
    };
    let Ok(permit) = refusals.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let _permit = permit;
        let mut frame = Vec::new();
        let closing = ServerMessage::Closing {
            code: ErrorCode::LimitExceeded,
            message,
        };
        if encode_frame(&closing, usize::MAX, &mut frame).is_err() {
            return;
        }
        let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, async {
            stream.write_all(&frame).await?;
            stream.shutdown().await?;
            // Read what the client sent (its handshake) before closing: a
            // socket closed with unread input sends a reset, which can reach
            // the client before our answer and hide it.
            let mut sink = [0u8; 1024];
            let mut drained = 0;
            while drained < REFUSAL_DRAIN_BYTES_MAX {
                match stream.read(&mut sink).await? {
                    0 => break,
                    read => drained += read,
                }
            }
            Ok::<_, std::io::Error>(())
        })
        .await;
    });
}

/// Counts a connection as open for as long as it is held.
struct OpenConnection(Arc<Stats>);

impl OpenConnection {
    fn new(stats: Arc<Stats>) -> Self {
        stats.connection_opened();
        Self(stats)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.connection_closed();
    }
}

/// Counts connections per client address.
struct PerIpLimit {
    limits: Arc<LiveLimits>,
    counts: Mutex<HashMap<IpAddr, usize>>,
}

/// Gives a connection's place back when dropped.
struct IpSlot {
    limit: Arc<PerIpLimit>,
    ip: IpAddr,
}

impl PerIpLimit {
    fn new(limits: Arc<LiveLimits>) -> Self {
        Self {
            limits,
            counts: Mutex::new(HashMap::new()),
        }
    }

    fn acquire(limit: &Arc<PerIpLimit>, ip: IpAddr) -> Option<IpSlot> {
        let mut counts = limit.counts.lock();
        let count = counts.entry(ip).or_insert(0);
        if *count >= limit.limits.connections_per_ip_max() {
            return None;
        }
        *count += 1;
        Some(IpSlot {
            limit: limit.clone(),
            ip,
        })
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut counts = self.limit.counts.lock();
        if let Some(count) = counts.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}
