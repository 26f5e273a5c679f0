//! Checkers for histories recorded from a running ensemble under faults.
//!
//! A fault run records what its clients asked and were answered
//! ([`History`]); [`check`] tells whether the promises users build locks on
//! held. Each promise has a module, and each matters to a lock user:
//!
//! * `registers`: writes, compare-and-sets and synced reads of a few
//!   znodes linearize ([`versioned`], linear in the history's length; the
//!   exhaustive search of [`linearizable`] is its reference in tests), and
//!   every member's final value is one a read after the run could return.
//!   A lock is only as good as the ordering of the writes that build it.
//! * `reads`: one session never sees a register's version go down, synced
//!   or not. A holder that re-reads state it acted on must not go back.
//! * `sessions`: a session heard from within its timeout is not expired,
//!   and its ephemeral lives exactly as long as it does. A lock node is an
//!   ephemeral: an early expiry hands a live holder's lock to another.
//! * `locks`: one holder at a time (as the holders believed, which is what
//!   they act on), tokens growing with each grant, and the fenced store
//!   never taking a token older than one it has taken. Fencing is the
//!   last line when a paused holder learns too late.
//! * `sequential`: sequential names unique, numbered in real-time order,
//!   and kept once acknowledged. Lock queues and elections order by them.
//! * `finals`: once healed, no member keeps an ended session's ephemeral,
//!   and all members hold the same state: what one member tells a waiter,
//!   another must not contradict.
//!
//! Every check compares recorded times chosen so that a correct run cannot
//! fail it (see [`history`]); a finding names what to look up in the
//! history. Odd but allowed things are warnings, not violations.

pub mod history;
pub mod linearizable;
pub mod report;
pub mod versioned;

mod finals;
mod locks;
mod reads;
mod registers;
mod sequential;
mod sessions;

use serde::{Deserialize, Serialize};

pub use history::{
    ChildCreate, Grant, GrantEnd, History, MarkerCheck, MarkerDeletion, MemberFinal, Observation,
    QueueNode, SessionEnd, SessionLife, StoreWrite,
};
pub use report::{Child, Counts, Difference, Holder, Report, Violation, Warning};

/// What the checks allow that the history cannot tell them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckConfig {
    /// How much earlier than its timeout after it was last heard from a
    /// session may be found expired and still count as on time: the touch
    /// interval and expiry bucket rounding of the server (e.g. one tick).
    pub expiry_slack_us: u64,
}

/// Runs every check over `history`.
pub fn check(history: &History, config: &CheckConfig) -> Report {
    let mut report = Report {
        counts: Counts::of(history),
        ..Report::default()
    };
    registers::check(history, &mut report);
    reads::check(history, &mut report);
    sessions::check(history, config, &mut report);
    finals::check(history, &mut report);
    locks::check(history, &mut report);
    sequential::check(history, &mut report);
    report
}
