//! Telling people the server is gone for now: while the client resumes its
//! session by itself (every server, again and again, until the session
//! timeout), `watch`, `shell` and `browse` say so, and for how long the
//! session can still come back, rather than look hung.
//!
//! The time left is counted from the moment the loss was seen, so it is an
//! upper bound: the client counts from the last frame it received, a little
//! earlier (at most a third of the timeout: it pings that often).

use std::time::{Duration, Instant};

use arbor_client::{Client, ConnectionState};

use crate::output::Output;

/// How often the message is repeated on stderr while the server stays gone.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// A lost connection, since when, against the session timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    since: Instant,
    session_timeout: Duration,
}

impl Outage {
    /// An outage seen at `now`, of a session granted `session_timeout`.
    pub fn began(now: Instant, session_timeout: Duration) -> Outage {
        Outage {
            since: now,
            session_timeout,
        }
    }

    /// Whole seconds, rounded up, the session may still be resumed at `now`.
    pub fn seconds_left(&self, now: Instant) -> u64 {
        let left = self
            .session_timeout
            .saturating_sub(now.saturating_duration_since(self.since));
        left.as_millis().div_ceil(1000) as u64
    }

    /// What to tell people at `now`.
    pub fn message(&self, now: Instant) -> String {
        format!(
            "server unreachable; retrying while the session lives ({} s left)",
            self.seconds_left(now)
        )
    }
}

/// A background task, stopped when this is dropped.
pub struct Reporter(tokio::task::JoinHandle<()>);

impl Drop for Reporter {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Reports `client`'s outages on stderr until it ends: a line when the
/// connection is lost, again every [`REPORT_INTERVAL`] while it stays lost,
/// and one when the session is resumed. Expiry is left to the command,
/// whose next call fails with it.
pub fn report_on_stderr(client: &Client, out: &Output) -> Reporter {
    let mut states = client.state_changes();
    let session_timeout = client.session_timeout();
    let out = *out;
    let warn = move |message: &str| {
        use std::io::Write;
        // A closed stderr loses the line, nothing more.
        writeln!(std::io::stderr(), "{}", out.error_line(message)).ok();
    };
    // The loss may have come before the subscription: it sent no change.
    let mut outage = (client.state() == ConnectionState::Suspended).then(|| {
        let began = Outage::began(Instant::now(), session_timeout);
        warn(&began.message(Instant::now()));
        began
    });
    Reporter(tokio::spawn(async move {
        loop {
            let next = match outage {
                Some(_) => tokio::time::timeout(REPORT_INTERVAL, states.next()).await,
                None => Ok(states.next().await),
            };
            let now = Instant::now();
            match next {
                // Still away: the count goes down.
                Err(_) => {
                    if let Some(outage) = outage.filter(|o| o.seconds_left(now) > 0) {
                        warn(&outage.message(now));
                    }
                }
                Ok(Some(ConnectionState::Suspended)) => {
                    let began = Outage::began(now, session_timeout);
                    warn(&began.message(now));
                    outage = Some(began);
                }
                Ok(Some(ConnectionState::Connected | ConnectionState::Reconnected)) => {
                    if outage.take().is_some() {
                        warn("server reachable again; session resumed");
                    }
                }
                Ok(Some(ConnectionState::Expired | ConnectionState::Closed)) | Ok(None) => return,
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the seconds left count down from the session timeout, rounded up, and stop at zero.
    #[test]
    fn seconds_left_count_down() {
        let start = Instant::now();
        let outage = Outage::began(start, Duration::from_secs(30));
        assert_eq!(outage.seconds_left(start), 30);
        assert_eq!(outage.seconds_left(start + Duration::from_millis(100)), 30);
        assert_eq!(outage.seconds_left(start + Duration::from_secs(12)), 18);
        assert_eq!(outage.seconds_left(start + Duration::from_secs(31)), 0);
        assert_eq!(
            outage.message(start + Duration::from_secs(5)),
            "server unreachable; retrying while the session lives (25 s left)"
        );
    }
}
