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

use std::collections::{BTreeMap, HashSet};

/// States the search may visit per key before it gives up loudly, rather
/// than run out of memory (unknown outcomes make it exponential).
const SEARCH_STATES_MAX: usize = 2_000_000;

/// A znode's data and version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Register {
    pub value: u64,
    pub version: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

#[derive(Debug, Clone, Copy)]
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

/// The keys whose history cannot be linearized, starting from `initial`.
pub fn violations(history: &[Operation], initial: Register) -> Vec<u32> {
    let mut by_key: BTreeMap<u32, Vec<Operation>> = BTreeMap::new();
    for op in history {
        by_key.entry(op.key).or_default().push(*op);
    }
    by_key
        .into_iter()
        .filter(|(_, ops)| !linearizable(ops, initial))
        .map(|(key, _)| key)
        .collect()
}

/// Whether one key's operations can be linearized.
pub fn linearizable(ops: &[Operation], initial: Register) -> bool {
    let mut done = vec![false; ops.len()];
    let mut seen = HashSet::new();
    let (known, unknown): (Vec<usize>, Vec<usize>) =
        (0..ops.len()).partition(|&i| ops[i].output != Output::Unknown);
    let search = Search {
        ops,
        order: [&known[..], &unknown[..]].concat(),
    };
    search.run(&mut done, initial, known.len(), &mut seen)
}

struct Search<'a> {
    ops: &'a [Operation],
    /// Indices into `ops`, known outcomes first.
    order: Vec<usize>,
}

impl Search<'_> {
    /// `remaining`: known operations not yet placed.
    fn run(
        &self,
        done: &mut Vec<bool>,
        state: Register,
        remaining: usize,
        seen: &mut HashSet<(Vec<bool>, Register)>,
    ) -> bool {
        if remaining == 0 {
            return true;
        }
        let ops = self.ops;
        // An operation may go next only if it was called before every pending
        // operation returned.
        let first_return = ops
            .iter()
            .zip(done.iter())
            .filter(|(_, done)| !**done)
            .map(|(op, _)| op.ret())
            .min()
            .unwrap_or(u64::MAX);
        for &i in &self.order {
            if done[i] || ops[i].call >= first_return {
                continue;
            }
            let Some(next) = step(state, &ops[i]) else {
                continue;
            };
            let known = usize::from(ops[i].output != Output::Unknown);
            assert!(
                seen.len() < SEARCH_STATES_MAX,
                "the search visited {SEARCH_STATES_MAX} states: too many unknown outcomes to check"
            );
            done[i] = true;
            if seen.insert((done.clone(), next)) && self.run(done, next, remaining - known, seen) {
                return true;
            }
            done[i] = false;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(input: Input, output: Output, call: u64, ret: u64) -> Operation {
        Operation {
            key: 0,
            input,
            output,
            call,
            ret,
        }
    }

    fn read(value: u64, version: i32, call: u64, ret: u64) -> Operation {
        op(
            Input::Read,
            Output::Read(Register { value, version }),
            call,
            ret,
        )
    }

    fn write(value: u64, version: i32, call: u64, ret: u64) -> Operation {
        op(
            Input::Write { value },
            Output::Written { version },
            call,
            ret,
        )
    }

    #[test]
    fn a_read_overlapping_a_write_may_see_either_value() {
        let before = [write(1, 1, 0, 10), read(0, 0, 5, 6)];
        let after = [write(1, 1, 0, 10), read(1, 1, 5, 6)];
        assert!(linearizable(&before, Register::default()));
        assert!(linearizable(&after, Register::default()));
    }

    #[test]
    fn a_stale_read_after_a_completed_write_is_a_violation() {
        let history = [write(1, 1, 0, 10), read(0, 0, 11, 12)];
        assert_eq!(violations(&history, Register::default()), vec![0]);
    }

    #[test]
    fn compare_and_set_must_agree_with_the_version_it_saw() {
        let cas =
            |expect, value, output, call, ret| op(Input::Cas { expect, value }, output, call, ret);
        // Two CAS from version 0, concurrent: only one may win.
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
        let lost = op(Input::Write { value: 7 }, Output::Unknown, 0, 1);
        assert!(linearizable(&[lost, read(0, 0, 5, 6)], Register::default()));
        assert!(linearizable(&[lost, read(7, 1, 5, 6)], Register::default()));
        // But once seen, it cannot be unseen.
        assert!(!linearizable(
            &[lost, read(7, 1, 5, 6), read(0, 0, 7, 8)],
            Register::default()
        ));
    }
}
