//! A lock worker: takes a fair lock, and while it believes it holds it
//! writes to a store fenced by the lock's token, then releases it; over
//! and over, with a new session when its session ends.
//!
//! "Believes it holds it" is what a lock user acts on: from the grant
//! until it starts its release or learns that it may have lost the lock —
//! `Guard::lost()` with Arbor's client (the session suspended or gone),
//! `Disconnected`/`Expired` with ZooKeeper's (Curator's SUSPENDED). Each
//! protocol contends for its own lock path, with its own client's recipe.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arbor_check::{Grant, GrantEnd, StoreWrite};
use arbor_client::recipes::{Fence, Mutex};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tracing::debug;
use zookeeper_client as zk;

use super::{open_tracked, Context, Tracked, LOCKS};
use crate::client::{Protocol, Session};

/// How long a holder keeps the lock, at most, and how often it writes to
/// the store meanwhile.
const HOLD_MAX: Duration = Duration::from_millis(400);
const STORE_WRITE_INTERVAL: Duration = Duration::from_millis(15);
/// Pause after a failed attempt to take the lock.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// How long one attempt to take the lock may wait in its queue.
const WAIT_MAX: Duration = Duration::from_secs(30);

/// Tries to clear a ZooKeeper worker's own nodes from its lock queue
/// (each after `RETRY_PAUSE`): a few seconds, past a reconnect.
const SWEEP_TRIES_MAX: usize = 100;

/// No time yet.
const NOT_YET: u64 = u64::MAX;

/// The lock each protocol's workers contend for.
pub fn lock_path(protocol: Protocol) -> String {
    match protocol {
        Protocol::Native => format!("{LOCKS}/native"),
        Protocol::ZooKeeper => format!("{LOCKS}/zookeeper"),
    }
}

/// Runs lock worker `process` until the run stops; returns its last
/// session, left open. Every worker of `protocol` shares `fence`.
pub async fn run(
    context: Context,
    process: u32,
    protocol: Protocol,
    fence: Arc<Fence>,
    seed: u64,
) -> Option<Tracked> {
    let mut rng = StdRng::seed_from_u64(seed ^ u64::from(process) ^ 0x10c4);
    let servers = context.servers.all(protocol);
    while let Some(tracked) = open_tracked(&context, process, protocol, &servers).await {
        loop {
            if context.stop.is_cancelled() {
                return Some(tracked);
            }
            let hold = rng.gen_range(Duration::ZERO..HOLD_MAX);
            let holder = Holder {
                context: &context,
                tracked: &tracked,
                process,
                fence: &fence,
                lock: lock_path(protocol),
            };
            let held = tokio::select! {
                held = holder.take_and_hold(hold) => held,
                // A tenure cut short is not recorded: the run is over.
                () = context.stop.cancelled() => {
                    holder.leave().await;
                    return Some(tracked);
                }
            };
            match held {
                Ok(()) => {}
                Err(Gone) => {
                    super::expired(&context, &tracked);
                    break;
                }
            }
        }
    }
    None
}

/// The session ended.
struct Gone;

struct Holder<'a> {
    context: &'a Context,
    tracked: &'a Tracked,
    process: u32,
    fence: &'a Fence,
    lock: String,
}

