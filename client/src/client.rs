//! The public handle: [`Client`] and its calls.
//!
//! A `Client` is cheap to clone; every clone talks to the same connection task
//! (see `connection`) through a bounded channel. A call checks what it can
//! locally (path syntax, data size), takes an in-flight slot (waiting if
//! `max_in_flight` requests are already out: back-pressure), hands the request
//! to the task, and turns the reply into a typed result.
//!
//! Watching calls register their local watcher *before* the request leaves, so
//! an event that overtakes the reply still finds it; if the request fails the
//! watcher is removed again (by the task while it handles the reply, and by the
//! handle's `Drop` if the caller goes away).
//!
//! Every call is bounded by `ClientOptions::request_timeout`, from the call to
//! the reply. The call stamps its deadline on the request and the connection
//! task answers `Timeout` when it passes (checked every
//! [`DEADLINE_TICK`](crate::DEADLINE_TICK)), so a call pays for no timer of
//! its own; only a wait for an in-flight slot is timed by the caller. A call
//! made while the client is `Suspended` fails at once with
//! `ConnectionLoss` instead of waiting for the reconnect (as ZooKeeper's
//! client does): the caller decides whether and how to retry.

mod admin;

pub use admin::ServerReport;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::debug;

use arbor_protocol::acl::ACL_ENTRIES_MAX;
use arbor_protocol::path::{self, PathError};
use arbor_protocol::{
    Acl, AddWatchMode, ChildEntry, CreateMode, Id, MultiOp, MultiOpOutcome, Op, OpResult,
    ServerLimits, SessionCredentials, SessionId, Stat, WatcherKind, Zxid, ANY_VERSION,
};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, TryAcquireError};
use tokio::time::Instant as TimerInstant;

use crate::connection::{self, Command, Connection, Effect, Reply};
use crate::error::{Ended, Error};
use crate::options::ClientOptions;
use crate::servers::ServerList;
use crate::session::Shared;
use crate::state::{ConnectionState, StateStream};
use crate::watch::{OneshotWatch, PersistentWatch, Table};

/// A session with an Arbor server.
///
/// Clones share the session. When the last clone is dropped the session is
/// closed best-effort (the client sends `CloseSession` and waits up to a second
/// for the answer), so its ephemeral nodes go away promptly rather than after
/// the session timeout.
///
/// When the connection is lost the client reconnects by itself, to any server
/// of the connect string, resuming the same session; see [`Client::state`].
/// Calls in flight at the loss fail with [`Error::ConnectionLoss`] (a write
/// may or may not have been applied; nothing is re-sent), as do calls made
/// until the session is resumed. Watches stay and keep firing. If the session
/// cannot be resumed within its timeout, or the server says it expired, the
/// client is dead: every call fails with [`Error::SessionExpired`].
#[derive(Clone)]
pub struct Client {
    commands: mpsc::Sender<Command>,
    shared: Arc<Shared>,
    request_timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("session_id", &format_args!("{:#x}", self.session_id()))
            .field("last_zxid", &self.last_zxid())
            .field("state", &self.state())
            .finish()
    }
}

impl Client {
    /// Opens (or, with [`ClientOptions::resume`], resumes) a session.
    ///
    /// `connect_string` is a comma-separated list of `host:port` (at most
    /// [`SERVERS_MAX`](crate::SERVERS_MAX)); the servers are tried in a
    /// shuffled order, each for at most `connect_timeout`, and the same list
    /// is used to reconnect. Fails with [`Error::Connect`] when none can be
    /// reached, [`Error::SessionExpired`] when a resumed session is no longer
    /// known, and [`Error::BadArguments`] for invalid options.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), arbor_client::Error> {
    /// use arbor_client::{Client, ClientOptions};
    ///
    /// let client = Client::connect("10.0.0.1:7181,10.0.0.2:7181", ClientOptions::default()).await?;
    /// println!("session {:#x}", client.session_id());
    /// # Ok(()) }
    /// ```
    pub async fn connect(connect_string: &str, options: ClientOptions) -> Result<Client, Error> {
        options.validate()?;
        let servers = ServerList::parse(connect_string)?;
        let established = connection::connect(&servers, connect_string, &options).await?;
        let shared = Arc::new(Shared::new(
            &established.response,
            established.addr(),
            options.max_in_flight,
        ));
        // Every command holds an in-flight permit, so this never fills up.
        let (commands, receiver) = mpsc::channel(options.max_in_flight);
        let request_timeout = options.request_timeout;
        Connection::spawn(established, receiver, shared.clone(), servers, options);
        Ok(Client {
            commands,
            shared,
            request_timeout,
        })
    }

