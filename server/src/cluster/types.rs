//! openraft's type configuration for Arbor, and the conversions between
//! openraft's values and this crate's own records ([`super::records`]).
//!
//! A log entry's application payload is a [`Command`]: a txn that prep made
//! deterministic, the wall time prep fixed for it, and the member that
//! proposed it (a session's writes count only from the member that owns
//! the session).

use std::collections::{BTreeMap, BTreeSet};

use arbor_protocol::codec;
use bincode::{Decode, Encode};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Membership, StoredMembership, Vote};

use super::records::{
    AppliedPosition, LogPosition, MemberAddr, MemberId, MembershipRecord, VoteRecord,
};
use crate::pipeline::commit::WriteResult;
use crate::txn::Txn;

openraft::declare_raft_types!(
    /// Arbor's openraft types: entries carry [`Command`]s, applying one gives
    /// an [`Outcome`], and snapshots travel as files.
    pub TypeConfig:
        D = Command,
        R = Outcome,
        NodeId = MemberId,
        Node = MemberAddr,
        Entry = Entry<TypeConfig>,
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);

/// One write as prep fixed it.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct Write {
    /// Wall time fixed by prep; apply reads no clock.
    pub time_ms: u64,
    pub txn: Txn,
    /// The member that took the request: a session's writes count only
    /// from the member that owns the session (see `Txn::MoveSession`).
    /// `None` for writes of nobody's session.
    pub proposer: Option<MemberId>,
}

/// The writes of one entry of the replicated log, applied in order, each at
/// the next zxid. openraft 0.9 makes the leader sync its log once per entry
/// before it takes the next one, so the leader puts every write waiting for
/// it (its own and those its followers forwarded) into one entry: that is
/// the ensemble's group commit.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct Command {
    pub writes: Vec<Write>,
}

impl Command {
    /// A command of one write.
    pub fn one(time_ms: u64, txn: Txn, proposer: Option<MemberId>) -> Self {
        Self {
            writes: vec![Write {
                time_ms,
                txn,
                proposer,
            }],
        }
    }
}

/// What applying an entry gave.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum Outcome {
    /// A blank or membership entry: nothing for a client.
    Nothing,
    /// One result per write of the command, in order.
    Writes(Vec<WriteResult>),
}

/// openraft's `serde` feature asks application data to be serde types. Ours
/// are bincode types: they pass through serde as their bincode bytes, so
/// there is one encoding of a command wherever it goes.
macro_rules! serde_as_bincode_bytes {
    ($($ty:ty),*) => {$(
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let bytes = codec::encode(self).map_err(serde::ser::Error::custom)?;
                serializer.serialize_bytes(&bytes)
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let bytes = <Vec<u8> as serde::Deserialize>::deserialize(deserializer)?;
                codec::decode(&bytes).map_err(serde::de::Error::custom)
            }
        }
    )*};
}

serde_as_bincode_bytes!(Command, Outcome);

impl From<LogId<MemberId>> for LogPosition {
    fn from(id: LogId<MemberId>) -> Self {
        Self {
            term: id.leader_id.term,
            leader: id.leader_id.node_id,
            index: id.index,
        }
    }
}

impl From<LogPosition> for LogId<MemberId> {
    fn from(position: LogPosition) -> Self {
        LogId::new(
            CommittedLeaderId::new(position.term, position.leader),
            position.index,
        )
    }
}

impl From<&Vote<MemberId>> for VoteRecord {
    fn from(vote: &Vote<MemberId>) -> Self {
        Self {
            term: vote.leader_id.term,
            voted_for: vote.leader_id.node_id,
            committed: vote.committed,
        }
    }
}

impl From<VoteRecord> for Vote<MemberId> {
    fn from(record: VoteRecord) -> Self {
        if record.committed {
            Vote::new_committed(record.term, record.voted_for)
        } else {
            Vote::new(record.term, record.voted_for)
        }
    }
}

