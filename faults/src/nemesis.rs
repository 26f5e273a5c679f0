//! The nemesis: a seeded schedule of faults, applied one at a time to the
//! running ensemble, each healed before the next (after the ensemble
//! serves again).
//!
//! The schedule (kinds, lengths, pauses between) comes from the seed
//! alone; which member a fault hits is decided when it starts (the leader
//! then, or a random follower), since who leads is the ensemble's doing.
//! Each seed goes through every kind of fault in a shuffled order before
//! it repeats one, so a run of a few minutes exercises them all.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::lab::Lab;
use crate::record::RunClock;
use crate::target::Target;

/// How long the ensemble may take to serve again after a fault is healed.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum FaultKind {
    /// Cut the leader off from every other member.
    PartitionLeader,
    /// Cut one follower off (a minority).
    PartitionFollower,
    /// SIGSTOP the leader for less than a session timeout.
    PauseLeaderShort,
    /// SIGSTOP the leader for more than a session timeout.
    PauseLeaderLong,
    /// SIGSTOP a follower for less than a session timeout.
    PauseFollowerShort,
    /// SIGSTOP a follower for more than a session timeout.
    PauseFollowerLong,
    /// kill -9 the leader, restart it a moment later.
    KillLeader,
    /// kill -9 a follower, restart it a moment later.
    KillFollower,
}

impl FaultKind {
    pub const ALL: [FaultKind; 8] = [
        FaultKind::PartitionLeader,
        FaultKind::PartitionFollower,
        FaultKind::PauseLeaderShort,
        FaultKind::PauseLeaderLong,
        FaultKind::PauseFollowerShort,
        FaultKind::PauseFollowerLong,
        FaultKind::KillLeader,
        FaultKind::KillFollower,
    ];

    /// Whether it strikes the leader (a failover follows).
    pub fn hits_leader(self) -> bool {
        matches!(
            self,
            FaultKind::PartitionLeader
                | FaultKind::PauseLeaderShort
                | FaultKind::PauseLeaderLong
                | FaultKind::KillLeader
        )
    }
}

/// One planned fault.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Planned {
    pub kind: FaultKind,
    /// How long it lasts (a partition, a pause, the time a killed member
    /// stays down).
    pub length: Duration,
    /// The pause before it, once the ensemble serves.
    pub gap: Duration,
}

/// The faults of a run of about `run` with sessions of `session_timeout`.
pub fn schedule(seed: u64, run: Duration, session_timeout: Duration) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut plan = Vec::new();
    let mut planned = Duration::ZERO;
    let mut kinds = Vec::new();
    while planned < run {
        if kinds.is_empty() {
            kinds = FaultKind::ALL.to_vec();
            kinds.shuffle(&mut rng);
        }
        let kind = kinds.pop().expect("refilled above");
        let length = length(kind, session_timeout, &mut rng);
        let gap = Duration::from_millis(rng.gen_range(2_000..5_000));
        planned += gap + length + Duration::from_secs(1);
        plan.push(Planned { kind, length, gap });
    }
    plan
}

fn length(kind: FaultKind, session_timeout: Duration, rng: &mut StdRng) -> Duration {
    let timeout_ms = u64::try_from(session_timeout.as_millis()).unwrap_or(u64::MAX);
    let ms = match kind {
        FaultKind::PartitionLeader | FaultKind::PartitionFollower => rng.gen_range(3_000..10_000),
        FaultKind::PauseLeaderShort | FaultKind::PauseFollowerShort => {
            rng.gen_range(1_000..timeout_ms.max(1_001))
        }
        FaultKind::PauseLeaderLong | FaultKind::PauseFollowerLong => {
            rng.gen_range(timeout_ms + 1_000..timeout_ms + 4_000)
        }
        FaultKind::KillLeader | FaultKind::KillFollower => rng.gen_range(500..3_000),
    };
    Duration::from_millis(ms)
}