    /// Where the connection stands now.
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) {
    /// if client.state().is_terminal() {
    ///     println!("session over; connect a new client");
    /// }
    /// # }
    /// ```
    pub fn state(&self) -> ConnectionState {
        self.shared.state.get()
    }

    /// Every change of [`Client::state`] from now on (not the current state),
    /// ending after `Expired` or `Closed`. A subscriber more than
    /// [`STATE_CHANGES_MAX`](crate::STATE_CHANGES_MAX) changes behind loses
    /// the oldest ones.
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) {
    /// use arbor_client::ConnectionState;
    ///
    /// let mut states = client.state_changes();
    /// tokio::spawn(async move {
    ///     while let Some(state) = states.next().await {
    ///         if state == ConnectionState::Suspended {
    ///             println!("disconnected: a held lock may be lost");
    ///         }
    ///     }
    /// });
    /// # }
    /// ```
    pub fn state_changes(&self) -> StateStream {
        self.shared.state.subscribe()
    }

    /// The session id, as chosen by the server.
    pub fn session_id(&self) -> SessionId {
        self.shared.session_id()
    }

    /// What another client needs to resume this session
    /// ([`ClientOptions::with_resume`]).
    pub fn credentials(&self) -> SessionCredentials {
        self.shared.session().credentials
    }

    /// The session timeout the server granted.
    pub fn session_timeout(&self) -> Duration {
        self.shared.session().timeout
    }

    /// The newest zxid seen in any reply or event. Never decreases.
    pub fn last_zxid(&self) -> Zxid {
        self.shared.last_zxid()
    }

    /// How many watch events this client has received from the server, over
    /// all its connections: one per change per session, however many local
    /// watchers it reached. A lock waiter that watches only its predecessor
    /// receives one per grant; a herd would receive one per release.
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) {
    /// println!("{} watch events so far", client.watch_events_received());
    /// # }
    /// ```
    pub fn watch_events_received(&self) -> u64 {
        self.shared
            .events_received
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The address (as the connect string names it) of the server this
    /// client is connected to now, or `None` while it is reconnecting.
    /// Operators use it to find which member a session lives on.
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) {
    /// if let Some(server) = client.connected_server() {
    ///     println!("session {:#x} is on {server}", client.session_id());
    /// }
    /// # }
    /// ```
    pub fn connected_server(&self) -> Option<String> {
        self.shared.server()
    }

    /// The server's limits, as announced in the handshake.
    pub fn server_limits(&self) -> ServerLimits {
        self.shared.session().limits
    }

    /// Creates a node and returns its actual path (with the sequence suffix
    /// for sequential modes).
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) -> Result<(), arbor_client::Error> {
    /// use arbor_client::CreateMode;
    ///
    /// let path = client.create("/jobs/job-", b"payload".to_vec(), CreateMode::PersistentSequential).await?;
    /// assert!(path.starts_with("/jobs/job-"));
    /// # Ok(()) }
    /// ```
    pub async fn create(
        &self,
        path: &str,
        data: impl Into<Vec<u8>>,
        mode: CreateMode,
    ) -> Result<String, Error> {
        let (created, _stat) = self.create_with_stat(path, data, mode).await?;
        Ok(created)
    }

    /// Like [`Client::create`], also returning the new node's stat (its
    /// `czxid` is a fencing token).
    pub async fn create_with_stat(
        &self,
        path: &str,
        data: impl Into<Vec<u8>>,
        mode: CreateMode,
    ) -> Result<(String, Stat), Error> {
        let data = data.into();
        check_create_path(path, mode)?;
        self.check_data(&data)?;
        let op = Op::Create {
            path: path.to_owned(),
            data,
            mode,
        };
        match self.call(path, op, Effect::None).await? {
            OpResult::Created { path, stat } => Ok((path, stat)),
            other => Err(unexpected("create", &other)),
        }
    }

    /// Creates a node whose ACL is `acl` and returns its actual path and
    /// stat. The parent's ACL must grant CREATE. `auth` entries stand for
    /// the ids this session proved ([`ClientOptions::with_auth`](crate::ClientOptions::with_auth)).
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) -> Result<(), arbor_client::Error> {
    /// use arbor_client::{Acl, CreateMode};
    ///
    /// // Everything for this session's ids, reads for everybody.
    /// let acl = Acl::parse_list("auth::cdrwa,world:anyone:r").expect("valid ACL text");
    /// client.create_with_acl("/team-a", Vec::new(), CreateMode::Persistent, acl).await?;
    /// # Ok(()) }
    /// ```
    pub async fn create_with_acl(
        &self,
        path: &str,
        data: impl Into<Vec<u8>>,
        mode: CreateMode,
        acl: Vec<Acl>,
    ) -> Result<(String, Stat), Error> {
        let data = data.into();
        check_create_path(path, mode)?;
        self.check_data(&data)?;
        check_acl(&acl)?;
        let op = if Acl::is_open(&acl) {
            Op::Create {
                path: path.to_owned(),
                data,
                mode,
            }
        } else {
            Op::CreateWithAcl {
                path: path.to_owned(),
                data,
                mode,
                acl,
            }
        };
        match self.call(path, op, Effect::None).await? {
            OpResult::Created { path, stat } => Ok((path, stat)),
            other => Err(unexpected("create", &other)),
        }
    }

    /// A node's ACL and stat (`stat.aversion` is the ACL's version). Needs
    /// READ or ADMIN; without ADMIN, digests show as `user:x`.
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) -> Result<(), arbor_client::Error> {
    /// let (acl, stat) = client.get_acl("/team-a").await?;
    /// for entry in &acl {
    ///     println!("{entry}"); // e.g. digest:alice:x:cdrwa
    /// }
    /// println!("ACL version {}", stat.aversion);
    /// # Ok(()) }
    /// ```
    pub async fn get_acl(&self, path: &str) -> Result<(Vec<Acl>, Stat), Error> {
        check_path(path)?;
        let op = Op::GetAcl {
            path: path.to_owned(),
        };
        match self.call(path, op, Effect::None).await? {
            OpResult::Acl { acl, stat } => Ok((acl, stat)),
            other => Err(unexpected("get_acl", &other)),
        }
    }

    /// Replaces a node's ACL if its ACL version is `version` (`None`: any);
    /// needs ADMIN. Returns the new stat.
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) -> Result<(), arbor_client::Error> {
    /// use arbor_client::Acl;
    ///
    /// let (_, stat) = client.get_acl("/team-a").await?;
    /// client.set_acl("/team-a", Acl::read_only(), Some(stat.aversion)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_acl(
        &self,
        path: &str,
        acl: Vec<Acl>,
        version: Option<i32>,
    ) -> Result<Stat, Error> {
        check_path(path)?;
        check_acl(&acl)?;
        let op = Op::SetAcl {
            path: path.to_owned(),
            acl,
            version: version.unwrap_or(ANY_VERSION),
        };
        match self.call(path, op, Effect::None).await? {
            OpResult::SetAcl(stat) => Ok(stat),
            other => Err(unexpected("set_acl", &other)),
        }
    }

    /// The ids this session holds, as the server sees them: the address it
    /// connects from (`ip`), then each id it proved.
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) -> Result<(), arbor_client::Error> {
    /// for id in client.who_am_i().await? {
    ///     println!("{id}"); // ip:127.0.0.1, digest:alice:...
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn who_am_i(&self) -> Result<Vec<Id>, Error> {
        match self.call("", Op::WhoAmI, Effect::None).await? {
            OpResult::WhoAmI(ids) => Ok(ids),
            other => Err(unexpected("who_am_i", &other)),
        }
    }

    /// Deletes a node if its version is `version` (`None`: any version).
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) -> Result<(), arbor_client::Error> {
    /// client.delete("/config/old", None).await?;
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self, path: &str, version: Option<i32>) -> Result<(), Error> {
        check_path(path)?;
        let op = Op::Delete {
            path: path.to_owned(),
            version: version.unwrap_or(ANY_VERSION),
        };
        match self.call(path, op, Effect::None).await? {
            OpResult::Deleted => Ok(()),
            other => Err(unexpected("delete", &other)),
        }
    }

    /// Replaces a node's data if its version is `version` (`None`: any
    /// version); returns the new stat.
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) -> Result<(), arbor_client::Error> {
    /// let (_, stat) = client.get_data("/config").await?;
    /// // Compare-and-set: fails with Error::BadVersion if someone wrote in between.
    /// client.set_data("/config", b"v2".to_vec(), Some(stat.version)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_data(
        &self,
        path: &str,
        data: impl Into<Vec<u8>>,
        version: Option<i32>,
    ) -> Result<Stat, Error> {
        let data = data.into();
        check_path(path)?;
        self.check_data(&data)?;
        let op = Op::SetData {
            path: path.to_owned(),
            data,
            version: version.unwrap_or(ANY_VERSION),
        };
        match self.call(path, op, Effect::None).await? {
            OpResult::SetData(stat) => Ok(stat),
            other => Err(unexpected("set_data", &other)),
        }
    }

    /// A node's data and stat.
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) -> Result<(), arbor_client::Error> {
    /// let (data, stat) = client.get_data("/config").await?;
    /// println!("{} bytes at version {}", data.len(), stat.version);
    /// # Ok(()) }
    /// ```
    pub async fn get_data(&self, path: &str) -> Result<(Vec<u8>, Stat), Error> {
        check_path(path)?;
        let op = Op::GetData {
            path: path.to_owned(),
            watch: false,
        };
        match self.call(path, op, Effect::None).await? {
            OpResult::Data { data, stat } => Ok((data, stat)),
            other => Err(unexpected("get_data", &other)),
        }
    }

    /// A node's data and stat, and a one-shot watch that fires on the node's
    /// next data change or deletion. Fails with [`Error::NoNode`] (and sets no
    /// watch) if the node does not exist; use [`Client::exists_watch`] to wait
    /// for a node to appear.
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) -> Result<(), arbor_client::Error> {
    /// let (data, _stat, watch) = client.get_data_watch("/config").await?;
    /// println!("config: {data:?}");
    /// let event = watch.await?;
    /// println!("config changed: {:?}", event.event_type);
    /// # Ok(()) }
    /// ```
    pub async fn get_data_watch(&self, path: &str) -> Result<(Vec<u8>, Stat, OneshotWatch), Error> {
        check_path(path)?;
        let watch = self.shared.watches.oneshot(path, Table::Data)?;
        let op = Op::GetData {
            path: path.to_owned(),
            watch: true,
        };
        let effect = Effect::Provisional(watch.key().clone());
        match self.call(path, op, effect).await? {
            OpResult::Data { data, stat } => Ok((data, stat, watch)),
            other => Err(unexpected("get_data", &other)),
        }
    }

    /// The node's stat, or `None` if it does not exist.
    pub async fn exists(&self, path: &str) -> Result<Option<Stat>, Error> {
        check_path(path)?;
        let op = Op::Exists {
            path: path.to_owned(),
            watch: false,
        };
        match self.call(path, op, Effect::None).await? {
            OpResult::Exists(stat) => Ok(stat),
            other => Err(unexpected("exists", &other)),
        }
    }

    /// The node's stat (or `None`), and a one-shot watch that fires when the
    /// node is created, changed or deleted. Set whether or not the node exists:
    /// this is how a lock waiter waits for its predecessor to go.
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) -> Result<(), arbor_client::Error> {
    /// let (stat, watch) = client.exists_watch("/locks/lock-0000000041").await?;
    /// if stat.is_some() {
    ///     watch.await?; // the predecessor changed or went away
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn exists_watch(&self, path: &str) -> Result<(Option<Stat>, OneshotWatch), Error> {
        check_path(path)?;
        let watch = self.shared.watches.oneshot(path, Table::Data)?;
        let op = Op::Exists {
            path: path.to_owned(),
            watch: true,
        };
        let effect = Effect::Provisional(watch.key().clone());
        match self.call(path, op, effect).await? {
            OpResult::Exists(stat) => Ok((stat, watch)),
            other => Err(unexpected("exists", &other)),
        }
    }

    /// The names of a node's children (in no particular order).
    pub async fn get_children(&self, path: &str) -> Result<Vec<String>, Error> {
        check_path(path)?;
        let op = Op::GetChildren {
            path: path.to_owned(),
            watch: false,
        };
        match self.call(path, op, Effect::None).await? {
            OpResult::Children { names, .. } => Ok(names.into_vec()),
            other => Err(unexpected("get_children", &other)),
        }
    }

    /// The names of a node's children, and a one-shot watch that fires when a
    /// child is added or removed or the node is deleted. Fails with
    /// [`Error::NoNode`] (and sets no watch) if the node does not exist.
    pub async fn get_children_watch(
        &self,
        path: &str,
    ) -> Result<(Vec<String>, OneshotWatch), Error> {
        check_path(path)?;
        let watch = self.shared.watches.oneshot(path, Table::Child)?;
        let op = Op::GetChildren {
            path: path.to_owned(),
            watch: true,
        };
        let effect = Effect::Provisional(watch.key().clone());
        match self.call(path, op, effect).await? {
            OpResult::Children { names, .. } => Ok((names.into_vec(), watch)),
            other => Err(unexpected("get_children", &other)),
        }
    }

    /// A node's children with their stats, and the node's own stat.
    pub async fn get_children_with_stat(
        &self,
        path: &str,
    ) -> Result<(Vec<ChildEntry>, Stat), Error> {
        check_path(path)?;
        let op = Op::GetChildrenWithStat {
            path: path.to_owned(),
            watch: false,
        };
        match self.call(path, op, Effect::None).await? {
            OpResult::ChildrenWithStat { children, stat } => Ok((children, stat)),
            other => Err(unexpected("get_children_with_stat", &other)),
        }
    }

    /// The sequential children of `path` whose sequence number is below
    /// `sequence`, highest first, at most `limit` (capped at
    /// [`CHILDREN_BELOW_MAX`](arbor_protocol::CHILDREN_BELOW_MAX)), with their
    /// stats. One small reply however many children there are: a queue
    /// member finds the node just ahead of it without listing the queue.
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) -> Result<(), arbor_client::Error> {
    /// // The node created just before /queue/job-0000000042, if any is left.
    /// let ahead = client.children_below("/queue", 42, 1).await?;
    /// if let Some(previous) = ahead.first() {
    ///     println!("{} is ahead (created at zxid {})", previous.name, previous.stat.czxid);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn children_below(
        &self,
        path: &str,
        sequence: u64,
        limit: u32,
    ) -> Result<Vec<ChildEntry>, Error> {
        check_path(path)?;
        let op = Op::ChildrenBelow {
            path: path.to_owned(),
            sequence,
            limit,
        };
        match self.call(path, op, Effect::None).await? {
            OpResult::ChildrenWithStat { children, .. } => Ok(children),
            other => Err(unexpected("children_below", &other)),
        }
    }

    /// The connected server's view of its ensemble: its member id (0 for a
    /// standalone server), the leader it follows, its term and log
    /// position, and the members; asked of the leader, also how far each
    /// member has confirmed the log.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// let status = client.cluster_status().await?;
    /// if status.member_id == 0 {
    ///     println!("a standalone server");
    /// } else {
    ///     println!("member {} follows {:?}", status.member_id, status.leader);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn cluster_status(&self) -> Result<crate::ClusterStatus, Error> {
        match self.call("", Op::ClusterStatus, Effect::None).await? {
            OpResult::ClusterStatus(status) => Ok(status),
            other => Err(unexpected("cluster_status", &other)),
        }
    }

    /// Adds member `id` to the ensemble online, through its leader: first as
    /// a learner, answered once it has caught up with the log, then as a
    /// voter. The new member must be running (`arbord --join`). Returns the
    /// ensemble's status after the change.
    ///
    /// ```no_run
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let client = arbor_client::Client::connect("127.0.0.1:7281", Default::default()).await?;
    /// let status = client.add_member(4, "127.0.0.1:7581", "127.0.0.1:7591").await?;
    /// assert!(status.members.iter().any(|m| m.id == 4 && m.voter));
    /// # Ok(()) }
    /// ```
    pub async fn add_member(
        &self,
        id: u64,
        client_addr: &str,
        peer_addr: &str,
    ) -> Result<crate::ClusterStatus, Error> {
        let op = Op::AddMember {
            id,
            client_addr: client_addr.to_owned(),
            peer_addr: peer_addr.to_owned(),
        };
        match self.call("", op, Effect::None).await? {
            OpResult::ClusterStatus(status) => Ok(status),
            other => Err(unexpected("add_member", &other)),
        }
    }

    /// Removes member `id` from the ensemble online, through its leader.
    /// Returns the ensemble's status after the change, as the connected
    /// member has applied it (asked of the member being removed, which is
    /// sent no more of the log, it is that member's last view).
    ///
    /// ```no_run
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let client = arbor_client::Client::connect("127.0.0.1:7281", Default::default()).await?;
    /// let status = client.remove_member(4).await?;
    /// assert!(status.members.iter().all(|m| m.id != 4));
    /// # Ok(()) }
    /// ```
    pub async fn remove_member(&self, id: u64) -> Result<crate::ClusterStatus, Error> {
        match self.call("", Op::RemoveMember { id }, Effect::None).await? {
            OpResult::ClusterStatus(status) => Ok(status),
            other => Err(unexpected("remove_member", &other)),
        }
    }

    /// Applies `ops` all together or not at all, and returns one result per op.
    ///
    /// If an op fails nothing is applied, and the error is
    /// [`Error::MultiFailed`] with the index and code of the failing op. Build
    /// the ops with the helpers of [`crate::multi`].
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) -> Result<(), arbor_client::Error> {
    /// use arbor_client::{multi, CreateMode};
    ///
    /// let (_, stat) = client.get_data("/jobs/42").await?;
    /// client.multi(vec![
    ///     multi::check("/leader", None),
    ///     multi::set_data("/jobs/42", b"done".to_vec(), Some(stat.version)),
    ///     multi::create("/done/42", Vec::new(), CreateMode::Persistent),
    /// ]).await?;
    /// # Ok(()) }
    /// ```
    pub async fn multi(&self, ops: Vec<MultiOp>) -> Result<Vec<OpResult>, Error> {
        for op in &ops {
            match op {
                MultiOp::Create { path, data, mode } => {
                    check_create_path(path, *mode)?;
                    self.check_data(data)?;
                }
                MultiOp::CreateWithAcl {
                    path,
                    data,
                    mode,
                    acl,
                } => {
                    check_create_path(path, *mode)?;
                    self.check_data(data)?;
                    check_acl(acl)?;
                }
                MultiOp::SetData { path, data, .. } => {
                    check_path(path)?;
                    self.check_data(data)?;
                }
                MultiOp::Check { path, .. } | MultiOp::Delete { path, .. } => check_path(path)?,
            }
        }
        let count = ops.len();
        match self.call("", Op::Multi { ops }, Effect::None).await? {
            OpResult::Multi(outcomes) => multi_results(count, outcomes),
            other => Err(unexpected("multi", &other)),
        }
    }

    /// Waits until every write the server ordered before this call has been
    /// applied by the server this client talks to.
    pub async fn sync(&self, path: &str) -> Result<(), Error> {
        check_path(path)?;
        let op = Op::Sync {
            path: path.to_owned(),
        };
        match self.call(path, op, Effect::None).await? {
            OpResult::Synced { .. } => Ok(()),
            other => Err(unexpected("sync", &other)),
        }
    }

    /// Pings the server and returns the round trip (including any wait behind
    /// requests already in flight).
    pub async fn ping(&self) -> Result<Duration, Error> {
        let started = Instant::now();
        match self.call("", Op::Ping, Effect::None).await? {
            OpResult::Pong => Ok(started.elapsed()),
            other => Err(unexpected("ping", &other)),
        }
    }

    /// Sets a persistent watch on `path` (and, with
    /// [`AddWatchMode::PersistentRecursive`], everything below it). It stays
    /// until [`Client::remove_watches`] or the end of the client (it is
    /// registered again after every reconnect).
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) -> Result<(), arbor_client::Error> {
    /// use arbor_client::AddWatchMode;
    ///
    /// let mut watch = client.watch("/config", AddWatchMode::PersistentRecursive).await?;
    /// loop {
    ///     let event = watch.next().await?;
    ///     println!("{:?} {}", event.event_type, event.path);
    /// }
    /// # }
    /// ```
    pub async fn watch(&self, path: &str, mode: AddWatchMode) -> Result<PersistentWatch, Error> {
        check_path(path)?;
        let watch = self.shared.watches.persistent(path, mode)?;
        let op = Op::AddWatch {
            path: path.to_owned(),
            mode,
        };
        let effect = Effect::Provisional(watch.key().clone());
        match self.call(path, op, effect).await? {
            OpResult::WatchesChanged => Ok(watch),
            other => Err(unexpected("add_watch", &other)),
        }
    }

    /// Removes this session's watches of `kind` on `path`, on the server and
    /// locally: local one-shot watches resolve, and persistent streams end,
    /// with [`Error::WatchRemoved`]. [`Error::NoWatcher`] if the server held
    /// none (local watchers of that kind are removed then too, as they could
    /// never fire).
    pub async fn remove_watches(&self, path: &str, kind: WatcherKind) -> Result<(), Error> {
        check_path(path)?;
        let op = Op::RemoveWatches {
            path: path.to_owned(),
            kind,
        };
        let effect = Effect::RemoveLocal {
            path: path.to_owned(),
            kind,
        };
        match self.call(path, op, effect).await? {
            OpResult::WatchesChanged => Ok(()),
            other => Err(unexpected("remove_watches", &other)),
        }
    }

    /// Closes the session: ephemeral nodes are deleted and watches removed.
    /// Waits for the server's answer (at most the request timeout), then ends
    /// the connection. Every clone of this client then fails with
    /// [`Error::Closed`].
    ///
    /// While [`Suspended`](ConnectionState::Suspended) it does not wait for a
    /// reconnect: the client is closed at once and the call returns
    /// [`Error::ConnectionLoss`], saying that the server was not told, so the
    /// session and its ephemeral nodes live until the session timeout.
    ///
    /// ```no_run
    /// # async fn demo(client: arbor_client::Client) -> Result<(), arbor_client::Error> {
    /// client.close().await?;
    /// # Ok(()) }
    /// ```
    pub async fn close(self) -> Result<(), Error> {
        match self.shared.ended() {
            Some(Ended::Closed) => return Ok(()),
            Some(ended) => return Err(ended.error()),
            None => {}
        }
        match self.submit_any(Op::CloseSession, Effect::None).await {
            Ok(Reply {
                result: Ok(OpResult::SessionClosed),
            }) => Ok(()),
            Ok(Reply { result: Ok(other) }) => Err(unexpected("close_session", &other)),
            Ok(Reply { result: Err(code) }) => Err(Error::from_code(code, "")),
            // Another clone closed it first.
            Err(Error::Closed) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Sends `op` and maps a refusal to the error for `path`.
    async fn call(&self, path: &str, op: Op, effect: Effect) -> Result<OpResult, Error> {
        let reply = self.submit(op, effect).await?;
        reply.result.map_err(|code| Error::from_code(code, path))
    }

    /// Takes an in-flight slot, hands `op` to the connection task and waits
    /// for its reply, all within the request timeout. Fails fast unless
    /// connected.
    async fn submit(&self, op: Op, effect: Effect) -> Result<Reply, Error> {
        if let Some(error) = self.shared.unavailable() {
            return Err(error);
        }
        self.submit_any(op, effect).await
    }

    /// [`Client::submit`] in any state but a terminal one: the connection
    /// task answers commands itself while suspended.
    ///
    /// The request timeout costs no timer when nothing waits: the command
    /// carries its deadline and the connection task answers
    /// [`Error::Timeout`] once it passes. Only a wait for an in-flight slot
    /// (or, never in practice, for room in the channel) is timed here.
    /// Dropping this future is safe at every await: a command not yet sent is
    /// dropped whole, and a sent one keeps its pending slot until the reply
    /// comes and is discarded (see `connection`).
    async fn submit_any(&self, op: Op, effect: Effect) -> Result<Reply, Error> {
        if let Some(ended) = self.shared.ended() {
            return Err(ended.error());
        }
        let deadline = connection::deadline_after(self.request_timeout);
        let op_name = op.name();
        let permit = self.in_flight_permit(op_name, deadline).await?;
        let (reply, answer) = oneshot::channel();
        let command = Command {
            op,
            effect,
            reply,
            permit,
            deadline,
        };
        self.hand_over(command).await?;
        match answer.await {
            Ok(result) => result,
            Err(_) => Err(self.shared.ended_error()),
        }
    }

    /// An in-flight slot: at once if one is free, else the first one freed
    /// before `deadline`.
    async fn in_flight_permit(
        &self,
        op_name: &'static str,
        deadline: TimerInstant,
    ) -> Result<OwnedSemaphorePermit, Error> {
        let in_flight = &self.shared.in_flight;
        let waited = match in_flight.clone().try_acquire_owned() {
            Ok(permit) => return Ok(permit),
            Err(TryAcquireError::NoPermits) => {
                tokio::time::timeout_at(deadline, in_flight.clone().acquire_owned()).await
            }
            // Closed by the task when the client ended.
            Err(TryAcquireError::Closed) => return Err(self.shared.ended_error()),
        };
        match waited {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_closed)) => Err(self.shared.ended_error()),
            Err(_elapsed) => {
                debug!(
                    op = op_name,
                    timeout_ms = self.request_timeout.as_millis() as u64,
                    "request timed out waiting for an in-flight slot"
                );
                Err(Error::Timeout)
            }
        }
    }

    /// Puts `command` on the channel to the connection task. The channel
    /// holds as many commands as there are in-flight slots, so this never
    /// waits in practice; if it had to, it would wait until the deadline.
    async fn hand_over(&self, command: Command) -> Result<(), Error> {
        let deadline = command.deadline;
        let command = match self.commands.try_send(command) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Full(command)) => command,
            Err(TrySendError::Closed(_)) => return Err(self.shared.ended_error()),
        };
        match tokio::time::timeout_at(deadline, self.commands.send(command)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_closed)) => Err(self.shared.ended_error()),
            Err(_elapsed) => Err(Error::Timeout),
        }
    }

    #[cfg(test)]
    pub(crate) fn watcher_count(&self) -> usize {
        self.shared.watches.lock().len()
    }

    fn check_data(&self, data: &[u8]) -> Result<(), Error> {
        let max = usize::try_from(self.server_limits().data_bytes_max).unwrap_or(usize::MAX);
        if data.len() > max {
            return Err(Error::TooLarge {
                bytes: Some(data.len()),
                max: Some(max),
            });
        }
        Ok(())
    }
}

