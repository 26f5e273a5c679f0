//! A linearizability checker for histories of versioned registers (a znode's
//! data and version): Wing and Gong's search with the memo of visited
//! (linearized set, state) pairs that Lowe and Porcupine add, run per key
//! (a history is linearizable iff each key's is).
//!
//! An operation whose outcome is unknown (its request failed: it may or may
//! not have happened) has no return time; it may take effect anywhere after
//! its call, or never (at the very end, where nothing observes it). Such
//! operations make the search exponential in their number, so it is done
//! once every known one is placed, and tries known operations first: an
//! unknown one is placed only where a known one needs its effect.
//!
//! Real time is strict: an operation called at the very moment another
//! returned comes after it, so an operation must return after its call
//! (`call < ret`) to be placeable at all.
//!
//! When a key fails, [`verdict`] says where the search got furthest: how
//! many operations it placed, the register there, and the operation that
//! had to go next and could not. That is one of possibly many dead ends,
//! but the deepest, and usually the stale read or lost write to look at.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};

/// States the search may visit per key before it gives up loudly, rather
/// than run out of memory (unknown outcomes make it exponential).
pub const SEARCH_STATES_MAX: usize = 2_000_000;

/// A znode's data and version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Register {
    pub value: u64,
    pub version: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    /// Set the data, whatever the version.
    Write {
        value: u64,
    },
    /// Set the data if the version is `expect` (a compare-and-set).
    Cas {
        expect: i32,
        value: u64,
    },
    Read,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Output {
    /// The write happened; the new version.
    Written {
        version: i32,
    },
    BadVersion,
    Read(Register),
    /// The request failed: it may or may not have taken effect.
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    pub key: u32,
    pub input: Input,
    pub output: Output,
    /// When the request was sent and its answer came (any monotonic unit).
    pub call: u64,
    pub ret: u64,
}

impl Operation {
    fn ret(&self) -> u64 {
        if self.output == Output::Unknown {
            u64::MAX
        } else {
            self.ret
        }
    }
}

/// What the search concluded about one key's operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    Linearizable,
    /// No order fits; where the search got furthest.
    NotLinearizable(DeadEnd),
    /// The search visited [`SEARCH_STATES_MAX`] states without an answer
    /// (too many unknown outcomes).
    Undecided,
}

/// The deepest point a failed search reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadEnd {
    /// Operations with known outcomes placed in order, of `known` in all.
    pub placed: usize,
    pub known: usize,
    /// The register after them.
    pub state: Register,
    /// The pending operation that returned first: it had to take effect
    /// next or before something that could, and nothing let it.
    pub blocked: Operation,
}

impl fmt::Display for DeadEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let DeadEnd {
            placed,
            known,
            state,
            blocked,
        } = self;
        write!(
            f,
            "placed {placed} of {known} operations reaching value {} version {}; \
             then nothing lets {blocked} take effect",
            state.value, state.version
        )
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.input {
            Input::Write { value } => write!(f, "write {value}")?,
            Input::Cas { expect, value } => write!(f, "cas {value} if version {expect}")?,
            Input::Read => write!(f, "read")?,
        }
        match self.output {
            Output::Written { version } => write!(f, " -> version {version}")?,
            Output::BadVersion => write!(f, " -> bad version")?,
            Output::Read(Register { value, version }) => {
                write!(f, " -> value {value} version {version}")?
            }
            Output::Unknown => write!(f, " -> unknown")?,
        }
        write!(f, " (called {}, returned {})", self.call, self.ret)
    }
}

/// The register after `op`, if `op` may take effect on `state` and answer
/// what it answered.
fn step(state: Register, op: &Operation) -> Option<Register> {
    let written = Register {
        value: 0,
        version: state.version + 1,
    };
    match (op.input, op.output) {
        (Input::Read, Output::Read(seen)) => (seen == state).then_some(state),
        (Input::Read, _) => None,
        (Input::Write { value }, Output::Written { version }) => {
            (version == written.version).then_some(Register { value, ..written })
        }
        (Input::Write { value }, Output::Unknown) => Some(Register { value, ..written }),
        (Input::Cas { expect, value }, Output::Written { version }) => (expect == state.version
            && version == written.version)
            .then_some(Register { value, ..written }),
        (Input::Cas { expect, .. }, Output::BadVersion) => {
            (expect != state.version).then_some(state)
        }
        (Input::Cas { expect, value }, Output::Unknown) => Some(if expect == state.version {
            Register { value, ..written }
        } else {
            state
        }),
        (_, _) => None,
    }
}