/// A fault as it happened.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub kind: FaultKind,
    pub member: usize,
    /// When it began and when it was healed (run microseconds).
    pub start_us: u64,
    pub healed_us: u64,
    /// When the ensemble served again after the heal, if it did.
    pub serving_us: Option<u64>,
}

/// Applies `plan` to `target` until it is done or `stop`; what happened.
pub fn run(
    plan: &[Planned],
    target: &mut Target,
    lab: &Lab,
    clock: RunClock,
    seed: u64,
    stop: &CancellationToken,
) -> Vec<Event> {
    let mut rng = StdRng::seed_from_u64(seed.rotate_left(17));
    let mut events = Vec::new();
    for planned in plan {
        if sleep_or_stop(planned.gap, stop) {
            break;
        }
        let Some(member) = victim(planned.kind, target, &mut rng) else {
            warn!(kind = ?planned.kind, "no member to strike: skipped");
            continue;
        };
        info!(kind = ?planned.kind, member, length = ?planned.length, "fault begins");
        strike(planned.kind, member, target, lab);
        // In effect from here: a partition is several rules, set in turn.
        let start_us = clock.now_us();
        std::thread::sleep(planned.length);
        heal(planned.kind, member, target, lab);
        let healed_us = clock.now_us();
        let serving_us = match target.wait_serving(RECOVERY_TIMEOUT) {
            Ok(_) => Some(clock.now_us()),
            Err(why) => {
                warn!(kind = ?planned.kind, member, %why, "the ensemble did not serve again in time");
                None
            }
        };
        info!(kind = ?planned.kind, member, "fault healed");
        events.push(Event {
            kind: planned.kind,
            member,
            start_us,
            healed_us,
            serving_us,
        });
        if stop.is_cancelled() {
            break;
        }
    }
    events
}

/// Sleeps `length`; true if the run stopped meanwhile.
fn sleep_or_stop(length: Duration, stop: &CancellationToken) -> bool {
    let step = Duration::from_millis(50);
    let mut slept = Duration::ZERO;
    while slept < length {
        if stop.is_cancelled() {
            return true;
        }
        std::thread::sleep(step);
        slept += step;
    }
    stop.is_cancelled()
}

/// The member the fault strikes: the leader, or a random other member.
fn victim(kind: FaultKind, target: &mut Target, rng: &mut StdRng) -> Option<usize> {
    let leader = target.leader()?;
    if kind.hits_leader() {
        return Some(leader);
    }
    let followers: Vec<usize> = (1..=target.members()).filter(|m| *m != leader).collect();
    followers.choose(rng).copied()
}

fn strike(kind: FaultKind, member: usize, target: &mut Target, lab: &Lab) {
    match kind {
        FaultKind::PartitionLeader | FaultKind::PartitionFollower => {
            if let Err(err) = lab.isolate(member) {
                warn!(member, error = %err, "cannot cut the member off");
            }
        }
        FaultKind::PauseLeaderShort
        | FaultKind::PauseLeaderLong
        | FaultKind::PauseFollowerShort
        | FaultKind::PauseFollowerLong => target.pause(member),
        FaultKind::KillLeader | FaultKind::KillFollower => target.kill9(member),
    }
}

fn heal(kind: FaultKind, member: usize, target: &mut Target, lab: &Lab) {
    match kind {
        FaultKind::PartitionLeader | FaultKind::PartitionFollower => {
            if let Err(err) = lab.heal_all() {
                warn!(member, error = %err, "cannot heal the partition");
            }
        }
        FaultKind::PauseLeaderShort
        | FaultKind::PauseLeaderLong
        | FaultKind::PauseFollowerShort
        | FaultKind::PauseFollowerLong => target.resume(member),
        FaultKind::KillLeader | FaultKind::KillFollower => {
            if let Err(why) = target.restart(member) {
                warn!(member, %why, "cannot restart the member");
            }
        }
    }
}
