//! The replicated log's positions and membership as this crate stores them:
//! plain bincode records with no openraft type in them, so the bytes on disk
//! (log records, the vote file, snapshots) are ours to document and keep
//! when openraft changes. [`super::types`] converts to and from openraft.

use bincode::{Decode, Encode};

/// A member's id in the ensemble (ZooKeeper's `myid`). Never 0 in a
/// configuration written by people; openraft's own tests use 0.
pub type MemberId = u64;

/// Where a member listens: clients on one address, peers on another.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, Hash, Encode, Decode, serde::Serialize, serde::Deserialize,
)]
pub struct MemberAddr {
    /// `host:port` of the native client protocol.
    pub client: String,
    /// `host:port` of the peer protocol (replication, forwarded writes).
    pub peer: String,
}

/// A position in the replicated log: the term and member of the leader
/// that wrote the entry, and its index. Raft's `LogId`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Encode, Decode)]
pub struct LogPosition {
    pub term: u64,
    pub leader: MemberId,
    pub index: u64,
}

/// A member's vote: the term it is in, whom it voted for in that term, and
/// whether a quorum granted that vote (a leader's own, once elected).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Encode, Decode)]
pub struct VoteRecord {
    pub term: u64,
    pub voted_for: MemberId,
    pub committed: bool,
}

/// A configuration of the ensemble: one voter set, or two during a joint
/// change, and the address of every member (learners included).
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode, Decode)]
pub struct MembershipRecord {
    pub voter_sets: Vec<Vec<MemberId>>,
    pub members: Vec<(MemberId, MemberAddr)>,
}

/// What a replica has applied: the last entry and the membership in force,
/// with the entry that brought it. Kept in the state machine, so a snapshot
/// carries it exactly as of the state it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode, Decode)]
pub struct AppliedPosition {
    pub last_applied: Option<LogPosition>,
    pub membership_at: Option<LogPosition>,
    pub membership: MembershipRecord,
    /// The member each live session was last opened or resumed on. Writes
    /// of a session from any other member are refused (`SessionMoved`), so
    /// a connection the client has left cannot write behind its back.
    pub session_owners: std::collections::BTreeMap<u64, MemberId>,
}
