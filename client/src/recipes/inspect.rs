//! Reading the queues of [`Mutex`](super::Mutex), [`RwLock`](super::RwLock)
//! and [`Election`](super::Election) from outside: who holds, who waits, and
//! since when. This is what an operator asks when something is stuck, and
//! what `arbor locks` prints.
//!
//! A queue is a node whose children are participant nodes named
//! `[_c_<id>-]<role>-<sequence>`; the same names Curator uses, so Curator's
//! locks on a migrated tree are recognised too. The view is a snapshot of one
//! `get_children_with_stat`: by the time it is printed, the queue may have
//! moved on.

use arbor_protocol::path;

use super::election::CANDIDATE_NAME;
use super::lock::LOCK_NAME;
use super::rwlock::{READ_NAME, WRITE_NAME};
use super::FencingToken;
use crate::{ChildEntry, Client, Error, SessionId};

/// The most nodes [`find_queues`] visits before it stops with
/// [`InspectError::TooManyNodes`]: the walk must stay bounded on a big tree.
pub const INSPECT_NODES_MAX: usize = 100_000;

/// What a participant queued for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A [`Mutex`](super::Mutex) contender.
    Lock,
    /// A reader of an [`RwLock`](super::RwLock).
    Read,
    /// A writer of an [`RwLock`](super::RwLock).
    Write,
    /// An [`Election`](super::Election) candidate.
    Candidate,
}

impl Role {
    /// Every role, with the name stem its nodes carry.
    const ALL: [(Role, &'static str); 4] = [
        (Role::Lock, LOCK_NAME),
        (Role::Read, READ_NAME),
        (Role::Write, WRITE_NAME),
        (Role::Candidate, CANDIDATE_NAME),
    ];

    /// A short lowercase name (`lock`, `read`, `write`, `candidate`).
    pub fn name(self) -> &'static str {
        match self {
            Role::Lock => "lock",
            Role::Read => "read",
            Role::Write => "write",
            Role::Candidate => "candidate",
        }
    }

    /// Whether holders of this role share (readers do; nobody else).
    fn shares(self) -> bool {
        self == Role::Read
    }
}

/// One node in a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Participant {
    /// The node's name under the queue.
    pub name: String,
    pub role: Role,
    /// The sequence number the server gave it: the queue order.
    pub sequence: u64,
    /// The session that owns the (ephemeral) node; 0 if it is not ephemeral.
    pub session_id: SessionId,
    /// The node's creation zxid: the fencing token of its grant.
    pub fencing_token: FencingToken,
    /// When the node was created (server clock, ms since the Unix epoch):
    /// when this participant started waiting.
    pub created_ms: u64,
    /// Whether it holds the lock (or leads the election) now.
    pub holds: bool,
}

/// The participants of one lock, read-write lock or election, in queue order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    /// The node whose children form the queue.
    pub path: String,
    pub participants: Vec<Participant>,
}

impl Queue {
    /// The participants that hold the lock (several only for readers).
    pub fn holders(&self) -> impl Iterator<Item = &Participant> {
        self.participants.iter().filter(|p| p.holds)
    }

    /// The participants still waiting, first in line first.
    pub fn waiters(&self) -> impl Iterator<Item = &Participant> {
        self.participants.iter().filter(|p| !p.holds)
    }
}

/// Why a walk for queues stopped.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("more than {INSPECT_NODES_MAX} nodes under {root}; inspect a smaller subtree")]
    TooManyNodes { root: String },
    #[error(transparent)]
    Client(#[from] Error),
}

/// The role and sequence of a participant node's name, `None` for any other
/// name. Accepts `<role>-<digits>` with an optional protected-mode prefix
/// `_c_<id>-`, and at least 10 digits, as the server writes them.
///
/// ```
/// use arbor_client::recipes::inspect::{parse_participant, Role};
///
/// let name = "_c_0123456789abcdef0123456789abcdef-lock-0000000007";
/// assert_eq!(parse_participant(name), Some((Role::Lock, 7)));
/// assert_eq!(parse_participant("read-0000000012"), Some((Role::Read, 12)));
/// assert_eq!(parse_participant("config"), None);
/// ```
pub fn parse_participant(name: &str) -> Option<(Role, u64)> {
    let sequence = path::parse_sequence(name)?;
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    Role::ALL.into_iter().find_map(|(role, role_name)| {
        let before = stem.strip_suffix(role_name)?;
        let plain = before.is_empty();
        let protected = before.starts_with("_c_") && before.ends_with('-') && before.len() > 4;
        (plain || protected).then_some((role, sequence))
    })
}

/// The queue formed by `children` of `dir`, or `None` if no child is a
/// participant. Children that are not participants are ignored.
pub fn queue_of(dir: &str, children: &[ChildEntry]) -> Option<Queue> {
    let mut participants: Vec<Participant> = children
        .iter()
        .filter_map(|child| {
            let (role, sequence) = parse_participant(&child.name)?;
            Some(Participant {
                name: child.name.clone(),
                role,
                sequence,
                session_id: child.stat.ephemeral_owner,
                fencing_token: child.stat.czxid,
                created_ms: child.stat.ctime_ms,
                holds: false,
            })
        })
        .collect();
    if participants.is_empty() {
        return None;
    }
    participants.sort_by_key(|p| p.sequence);
    // The recipes' grant rule: the first in line holds; a reader also holds
    // while only readers are ahead of it.
    let mut only_sharers_ahead = true;
    for (index, participant) in participants.iter_mut().enumerate() {
        participant.holds = index == 0 || (participant.role.shares() && only_sharers_ahead);
        only_sharers_ahead &= participant.role.shares();
    }
    Some(Queue {
        path: dir.to_owned(),
        participants,
    })
}

