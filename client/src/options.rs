//! How a [`Client`](crate::Client) connects, and the limits it keeps.
//!
//! Every limit here is checked by [`ClientOptions::validate`] before a socket is
//! opened, so a bad value is an [`Error::BadArguments`] at connect time rather
//! than a hang or a panic later.

use std::time::Duration;

use arbor_protocol::SessionCredentials;

use crate::error::Error;
use crate::tls::TlsOptions;

/// The session timeout asked for by default (the server clamps it to its range).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// How long connecting to one server (TCP and handshake) may take by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a request may wait for its reply by default (including the wait
/// for an in-flight slot). Generous: it only catches a server that stopped
/// answering one request while still answering pings.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Requests sent but not yet answered, by default.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1024;

/// The largest `max_in_flight` accepted: the pending-reply queue is allocated
/// up front at this size, so it must stay modest.
pub const MAX_IN_FLIGHT_LIMIT: usize = 65_536;

/// Credentials a client proves on each connection at most (the server keeps
/// as many ids per session).
pub const MAX_AUTH: usize = 8;

/// Options for [`Client::connect`](crate::Client::connect).
///
/// ```
/// use std::time::Duration;
/// use arbor_client::ClientOptions;
///
/// let options = ClientOptions::default()
///     .with_session_timeout(Duration::from_secs(6))
///     .with_max_in_flight(256);
/// assert_eq!(options.max_in_flight, 256);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct ClientOptions {
    /// The session timeout to ask for; the server answers with the negotiated
    /// one ([`Client::session_timeout`](crate::Client::session_timeout)). The
    /// client pings after a third of it without sending, and gives the
    /// connection up after two thirds of it without receiving.
    pub session_timeout: Duration,
    /// How long connecting to one server of the connect string (TCP connect and
    /// handshake) may take before the next one is tried, at connect and when
    /// reconnecting.
    pub connect_timeout: Duration,
    /// How long one call may wait for its reply, counted from the call
    /// (including the wait for an in-flight slot). Past it the call fails
    /// with [`Error::Timeout`](crate::Error::Timeout): like a connection loss,
    /// the outcome of a write is then unknown. A late reply is matched to its
    /// request and dropped. The connection checks deadlines every
    /// [`DEADLINE_TICK`](crate::DEADLINE_TICK), so the error may come up to
    /// that much later; never earlier.
    pub request_timeout: Duration,
    /// Requests sent but not yet answered. Callers past it wait for a reply to
    /// free a slot (back-pressure), rather than queue without bound.
    pub max_in_flight: usize,
    /// Resume this session instead of opening a new one (the client resumes
    /// its own session by itself after a connection loss; this is for
    /// handing a session to a new process). If the server no
    /// longer knows it, connecting fails with
    /// [`Error::SessionExpired`](crate::Error::SessionExpired).
    pub resume: Option<SessionCredentials>,
    /// Ids to prove on every connection, in order, before any request (see
    /// [`ClientOptions::with_auth`]).
    pub auth: Vec<AuthInfo>,
    /// Connect over TLS with these settings (see [`ClientOptions::with_tls`]);
    /// `None`: plain TCP.
    pub tls: Option<TlsOptions>,
}

/// Credentials in one scheme, proved by the client on each connection.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthInfo {
    pub scheme: String,
    pub credentials: Vec<u8>,
}

/// Never prints the credentials.
impl std::fmt::Debug for AuthInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthInfo")
            .field("scheme", &self.scheme)
            .field("credentials", &"<redacted>")
            .finish()
    }
}

/// Shows the session id to resume but never its password.
impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("max_in_flight", &self.max_in_flight)
            .field("resume", &self.resume.map(|credentials| credentials.id))
            .field("auth", &self.auth)
            .field("tls", &self.tls)
            .finish()
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            resume: None,
            auth: Vec::new(),
            tls: None,
        }
    }
}

impl ClientOptions {
    /// Proves `credentials` in `scheme` on every connection, before any
    /// request: at connect, and again after each reconnect. Scheme `digest`
    /// takes `user:password`; its id is what an ACL entry
    /// `digest:user:<hash>` names (see `arbor_protocol::acl::digest_id`).
    /// Refused credentials fail the connect with
    /// [`Error::AuthFailed`](crate::Error::AuthFailed).
    ///
    /// ```
    /// use arbor_client::ClientOptions;
    ///
    /// let options = ClientOptions::default().with_auth("digest", "alice:secret");
    /// assert_eq!(options.auth[0].scheme, "digest");
    /// assert!(!format!("{options:?}").contains("secret"));
    /// ```
    pub fn with_auth(mut self, scheme: &str, credentials: impl Into<Vec<u8>>) -> Self {
        self.auth.push(AuthInfo {
            scheme: scheme.to_owned(),
            credentials: credentials.into(),
        });
        self
    }