fn check_path(path: &str) -> Result<(), Error> {
    path::validate(path).map_err(|reason| invalid_path(path, reason))
}

/// What the server would refuse of an ACL without looking at the tree: an
/// empty list, or more entries than it takes.
fn check_acl(acl: &[Acl]) -> Result<(), Error> {
    if acl.is_empty() {
        return Err(Error::InvalidAcl);
    }
    if acl.len() > ACL_ENTRIES_MAX {
        return Err(Error::LimitExceeded);
    }
    Ok(())
}

fn check_create_path(path: &str, mode: CreateMode) -> Result<(), Error> {
    let checked = if mode.is_sequential() {
        path::validate_sequential_prefix(path)
    } else {
        path::validate(path)
    };
    checked.map_err(|reason| invalid_path(path, reason))
}

fn invalid_path(path: &str, reason: PathError) -> Error {
    Error::InvalidPath {
        path: path.to_owned(),
        reason: Some(reason),
    }
}

/// A result of the wrong kind for the request: the server broke the protocol.
fn unexpected(op: &str, result: &OpResult) -> Error {
    Error::Protocol(format!("{} result for a {op} request", result_name(result)))
}

fn result_name(result: &OpResult) -> &'static str {
    match result {
        OpResult::Created { .. } => "Created",
        OpResult::Deleted => "Deleted",
        OpResult::SetData(_) => "SetData",
        OpResult::Checked => "Checked",
        OpResult::Data { .. } => "Data",
        OpResult::Exists(_) => "Exists",
        OpResult::Children { .. } => "Children",
        OpResult::ChildrenWithStat { .. } => "ChildrenWithStat",
        OpResult::Multi(_) => "Multi",
        OpResult::Synced { .. } => "Synced",
        OpResult::Pong => "Pong",
        OpResult::SessionClosed => "SessionClosed",
        OpResult::WatchesChanged => "WatchesChanged",
        OpResult::ClusterStatus(_) => "ClusterStatus",
        OpResult::Acl { .. } => "Acl",
        OpResult::SetAcl(_) => "SetAcl",
        OpResult::Authenticated => "Authenticated",
        OpResult::WhoAmI(_) => "WhoAmI",
        OpResult::Ephemerals(_) => "Ephemerals",
        OpResult::DescendantCount(_) => "DescendantCount",
        OpResult::MultiRead(_) => "MultiRead",
        OpResult::AdminReport(_) => "AdminReport",
        OpResult::BackupStarted(_) => "BackupStarted",
        OpResult::BackupChunk(_) => "BackupChunk",
    }
}

/// Turns a multi's outcomes into per-op results, or the failing op's error.
fn multi_results(count: usize, outcomes: Vec<MultiOpOutcome>) -> Result<Vec<OpResult>, Error> {
    if outcomes.len() != count {
        return Err(Error::Protocol(format!(
            "{} outcomes for a multi of {count} ops",
            outcomes.len()
        )));
    }
    let failed = outcomes
        .iter()
        .enumerate()
        .find_map(|(index, outcome)| match outcome {
            MultiOpOutcome::Failed(code) => Some((index, *code)),
            _ => None,
        });
    if let Some((index, code)) = failed {
        return Err(Error::MultiFailed {
            index,
            code,
            outcomes,
        });
    }
    outcomes
        .into_iter()
        .map(|outcome| match outcome {
            MultiOpOutcome::Applied(result) => Ok(result),
            other => Err(Error::Protocol(format!(
                "multi outcome {other:?} without a failed op"
            ))),
        })
        .collect()
}