impl Holder<'_> {
    async fn take_and_hold(&self, hold: Duration) -> Result<(), Gone> {
        match &self.tracked.session {
            Session::Native(client) => self.native(client, hold).await,
            Session::ZooKeeper(client) => self.zookeeper(client, hold).await,
        }
    }

    async fn native(&self, client: &arbor_client::Client, hold: Duration) -> Result<(), Gone> {
        let mutex = Mutex::new(client, &self.lock);
        let guard = match mutex.lock_timeout(WAIT_MAX).await {
            Ok(guard) => guard,
            Err(err) => {
                debug!(process = self.process, error = %err, "lock not taken");
                return self.after_failure(client.state().is_terminal()).await;
            }
        };
        let granted_us = self.context.recorder.now_us();
        let lost_us = Arc::new(AtomicU64::new(NOT_YET));
        let watching = async {
            guard.lost().await;
            lost_us.store(self.context.recorder.now_us(), Ordering::Release);
        };
        let token = guard.fencing_token();
        let (end, ended_us) = tokio::select! {
            () = watching => (GrantEnd::Lost, lost_us.load(Ordering::Acquire)),
            ended = self.write_while_held(token, hold, &lost_us) => ended,
        };
        self.record(token, granted_us, end, ended_us);
        if end == GrantEnd::Released {
            let _ = guard.release().await;
        }
        Ok(())
    }

    async fn zookeeper(&self, client: &zk::Client, hold: Duration) -> Result<(), Gone> {
        let Ok(prefix) = zk::LockPrefix::new_curator(&self.lock, "lock-") else {
            return Ok(());
        };
        let options = zk::LockOptions::new(zk::Acls::anyone_all());
        let mut states = client.state_watcher();
        let taken = tokio::time::timeout(WAIT_MAX, client.lock(prefix, b"", options)).await;
        let lock = match taken {
            Ok(Ok(lock)) => lock,
            Ok(Err(err)) => {
                debug!(process = self.process, error = %err, "lock not taken");
                let gone = matches!(err, zk::Error::SessionExpired | zk::Error::ClientClosed);
                if !gone {
                    self.sweep(client).await;
                }
                return self.after_failure(gone).await;
            }
            Err(_) => {
                self.sweep(client).await;
                return Ok(());
            }
        };
        let granted_us = self.context.recorder.now_us();
        let lost_us = Arc::new(AtomicU64::new(NOT_YET));
        if client.state() != zk::SessionState::SyncConnected {
            lost_us.store(granted_us, Ordering::Release);
        }
        let watching = {
            let (lost_us, clock) = (lost_us.clone(), self.context.recorder.clone());
            async move {
                while states.changed().await == zk::SessionState::SyncConnected {}
                lost_us.store(clock.now_us(), Ordering::Release);
            }
        };
        let token = match client.check_stat(lock.lock_path()).await {
            Ok(Some(stat)) => stat.czxid as u64,
            // Gone already, or unknown: the grant cannot be used.
            _ => return Ok(()),
        };
        let (end, ended_us) = tokio::select! {
            () = watching => (GrantEnd::Lost, lost_us.load(Ordering::Acquire)),
            ended = self.write_while_held(token, hold, &lost_us) => ended,
        };
        self.record(token, granted_us, end, ended_us);
        // Dropping the lock client deletes its node (in the background).
        drop(lock);
        self.sweep(client).await;
        Ok(())
    }

    /// After an attempt or a tenure cut short by the run's end: Arbor's
    /// recipe cleans up by itself (that is under test); the crate's lock
    /// is helped by a sweep.
    async fn leave(&self) {
        if let Session::ZooKeeper(client) = &self.tracked.session {
            self.sweep(client).await;
        }
    }

    /// Deletes every node of this session left in the lock's queue: the
    /// worker has at most one attempt at a time, and it is over. The
    /// crate's own clean-up gives up when a request fails because its
    /// connection timed out ("no response from connection", not the
    /// `ConnectionLoss` its retries look for), leaving the node to block
    /// the queue for the session's life; Curator's retry loop would go on,
    /// and so does this, for a while.
    async fn sweep(&self, client: &zk::Client) {
        let own = client.session_id().0;
        for _ in 0..SWEEP_TRIES_MAX {
            match sweep_once(client, &self.lock, own).await {
                Ok(()) | Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => return,
                Err(err) => {
                    debug!(process = self.process, error = %err, "sweeping the lock queue again");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
    }

    /// Writes to the store every [`STORE_WRITE_INTERVAL`] for `hold`, as
    /// long as nothing says the lock may be lost; how the tenure ended and
    /// when the holder stopped taking itself for the holder.
    async fn write_while_held(
        &self,
        token: u64,
        hold: Duration,
        lost_us: &AtomicU64,
    ) -> (GrantEnd, u64) {
        let until = tokio::time::Instant::now() + hold;
        loop {
            // Checked right before each write, as a careful holder does.
            let lost = lost_us.load(Ordering::Acquire);
            if lost != NOT_YET {
                return (GrantEnd::Lost, lost);
            }
            if tokio::time::Instant::now() >= until {
                return (GrantEnd::Released, self.context.recorder.now_us());
            }
            self.store_write(token);
            tokio::time::sleep(STORE_WRITE_INTERVAL).await;
        }
    }

    fn store_write(&self, token: u64) {
        let clock = &self.context.recorder;
        let (at_us, accepted) = match self.fence.write(token, || clock.now_us()) {
            Ok(at_us) => (at_us, true),
            Err(_) => (clock.now_us(), false),
        };
        let write = StoreWrite {
            lock: self.lock.clone(),
            process: self.process,
            token,
            at_us,
            accepted,
        };
        clock.with(|history| history.store_writes.push(write));
    }

    fn record(&self, token: u64, granted_us: u64, end: GrantEnd, ended_us: u64) {
        let grant = Grant {
            lock: self.lock.clone(),
            process: self.process,
            session: self.tracked.session.id(),
            token,
            granted_us,
            ended_us: Some(ended_us),
            end,
        };
        self.context
            .recorder
            .with(|history| history.grants.push(grant));
    }

    /// After a failed attempt: `Gone` if the session ended, else a pause.
    async fn after_failure(&self, session_gone: bool) -> Result<(), Gone> {
        if session_gone {
            return Err(Gone);
        }
        tokio::time::sleep(RETRY_PAUSE).await;
        Ok(())
    }
}

/// One pass of [`Holder::sweep`].
async fn sweep_once(client: &zk::Client, lock: &str, own: i64) -> Result<(), zk::Error> {
    let names = match client.list_children(lock).await {
        Ok(names) => names,
        Err(zk::Error::NoNode) => return Ok(()),
        Err(err) => return Err(err),
    };
    for name in names {
        let node = format!("{lock}/{name}");
        let owned = match client.check_stat(&node).await? {
            Some(stat) => stat.ephemeral_owner == own,
            None => false,
        };
        if owned {
            match client.delete(&node, None).await {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(err) => return Err(err),
            }
        }
    }
    Ok(())
}
