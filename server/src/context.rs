//! The state every part of a running server shares, each piece with one
//! owner-lock. Lock order, where more than one is held: the committer's
//! order → `state` → `watches` → `connections` → `tracker`. None is ever held
//! across an `.await`.

use std::sync::atomic::{AtomicU64, Ordering};

use arbor_protocol::Zxid;
use parking_lot::{Mutex, RwLock};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::config::Config;
use crate::net::ConnectionRegistry;
use crate::pipeline::apply::StateMachine;
use crate::pipeline::commit::Committer;
use crate::session::SessionTracker;
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
}

impl Shared {
    pub fn new(config: Config, state: StateMachine, committer: Committer) -> Self {
        let last_zxid = AtomicU64::new(state.last_zxid());
        Self {
            clock: Clock::new(),
            watches: Mutex::new(WatchManager::new(config.watches_per_session_max)),
            connections: Mutex::new(ConnectionRegistry::default()),
            tracker: Mutex::new(SessionTracker::new(config.tick_ms)),
            state: RwLock::new(state),
            last_zxid,
            committer,
            shutdown: CancellationToken::new(),
            config,
        }
    }

    pub fn last_zxid(&self) -> Zxid {
        self.last_zxid.load(Ordering::Acquire)
    }

    pub(crate) fn publish_zxid(&self, zxid: Zxid) {
        self.last_zxid.store(zxid, Ordering::Release);
    }
}
