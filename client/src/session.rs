//! The session as every client handle and the connection task see it.
//!
//! [`Shared`] is the state both sides read: the negotiated session parameters,
//! the newest zxid seen, the watch registry, the in-flight semaphore and the
//! connection state. Invariants:
//! * `last_zxid` only grows (`fetch_max`), whatever order replies and events
//!   are observed in.
//! * A terminal state (`Expired`, `Closed`) is set once, by the connection
//!   task, before it answers any waiter with the terminal error; later calls
//!   read it and fail fast. `Suspended` is likewise set before the requests
//!   in flight are failed, so a caller that retries at once fails fast too.
//! * Once the state is terminal the in-flight semaphore is closed, so callers
//!   waiting for a slot wake up instead of waiting forever.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::{ConnectResponse, ServerLimits, SessionCredentials, SessionId, Zxid};
use parking_lot::Mutex;
use tokio::sync::Semaphore;

use crate::error::{Ended, Error};
use crate::state::{ConnectionState, StateCell};
use crate::watch::Watches;

/// What the handshake fixed. Kept behind a lock, not as plain fields, because
/// a reconnect to another server renegotiates the timeout and limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionInfo {
    pub(crate) credentials: SessionCredentials,
    pub(crate) timeout: Duration,
    pub(crate) limits: ServerLimits,
}

impl SessionInfo {
    pub(crate) fn from_response(response: &ConnectResponse) -> Self {
        SessionInfo {
            credentials: SessionCredentials {
                id: response.session_id,
                password: response.password,
            },
            timeout: Duration::from_millis(u64::from(response.session_timeout_ms)),
            limits: response.limits,
        }
    }
}

pub(crate) struct Shared {
    session: Mutex<SessionInfo>,
    last_zxid: AtomicU64,
    pub(crate) state: StateCell,
    pub(crate) watches: Watches,
    /// Slots for requests sent but not yet answered; see `ClientOptions::max_in_flight`.
    pub(crate) in_flight: Arc<Semaphore>,
    /// Watch events received from the server, for diagnostics and benchmarks.
    pub(crate) events_received: AtomicU64,
    /// The server of the current connection; `None` while suspended.
    server: Mutex<Option<String>>,
}

impl Shared {
    pub(crate) fn new(response: &ConnectResponse, server: &str, max_in_flight: usize) -> Self {
        Shared {
            session: Mutex::new(SessionInfo::from_response(response)),
            last_zxid: AtomicU64::new(response.zxid),
            state: StateCell::new(),
            watches: Watches::new(),
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            events_received: AtomicU64::new(0),
            server: Mutex::new(Some(server.to_owned())),
        }
    }

    pub(crate) fn session(&self) -> SessionInfo {
        *self.session.lock()
    }

    pub(crate) fn session_id(&self) -> SessionId {
        self.session.lock().credentials.id
    }

    pub(crate) fn last_zxid(&self) -> Zxid {
        self.last_zxid.load(Ordering::Acquire)
    }

    /// Records a zxid from a reply or an event; the stored one never decreases.
    pub(crate) fn observe_zxid(&self, zxid: Zxid) {
        self.last_zxid.fetch_max(zxid, Ordering::AcqRel);
    }

    pub(crate) fn server(&self) -> Option<String> {
        self.server.lock().clone()
    }

    /// Where the session is served from now; `None` once disconnected.
    pub(crate) fn set_server(&self, server: Option<&str>) {
        *self.server.lock() = server.map(str::to_owned);
    }

    /// Renegotiated by a resume; the credentials stay the same.
    pub(crate) fn set_session(&self, info: SessionInfo) {
        *self.session.lock() = info;
    }

    pub(crate) fn ended(&self) -> Option<Ended> {
        match self.state.get() {
            ConnectionState::Expired => Some(Ended::SessionExpired),
            ConnectionState::Closed => Some(Ended::Closed),
            _ => None,
        }
    }

    /// The error for a call that cannot go out now: the terminal one, or
    /// [`Error::ConnectionLoss`] while not connected.
    pub(crate) fn unavailable(&self) -> Option<Error> {
        match self.state.get() {
            ConnectionState::Expired => Some(Error::SessionExpired),
            ConnectionState::Closed => Some(Error::Closed),
            ConnectionState::Suspended => Some(Error::ConnectionLoss),
            ConnectionState::Connected | ConnectionState::Reconnected => None,
        }
    }

    /// The error for a call that found the connection task gone.
    pub(crate) fn ended_error(&self) -> Error {
        // Only reachable once the task has ended, which sets the terminal
        // state first; ConnectionLoss is the honest answer if that ever did
        // not hold.
        self.ended().map_or(Error::ConnectionLoss, Ended::error)
    }

    /// Ends the client (the first terminal state wins) and wakes every
    /// caller waiting for an in-flight slot.
    pub(crate) fn end(&self, ended: Ended) {
        self.state.set(match ended {
            Ended::Closed => ConnectionState::Closed,
            Ended::SessionExpired => ConnectionState::Expired,
        });
        self.in_flight.close();
    }
}
