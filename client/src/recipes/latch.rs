//! A leader latch: a long-running participant in an [`Election`] that keeps
//! campaigning in the background and tells, at any moment, whether it leads
//! (Curator's `LeaderLatch`, built on [`Election::campaign`]).
//!
//! Where [`Election::campaign`] is one campaign — wait, lead, resign — a
//! latch is for a service that should lead whenever it can for as long as
//! it runs. Its state follows the connection:
//!
//! * `Waiting` → `Leading` when its candidate node becomes the lowest.
//! * `Leading` → `Suspended` as soon as the connection is suspended: the
//!   session may expire and a successor take over before it comes back, so
//!   a suspended leader must act as a follower (stop writing).
//! * `Suspended` → `Leading` again, same node and same fencing token, if the
//!   session was resumed and the node is still the lowest (a resumed session
//!   keeps its ephemerals, and nobody can queue ahead of an existing node).
//!   Curator deletes and re-creates its node on reconnect instead, which
//!   sends the old leader to the back of the queue; keeping the node keeps
//!   leadership where it was.
//! * → `Ended` when the session expires or the client closes: a session is
//!   not replaced behind the caller's back. Start a new latch on a new
//!   client.
//!
//! Transient failures while campaigning (after the election's own retries)
//! are retried after [`CAMPAIGN_RETRY_PAUSE`]; they never end the latch.

use std::time::Duration;

use tokio::sync::{oneshot, watch};

use crate::recipes::fence::FencingToken;
use crate::recipes::fenced::Fenced;
use crate::recipes::{owned_stat, wait_connected, Election, ElectionError, Leadership};
use crate::{Client, ConnectionState, Error};

/// The pause before campaigning again after a failure that left the
/// session alive (the election already retried the request).
pub const CAMPAIGN_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Where a latch stands.
#[derive(Debug, Clone)]
pub enum LatchState {
    /// Campaigning: someone else leads, or nobody yet.
    Waiting,
    /// Leading, with this grant's fencing token and candidate node.
    Leading { token: FencingToken, node: String },
    /// Was leading, and the connection is suspended: act as a follower
    /// until it is `Leading` again.
    Suspended,
    /// Over: the session expired, the client closed, or the latch was
    /// closed (`Error::Closed`).
    Ended(Error),
}

impl LatchState {
    /// Whether this state is `Leading`.
    pub fn is_leading(&self) -> bool {
        matches!(self, LatchState::Leading { .. })
    }
}

