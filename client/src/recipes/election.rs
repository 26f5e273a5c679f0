//! Leader election (etcd's `concurrency.Election`, Curator's `LeaderLatch`).
//!
//! Each candidate creates an ephemeral sequential node
//! `<prefix>candidate-<seq>` under the election's path, holding the value it
//! campaigns with. The candidate with the lowest node leads. The invariants:
//!
//! * At most one leader at a time: the lowest node is unique, and a session's
//!   nodes vanish when it expires or closes, which is how leadership passes on
//!   when a leader dies.
//! * Succession follows arrival order, and a waiting candidate watches only
//!   the node just ahead of it, so a leader's departure wakes one candidate
//!   (no herd). It finds that node with [`Client::children_below`] (its own
//!   node and the one just ahead), never by listing the candidates.
//! * The leader's fencing token is the creation zxid of its node: every
//!   leader's token is larger than every earlier leader's.
//! * Leadership is reported only after checking that the node is owned by
//!   this session; [`Leadership::lost`] says when it may have been lost, and
//!   the resources a leader writes must check its token anyway
//!   ([`super::Fence`]).
//! * A lost create reply is found again by its per-attempt prefix; cancelling
//!   [`Election::campaign`] removes the candidate's node; a connection loss
//!   while campaigning or observing is ridden out until the session is back.
//!
//! Observers ([`Election::observe`]) watch the leader's node (or, while there
//! is no leader, the election's children), re-read after every event, and
//! report each leader once.

use arbor_protocol::path;

use crate::recipes::fence::FencingToken;
use crate::recipes::fenced::Fenced;
use crate::recipes::lock::{Turn, TurnError};
use crate::recipes::{
    create_protected, delete_node, retrying, unique_prefix, until_lost, NodeCleanup,
};
use crate::{Acl, Client, ConnectionState, Error, OneshotWatch, SessionId};

/// The part of a candidate's node name after the attempt prefix.
pub(crate) const CANDIDATE_NAME: &str = "candidate-";

/// Why a campaign (or a look at the leader) failed.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// # let election = arbor_client::recipes::Election::new(&client, "/doc/election");
/// use arbor_client::recipes::ElectionError;
/// match election.campaign("me").await {
///     Ok(leadership) => println!("leading with token {}", leadership.fencing_token()),
///     Err(ElectionError::Client(err)) if err.is_session_ended() => println!("session over"),
///     Err(err) => println!("no leadership: {err}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    /// The lowest node is not owned by this session: never report leadership.
    #[error("candidate node {node} is owned by session {owner:#x}, not by this one")]
    NotOwner { node: String, owner: SessionId },
    #[error(transparent)]
    Client(#[from] Error),
}

/// An election on a path. Cheap to create; clone the client, not the
/// election.
///
/// ```
/// use arbor_client::recipes::{Election, ElectionError};
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// let election = Election::new(&client, "/election/svc");
/// let leadership = election.campaign("10.0.0.7:8080").await?; // waits its turn
/// tokio::select! {
///     state = leadership.lost() => eprintln!("stepping down: {state:?}"),
///     () = serve(leadership.fencing_token()) => {}
/// }
/// leadership.resign().await?;
/// # Ok(()) }
/// # async fn serve(_token: u64) {}
/// ```
#[derive(Clone)]
pub struct Election {
    client: Client,
    path: String,
    /// The ACL of the nodes the election creates (the open one by default).
    acl: Vec<Acl>,
}

/// Leading the election. Dropping it resigns in the background;
/// [`Leadership::resign`] does it and waits.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// # let election = arbor_client::recipes::Election::new(&client, "/doc/election");
/// let leadership = election.campaign(b"node-a".to_vec()).await?;
/// assert_eq!(leadership.value(), b"node-a");
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
pub struct Leadership {
    node: NodeCleanup,
    token: FencingToken,
    value: Vec<u8>,
}

/// Who leads: the lowest candidate node, as read from the server.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// # let election = arbor_client::recipes::Election::new(&client, "/doc/election");
/// if let Some(leader) = election.leader().await? {
///     println!("{} leads with token {}: {:?}", leader.node, leader.token, leader.value);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The leader's candidate node (full path).
    pub node: String,
    /// The value the leader campaigned with.
    pub value: Vec<u8>,
    /// The leader's fencing token: its node's creation zxid.
    pub token: FencingToken,
}

