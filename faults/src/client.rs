//! One session, spoken either way the suite speaks to a server: Arbor's
//! own protocol through `arbor-client`, or ZooKeeper's through the
//! `zookeeper-client` crate (a client that is not ours, which also runs
//! against Apache ZooKeeper). The workload asks the same things of both and
//! records their answers alike.
//!
//! Every answer is sorted into what the history needs: the request took
//! effect (or was refused) for sure, or its outcome is unknown (the
//! connection was lost or the request timed out), or the session is gone.

use std::time::Duration;

use arbor_client::{AddWatchMode, Client, ClientOptions, ConnectionState, CreateMode, Error};
use zookeeper_client as zk;

/// Which protocol a session speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Protocol {
    /// Arbor's own, through `arbor-client`.
    Native,
    /// ZooKeeper's, through the `zookeeper-client` crate.
    ZooKeeper,
}

/// How long any one request may take before its outcome counts as unknown.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The request certainly did not take effect, for this reason.
    #[error("refused: {0}")]
    Refused(Refusal),
    /// It may or may not have taken effect.
    #[error("outcome unknown: {0}")]
    Unknown(String),
    /// The session is gone (expired, or the client closed).
    #[error("session expired")]
    Expired,
}

/// The refusals the workload tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    NoNode,
    NodeExists,
    BadVersion,
    /// Anything else (not leader, unavailable, ...): nothing was done.
    Other,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

pub type Answer<T> = Result<T, Failure>;

/// How a node is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Persistent,
    Ephemeral,
    Sequential,
    EphemeralSequential,
}

/// A version of a node's data, as the workload reads registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    pub data: Vec<u8>,
    pub version: i32,
    pub czxid: u64,
    /// The session an ephemeral belongs to; 0 for any other node.
    pub owner: u64,
}

/// An open session.
pub enum Session {
    Native(Client),
    ZooKeeper(zk::Client),
}

impl Session {
    /// Opens a session on any of `servers` (comma-separated `host:port`).
    pub async fn open(protocol: Protocol, servers: &str, timeout: Duration) -> Answer<Session> {
        match protocol {
            Protocol::Native => {
                let options = ClientOptions::default()
                    .with_session_timeout(timeout)
                    .with_request_timeout(REQUEST_TIMEOUT)
                    .with_connect_timeout(timeout / 3);
                Client::connect(servers, options)
                    .await
                    .map(Session::Native)
                    .map_err(native_failure)
            }
            Protocol::ZooKeeper => {
                let connecting = zk::Client::connector()
                    .with_session_timeout(timeout)
                    .connect(servers);
                match tokio::time::timeout(timeout, connecting).await {
                    Ok(Ok(client)) => Ok(Session::ZooKeeper(client)),
                    Ok(Err(err)) => Err(zk_failure(err)),
                    Err(_) => Err(Failure::Unknown("connect timed out".into())),
                }
            }
        }
    }

    pub fn protocol(&self) -> Protocol {
        match self {
            Session::Native(_) => Protocol::Native,
            Session::ZooKeeper(_) => Protocol::ZooKeeper,
        }
    }

    pub fn id(&self) -> u64 {
        match self {
            Session::Native(client) => client.session_id(),
            Session::ZooKeeper(client) => client.session_id().0 as u64,
        }
    }

    /// The timeout the server granted.
    pub fn timeout(&self) -> Duration {
        match self {
            Session::Native(client) => client.session_timeout(),
            Session::ZooKeeper(client) => client.session_timeout(),
        }
    }

