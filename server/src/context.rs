//! The state every part of a running server shares, each piece with one
//! owner-lock. Lock order, where more than one is held: the committer's
//! order → `state` → `watches` → `connections` → `tracker`. None is ever held
//! across an `.await`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use arbor_protocol::{ErrorCode, Zxid};
use futures_util::future::BoxFuture;
use parking_lot::{Mutex, RwLock};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::config::{Config, LiveLimits};
use crate::net::ConnectionRegistry;
use crate::pipeline::apply::StateMachine;
use crate::pipeline::commit::Committer;
use crate::session::SessionTracker;
use crate::stats::Stats;
use crate::txn::{Decision, Txn};
use crate::watch::WatchManager;

pub struct Shared {
    pub config: Config,
    pub clock: Clock,
    /// The tree and session table. Written only by the committer; read by
    /// connections, which never wait for a sync to read.
    pub state: RwLock<StateMachine>,
    pub watches: Mutex<WatchManager>,
    pub connections: Mutex<ConnectionRegistry>,
    pub tracker: Mutex<SessionTracker>,
    /// Copy of `state.last_zxid()`, for replies that need no lock.
    last_zxid: AtomicU64,
    /// The order of writes: [`Committer::propose`] queues one for the commit
    /// thread, [`Committer::try_commit_now`] commits a lone one at once.
    pub committer: Committer,
    /// Cancelled when the server begins to shut down.
    pub shutdown: CancellationToken,
    /// Set once when this server is a member of an ensemble.
    ensemble: OnceLock<Arc<dyn Ensemble>>,
    /// Bytes every connection has queued for its client and not yet written.
    pub outbound_total: Arc<crate::net::OutboundTotal>,
    /// What the server counts; every view of its figures reads these.
    pub stats: Arc<Stats>,
    /// The connection limits in force (`config` holds those it started
    /// with).
    pub limits: Arc<LiveLimits>,
    /// Backups prepared for `arbor backup` and not yet read.
    pub backups: crate::admin::backup::Backups,
}

/// What being an ensemble member changes for the rest of the server.
pub trait Ensemble: Send + Sync {
    /// Whether this member leads, as far as it knows (for status views).
    fn is_leader(&self) -> bool;
    /// The term this member leads in, while a quorum has recently
    /// acknowledged it: only then may it decide expiries and reaping,
    /// decisions made once and then replicated, stamped with this term.
    fn leading_term(&self) -> Option<u64>;
    /// Completes once this member has applied everything the leader had
    /// committed or held when it was called (`sync`: the next read is
    /// linearizable, and sees any write handed to the leader before).
    fn sync(&self) -> BoxFuture<'static, Result<(), ErrorCode>>;
    /// Whether this member may serve its clients: it has fresh proof that
    /// it belongs to the ensemble's working majority, so the majority will
    /// not expire a session it answers for (see `crate::cluster::contact`).
    fn vouches(&self) -> bool {
        self.standing() == Standing::Serving
    }
    /// Where this member stands with its clients now.
    fn standing(&self) -> Standing;
    /// This member's view of the ensemble.
    fn status(&self) -> arbor_protocol::ClusterStatus;
    /// Whether this member can serve clients now: it knows a leader that
    /// holds a quorum, and has applied what it has received; else why not.
    fn readiness(&self) -> Result<(), String>;
    /// Adds (`Some` addresses) or removes (`None`) member `id`, through the
    /// leader; completes once the change is committed.
    fn change_member(
        &self,
        id: u64,
        addrs: Option<(String, String)>,
    ) -> BoxFuture<'static, Result<(), ErrorCode>>;
}

/// Where a server stands with its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// It serves them: standalone, or a member in contact with the
    /// ensemble's majority.
    Serving,
    /// A member that has not yet been in contact since it started: it will
    /// likely serve in a moment.
    Joining,
    /// A member that lost contact with the majority: its clients must go
    /// elsewhere.
    CutOff,
}

/// What a client of a member cut off from the majority is told, when its
/// connection is closed or its handshake refused.
pub const CUT_OFF_MESSAGE: &str =
    "this member cannot reach the ensemble's majority; try another member";

/// Who decides expiries and reaping on this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decider {
    /// A standalone server: the only one there is.
    Standalone,
    /// The ensemble's leader of `term`.
    Leader { term: u64 },
}

impl Decider {
    /// The txn that records `decision`: as is on a standalone server;
    /// stamped with the term in an ensemble, so that it applies only from
    /// an entry of that term.
    pub fn txn(self, decision: Decision) -> Txn {
        match self {
            Decider::Standalone => decision.txn(),
            Decider::Leader { term } => Txn::Decided { term, decision },
        }
    }
}

impl Shared {
    pub fn new(config: Config, clock: Clock, state: StateMachine, committer: Committer) -> Self {
        let last_zxid = AtomicU64::new(state.last_zxid());
        Self {
            clock,
            watches: Mutex::new(WatchManager::new(config.watches_per_session_max)),
            connections: Mutex::new(ConnectionRegistry::default()),
            tracker: Mutex::new(SessionTracker::new(config.tick_ms)),
            state: RwLock::new(state),
            last_zxid,
            committer,
            shutdown: CancellationToken::new(),
            ensemble: OnceLock::new(),
            outbound_total: Arc::default(),
            stats: Arc::default(),
            limits: Arc::new(LiveLimits::new(&config)),
            backups: crate::admin::backup::Backups::default(),
            config,
        }
    }

    /// Counts into `stats` (shared with parts made before this, such as
    /// the snapshot thread) instead of a fresh set.
    pub fn with_stats(mut self, stats: Arc<Stats>) -> Self {
        self.stats = stats;
        self
    }

    /// Reads its connection limits from `limits`, which a reload may
    /// change.
    pub fn with_limits(mut self, limits: Arc<LiveLimits>) -> Self {
        self.limits = limits;
        self
    }

    /// Makes this server an ensemble member (once, before serving).
    pub fn join_ensemble(&self, ensemble: Arc<dyn Ensemble>) {
        if self.ensemble.set(ensemble).is_err() {
            tracing::error!("join_ensemble called twice; the first one stands");
        }
    }

    pub fn ensemble(&self) -> Option<&Arc<dyn Ensemble>> {
        self.ensemble.get()
    }

    /// Whether this server decides expiries and reaping now, and as what:
    /// a standalone server always; a member while it leads a quorum.
    pub fn decider(&self) -> Option<Decider> {
        match self.ensemble.get() {
            None => Some(Decider::Standalone),
            Some(ensemble) => ensemble.leading_term().map(|term| Decider::Leader { term }),
        }
    }

    /// Whether this server may serve its clients now: a standalone server
    /// always, a member while it reaches the ensemble's majority.
    pub fn vouches(&self) -> bool {
        self.standing() == Standing::Serving
    }

    /// Where this server stands with its clients now.
    pub fn standing(&self) -> Standing {
        self.ensemble
            .get()
            .map_or(Standing::Serving, |ensemble| ensemble.standing())
    }

    pub fn last_zxid(&self) -> Zxid {
        self.last_zxid.load(Ordering::Acquire)
    }

    pub(crate) fn publish_zxid(&self, zxid: Zxid) {
        self.last_zxid.store(zxid, Ordering::Release);
    }
}