/// Follows the election's leader: [`Observer::next`] yields each new leader.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// # let election = arbor_client::recipes::Election::new(&client, "/doc/election");
/// # let _leading = election.campaign("a").await?;
/// let mut observer = election.observe();
/// # for _ in 0..1 {
/// loop {
///     let leader = observer.next().await?;
///     println!("new leader {:?}", leader.value);
/// #   break;
/// }
/// # }
/// # Ok(()) }
/// ```
pub struct Observer {
    client: Client,
    path: String,
    /// The leader reported last, so a re-read that finds it again is silent.
    last: Option<LeaderInfo>,
}

impl Election {
    /// An election on `path` (created as a container if missing, with its
    /// parents).
    ///
    /// ```
    /// # fn demo(client: arbor_client::Client) {
    /// let election = arbor_client::recipes::Election::new(&client, "/election/svc");
    /// assert_eq!(election.path(), "/election/svc");
    /// # }
    /// ```
    pub fn new(client: &Client, path: &str) -> Self {
        Self {
            client: client.clone(),
            path: path.to_owned(),
            acl: Acl::open(),
        }
    }

    /// Gives the nodes this election creates (its directory, if missing,
    /// and each candidate's node) `acl` instead of the open one (see
    /// [`Mutex::with_acl`](crate::recipes::Mutex::with_acl)).
    ///
    /// ```
    /// # fn demo(client: arbor_client::Client) {
    /// use arbor_client::{recipes::Election, Acl};
    /// let election = Election::new(&client, "/team-a/leader").with_acl(Acl::creator_all());
    /// # }
    /// ```
    pub fn with_acl(mut self, acl: Vec<Acl>) -> Self {
        self.acl = acl;
        self
    }

    /// The path whose children are the candidates.
    ///
    /// ```
    /// # fn demo(election: arbor_client::recipes::Election) {
    /// println!("candidates under {}", election.path());
    /// # }
    /// ```
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The client the election campaigns through.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Joins the election with `value` (what observers see: an address, a
    /// name) and waits until this candidate leads. Dropping the future leaves
    /// the election: the candidate's node is removed.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let election = arbor_client::recipes::Election::new(&client, "/doc/election");
    /// use std::time::Duration;
    /// // Campaign for at most a minute; on timeout the candidacy is withdrawn.
    /// match tokio::time::timeout(Duration::from_secs(60), election.campaign("me")).await {
    ///     Ok(leadership) => leadership?.resign().await?,
    ///     Err(_) => println!("someone else leads"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn campaign(&self, value: impl Into<Vec<u8>>) -> Result<Leadership, ElectionError> {
        let value = value.into();
        let prefix = unique_prefix();
        // The create and a look at the top of the queue go out together (as
        // the mutex does): an uncontested election costs one round trip.
        let (created, top) = tokio::join!(
            create_protected(
                &self.client,
                &self.path,
                &prefix,
                CANDIDATE_NAME,
                value.clone(),
                &self.acl,
            ),
            self.client.children_below(&self.path, u64::MAX, 2),
        );
        // Dropping this future deletes the node, even mid-create.
        let (cleanup, stat) = created?;
        let node = cleanup.path().to_owned();
        let name = path::name(&node).to_owned();
        let sequence = path::parse_sequence(&name)
            .ok_or_else(|| Error::Protocol(format!("{node} has no sequence number")))?;
        let turn = Turn {
            client: &self.client,
            dir: &self.path,
            name: &name,
            sequence,
            // Only candidates queue; any other child is a stranger.
            blocks: |other: &str| other.contains(CANDIDATE_NAME),
            limit: 2,
            resume_below_blocker: false,
        };
        match turn.wait(true, top.ok()).await {
            Ok(()) => Ok(Leadership {
                node: cleanup,
                token: stat.czxid,
                value,
            }),
            Err(TurnError::NotOwner(owner)) => Err(ElectionError::NotOwner { node, owner }),
            Err(TurnError::Client(err)) => Err(err.into()),
            Err(TurnError::Busy) => unreachable!("a campaign always waits"),
        }
    }

