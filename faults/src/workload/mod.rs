//! What the suite's clients do while the nemesis works, and what they
//! record ([`crate::record`]):
//!
//! * [`registers`]: sessions that read (with and without `sync`), write
//!   and compare-and-set a few registers, create sequential children, and
//!   check with `sync` + `exists` that their own ephemeral marker is there;
//! * [`locks`]: sessions that take a fair lock in turn and, while they
//!   believe they hold it, write to a fenced store with their token;
//! * [`observers`]: one session per member watching every marker, to see
//!   when each session's ephemeral went;
//! * [`probes`]: one session per member writing all the time, to measure
//!   how long writes stop after a fault.
//!
//! Every session has a marker `MARKERS/<session id>`: nothing deletes it
//! but the end of its session. Worker sessions are left open when the
//! workload stops, so the final state shows their markers.

pub mod finals;
pub mod locks;
pub mod observers;
pub mod probes;
pub mod registers;

use std::time::Duration;

use arbor_check::{SessionEnd, SessionLife};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::client::{Failure, Kind, Protocol, Refusal, Session};
use crate::record::Recorder;

/// Where everything the workload touches lives.
pub const ROOT: &str = "/suite";
pub const SEQUENTIAL_PARENT: &str = "/suite/seq";
pub const MARKERS: &str = "/suite/markers";
pub const LOCKS: &str = "/suite/locks";
/// Registers `/suite/k0` ... : few, so that clients contend.
pub const REGISTERS: u32 = 3;

/// A pause between attempts to open a session.
const OPEN_RETRY_PAUSE: Duration = Duration::from_millis(100);

pub fn register_path(key: u32) -> String {
    format!("{ROOT}/k{key}")
}

pub fn marker_path(session: u64) -> String {
    format!("{MARKERS}/{session:016x}")
}

/// The session a marker path names.
pub fn marker_session(path: &str) -> Option<u64> {
    let name = path.strip_prefix(MARKERS)?.strip_prefix('/')?;
    u64::from_str_radix(name, 16).ok()
}

/// What every client of a run is given.
#[derive(Clone)]
pub struct Context {
    pub recorder: Recorder,
    /// Each member's address for a protocol, by member (from 1).
    pub servers: Servers,
    pub session_timeout: Duration,
    pub stop: CancellationToken,
}

/// Client addresses of the members, per protocol.
#[derive(Debug, Clone)]
pub struct Servers {
    pub native: Vec<String>,
    pub zookeeper: Vec<String>,
}

impl Servers {
    /// Every member's address for `protocol`, comma-separated.
    pub fn all(&self, protocol: Protocol) -> String {
        self.of(protocol).join(",")
    }

    /// Member `member`'s (from 1) address for `protocol`.
    pub fn one(&self, protocol: Protocol, member: usize) -> String {
        self.of(protocol)[member - 1].clone()
    }

    pub fn members(&self) -> usize {
        self.zookeeper.len()
    }

    /// The protocols the target speaks: Apache ZooKeeper only its own.
    pub fn protocols(&self) -> Vec<Protocol> {
        match self.native.is_empty() {
            true => vec![Protocol::ZooKeeper],
            false => vec![Protocol::Native, Protocol::ZooKeeper],
        }
    }

    fn of(&self, protocol: Protocol) -> &[String] {
        match protocol {
            Protocol::Native => &self.native,
            Protocol::ZooKeeper => &self.zookeeper,
        }
    }
}

/// A session of the workload, recorded from its connect to its end.
pub struct Tracked {
    pub session: Session,
    /// Its index in the history's sessions.
    pub index: usize,
    pub marker: String,
}

/// A session of a helper (an observer, a probe) pinned to `server`:
/// `None` once the run stops; after a failed attempt, `Some(None)` a
/// moment later, so the caller tries again.
pub async fn open_pinned(
    context: &Context,
    protocol: Protocol,
    server: &str,
    retry_pause: Duration,
) -> Option<Option<Session>> {
    let opening = Session::open(protocol, server, context.session_timeout);
    let opened = tokio::select! {
        opened = opening => opened,
        () = context.stop.cancelled() => return None,
    };
    match opened {
        Ok(session) => Some(Some(session)),
        Err(_) => {
            tokio::time::sleep(retry_pause).await;
            Some(None)
        }
    }
}

/// Opens a session on `servers` for `process` and creates its marker,
/// retrying until it has both or the run stops.
pub async fn open_tracked(
    context: &Context,
    process: u32,
    protocol: Protocol,
    servers: &str,
) -> Option<Tracked> {
    loop {
        if context.stop.is_cancelled() {
            return None;
        }
        let opened_us = context.recorder.now_us();
        let opening = Session::open(protocol, servers, context.session_timeout);
        let opened = tokio::select! {
            opened = opening => opened,
            () = context.stop.cancelled() => return None,
        };
        let session = match opened {
            Ok(session) => session,
            Err(failure) => {
                debug!(process, %failure, "cannot open a session yet");
                tokio::time::sleep(OPEN_RETRY_PAUSE).await;
                continue;
            }
        };
        let marker = marker_path(session.id());
        let index = context.recorder.session_opened(SessionLife {
            session: session.id(),
            process,
            timeout_us: u64::try_from(session.timeout().as_micros()).unwrap_or(u64::MAX),
            marker: marker.clone(),
            opened_us,
            heard_us: Vec::new(),
            end: SessionEnd::Open,
        });
        let tracked = Tracked {
            session,
            index,
            marker,
        };
        if create_marker(context, &tracked).await {
            return Some(tracked);
        }
    }
}

/// Creates the session's marker; false if the session ended first.
async fn create_marker(context: &Context, tracked: &Tracked) -> bool {
    loop {
        if context.stop.is_cancelled() {
            return false;
        }
        let call_us = context.recorder.now_us();
        let creating = tracked
            .session
            .create(&tracked.marker, b"", Kind::Ephemeral);
        let created = tokio::select! {
            created = creating => created,
            () = context.stop.cancelled() => return false,
        };
        match created {
            // Exists: an earlier try whose answer was lost made it.
            Ok(_) | Err(Failure::Refused(Refusal::NodeExists)) => {
                context.recorder.heard(tracked.index, call_us);
                return true;
            }
            Err(Failure::Expired) => {
                let seen_us = context.recorder.now_us();
                context
                    .recorder
                    .session_ended(tracked.index, SessionEnd::Expired { seen_us });
                return false;
            }
            Err(failure) => {
                debug!(session = tracked.session.id(), %failure, "marker not created yet");
                tokio::time::sleep(OPEN_RETRY_PAUSE).await;
            }
        }
    }
}

/// Records that `tracked`'s session expired, as its client was told now.
pub fn expired(context: &Context, tracked: &Tracked) {
    let seen_us = context.recorder.now_us();
    context
        .recorder
        .session_ended(tracked.index, SessionEnd::Expired { seen_us });
}