/// The queue under `dir`, or `None` if it has no participants.
///
/// ```
/// use arbor_client::recipes::{inspect, Mutex};
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// let guard = Mutex::new(&client, "/locks/job-42").lock().await?;
/// let queue = inspect::queue(&client, "/locks/job-42").await?.expect("a holder");
/// let holder = queue.holders().next().expect("one holder");
/// assert_eq!(holder.fencing_token, guard.fencing_token());
/// assert_eq!(holder.session_id, client.session_id());
/// # Ok(()) }
/// ```
pub async fn queue(client: &Client, dir: &str) -> Result<Option<Queue>, Error> {
    let (children, _stat) = client.get_children_with_stat(dir).await?;
    Ok(queue_of(dir, &children))
}

/// Every queue at or below `root`, in depth-first path order. Participant
/// nodes themselves are not descended into. Visits at most
/// [`INSPECT_NODES_MAX`] nodes; nodes deleted during the walk are skipped.
pub async fn find_queues(client: &Client, root: &str) -> Result<Vec<Queue>, InspectError> {
    let mut queues = Vec::new();
    let mut pending = vec![root.to_owned()];
    let mut visited = 0usize;
    while let Some(dir) = pending.pop() {
        let children = match client.get_children_with_stat(&dir).await {
            Ok((children, _stat)) => children,
            Err(Error::NoNode { .. }) if dir != root => continue,
            Err(err) => return Err(err.into()),
        };
        visited += 1 + children.len();
        if visited > INSPECT_NODES_MAX {
            return Err(InspectError::TooManyNodes {
                root: root.to_owned(),
            });
        }
        if let Some(queue) = queue_of(&dir, &children) {
            queues.push(queue);
        }
        // Reverse order on the stack pops the children in name order.
        let mut deeper: Vec<&ChildEntry> = children
            .iter()
            .filter(|c| c.stat.num_children > 0 && parse_participant(&c.name).is_none())
            .collect();
        deeper.sort_by(|a, b| b.name.cmp(&a.name));
        pending.extend(deeper.into_iter().map(|c| path::join(&dir, &c.name)));
    }
    Ok(queues)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stat;

    fn child(name: &str, czxid: u64) -> ChildEntry {
        ChildEntry {
            name: name.to_owned(),
            stat: Stat {
                czxid,
                ephemeral_owner: 0x10 + czxid,
                ..Stat::default()
            },
        }
    }

    // Proves only well-formed participant names are recognised, with or without the protected prefix.
    #[test]
    fn parses_participant_names() {
        let id = "_c_0123456789abcdef0123456789abcdef-";
        assert_eq!(
            parse_participant(&format!("{id}write-0000000003")),
            Some((Role::Write, 3))
        );
        assert_eq!(
            parse_participant("candidate-12345678901"),
            Some((Role::Candidate, 12_345_678_901))
        );
        // Curator's protected names carry a dashed UUID.
        assert_eq!(
            parse_participant("_c_7b0e6c4e-1f0a-4c1e-9d1b-2f1e0a9b8c7d-lock-0000000001"),
            Some((Role::Lock, 1))
        );
        for stranger in [
            "lock-12",
            "lock-",
            "config",
            "xlock-0000000001",
            "_c_-lock-0000000001",
            "member-0000000001",
            "lock-0000000001x",
        ] {
            assert_eq!(parse_participant(stranger), None, "{stranger}");
        }
    }

    // Proves the first writer holds alone, leading readers share, and order follows the sequence, not the name.
    #[test]
    fn grant_rule_of_each_role() {
        let queue = queue_of(
            "/rw",
            &[
                child("_c_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-read-0000000002", 2),
                child("read-0000000001", 1),
                child("write-0000000003", 3),
                child("read-0000000004", 4),
                child("config", 5),
            ],
        )
        .expect("participants");
        let holders: Vec<u64> = queue.holders().map(|p| p.sequence).collect();
        let waiters: Vec<u64> = queue.waiters().map(|p| p.sequence).collect();
        assert_eq!(holders, [1, 2]);
        assert_eq!(waiters, [3, 4]);
        assert_eq!(queue.participants[0].session_id, 0x11);

        let queue = queue_of(
            "/m",
            &[child("lock-0000000009", 9), child("lock-0000000008", 8)],
        )
        .expect("participants");
        let holders: Vec<u64> = queue.holders().map(|p| p.fencing_token).collect();
        assert_eq!(holders, [8]);

        let queue = queue_of(
            "/w",
            &[child("write-0000000001", 1), child("read-0000000002", 2)],
        )
        .expect("participants");
        assert_eq!(queue.holders().count(), 1);
        assert!(queue_of("/empty", &[child("config", 1)]).is_none());
    }
}
