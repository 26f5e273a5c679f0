//! Starting an ensemble member: its storage from the data directory, its
//! raft, and the tasks around it; and stopping them again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::{Raft, SnapshotPolicy};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use super::campaign::{ELECTION_TIMEOUT_MAX_MS, ELECTION_TIMEOUT_MIN_MS, HEARTBEAT_MS};
use super::contact::Contact;
use super::liveness::{close_when_cut_off, send_touches, watch_leadership};
use super::log_files::{LogError, LogOptions};
use super::log_store::{LogIoThread, LogStore};
use super::member::{run_replicator, Member};
use super::network::PeerNetwork;
use super::peer::RAFT_PAYLOAD_ENTRIES_MAX;
use super::peer_server::{self, FORWARDS_QUEUED_MAX};
use super::peer_tls::PeerTls;
use super::records::{MemberAddr, MemberId};
use super::state_machine::{load_newest, ClusterStateMachine};
use super::types::TypeConfig;
use crate::config::{Config, EnsembleConfig};
use crate::context::Shared;
use crate::pipeline::apply::StateMachine;
use crate::pipeline::commit::Proposal;
use crate::storage::snapshot::SnapshotError;
use crate::storage::snapshotter;

/// How long sending a snapshot chunk, and installing the last one, may
/// take. Installing loads the whole tree to verify it (about 2 s for a
/// million nodes in a release build); openraft's 200 ms default made a
/// member behind a large tree retry the install for ever.
const INSTALL_SNAPSHOT_TIMEOUT_MS: u64 = 60_000;
/// Entries kept in the log behind a snapshot, so a follower slightly behind
/// catches up from the log rather than by a whole snapshot.
const LOG_KEPT_BEHIND_SNAPSHOT: u64 = 1000;

#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error("replicated log: {0}")]
    Log(#[from] LogError),
    #[error("snapshot: {0}")]
    Snapshot(#[from] SnapshotError),
    #[error("{dir} holds a standalone server's log: an ensemble member cannot start from it (converting a standalone data directory is not supported yet); use an empty --data-dir")]
    StandaloneData { dir: PathBuf },
    #[error("{dir} belongs to an ensemble member (it has a replicated log in raft/): start it with its --member-id and --member flags")]
    MemberData { dir: PathBuf },
    #[error("raft: {0}")]
    Raft(String),
    #[error("peer TLS: {0}")]
    PeerTls(#[from] crate::net::TlsError),
    #[error("cannot listen for peers on {addr}: {source}")]
    PeerListen {
        addr: String,
        source: std::io::Error,
    },
}

/// A member's storage, opened and recovered, and its bound peer port.
pub struct MemberStorage {
    log_store: LogStore,
    log_thread: LogIoThread,
    snapshot_dir: PathBuf,
    loaded_from: Option<PathBuf>,
    peer_listener: std::net::TcpListener,
    peer_tls: Option<Arc<PeerTls>>,
}

/// Refuses to start a standalone server on a member's data directory.
pub fn refuse_member_data(data_dir: &Path) -> Result<(), MemberError> {
    if raft_dir(data_dir).exists() {
        return Err(MemberError::MemberData {
            dir: data_dir.to_owned(),
        });
    }
    Ok(())
}

/// `<data-dir>/raft` holds the replicated log; snapshots go where a
/// standalone server keeps them.
pub fn raft_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("raft")
}

/// Opens a member's storage (blocking) and returns the state recovered from
/// its newest snapshot. `log_dir` is where a standalone server would keep
/// its log: a member refuses to start over one.
pub fn open_storage(
    config: &Config,
    ensemble: &EnsembleConfig,
    log_dir: &Path,
    snapshot_dir: &Path,
) -> Result<(StateMachine, MemberStorage), MemberError> {
    // First: a bad certificate is a setting to fix, found before any data
    // is touched.
    let peer_tls = config
        .peer_tls
        .as_ref()
        .map(PeerTls::load)
        .transpose()?
        .map(Arc::new);
    let standalone_log = std::fs::read_dir(log_dir)
        .map(|mut entries| entries.next().is_some())
        .unwrap_or(false);
    if standalone_log {
        return Err(MemberError::StandaloneData {
            dir: config.data_dir.clone(),
        });
    }
    let (state, loaded_from) = load_newest(snapshot_dir)?;
    let (log_store, log_thread) = LogStore::open(
        &raft_dir(&config.data_dir),
        LogOptions {
            segment_bytes_max: config.segment_bytes_max,
            fsync: config.fsync,
            preallocate_bytes: crate::storage::txnlog::PREALLOCATE_BYTES_DEFAULT,
            spares: true,
        },
    )?;
    let peer_addr = &ensemble.members[&ensemble.member_id].peer;
    let peer_listener = std::net::TcpListener::bind(peer_addr)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
        .map_err(|source| MemberError::PeerListen {
            addr: peer_addr.clone(),
            source,
        })?;
    let storage = MemberStorage {
        log_store,
        log_thread,
        snapshot_dir: snapshot_dir.to_owned(),
        loaded_from,
        peer_listener,
        peer_tls,
    };
    Ok((state, storage))
}

/// A running member's parts, for the shutdown.
pub struct RunningMember {
    raft: Raft<TypeConfig>,
    log_thread: LogIoThread,
    tasks: TaskTracker,
    stop: CancellationToken,
}

fn raft_config(config: &Config) -> Result<openraft::Config, MemberError> {
    openraft::Config {
        cluster_name: "arbor".into(),
        heartbeat_interval: HEARTBEAT_MS,
        election_timeout_min: ELECTION_TIMEOUT_MIN_MS,
        election_timeout_max: ELECTION_TIMEOUT_MAX_MS,
        max_payload_entries: RAFT_PAYLOAD_ENTRIES_MAX,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snap_count),
        max_in_snapshot_log_to_keep: LOG_KEPT_BEHIND_SNAPSHOT,
        install_snapshot_timeout: INSTALL_SNAPSHOT_TIMEOUT_MS,
        ..Default::default()
    }
    .validate()
    .map_err(|err| MemberError::Raft(err.to_string()))
}