    /// Creates `path`; the created path (with its sequence, if any).
    pub async fn create(&self, path: &str, data: &[u8], kind: Kind) -> Answer<String> {
        match self {
            Session::Native(client) => {
                let mode = match kind {
                    Kind::Persistent => CreateMode::Persistent,
                    Kind::Ephemeral => CreateMode::Ephemeral,
                    Kind::Sequential => CreateMode::PersistentSequential,
                    Kind::EphemeralSequential => CreateMode::EphemeralSequential,
                };
                client
                    .create(path, data.to_vec(), mode)
                    .await
                    .map_err(native_failure)
            }
            Session::ZooKeeper(client) => {
                let mode = match kind {
                    Kind::Persistent => zk::CreateMode::Persistent,
                    Kind::Ephemeral => zk::CreateMode::Ephemeral,
                    Kind::Sequential => zk::CreateMode::PersistentSequential,
                    Kind::EphemeralSequential => zk::CreateMode::EphemeralSequential,
                };
                let options = mode.with_acls(zk::Acls::anyone_all());
                let created = within(client.create(path, data, &options)).await?;
                Ok(match kind {
                    Kind::Sequential | Kind::EphemeralSequential => {
                        format!("{path}{}", created.1)
                    }
                    _ => path.to_owned(),
                })
            }
        }
    }

    pub async fn get(&self, path: &str) -> Answer<Versioned> {
        match self {
            Session::Native(client) => {
                let (data, stat) = client.get_data(path).await.map_err(native_failure)?;
                Ok(Versioned {
                    data,
                    version: stat.version,
                    czxid: stat.czxid,
                    owner: stat.ephemeral_owner,
                })
            }
            Session::ZooKeeper(client) => {
                let (data, stat) = within(client.get_data(path)).await?;
                Ok(Versioned {
                    data,
                    version: stat.version,
                    czxid: stat.czxid as u64,
                    owner: stat.ephemeral_owner as u64,
                })
            }
        }
    }

    /// Sets `path`'s data, if its version is `expect` (any, if `None`); the
    /// new version.
    pub async fn set(&self, path: &str, data: &[u8], expect: Option<i32>) -> Answer<i32> {
        match self {
            Session::Native(client) => client
                .set_data(path, data.to_vec(), expect)
                .await
                .map(|stat| stat.version)
                .map_err(native_failure),
            Session::ZooKeeper(client) => within(client.set_data(path, data, expect))
                .await
                .map(|stat| stat.version),
        }
    }

    /// Waits until the member serving this session has what the leader
    /// had committed: the next read is linearizable.
    pub async fn sync(&self, path: &str) -> Answer<()> {
        match self {
            Session::Native(client) => client.sync(path).await.map_err(native_failure),
            Session::ZooKeeper(client) => within(client.sync(path)).await,
        }
    }

    /// The node's creation zxid, if it exists.
    pub async fn exists(&self, path: &str) -> Answer<Option<u64>> {
        match self {
            Session::Native(client) => client
                .exists(path)
                .await
                .map(|stat| stat.map(|stat| stat.czxid))
                .map_err(native_failure),
            Session::ZooKeeper(client) => within(client.check_stat(path))
                .await
                .map(|stat| stat.map(|stat| stat.czxid as u64)),
        }
    }

    pub async fn children(&self, path: &str) -> Answer<Vec<String>> {
        match self {
            Session::Native(client) => client.get_children(path).await.map_err(native_failure),
            Session::ZooKeeper(client) => within(client.list_children(path)).await,
        }
    }

    /// Ends the session (best effort: the suite ends its sessions at the
    /// end of a run).
    pub async fn close(self) {
        match self {
            Session::Native(client) => {
                let _ = tokio::time::timeout(REQUEST_TIMEOUT, client.close()).await;
            }
            Session::ZooKeeper(client) => drop(client),
        }
    }

    /// A stream of the session's connection state: `true` while connected.
    pub fn connection(&self) -> Connection {
        match self {
            Session::Native(client) => Connection::Native(client.state_changes()),
            Session::ZooKeeper(client) => Connection::ZooKeeper(client.state_watcher()),
        }
    }

    /// Whether the session is connected now.
    pub fn is_connected(&self) -> bool {
        match self {
            Session::Native(client) => client.state().is_connected(),
            Session::ZooKeeper(client) => client.state() == zk::SessionState::SyncConnected,
        }
    }