/// Splits a history into each key's operations, in their recorded order.
pub fn by_key(history: &[Operation]) -> BTreeMap<u32, Vec<Operation>> {
    let mut by_key: BTreeMap<u32, Vec<Operation>> = BTreeMap::new();
    for op in history {
        by_key.entry(op.key).or_default().push(*op);
    }
    by_key
}

/// The keys whose history cannot be linearized, starting from `initial`.
///
/// Panics if a key's search gives up (see [`verdict`] for an answer instead).
pub fn violations(history: &[Operation], initial: Register) -> Vec<u32> {
    by_key(history)
        .into_iter()
        .filter(|(_, ops)| !linearizable(ops, initial))
        .map(|(key, _)| key)
        .collect()
}

/// Whether one key's operations can be linearized.
///
/// Panics if the search visits too many states to decide: a test that
/// cannot be checked must fail loudly, not pass.
pub fn linearizable(ops: &[Operation], initial: Register) -> bool {
    match verdict(ops, initial) {
        Verdict::Linearizable => true,
        Verdict::NotLinearizable(_) => false,
        Verdict::Undecided => panic!(
            "the search visited {SEARCH_STATES_MAX} states: too many unknown outcomes to check"
        ),
    }
}

/// Whether one key's operations can be linearized, and if not, where the
/// search got furthest.
pub fn verdict(ops: &[Operation], initial: Register) -> Verdict {
    let (known, unknown): (Vec<usize>, Vec<usize>) =
        (0..ops.len()).partition(|&i| ops[i].output != Output::Unknown);
    let mut search = Search {
        ops,
        order: [&known[..], &unknown[..]].concat(),
        seen: HashSet::new(),
        deepest: None,
    };
    let mut done = vec![false; ops.len()];
    match search.run(&mut done, initial, known.len()) {
        Err(Exhausted) => Verdict::Undecided,
        Ok(true) => Verdict::Linearizable,
        Ok(false) => {
            let (remaining, state, blocked) = search.deepest.expect("a failed search stopped");
            Verdict::NotLinearizable(DeadEnd {
                placed: known.len() - remaining,
                known: known.len(),
                state,
                blocked: ops[blocked],
            })
        }
    }
}

/// The search reached [`SEARCH_STATES_MAX`].
struct Exhausted;

struct Search<'a> {
    ops: &'a [Operation],
    /// Indices into `ops`, known outcomes first.
    order: Vec<usize>,
    /// (placed set, state) pairs already explored.
    seen: HashSet<(Vec<bool>, Register)>,
    /// Fewest known operations left unplaced so far: that count, the state
    /// there, and the index of the pending operation that returned first.
    deepest: Option<(usize, Register, usize)>,
}

impl Search<'_> {
    /// `remaining`: known operations not yet placed.
    fn run(
        &mut self,
        done: &mut Vec<bool>,
        state: Register,
        remaining: usize,
    ) -> Result<bool, Exhausted> {
        if remaining == 0 {
            return Ok(true);
        }
        let ops = self.ops;
        // An operation may go next only if it was called before every pending
        // operation returned. Some known operation is pending, so this is one.
        let first = (0..ops.len())
            .filter(|&i| !done[i])
            .min_by_key(|&i| ops[i].ret())
            .expect("a known operation is pending");
        let first_return = ops[first].ret();
        if self.deepest.is_none_or(|(fewest, ..)| remaining < fewest) {
            self.deepest = Some((remaining, state, first));
        }
        for at in 0..self.order.len() {
            let i = self.order[at];
            if done[i] || ops[i].call >= first_return {
                continue;
            }
            let Some(next) = step(state, &ops[i]) else {
                continue;
            };
            let known = usize::from(ops[i].output != Output::Unknown);
            if self.seen.len() >= SEARCH_STATES_MAX {
                return Err(Exhausted);
            }
            done[i] = true;
            if self.seen.insert((done.clone(), next)) && self.run(done, next, remaining - known)? {
                return Ok(true);
            }
            done[i] = false;
        }
        Ok(false)
    }
}