    /// Connects to every server over TLS: each server's certificate must
    /// come from the CA of `tls`, and the client presents its own
    /// certificate if `tls` has one (the server's mutual TLS then makes its
    /// subject the session's `x509` id). The connect string names the
    /// servers' TLS ports.
    ///
    /// ```no_run
    /// use arbor_client::{ClientOptions, TlsOptions};
    ///
    /// # fn example() -> Result<(), arbor_client::TlsError> {
    /// let options = ClientOptions::default().with_tls(TlsOptions::new("ca.pem")?);
    /// assert!(options.tls.is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sets [`ClientOptions::session_timeout`].
    pub fn with_session_timeout(mut self, session_timeout: Duration) -> Self {
        self.session_timeout = session_timeout;
        self
    }

    /// Sets [`ClientOptions::connect_timeout`].
    pub fn with_connect_timeout(mut self, connect_timeout: Duration) -> Self {
        self.connect_timeout = connect_timeout;
        self
    }

    /// Sets [`ClientOptions::request_timeout`]. A call fails with
    /// [`Error::Timeout`](crate::Error::Timeout) this long after it started,
    /// or at most [`DEADLINE_TICK`](crate::DEADLINE_TICK) later; never earlier.
    pub fn with_request_timeout(mut self, request_timeout: Duration) -> Self {
        self.request_timeout = request_timeout;
        self
    }

    /// Sets [`ClientOptions::max_in_flight`].
    pub fn with_max_in_flight(mut self, max_in_flight: usize) -> Self {
        self.max_in_flight = max_in_flight;
        self
    }

    /// Sets [`ClientOptions::resume`]: resume the session of these credentials
    /// (from [`Client::credentials`](crate::Client::credentials)).
    pub fn with_resume(mut self, credentials: SessionCredentials) -> Self {
        self.resume = Some(credentials);
        self
    }

    /// Checks every value and how they relate.
    pub fn validate(&self) -> Result<(), Error> {
        let timeout_ms_ok = self.session_timeout >= Duration::from_millis(3)
            && self.session_timeout.as_millis() <= u128::from(u32::MAX);
        let in_flight_ok = (1..=MAX_IN_FLIGHT_LIMIT).contains(&self.max_in_flight);
        let waits_ok = !self.connect_timeout.is_zero() && !self.request_timeout.is_zero();
        let auth_ok = self.auth.len() <= MAX_AUTH;
        if timeout_ms_ok && in_flight_ok && waits_ok && auth_ok {
            Ok(())
        } else {
            Err(Error::BadArguments)
        }
    }

    pub(crate) fn session_timeout_ms(&self) -> u32 {
        u32::try_from(self.session_timeout.as_millis()).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves Debug output never contains the session password.
    #[test]
    fn debug_hides_the_password() {
        let credentials = SessionCredentials {
            id: 5,
            password: [0xab; 16],
        };
        let shown = format!("{:?}", ClientOptions::default().with_resume(credentials));
        assert!(shown.contains("resume: Some(5)"), "{shown}");
        assert!(!shown.contains("171"), "{shown}");
    }

    // Proves the defaults are valid and out-of-range values are refused.
    #[test]
    fn validate_checks_ranges() {
        assert!(ClientOptions::default().validate().is_ok());
        let zero_in_flight = ClientOptions::default().with_max_in_flight(0);
        assert!(matches!(
            zero_in_flight.validate(),
            Err(Error::BadArguments)
        ));
        let huge = ClientOptions::default().with_max_in_flight(MAX_IN_FLIGHT_LIMIT + 1);
        assert!(huge.validate().is_err());
        let tiny = ClientOptions::default().with_session_timeout(Duration::from_millis(1));
        assert!(tiny.validate().is_err());
        let no_connect = ClientOptions::default().with_connect_timeout(Duration::ZERO);
        assert!(no_connect.validate().is_err());
        let no_wait = ClientOptions::default().with_request_timeout(Duration::ZERO);
        assert!(no_wait.validate().is_err());
    }
}
