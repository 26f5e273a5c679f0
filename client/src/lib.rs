//! Async Rust client for Arbor, a ZooKeeper-style coordination service.
//!
//! A [`Client`] is one session with a server: a hierarchical tree of znodes
//! with ephemeral and sequential nodes, one-shot and persistent watches, and a
//! total order of writes numbered by the zxid.
//!
//! ```no_run
//! use arbor_client::{AddWatchMode, Client, ClientOptions, CreateMode, Error};
//!
//! # async fn demo() -> Result<(), Error> {
//! let client = Client::connect("127.0.0.1:7181", ClientOptions::default()).await?;
//!
//! // Plain nodes, and compare-and-set by version.
//! match client.create("/config", b"v1".to_vec(), CreateMode::Persistent).await {
//!     Ok(_) | Err(Error::NodeExists { .. }) => {}
//!     Err(err) => return Err(err),
//! }
//! let (data, stat) = client.get_data("/config").await?;
//! client.set_data("/config", [data, b"+".to_vec()].concat(), Some(stat.version)).await?;
//!
//! // An ephemeral sequential node lives as long as this session.
//! client.create("/workers", Vec::new(), CreateMode::Persistent).await.ok();
//! let me = client.create("/workers/w-", Vec::new(), CreateMode::EphemeralSequential).await?;
//! println!("registered as {me}");
//!
//! // A one-shot watch fires once; a persistent one is a stream of events.
//! let (_stat, gone) = client.exists_watch(&me).await?;
//! let mut changes = client.watch("/config", AddWatchMode::PersistentRecursive).await?;
//! tokio::spawn(async move {
//!     while let Ok(event) = changes.next().await {
//!         println!("{:?} {}", event.event_type, event.path);
//!     }
//! });
//!
//! client.delete(&me, None).await?;
//! let event = gone.await?;
//! assert_eq!(event.path, me);
//!
//! // Closing deletes the session's remaining ephemerals at once.
//! client.close().await?;
//! # Ok(()) }
//! ```
//!
//! # Model
//!
//! * One background task per client owns the TCP connection: it multiplexes
//!   requests by xid (replies come back in request order), sends a ping after a
//!   third of the session timeout without sending, and gives the connection up
//!   after two thirds of it without receiving anything.
//! * At most [`ClientOptions::max_in_flight`] requests are out at a time; more
//!   callers wait for a slot (back-pressure).
//! * Paths and data sizes are checked locally before anything is sent
//!   ([`Error::InvalidPath`], [`Error::TooLarge`]).
//! * [`Error::ConnectionLoss`] means the outcome of a write is unknown. When
//!   the connection is lost the client resumes the session by itself, on any
//!   server of the connect string, within the session timeout; it never
//!   re-sends a request. [`Client::state`] and [`Client::state_changes`] tell
//!   `Connected`, `Suspended`, `Reconnected`, `Expired` and `Closed` apart.
//!   After `Expired` every call fails with [`Error::SessionExpired`].
//! * Every call gives up after [`ClientOptions::request_timeout`] with
//!   [`Error::Timeout`] (outcome unknown, like a connection loss), at most
//!   [`DEADLINE_TICK`] late: deadlines are checked by the connection task,
//!   not by a timer per call.
//! * Dropping the last clone of a client closes its session best-effort.
//!
//! # Watches
//!
//! `*_watch` calls return a [`OneshotWatch`] (a future that fires once);
//! [`Client::watch`] returns a [`PersistentWatch`] (a stream). The server sends
//! one event per change however many of the session's watches match it, and
//! the client hands it to its local watchers as ZooKeeper's does:
//!
//! | event                 | data / exists one-shots | child one-shots | persistent, same path | recursive, path or ancestor |
//! |-----------------------|:-:|:-:|:-:|:-:|
//! | `NodeCreated`         | ✓ |   | ✓ | ✓ |
//! | `NodeDataChanged`     | ✓ |   | ✓ | ✓ |
//! | `NodeDeleted`         | ✓ | ✓ | ✓ | ✓ |
//! | `NodeChildrenChanged` |   | ✓ | ✓ |   |
//!
//! A one-shot watcher is registered before its request is sent, so an event
//! that overtakes the reply is not missed; the price is that, if this session
//! already had a watch on the same path, an event for a change made just
//! before the read can fire the new watcher too. Re-read after a watch fires
//! (as every recipe does) and this is harmless. Watches survive reconnects:
//! after a resume every one is registered again with the last zxid seen, and
//! the server fires at once those whose node changed meanwhile. When the
//! client ends (expired or closed), every watch resolves with that error:
//! nobody waits forever.
//!
//! Logs go through `tracing` at debug level, with `session_id`, `xid` and `op`
//! fields.

mod client;
mod connection;
mod error;
pub mod multi;
mod options;
pub mod recipes;
mod resume;
mod servers;
mod session;
mod state;
mod tls;
mod transport;
mod watch;

#[cfg(test)]
mod tests;

pub use arbor_protocol::acl;
pub use arbor_protocol::{
    Acl, AddWatchMode, BackupInfo, ChildEntry, ClusterStatus, CreateMode, ErrorCode, EventType,
    Hex, Id, MemberStatus, MultiOp, MultiOpOutcome, OpResult, Perms, ServerLimits,
    SessionCredentials, SessionId, Stat, WatchEvent, WatcherKind, Zxid, ANY_VERSION,
};

pub use client::{Client, ServerReport};
pub use connection::{CLOSE_ON_DROP_TIMEOUT, DEADLINE_TICK, WRITE_BUFFER_HIGH_WATER_BYTES};
pub use error::Error;
pub use options::{
    AuthInfo, ClientOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_REQUEST_TIMEOUT, DEFAULT_SESSION_TIMEOUT, MAX_AUTH, MAX_IN_FLIGHT_LIMIT,
};
pub use resume::{RECONNECT_BACKOFF_MAX, RECONNECT_BACKOFF_MIN, SET_WATCHES_PATH_OVERHEAD_BYTES};
pub use servers::SERVERS_MAX;
pub use state::{ConnectionState, StateStream, STATE_CHANGES_MAX};
pub use tls::{TlsError, TlsOptions};
pub use watch::{OneshotWatch, PersistentWatch, PERSISTENT_WATCH_EVENTS_MAX, WATCHERS_MAX};