    /// Watches every node below `path` (persistent, recursive); what was
    /// deleted arrives on the returned watch.
    pub async fn watch_below(&self, path: &str) -> Answer<Deletions> {
        match self {
            Session::Native(client) => client
                .watch(path, AddWatchMode::PersistentRecursive)
                .await
                .map(Deletions::Native)
                .map_err(native_failure),
            Session::ZooKeeper(client) => {
                within(client.watch(path, zk::AddWatchMode::PersistentRecursive))
                    .await
                    .map(Deletions::ZooKeeper)
            }
        }
    }
}

/// A session's connection states as they change.
pub enum Connection {
    Native(arbor_client::StateStream),
    ZooKeeper(zk::StateWatcher),
}

/// What a connection change means to a holder of a lock or of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Disconnected: the session may expire before it comes back.
    Suspended,
    Connected,
    /// The session is gone (or the client closed).
    Ended,
}

impl Connection {
    /// The next change; `Ended` once there are no more.
    pub async fn next(&mut self) -> Change {
        match self {
            Connection::Native(states) => match states.next().await {
                Some(ConnectionState::Suspended) => Change::Suspended,
                Some(ConnectionState::Connected | ConnectionState::Reconnected) => {
                    Change::Connected
                }
                Some(ConnectionState::Expired | ConnectionState::Closed) | None => Change::Ended,
            },
            Connection::ZooKeeper(watcher) => match watcher.changed().await {
                zk::SessionState::Disconnected => Change::Suspended,
                zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                    Change::Connected
                }
                _ => Change::Ended,
            },
        }
    }
}

/// Deletions below a watched path.
pub enum Deletions {
    Native(arbor_client::PersistentWatch),
    ZooKeeper(zk::PersistentWatcher),
}

impl Deletions {
    /// The path of the next node deleted; `None` once the watch ended
    /// (its session did).
    pub async fn next(&mut self) -> Option<String> {
        loop {
            match self {
                Deletions::Native(watch) => {
                    let event = watch.next().await.ok()?;
                    if event.event_type == arbor_protocol::EventType::NodeDeleted {
                        return Some(event.path);
                    }
                }
                Deletions::ZooKeeper(watcher) => {
                    let event = watcher.changed().await;
                    match event.event_type {
                        zk::EventType::NodeDeleted => return Some(event.path),
                        zk::EventType::Session if event.session_state.is_terminated() => {
                            return None
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}

/// A ZooKeeper request, bounded by [`REQUEST_TIMEOUT`].
async fn within<T>(request: impl std::future::Future<Output = Result<T, zk::Error>>) -> Answer<T> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(answer) => answer.map_err(zk_failure),
        Err(_) => Err(Failure::Unknown("timed out".into())),
    }
}

fn native_failure(err: Error) -> Failure {
    match err {
        Error::NoNode { .. } => Failure::Refused(Refusal::NoNode),
        Error::NodeExists { .. } => Failure::Refused(Refusal::NodeExists),
        Error::BadVersion { .. } => Failure::Refused(Refusal::BadVersion),
        Error::SessionExpired | Error::Closed => Failure::Expired,
        Error::ConnectionLoss | Error::Timeout | Error::Io(_) | Error::Protocol(_) => {
            Failure::Unknown(err.to_string())
        }
        // A connect that failed made no session.
        Error::Connect { .. } | Error::Refused { .. } => Failure::Unknown(err.to_string()),
        _ => Failure::Refused(Refusal::Other),
    }
}

fn zk_failure(err: zk::Error) -> Failure {
    match err {
        zk::Error::NoNode => Failure::Refused(Refusal::NoNode),
        zk::Error::NodeExists => Failure::Refused(Refusal::NodeExists),
        zk::Error::BadVersion => Failure::Refused(Refusal::BadVersion),
        zk::Error::SessionExpired | zk::Error::ClientClosed => Failure::Expired,
        zk::Error::ConnectionLoss | zk::Error::Timeout => Failure::Unknown(err.to_string()),
        zk::Error::NoHosts => Failure::Unknown(err.to_string()),
        _ => Failure::Refused(Refusal::Other),
    }
}