    /// The current leader, or `None` if nobody campaigns.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let election = arbor_client::recipes::Election::new(&client, "/doc/election");
    /// match election.leader().await? {
    ///     Some(leader) => println!("send requests to {}", String::from_utf8_lossy(&leader.value)),
    ///     None => println!("no leader yet"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn leader(&self) -> Result<Option<LeaderInfo>, ElectionError> {
        loop {
            let queue = match retrying(&self.client, || candidates(&self.client, &self.path)).await
            {
                Ok(queue) => queue,
                // The container was reaped: nobody campaigns.
                Err(Error::NoNode { .. }) => return Ok(None),
                Err(err) => return Err(err.into()),
            };
            let Some(first) = queue.first() else {
                return Ok(None);
            };
            let node = path::join(&self.path, first);
            match retrying(&self.client, || self.client.get_data(&node)).await {
                Ok((value, stat)) => {
                    return Ok(Some(LeaderInfo {
                        node,
                        value,
                        token: stat.czxid,
                    }))
                }
                // That leader left between the two reads: look again.
                Err(Error::NoNode { .. }) => continue,
                Err(err) => return Err(err.into()),
            }
        }
    }

    /// Follows the leader from now on: the first [`Observer::next`] yields
    /// the current leader (waiting for one if there is none), each later one
    /// the next different leader.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let election = arbor_client::recipes::Election::new(&client, "/doc/election");
    /// # let a = election.campaign("a").await?;
    /// let mut observer = election.observe();
    /// let first = observer.next().await?;
    /// # a.resign().await?;
    /// # let _b = election.campaign("b").await?;
    /// let second = observer.next().await?; // after `first` resigned or died
    /// assert!(second.token > first.token);
    /// # Ok(()) }
    /// ```
    pub fn observe(&self) -> Observer {
        Observer {
            client: self.client.clone(),
            path: self.path.clone(),
            last: None,
        }
    }
}

/// The candidates' node names, in arrival (sequence) order.
async fn candidates(client: &Client, dir: &str) -> Result<Vec<String>, Error> {
    let mut names: Vec<String> = client
        .get_children(dir)
        .await?
        .into_iter()
        .filter(|name| name.contains(CANDIDATE_NAME))
        .collect();
    names.sort_by_key(|name| path::parse_sequence(name).unwrap_or(u64::MAX));
    Ok(names)
}

impl Observer {
    /// Waits for a leader different from the one reported last, and returns
    /// it. Changes in between are not queued: a leader that came and went
    /// while nobody called `next` may never be seen. Fails only when the
    /// session ends (or on an error the client cannot ride out).
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let election = arbor_client::recipes::Election::new(&client, "/doc/election");
    /// # let _leadership = election.campaign("me").await?;
    /// # let mut observer = election.observe();
    /// while let Ok(leader) = observer.next().await {
    ///     println!("leader is now {:?} (token {})", leader.value, leader.token);
    /// #   break;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn next(&mut self) -> Result<LeaderInfo, ElectionError> {
        loop {
            let (leader, watch) = self.read_with_watch().await?;
            if let Some(leader) = leader {
                if self.last.as_ref() != Some(&leader) {
                    self.last = Some(leader.clone());
                    return Ok(leader);
                }
            }
            // Any event (the leader left, a candidate came) means: look again.
            watch.await?;
        }
    }

    /// The leader reported last by [`Observer::next`], if any.
    ///
    /// ```
    /// # fn demo(observer: arbor_client::recipes::Observer) {
    /// if let Some(leader) = observer.last() {
    ///     println!("last seen leader: {}", leader.node);
    /// }
    /// # }
    /// ```
    pub fn last(&self) -> Option<&LeaderInfo> {
        self.last.as_ref()
    }

    /// The current leader and a watch that fires when it may have changed:
    /// on the leader's node if there is one (only its going matters, so
    /// candidates joining wake nobody), else on the children, else on the
    /// election's path itself.
    async fn read_with_watch(&self) -> Result<(Option<LeaderInfo>, OneshotWatch), Error> {
        let client = &self.client;
        loop {
            let (names, children_watch) =
                match retrying(client, || client.get_children_watch(&self.path)).await {
                    Ok(found) => found,
                    Err(Error::NoNode { .. }) => {
                        let (stat, watch) =
                            retrying(client, || client.exists_watch(&self.path)).await?;
                        if stat.is_none() {
                            return Ok((None, watch));
                        }
                        // Created in between: read its children.
                        continue;
                    }
                    Err(err) => return Err(err),
                };
            let first = names
                .iter()
                .filter(|name| name.contains(CANDIDATE_NAME))
                .min_by_key(|name| path::parse_sequence(name).unwrap_or(u64::MAX));
            let Some(first) = first else {
                return Ok((None, children_watch));
            };
            let node = path::join(&self.path, first);
            match retrying(client, || client.get_data_watch(&node)).await {
                Ok((value, stat, watch)) => {
                    let leader = LeaderInfo {
                        node,
                        value,
                        token: stat.czxid,
                    };
                    return Ok((Some(leader), watch));
                }
                // That leader left between the two reads: look again.
                Err(Error::NoNode { .. }) => continue,
                Err(err) => return Err(err),
            }
        }
    }
}

