//! The connection state of a client, and the stream of its changes.
//!
//! ```text
//! Connected ──loss──▶ Suspended ──resumed──▶ Reconnected ──loss──▶ Suspended ...
//! any state ──close() or every handle dropped──▶ Closed
//! any state ──server says expired, or no resume within the timeout──▶ Expired
//! ```
//!
//! Invariants:
//! * The state is changed only by the connection task (and by the first
//!   `Shared::end`), under one lock that also guards subscribing, so a
//!   subscriber sees every change made after it subscribed, exactly once, in
//!   order.
//! * `Expired` and `Closed` are terminal: once one is set the state never
//!   changes again, and a [`StateStream`] ends right after yielding it.
//! * A subscriber buffers at most [`STATE_CHANGES_MAX`] changes. One that falls
//!   further behind loses the oldest ones (logged at warn) and goes on with the
//!   oldest it still has; [`Client::state`](crate::Client::state) always tells
//!   the current state.

use parking_lot::Mutex;
use tokio::sync::broadcast;
use tracing::{debug, warn};

/// Most state changes a [`StateStream`] buffers for a slow subscriber. A
/// session flips between `Suspended` and `Reconnected` at most once per
/// reconnect round, so this is minutes of flapping.
pub const STATE_CHANGES_MAX: usize = 64;

/// Where a client's connection to its session stands.
///
/// ```no_run
/// # async fn demo(client: arbor_client::Client) {
/// use arbor_client::ConnectionState;
///
/// if client.state() == ConnectionState::Suspended {
///     println!("disconnected; the session may still be alive");
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectionState {
    /// Connected, on the connection opened by [`Client::connect`](crate::Client::connect).
    Connected,
    /// The connection was lost and the client is reconnecting; the session
    /// (and its ephemeral nodes) may still be alive. Calls fail fast with
    /// [`Error::ConnectionLoss`](crate::Error::ConnectionLoss); watches stay.
    Suspended,
    /// Connected again, to the same session, after a `Suspended`.
    Reconnected,
    /// The session is gone (the server said so, or it could not be resumed
    /// within the session timeout): its ephemeral nodes are deleted. Terminal.
    Expired,
    /// Closed by this client. Terminal.
    Closed,
}

impl ConnectionState {
    /// Whether requests can be sent now (`Connected` or `Reconnected`).
    pub fn is_connected(self) -> bool {
        matches!(
            self,
            ConnectionState::Connected | ConnectionState::Reconnected
        )
    }

    /// Whether the client is done for good (`Expired` or `Closed`).
    pub fn is_terminal(self) -> bool {
        matches!(self, ConnectionState::Expired | ConnectionState::Closed)
    }
}

/// The current state and its subscribers.
pub(crate) struct StateCell {
    current: Mutex<ConnectionState>,
    changes: broadcast::Sender<ConnectionState>,
}

impl StateCell {
    pub(crate) fn new() -> Self {
        StateCell {
            current: Mutex::new(ConnectionState::Connected),
            changes: broadcast::channel(STATE_CHANGES_MAX).0,
        }
    }

    pub(crate) fn get(&self) -> ConnectionState {
        *self.current.lock()
    }

    /// Moves to `next` unless the state is terminal already. Returns whether
    /// it changed.
    pub(crate) fn set(&self, next: ConnectionState) -> bool {
        let mut current = self.current.lock();
        if current.is_terminal() || *current == next {
            return false;
        }
        debug!(from = ?*current, to = ?next, "connection state");
        *current = next;
        // No subscriber is not an error; sent under the lock to keep order.
        let _ = self.changes.send(next);
        true
    }

    pub(crate) fn subscribe(&self) -> StateStream {
        let current = self.current.lock();
        StateStream {
            changes: self.changes.subscribe(),
            done: current.is_terminal(),
        }
    }
}

/// The changes of a client's [`ConnectionState`], from the moment of
/// [`Client::state_changes`](crate::Client::state_changes) on.
///
/// It ends (`None`) after yielding `Expired` or `Closed`, or at once if the
/// client had already ended. It buffers at most [`STATE_CHANGES_MAX`] changes:
/// a subscriber that falls further behind loses the oldest ones.
///
/// ```no_run
/// # async fn demo(client: arbor_client::Client) {
/// let mut states = client.state_changes();
/// while let Some(state) = states.next().await {
///     println!("now {state:?}");
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct StateStream {
    changes: broadcast::Receiver<ConnectionState>,
    done: bool,
}

impl StateStream {
    /// The next change, or `None` once the client has ended.
    pub async fn next(&mut self) -> Option<ConnectionState> {
        while !self.done {
            match self.changes.recv().await {
                Ok(state) => {
                    self.done = state.is_terminal();
                    return Some(state);
                }
                Err(broadcast::error::RecvError::Lagged(skipped)) => {
                    warn!(skipped, "state subscriber fell behind; oldest changes lost");
                }
                Err(broadcast::error::RecvError::Closed) => self.done = true,
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    // Proves subscribers see every later change in order and end after a terminal state.
    #[test]
    fn subscribers_see_changes_until_terminal() {
        let cell = StateCell::new();
        let mut early = cell.subscribe();
        assert!(cell.set(ConnectionState::Suspended));
        let mut late = cell.subscribe();
        assert!(!cell.set(ConnectionState::Suspended), "no change, no event");
        assert!(cell.set(ConnectionState::Reconnected));
        assert!(cell.set(ConnectionState::Expired));
        assert!(!cell.set(ConnectionState::Connected), "terminal stays");
        let mut seen = Vec::new();
        while let Some(state) = early.next().now_or_never().expect("ready") {
            seen.push(state);
        }
        use ConnectionState::*;
        assert_eq!(seen, vec![Suspended, Reconnected, Expired]);
        assert_eq!(late.next().now_or_never(), Some(Some(Reconnected)));
        assert_eq!(late.next().now_or_never(), Some(Some(Expired)));
        assert_eq!(late.next().now_or_never(), Some(None));
        assert_eq!(cell.subscribe().next().now_or_never(), Some(None));
        assert_eq!(cell.get(), Expired);
    }
}