/// Starts raft over `storage` and the member's tasks; writes proposed to the
/// server's committer arrive on `proposals`.
pub async fn start(
    shared: &Arc<Shared>,
    ensemble: &EnsembleConfig,
    storage: MemberStorage,
    proposals: mpsc::Receiver<Proposal>,
) -> Result<RunningMember, MemberError> {
    let MemberStorage {
        log_store,
        log_thread,
        snapshot_dir,
        loaded_from,
        peer_listener,
        peer_tls,
    } = storage;
    let id = ensemble.member_id;
    let state_machine = ClusterStateMachine::new(id, shared.clone(), &snapshot_dir, loaded_from);
    let raft = Raft::new(
        id,
        Arc::new(raft_config(&shared.config)?),
        PeerNetwork {
            tls: peer_tls.clone(),
        },
        log_store,
        state_machine,
    )
    .await
    .map_err(|err| MemberError::Raft(err.to_string()))?;
    let initialized = raft
        .is_initialized()
        .await
        .map_err(|err| MemberError::Raft(err.to_string()))?;
    if !initialized && !ensemble.join {
        // Every member of a new ensemble does this with the same members:
        // the first entry is the same everywhere, and an election follows.
        let members: BTreeMap<MemberId, MemberAddr> = ensemble.members.clone();
        if let Err(err) = raft.initialize(members).await {
            warn!(error = %err, "not initializing the ensemble (another member did)");
        }
    }
    let contact = Arc::new(Contact::default());
    let member = Arc::new(Member::new(
        id,
        raft.clone(),
        &ensemble.members,
        peer_tls.clone(),
        contact.clone(),
        shared.clock.clone(),
        shared.config.tick_ms,
    ));
    shared.join_ensemble(member.clone());
    let stop = CancellationToken::new();
    let tasks = TaskTracker::new();
    let peer_listener = tokio::net::TcpListener::from_std(peer_listener).map_err(|source| {
        MemberError::PeerListen {
            addr: ensemble.members[&id].peer.clone(),
            source,
        }
    })?;
    let (forwards, forwarded) = mpsc::channel(FORWARDS_QUEUED_MAX);
    tasks.spawn(peer_server::serve(
        peer_listener,
        peer_tls,
        raft.clone(),
        shared.clone(),
        forwards,
        contact,
        stop.clone(),
    ));
    tasks.spawn(watch_leadership(
        member.clone(),
        shared.clone(),
        stop.clone(),
    ));
    tasks.spawn(send_touches(member.clone(), shared.clone(), stop.clone()));
    tasks.spawn(close_when_cut_off(
        member.clone(),
        shared.clone(),
        stop.clone(),
    ));
    tasks.spawn(run_replicator(proposals, forwarded, member));
    tasks.spawn(snapshot_by_writes(
        raft.clone(),
        shared.clone(),
        shared.config.snap_count,
        shared.config.snap_tree_percent,
        stop.clone(),
    ));
    tasks.close();
    info!(
        member = id,
        members = ensemble.members.len(),
        "ensemble member started"
    );
    Ok(RunningMember {
        raft,
        log_thread,
        tasks,
        stop,
    })
}

/// How often [`snapshot_by_writes`] looks at the zxid.
const SNAPSHOT_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);

/// openraft spaces snapshots by log entries, and an entry holds a batch of
/// writes: under load one entry may carry hundreds. `--snap-count` counts
/// writes (as a standalone server does), so a snapshot is also asked for
/// once that many writes were applied since the last one asked for here,
/// or `--snap-tree-percent` % of the tree's nodes if that is more
/// ([`snapshotter::writes_between`]). openraft's own count of entries
/// applies too, unchanged: it also covers entries that write nothing
/// (session touches), and with one write per entry it still snapshots a big
/// tree every `snap_count` writes.
async fn snapshot_by_writes(
    raft: Raft<TypeConfig>,
    shared: Arc<Shared>,
    snap_count: u64,
    snap_tree_percent: u64,
    stop: CancellationToken,
) {
    let mut asked_at = shared.last_zxid();
    loop {
        tokio::select! {
            () = tokio::time::sleep(SNAPSHOT_CHECK_INTERVAL) => {}
            () = stop.cancelled() => return,
        }
        let now = shared.last_zxid();
        let tree_nodes = shared.state.read().tree.len();
        if now.saturating_sub(asked_at)
            >= snapshotter::writes_between(snap_count, snap_tree_percent, tree_nodes)
        {
            // openraft ignores it while a snapshot is being built.
            if raft.trigger().snapshot().await.is_err() {
                return;
            }
            asked_at = now;
        }
    }
}

impl RunningMember {
    /// Stops raft and the member's tasks, then waits for the log's last
    /// writes.
    pub async fn stop(self) {
        self.stop.cancel();
        if let Err(err) = self.raft.shutdown().await {
            warn!(error = %err, "raft did not stop cleanly");
        }
        drop(self.raft);
        // The replicator ends when the server's committer (its queue) goes.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), self.tasks.wait()).await;
        let log_thread = self.log_thread;
        let _ = tokio::task::spawn_blocking(move || log_thread.join()).await;
    }
}