impl Leadership {
    /// This leader's fencing token: the zxid that created its candidate
    /// node. Strictly larger than every earlier leader's token.
    ///
    /// ```
    /// # fn demo(leadership: arbor_client::recipes::Leadership) {
    /// let token: u64 = leadership.fencing_token(); // send it with every write
    /// # }
    /// ```
    pub fn fencing_token(&self) -> FencingToken {
        self.token
    }

    /// The candidate node's path.
    ///
    /// ```
    /// # fn demo(leadership: arbor_client::recipes::Leadership) {
    /// println!("leading as {}", leadership.node());
    /// # }
    /// ```
    pub fn node(&self) -> &str {
        self.node.path()
    }

    /// The value this leader campaigned with.
    ///
    /// ```
    /// # fn demo(leadership: arbor_client::recipes::Leadership) {
    /// println!("leading as {:?}", String::from_utf8_lossy(leadership.value()));
    /// # }
    /// ```
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// A transaction that commits only while this candidate leads: the
    /// server checks its candidate node in the same step (see [`Fenced`]),
    /// so a leader that lost leadership — paused past its session, or
    /// evicted — cannot write, even if it has not noticed yet.
    ///
    /// ```
    /// use arbor_client::{recipes::{Election, FencedError}, CreateMode};
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # client.create("/svc-epoch", b"0".to_vec(), CreateMode::Persistent).await?;
    /// let leadership = Election::new(&client, "/election/svc").campaign("me").await?;
    /// leadership.fenced().set_data("/svc-epoch", b"1".to_vec(), None).commit().await?;
    ///
    /// // Once the candidate node is gone, the leader's writes are refused.
    /// let fenced = leadership.fenced().set_data("/svc-epoch", b"2".to_vec(), None);
    /// client.delete(leadership.node(), None).await?;
    /// assert!(matches!(fenced.commit().await, Err(FencedError::GrantLost { .. })));
    /// assert_eq!(client.get_data("/svc-epoch").await?.0, b"1");
    /// # Ok(()) }
    /// ```
    pub fn fenced(&self) -> Fenced {
        Fenced::new(self.node.client(), self.node.path())
    }

    /// Resolves when this leader may have lost leadership: the connection is
    /// suspended (the session may expire, and a successor take over, before
    /// it comes back), the session expired, or the client closed. Returns
    /// that state. Act as a follower from then on.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let leadership = arbor_client::recipes::Election::new(&client, "/doc/election").campaign("me").await?;
    /// tokio::select! {
    ///     state = leadership.lost() => eprintln!("no longer leading: {state:?}"),
    ///     () = lead(leadership.fencing_token()) => {}
    /// }
    /// # Ok(()) }
    /// # async fn lead(_token: u64) {}
    /// ```
    pub async fn lost(&self) -> ConnectionState {
        until_lost(self.node.client()).await
    }

    /// Steps down and waits until the candidate node is gone, which hands
    /// leadership to the next candidate (riding out a connection loss on the
    /// way).
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// # let leadership = arbor_client::recipes::Election::new(&client, "/doc/election").campaign("me").await?;
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    pub async fn resign(self) -> Result<(), ElectionError> {
        delete_node(self.node).await.map_err(ElectionError::from)
    }
}