impl From<&Membership<MemberId, MemberAddr>> for MembershipRecord {
    fn from(membership: &Membership<MemberId, MemberAddr>) -> Self {
        Self {
            voter_sets: membership
                .get_joint_config()
                .iter()
                .map(|set| set.iter().copied().collect())
                .collect(),
            members: membership
                .nodes()
                .map(|(id, addr)| (*id, addr.clone()))
                .collect(),
        }
    }
}

impl From<&MembershipRecord> for Membership<MemberId, MemberAddr> {
    fn from(record: &MembershipRecord) -> Self {
        let voter_sets: Vec<BTreeSet<MemberId>> = record
            .voter_sets
            .iter()
            .map(|set| set.iter().copied().collect())
            .collect();
        let members: BTreeMap<MemberId, MemberAddr> = record.members.iter().cloned().collect();
        Membership::new(voter_sets, members)
    }
}

impl AppliedPosition {
    /// openraft's view of the membership in force.
    pub fn stored_membership(&self) -> StoredMembership<MemberId, MemberAddr> {
        StoredMembership::new(
            self.membership_at.map(LogId::from),
            Membership::from(&self.membership),
        )
    }

    pub fn last_applied_log_id(&self) -> Option<LogId<MemberId>> {
        self.last_applied.map(LogId::from)
    }
}

/// A log entry as the log store keeps it on disk ([`super::log_files`]).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct LogRecord {
    pub position: LogPosition,
    pub payload: PayloadRecord,
}

#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum PayloadRecord {
    /// A new leader's first entry.
    Blank,
    Command(Command),
    Membership(MembershipRecord),
}

impl From<&Entry<TypeConfig>> for LogRecord {
    fn from(entry: &Entry<TypeConfig>) -> Self {
        let payload = match &entry.payload {
            EntryPayload::Blank => PayloadRecord::Blank,
            EntryPayload::Normal(command) => PayloadRecord::Command(command.clone()),
            EntryPayload::Membership(membership) => {
                PayloadRecord::Membership(MembershipRecord::from(membership))
            }
        };
        Self {
            position: entry.log_id.into(),
            payload,
        }
    }
}

impl From<LogRecord> for Entry<TypeConfig> {
    fn from(record: LogRecord) -> Self {
        let payload = match record.payload {
            PayloadRecord::Blank => EntryPayload::Blank,
            PayloadRecord::Command(command) => EntryPayload::Normal(command),
            PayloadRecord::Membership(membership) => {
                EntryPayload::Membership(Membership::from(&membership))
            }
        };
        Entry {
            log_id: record.position.into(),
            payload,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ids_votes_and_memberships_round_trip_through_records() {
        // What goes to disk comes back as the same openraft value.
        let id = LogId::new(CommittedLeaderId::new(7, 3), 42);
        assert_eq!(LogId::from(LogPosition::from(id)), id);
        for vote in [Vote::new(5, 2), Vote::new_committed(6, 1)] {
            assert_eq!(Vote::from(VoteRecord::from(&vote)), vote);
        }
        let addr = |n: u16| MemberAddr {
            client: format!("127.0.0.1:{n}"),
            peer: format!("127.0.0.1:{}", n + 1),
        };
        let members: BTreeMap<MemberId, MemberAddr> = [
            (1, addr(7181)),
            (2, addr(7281)),
            (3, addr(7381)),
            (4, addr(7481)),
        ]
        .into();
        let joint = Membership::new(
            vec![BTreeSet::from([1, 2, 3]), BTreeSet::from([2, 3, 4])],
            members,
        );
        let back = Membership::from(&MembershipRecord::from(&joint));
        assert_eq!(back, joint);
    }

    #[test]
    fn commands_pass_through_serde_as_their_bincode_bytes() {
        // openraft's serde bound is met without a second encoding.
        let command = Command::one(17, Txn::ReapTtl { path: "/t".into() }, Some(2));
        let json = serde_json::to_vec(&command).expect("serializes");
        let back: Command = serde_json::from_slice(&json).expect("deserializes");
        assert_eq!(back, command);
    }
}