/// Operations of key 0, for the tests of this crate's register checks.
#[cfg(test)]
pub(crate) mod ops {
    use super::{Input, Operation, Output, Register};

    pub(crate) fn op(input: Input, output: Output, call: u64, ret: u64) -> Operation {
        Operation {
            key: 0,
            input,
            output,
            call,
            ret,
        }
    }

    pub(crate) fn read(value: u64, version: i32, call: u64, ret: u64) -> Operation {
        op(
            Input::Read,
            Output::Read(Register { value, version }),
            call,
            ret,
        )
    }

    pub(crate) fn write(value: u64, version: i32, call: u64, ret: u64) -> Operation {
        op(
            Input::Write { value },
            Output::Written { version },
            call,
            ret,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::ops::{op, read, write};
    use super::*;

    #[test]
    fn a_read_overlapping_a_write_may_see_either_value() {
        // Concurrent operations may be ordered either way.
        let before = [write(1, 1, 0, 10), read(0, 0, 5, 6)];
        let after = [write(1, 1, 0, 10), read(1, 1, 5, 6)];
        assert!(linearizable(&before, Register::default()));
        assert!(linearizable(&after, Register::default()));
    }

    #[test]
    fn a_stale_read_after_a_completed_write_is_a_violation() {
        // Real time orders a write before a read called after it returned.
        let history = [write(1, 1, 0, 10), read(0, 0, 11, 12)];
        assert_eq!(violations(&history, Register::default()), vec![0]);
    }

    #[test]
    fn compare_and_set_must_agree_with_the_version_it_saw() {
        // Of two concurrent compare-and-sets from one version, only one may win.
        let cas =
            |expect, value, output, call, ret| op(Input::Cas { expect, value }, output, call, ret);
        let both_win = [
            cas(0, 1, Output::Written { version: 1 }, 0, 10),
            cas(0, 2, Output::Written { version: 1 }, 0, 10),
        ];
        assert!(!linearizable(&both_win, Register::default()));
        let one_wins = [
            cas(0, 1, Output::Written { version: 1 }, 0, 10),
            cas(0, 2, Output::BadVersion, 0, 10),
            read(1, 1, 11, 12),
        ];
        assert!(linearizable(&one_wins, Register::default()));
    }

    #[test]
    fn an_unknown_write_may_have_happened_or_not() {
        // An unknown outcome fits either way, but once seen cannot be unseen.
        let lost = op(Input::Write { value: 7 }, Output::Unknown, 0, 1);
        assert!(linearizable(&[lost, read(0, 0, 5, 6)], Register::default()));
        assert!(linearizable(&[lost, read(7, 1, 5, 6)], Register::default()));
        assert!(!linearizable(
            &[lost, read(7, 1, 5, 6), read(0, 0, 7, 8)],
            Register::default()
        ));
    }

    #[test]
    fn a_failed_search_names_the_operation_it_could_not_place() {
        // The dead end is after the write, at the stale read.
        let stale = read(0, 0, 11, 12);
        let history = [write(1, 1, 0, 10), stale];
        let Verdict::NotLinearizable(dead_end) = verdict(&history, Register::default()) else {
            panic!("the stale read is a violation");
        };
        assert_eq!(
            dead_end,
            DeadEnd {
                placed: 1,
                known: 2,
                state: Register {
                    value: 1,
                    version: 1
                },
                blocked: stale,
            }
        );
    }

    #[test]
    fn an_operation_that_returns_when_it_is_called_cannot_be_placed() {
        // Real time is strict, so call == ret leaves the operation no room.
        assert!(!linearizable(&[read(0, 0, 5, 5)], Register::default()));
        assert!(linearizable(&[read(0, 0, 5, 6)], Register::default()));
    }
}
