//! When a member stands for election sooner than its timers say.
//!
//! openraft's followers stand once they have not heard from their leader
//! for its lease (the longest election timeout) and an election timeout of
//! their own. Two cases are clear sooner, and each costs every client of
//! the ensemble its writes while it lasts:
//!
//! * [`suspect_leader`]: the leader's process is gone (its peer port
//!   refuses connections), so there is nothing to wait for;
//! * [`outrank`]: a candidate whose log is behind this member's asked for
//!   its vote: it cannot win, and this member can.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::RaftError;
use openraft::raft::{VoteRequest, VoteResponse};
use openraft::{Raft, Vote};
use tokio::net::TcpStream;
use tracing::{debug, info, warn};

use super::contact::Contact;
use super::records::MemberId;
use super::types::TypeConfig;
use crate::clock::Clock;

/// Raft's timing: heartbeats every 50 ms; a follower that stops hearing
/// them waits out the leader's lease (openraft's: the longest election
/// timeout) and its own election timeout before it stands. Short enough
/// that most elections after a leader is cut off or stopped end within
/// the 600 ms a follower waits before it stops serving
/// (`super::contact`); long enough that a loaded member's heartbeats do not
/// start elections (docs/faults.md has the measurements).
pub const HEARTBEAT_MS: u64 = 50;
pub const ELECTION_TIMEOUT_MIN_MS: u64 = 100;
pub const ELECTION_TIMEOUT_MAX_MS: u64 = 200;

/// openraft's leader lease: a follower that heard from its leader within
/// it refuses to vote for anyone else.
const LEADER_LEASE_MS: u64 = ELECTION_TIMEOUT_MAX_MS;

/// Elections [`outrank`] starts at most, one term each: a candidate whose
/// term is further ahead (one back from a long partition) is left to the
/// timers.
const OUTRANK_STANDS_MAX: u64 = 3;

/// How long the probe of a leader's peer port may take. A refusal comes
/// back at once; anything slower proves nothing and is left to the timers.
const LEADER_PROBE_TIMEOUT: Duration = Duration::from_millis(200);

/// Probes of a leader's peer port, [`LEADER_PROBE_INTERVAL`] apart: a dying
/// process may close its connections a moment before its listener.
const LEADER_PROBES: usize = 5;
const LEADER_PROBE_INTERVAL: Duration = Duration::from_millis(10);

/// Whether `peer` refuses connections within [`LEADER_PROBES`] tries.
async fn refuses(peer: &str) -> bool {
    for _ in 0..LEADER_PROBES {
        match tokio::time::timeout(LEADER_PROBE_TIMEOUT, TcpStream::connect(peer)).await {
            Ok(Err(err)) if err.kind() == std::io::ErrorKind::ConnectionRefused => return true,
            Ok(Ok(_accepted)) => tokio::time::sleep(LEADER_PROBE_INTERVAL).await,
            Ok(Err(_)) | Err(_) => return false,
        }
    }
    false
}

/// How long the highest-numbered surviving voter waits before it stands,
/// so that the others have stood first (see [`suspect_leader`]).
const HIGHEST_STANDS_AFTER: Duration = Duration::from_millis(30);

/// The connection the leader replicated over has closed. If the leader's
/// peer port now refuses connections, its process is gone (`kill -9`, a
/// crash): elect a new leader at once instead of waiting out the leader
/// lease and an election timeout, as ZooKeeper's followers react to the
/// leader's socket closing. A leader that is only slow or cut off does not
/// refuse, and is left to the timers.
///
/// A follower still inside its leader lease refuses to vote, but a
/// candidate grants a vote of the same term from a higher-numbered member
/// (openraft orders votes by term, then member id). So every surviving
/// voter but the highest-numbered stands at once, which ends its lease, and
/// the highest stands a moment later and collects their votes: one round
/// instead of a split vote and an election timeout. Every connection from
/// the dead leader closes at once; only the first stands (one stand per
/// term), or each would take another term while the others catch up.
pub async fn suspect_leader(raft: Raft<TypeConfig>, contact: Arc<Contact>, leader: MemberId) {
    let (me, peer, highest) = {
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        if metrics.current_leader != Some(leader) || metrics.id == leader {
            return;
        }
        let membership = metrics.membership_config.membership();
        let Some(addr) = membership.get_node(&leader) else {
            return;
        };
        let highest = membership.voter_ids().filter(|id| *id != leader).max();
        (metrics.id, addr.peer.clone(), highest)
    };
    if !refuses(&peer).await {
        debug!(leader, %peer, "the leader's connection closed, but its port does not refuse");
        return;
    }
    if highest == Some(me) {
        tokio::time::sleep(HIGHEST_STANDS_AFTER).await;
    }
    let term = {
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        if metrics.current_leader != Some(leader) {
            return;
        }
        metrics.current_term
    };
    if !contact.claim_stand(term) {
        return;
    }
    info!(leader, %peer, "the leader's peer port refuses connections: standing for election");
    if let Err(fatal) = raft.trigger().elect().await {
        warn!(error = %fatal, "cannot stand for election");
    }
}

/// Answers a candidate's request for this member's vote; refused because
/// the candidate's log is behind, this member may [`outrank`] it.
pub async fn vote(
    raft: Raft<TypeConfig>,
    contact: Arc<Contact>,
    clock: Clock,
    request: VoteRequest<MemberId>,
) -> Result<VoteResponse<MemberId>, RaftError<MemberId>> {
    let (candidate, candidate_log) = (request.vote, request.last_log_id);
    let answer = raft.vote(request).await;
    if let Ok(refused) = &answer {
        if !refused.vote_granted && refused.last_log_id > candidate_log {
            tokio::spawn(outrank(raft, contact, clock, candidate));
        }
    }
    answer
}

/// A candidate asked for this member's vote and was refused because its
/// log is behind. It cannot win, and openraft makes it wait two more
/// election timeouts before it stands again; meanwhile this member waits
/// out its own timers, and stands at a term whose vote the candidate's own
/// outranks (openraft orders votes by term, then member id): two or three
/// rounds, up to 1.25 s without a leader in the fault suite. So unless it
/// leads, or follows a leader it heard from within the lease (then the
/// refusal was the lease's, and the leader lives; in an election there is
/// no lease), this member stands at once, at the first term whose vote
/// outranks the candidate's, and the candidate, whose log is no newer,
/// grants it.
async fn outrank(
    raft: Raft<TypeConfig>,
    contact: Arc<Contact>,
    clock: Clock,
    candidate: Vote<MemberId>,
) {
    let (me, term, leader) = {
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        (metrics.id, metrics.current_term, metrics.current_leader)
    };
    let following =
        leader.is_some() && contact.heard_leader_within(clock.monotonic_ms(), LEADER_LEASE_MS);
    if leader == Some(me) || following {
        return;
    }
    let candidate = candidate.leader_id();
    let outranking_term = match me > candidate.node_id {
        true => candidate.term,
        false => candidate.term + 1,
    };
    let stands = outranking_term.saturating_sub(term);
    if !(1..=OUTRANK_STANDS_MAX).contains(&stands) || !contact.claim_stand(term) {
        return;
    }
    info!(
        candidate = candidate.node_id,
        candidate_term = candidate.term,
        term = outranking_term,
        "a candidate whose log is behind this member's asked for its vote: standing instead"
    );
    for _ in 0..stands {
        if let Err(fatal) = raft.trigger().elect().await {
            warn!(error = %fatal, "cannot stand for election");
            return;
        }
    }
}