/// A background participant in an election.
///
/// ```
/// use arbor_client::recipes::{Election, LeaderLatch};
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// let latch = LeaderLatch::start(&Election::new(&client, "/election/svc"), "10.0.0.7:8080");
/// let token = latch.wait_leader().await?; // the only candidate: it leads
/// assert!(latch.is_leader());
/// // ... lead: check `latch.is_leader()` (or watch `latch.changes()`) before
/// // each step, send `token` with every write ...
/// # let _ = token;
/// latch.close().await?; // resigns
/// # Ok(()) }
/// ```
pub struct LeaderLatch {
    client: Client,
    state: watch::Receiver<LatchState>,
    stop: Option<oneshot::Sender<oneshot::Sender<Result<(), ElectionError>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaderLatch {
    /// Joins `election` with `value` (what observers see) and keeps
    /// campaigning in the background until closed or the session ends.
    /// Must be called within a tokio runtime.
    pub fn start(election: &Election, value: impl Into<Vec<u8>>) -> LeaderLatch {
        let (state_tx, state) = watch::channel(LatchState::Waiting);
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(run(election.clone(), value.into(), state_tx, stopped));
        LeaderLatch {
            client: election.client().clone(),
            state,
            stop: Some(stop),
            task,
        }
    }

    /// The state now.
    pub fn state(&self) -> LatchState {
        self.state.borrow().clone()
    }

    /// Whether this latch leads now: `Leading`, and the connection is up
    /// (so a suspension not yet seen by the latch's task counts as not
    /// leading too).
    pub fn is_leader(&self) -> bool {
        self.state.borrow().is_leading() && self.client.state().is_connected()
    }

    /// A receiver of every change of state (the latest is always kept).
    ///
    /// ```no_run
    /// # async fn demo(latch: arbor_client::recipes::LeaderLatch) {
    /// let mut changes = latch.changes();
    /// while changes.changed().await.is_ok() {
    ///     println!("now {:?}", *changes.borrow());
    /// }
    /// # }
    /// ```
    pub fn changes(&self) -> watch::Receiver<LatchState> {
        self.state.clone()
    }

    /// Waits until this latch leads, and returns the grant's fencing token;
    /// the error that ended the latch if it ends first.
    pub async fn wait_leader(&self) -> Result<FencingToken, Error> {
        let mut state = self.state.clone();
        loop {
            match &*state.borrow_and_update() {
                LatchState::Leading { token, .. } => return Ok(*token),
                LatchState::Ended(err) => return Err(err.clone()),
                LatchState::Waiting | LatchState::Suspended => {}
            }
            if state.changed().await.is_err() {
                return Err(Error::Closed);
            }
        }
    }

    /// A transaction that commits only while this latch's candidate node
    /// still stands (see [`Fenced`]); `None` unless leading.
    pub fn fenced(&self) -> Option<Fenced> {
        match &*self.state.borrow() {
            LatchState::Leading { node, .. } => Some(Fenced::new(&self.client, node)),
            _ => None,
        }
    }

    /// Leaves the election (resigning if leading) and waits until the
    /// candidate node is gone.
    pub async fn close(mut self) -> Result<(), ElectionError> {
        let Some(stop) = self.stop.take() else {
            return Ok(());
        };
        let (reply, replied) = oneshot::channel();
        if stop.send(reply).is_err() {
            return Ok(()); // the task already ended, and left nothing behind
        }
        replied.await.unwrap_or(Ok(()))
    }
}

impl Drop for LeaderLatch {
    /// Stops the task; a held candidate node is deleted in the background.
    fn drop(&mut self) {
        if self.stop.is_some() {
            self.task.abort();
        }
    }
}

/// The latch's task: participates until stopped or the session ends.
async fn run(
    election: Election,
    value: Vec<u8>,
    state: watch::Sender<LatchState>,
    mut stop: oneshot::Receiver<oneshot::Sender<Result<(), ElectionError>>>,
) {
    // Held outside the participation, so a stop can resign it and wait.
    let mut held: Option<Leadership> = None;
    let ended = tokio::select! {
        reply = &mut stop => {
            let result = match held.take() {
                Some(leadership) => leadership.resign().await,
                None => Ok(()),
            };
            state.send_replace(LatchState::Ended(Error::Closed));
            if let Ok(reply) = reply {
                let _ = reply.send(result);
            }
            return;
        }
        ended = participate(&election, &value, &state, &mut held) => ended,
    };
    tracing::debug!(path = election.path(), error = %ended, "leader latch ended");
    state.send_replace(LatchState::Ended(ended));
}

/// Campaigns, leads, rides out suspensions; returns why it ended.
async fn participate(
    election: &Election,
    value: &[u8],
    state: &watch::Sender<LatchState>,
    held: &mut Option<Leadership>,
) -> Error {
    let client = election.client();
    loop {
        let Some(leadership) = held.as_ref() else {
            state.send_replace(LatchState::Waiting);
            match election.campaign(value.to_vec()).await {
                Ok(leadership) => *held = Some(leadership),
                Err(ElectionError::Client(err)) if err.is_session_ended() => return err,
                Err(err) => {
                    tracing::debug!(path = election.path(), error = %err, "campaign failed; again");
                    tokio::time::sleep(CAMPAIGN_RETRY_PAUSE).await;
                }
            }
            continue;
        };
        state.send_replace(LatchState::Leading {
            token: leadership.fencing_token(),
            node: leadership.node().to_owned(),
        });
        match leadership.lost().await {
            ConnectionState::Expired => return Error::SessionExpired,
            ConnectionState::Closed => return Error::Closed,
            _ => {}
        }
        state.send_replace(LatchState::Suspended);
        if let Err(err) = wait_connected(client).await {
            return err;
        }
        // The session is back, and with it the node, unless it was
        // removed meanwhile; still the lowest, unless so.
        let node = leadership.node().to_owned();
        let still_leading = match (owned_stat(client, &node).await, election.leader().await) {
            (Ok(Ok(_)), Ok(Some(leader))) => leader.node == node,
            (Err(err), _) | (_, Err(ElectionError::Client(err))) if err.is_session_ended() => {
                return err
            }
            _ => false,
        };
        if !still_leading {
            tracing::info!(path = election.path(), node = %node, "leadership not regained; campaigning again");
            // Dropping it deletes the node in the background.
            *held = None;
        }
    }
}
