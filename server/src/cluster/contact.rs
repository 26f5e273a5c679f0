//! Whether this member may vouch for its clients' sessions.
//!
//! Only the leader expires sessions, from the touches that reach it. A
//! member cut off from the leader (or, leading, from a quorum) could go on
//! answering its clients while the majority, hearing none of their
//! touches, expires their sessions and grants their locks to others. So a
//! member serves clients only while it has fresh proof that it belongs to
//! the working majority:
//!
//! * leading: a quorum acknowledged it within [`CONTACT_STALE_MS`];
//! * following, or in an election: an append from its (last) leader
//!   arrived within [`CONTACT_STALE_MS`], and the leader acknowledged a
//!   batch of session touches sent within that plus one touch interval.
//!   An election does not end the proof: no leader can expire a session
//!   before it has been elected, and the new one gives every session a
//!   full timeout; a member cut off loses the proof all the same, once its
//!   last append is that old.
//!
//! Without it the member closes its client connections and refuses new
//! ones, so clients move to a member that reaches the majority long before
//! their sessions could expire there (a ZooKeeper follower does the same
//! when it loses its leader). Every time here is the server's monotonic
//! clock, which keeps running while the process is stopped: a member that
//! wakes from a pause has no fresh proof until it hears again.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// How old the proof may be. A healthy follower hears every heartbeat
/// (50 ms), and an election after the leader is lost usually ends within
/// this (a leader lease and an election timeout), so members that only
/// wait for an election keep their clients. Well within a third of the
/// shortest session timeout at the default tick (4 s), which leaves a
/// client most of its timeout to reach another member.
pub const CONTACT_STALE_MS: u64 = 600;

/// Followers touch their clients' sessions at the leader at most this
/// long apart: a touch's answer is also part of a follower's proof.
const TOUCH_INTERVAL_MAX_MS: u64 = 250;

/// How often a follower touches: half a tick (ZooKeeper's), at most
/// [`TOUCH_INTERVAL_MAX_MS`].
pub fn touch_interval_ms(tick_ms: u32) -> u64 {
    (u64::from(tick_ms) / 2).clamp(1, TOUCH_INTERVAL_MAX_MS)
}

/// "Never": no proof yet.
const NEVER_MS: u64 = u64::MAX;

/// What this member knows of its place in the ensemble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower,
    /// In an election, or not yet part of one.
    Leaderless,
}

/// The latest proofs of contact, as monotonic milliseconds.
#[derive(Debug)]
pub struct Contact {
    quorum_acked_ms: AtomicU64,
    leader_heard_ms: AtomicU64,
    touches_acked_ms: AtomicU64,
    /// One past the last term this member stood from by its own decision
    /// (see [`super::campaign`]).
    stood_past_term: AtomicU64,
    /// Whether this member has vouched for its clients since it started.
    vouched: AtomicBool,
}

impl Default for Contact {
    fn default() -> Self {
        Self {
            quorum_acked_ms: AtomicU64::new(NEVER_MS),
            leader_heard_ms: AtomicU64::new(NEVER_MS),
            touches_acked_ms: AtomicU64::new(NEVER_MS),
            stood_past_term: AtomicU64::new(0),
            vouched: AtomicBool::new(false),
        }
    }
}

impl Contact {
    /// A quorum acknowledged this member, leading, at `at_ms`.
    pub fn quorum_acked(&self, at_ms: u64) {
        raise(&self.quorum_acked_ms, at_ms);
    }

    /// An append from the leader was accepted at `at_ms`.
    pub fn leader_heard(&self, at_ms: u64) {
        raise(&self.leader_heard_ms, at_ms);
    }

    /// The leader acknowledged touches this member sent at `sent_ms`.
    pub fn touches_acked(&self, sent_ms: u64) {
        raise(&self.touches_acked_ms, sent_ms);
    }

    /// Whether an append from the leader arrived within `window_ms` of
    /// `now_ms`.
    pub fn heard_leader_within(&self, now_ms: u64, window_ms: u64) -> bool {
        fresh(&self.leader_heard_ms, now_ms, window_ms)
    }

    /// Claims the one stand for election this member may start by its own
    /// decision from `term`: several reasons to stand can arrive at once
    /// (every connection from a dead leader closes), and each stand would
    /// take another term.
    pub fn claim_stand(&self, term: u64) -> bool {
        self.stood_past_term.fetch_max(term + 1, Ordering::AcqRel) <= term
    }

    /// Whether this member ever vouched since it started: one that never
    /// did is still joining (it started a moment ago), not cut off.
    pub fn ever_vouched(&self) -> bool {
        self.vouched.load(Ordering::Acquire)
    }

    /// Whether a member in `role` may vouch for its clients at `now_ms`;
    /// followers send their touches every `touch_interval_ms`.
    pub fn vouches(&self, role: Role, now_ms: u64, touch_interval_ms: u64) -> bool {
        let vouches = match role {
            Role::Leader => fresh(&self.quorum_acked_ms, now_ms, CONTACT_STALE_MS),
            Role::Follower | Role::Leaderless => {
                fresh(&self.leader_heard_ms, now_ms, CONTACT_STALE_MS)
                    && fresh(
                        &self.touches_acked_ms,
                        now_ms,
                        CONTACT_STALE_MS + touch_interval_ms,
                    )
            }
        };
        if vouches {
            self.vouched.store(true, Ordering::Release);
        }
        vouches
    }
}

/// Whether `proof` came at most `allowance_ms` before `now_ms`.
fn fresh(proof: &AtomicU64, now_ms: u64, allowance_ms: u64) -> bool {
    let at_ms = proof.load(Ordering::Acquire);
    at_ms != NEVER_MS && now_ms.saturating_sub(at_ms) <= allowance_ms
}

/// Moves `proof` forward to `at_ms` (proofs arrive out of order).
fn raise(proof: &AtomicU64, at_ms: u64) {
    let at_ms = at_ms.min(NEVER_MS - 1);
    let _ = proof.fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
        (old == NEVER_MS || old < at_ms).then_some(at_ms)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOUCH_MS: u64 = 1000;

    #[test]
    fn nothing_is_vouched_for_before_any_proof() {
        let contact = Contact::default();
        for role in [Role::Leader, Role::Follower, Role::Leaderless] {
            assert!(!contact.vouches(role, 0, TOUCH_MS), "{role:?}");
        }
        assert!(
            !contact.ever_vouched(),
            "a member that never vouched is joining"
        );
        contact.leader_heard(10);
        assert!(!contact.vouches(Role::Follower, 10, TOUCH_MS));
        assert!(!contact.ever_vouched(), "one proof is not enough to vouch");
        contact.touches_acked(10);
        assert!(contact.vouches(Role::Follower, 10, TOUCH_MS));
        assert!(contact.ever_vouched());
    }

    #[test]
    fn a_leader_vouches_while_a_quorum_acknowledged_it_lately() {
        let contact = Contact::default();
        contact.quorum_acked(1_000);
        assert!(contact.vouches(Role::Leader, 1_000 + CONTACT_STALE_MS, TOUCH_MS));
        assert!(!contact.vouches(Role::Leader, 1_001 + CONTACT_STALE_MS, TOUCH_MS));
        assert!(
            !contact.vouches(Role::Follower, 1_000, TOUCH_MS),
            "a leader's own acknowledgements say nothing of a follower"
        );
    }

    #[test]
    fn an_election_keeps_a_members_proof_until_it_is_stale() {
        let contact = Contact::default();
        contact.leader_heard(1_000);
        contact.touches_acked(1_000);
        assert!(contact.vouches(Role::Leaderless, 1_000 + CONTACT_STALE_MS, TOUCH_MS));
        assert!(!contact.vouches(Role::Leaderless, 1_001 + CONTACT_STALE_MS, TOUCH_MS));
    }

    #[test]
    fn a_follower_needs_both_the_leaders_appends_and_acknowledged_touches() {
        let contact = Contact::default();
        contact.leader_heard(5_000);
        assert!(
            !contact.vouches(Role::Follower, 5_000, TOUCH_MS),
            "no touch acknowledged yet"
        );
        contact.touches_acked(4_900);
        assert!(contact.vouches(Role::Follower, 5_000, TOUCH_MS));
        // Appends stop: the leader is gone, whatever the touches said.
        assert!(!contact.vouches(Role::Follower, 5_001 + CONTACT_STALE_MS, TOUCH_MS));
        // Appends go on but touches are not acknowledged.
        contact.leader_heard(7_000);
        assert!(!contact.vouches(Role::Follower, 7_000, TOUCH_MS));
    }

    #[test]
    fn the_leader_was_heard_within_a_window_or_not() {
        let contact = Contact::default();
        assert!(!contact.heard_leader_within(1_000, 10_000), "never heard");
        contact.leader_heard(1_000);
        assert!(contact.heard_leader_within(1_200, 200));
        assert!(!contact.heard_leader_within(1_201, 200));
    }

    #[test]
    fn one_stand_per_term() {
        let contact = Contact::default();
        assert!(contact.claim_stand(0));
        assert!(!contact.claim_stand(0), "a second stand from term 0");
        assert!(contact.claim_stand(7));
        assert!(!contact.claim_stand(7));
        assert!(!contact.claim_stand(3), "an older term");
        assert!(contact.claim_stand(8));
    }

    #[test]
    fn late_proofs_never_move_time_back() {
        let contact = Contact::default();
        contact.leader_heard(3_000);
        contact.leader_heard(2_000);
        contact.touches_acked(3_000);
        assert!(contact.vouches(Role::Follower, 3_000 + CONTACT_STALE_MS, TOUCH_MS));
    }
}
