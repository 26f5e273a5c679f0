//! Linearizability of a versioned register, decided in O(n log n).
//!
//! A znode's version counts its writes, and every acknowledged write says
//! which version it made; the workload writes unique values. So the order
//! of the writes is not searched for, it is read off: version `n` is the
//! `n`-th write, its value identifies the write, and a read of `(value,
//! version)` names the write it saw. What is left is whether moments can
//! be chosen, `p_1 <= p_2 <= ...` with `p_n` inside the interval of the
//! write that made version `n`, such that every read of version `n` fits
//! between `p_n` and `p_(n+1)`. Choosing each `p_n` as early as allowed
//! is best for every later one, so one pass decides it.
//!
//! Writes whose outcome is unknown fill the versions no acknowledged write
//! made: the one whose value a read saw, or else any unknown write (the
//! earliest called first) that could have made it. A failed
//! compare-and-set is a violation only if, however the moments are chosen,
//! the register held the expected version for its whole interval.
//!
//! Where [`crate::linearizable`]'s search is exponential in the unknown
//! outcomes, this is linear: it is what checks a run of many thousands of
//! operations. Both agree on every history they are given in this crate's
//! tests.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::linearizable::{Input, Operation, Output, Register};

/// Why a key's history does not linearize.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anomaly {
    /// The version where it shows.
    pub version: i32,
    pub what: String,
    /// The operation that cannot be placed.
    pub op: Option<Operation>,
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at version {}: {}", self.version, self.what)?;
        if let Some(op) = &self.op {
            write!(f, "; {op}")?;
        }
        Ok(())
    }
}

/// The write that made a version: its value and interval (an unknown
/// write has no end).
#[derive(Debug, Clone, Copy)]
struct Made {
    value: u64,
    call: u64,
    ret: u64,
}

/// Whether one key's operations linearize from `initial` (whose version
/// every write counts on from).
pub fn check(ops: &[Operation], initial: Register) -> Result<(), Anomaly> {
    let (made, spare) = versions(ops, initial)?;
    let earliest = earliest_moments(ops, &made, initial)?;
    let latest = latest_moments(ops, &made, initial, &earliest);
    failed_swaps_fit(ops, &earliest, &latest, &spare, initial)
}

fn anomaly(version: i32, what: impl Into<String>, op: Option<&Operation>) -> Anomaly {
    Anomaly {
        version,
        what: what.into(),
        op: op.copied(),
    }
}

/// Which write made each version after `initial`, every version from the
/// first to the last seen having one; and the unknown writes left over,
/// which may have made versions after the last, unseen.
fn versions(
    ops: &[Operation],
    initial: Register,
) -> Result<(BTreeMap<i32, Made>, Vec<Operation>), Anomaly> {
    let mut made: BTreeMap<i32, Made> = BTreeMap::new();
    let mut unknown: HashMap<u64, &Operation> = HashMap::new();
    for op in ops {
        let value = match op.input {
            Input::Write { value } | Input::Cas { value, .. } => value,
            Input::Read => continue,
        };
        match op.output {
            Output::Written { version } => {
                if let Input::Cas { expect, .. } = op.input {
                    if expect + 1 != version {
                        return Err(anomaly(version, "a compare-and-set made a version other than the one after its expected", Some(op)));
                    }
                }
                let write = Made {
                    value,
                    call: op.call,
                    ret: op.ret,
                };
                if made.insert(version, write).is_some() || version <= initial.version {
                    return Err(anomaly(
                        version,
                        "two writes made the same version",
                        Some(op),
                    ));
                }
            }
            Output::Unknown => {
                unknown.insert(value, op);
            }
            _ => {}
        }
    }
    name_seen_unknowns(ops, initial, &mut made, &mut unknown)?;
    let spare = fill_gaps(initial, &mut made, unknown)?;
    Ok((made, spare))
}

/// Gives each version a read saw and no acknowledged write made to the
/// unknown write of the value the read saw.
fn name_seen_unknowns(
    ops: &[Operation],
    initial: Register,
    made: &mut BTreeMap<i32, Made>,
    unknown: &mut HashMap<u64, &Operation>,
) -> Result<(), Anomaly> {
    for op in ops {
        let Output::Read(seen) = op.output else {
            continue;
        };
        if seen.version == initial.version {
            if seen != initial {
                return Err(anomaly(
                    seen.version,
                    "a read saw a value the register never held",
                    Some(op),
                ));
            }
            continue;
        }
        if seen.version < initial.version {
            return Err(anomaly(
                seen.version,
                "a read saw a version before the first",
                Some(op),
            ));
        }
        if let Some(write) = made.get(&seen.version) {
            if write.value != seen.value {
                return Err(anomaly(
                    seen.version,
                    format!(
                        "a read saw value {}, but the write that made this version wrote {}",
                        seen.value, write.value
                    ),
                    Some(op),
                ));
            }
            continue;
        }
        let Some(write) = unknown.remove(&seen.value) else {
            return Err(anomaly(
                seen.version,
                format!(
                    "a read saw value {}, which no write made at this version",
                    seen.value
                ),
                Some(op),
            ));
        };
        if let Input::Cas { expect, .. } = write.input {
            if expect + 1 != seen.version {
                return Err(anomaly(
                    seen.version,
                    "a read saw a compare-and-set take effect at a version it did not expect",
                    Some(op),
                ));
            }
        }
        made.insert(
            seen.version,
            Made {
                value: seen.value,
                call: write.call,
                ret: u64::MAX,
            },
        );
    }
    Ok(())
}

/// Versions no acknowledged write made and no read named are made by the
/// unknown writes nobody saw, the earliest called first; those left over.
fn fill_gaps(
    initial: Register,
    made: &mut BTreeMap<i32, Made>,
    unknown: HashMap<u64, &Operation>,
) -> Result<Vec<Operation>, Anomaly> {
    let last = made.keys().next_back().copied().unwrap_or(initial.version);
    let mut spare: Vec<&Operation> = unknown.into_values().collect();
    spare.sort_by_key(|op| op.call);
    for version in initial.version + 1..=last {
        if made.contains_key(&version) {
            continue;
        }
        let fits = |op: &&Operation| match op.input {
            Input::Cas { expect, .. } => expect + 1 == version,
            _ => true,
        };
        let Some(at) = spare.iter().position(fits) else {
            return Err(anomaly(
                version,
                "no write, acknowledged or unknown, can have made this version",
                None,
            ));
        };
        let write = spare.remove(at);
        let value = match write.input {
            Input::Write { value } | Input::Cas { value, .. } => value,
            Input::Read => 0,
        };
        made.insert(
            version,
            Made {
                value,
                call: write.call,
                ret: u64::MAX,
            },
        );
    }
    Ok(spare.into_iter().copied().collect())
}

/// The reads of each version: the latest call and the earliest return.
fn read_bounds(ops: &[Operation]) -> HashMap<i32, (u64, u64, Operation)> {
    let mut bounds: HashMap<i32, (u64, u64, Operation)> = HashMap::new();
    for op in ops {
        if let Output::Read(seen) = op.output {
            let entry = bounds.entry(seen.version).or_insert((0, u64::MAX, *op));
            entry.0 = entry.0.max(op.call);
            if op.ret < entry.1 {
                entry.1 = op.ret;
                entry.2 = *op;
            }
        }
    }
    bounds
}

/// The earliest moment each version can have been made: after the write
/// that made it was called, after every read of the version before it was
/// called, after the version before; never after the write returned or
/// after a read of it returned.
fn earliest_moments(
    ops: &[Operation],
    made: &BTreeMap<i32, Made>,
    initial: Register,
) -> Result<BTreeMap<i32, u64>, Anomaly> {
    let reads = read_bounds(ops);
    let mut moments = BTreeMap::new();
    let mut previous = 0u64;
    for (&version, write) in made {
        let read_before = reads.get(&(version - 1)).map_or(0, |(call, ..)| *call);
        let moment = previous.max(write.call).max(read_before);
        if moment > write.ret {
            let what = "the write that made this version returned before it could have taken effect (a later version or a read of the one before came first)";
            return Err(anomaly(version, what, None));
        }
        if let Some((_, read_ret, read)) = reads.get(&version) {
            if moment > *read_ret {
                return Err(anomaly(
                    version,
                    "a read returned this version before it could have been made",
                    Some(read),
                ));
            }
        }
        moments.insert(version, moment);
        previous = moment;
    }
    let _ = initial;
    Ok(moments)
}

/// The latest moment each version can have been made, given the earliest.
fn latest_moments(
    ops: &[Operation],
    made: &BTreeMap<i32, Made>,
    initial: Register,
    earliest: &BTreeMap<i32, u64>,
) -> BTreeMap<i32, u64> {
    let reads = read_bounds(ops);
    let mut moments = BTreeMap::new();
    let mut next = u64::MAX;
    for (&version, write) in made.iter().rev() {
        let read_of = reads.get(&version).map_or(u64::MAX, |(_, ret, _)| *ret);
        let moment = next.min(write.ret).min(read_of).max(earliest[&version]);
        moments.insert(version, moment);
        next = moment;
    }
    let _ = initial;
    moments
}

/// A failed compare-and-set expecting version `e` is wrong only if the
/// register certainly held `e` for the whole of its interval: `e` was
/// made by its call at the latest, and the next version after its return
/// at the earliest (after the last version seen, an unknown write nobody
/// saw may have made the next one, from its call).
fn failed_swaps_fit(
    ops: &[Operation],
    earliest: &BTreeMap<i32, u64>,
    latest: &BTreeMap<i32, u64>,
    spare: &[Operation],
    initial: Register,
) -> Result<(), Anomaly> {
    let last = earliest
        .keys()
        .next_back()
        .copied()
        .unwrap_or(initial.version);
    for op in ops {
        let (Input::Cas { expect, .. }, Output::BadVersion) = (op.input, op.output) else {
            continue;
        };
        let made_by = match expect == initial.version {
            true => Some(0),
            false => latest.get(&expect).copied(),
        };
        let Some(made_by) = made_by else {
            continue;
        };
        let next_from = match expect == last {
            false => earliest.get(&(expect + 1)).copied().unwrap_or(u64::MAX),
            true => spare
                .iter()
                .filter(|write| match write.input {
                    Input::Cas { expect: theirs, .. } => theirs == last,
                    _ => true,
                })
                .map(|write| write.call)
                .min()
                .unwrap_or(u64::MAX),
        };
        if made_by <= op.call && op.ret < next_from {
            return Err(anomaly(
                expect,
                "a compare-and-set was refused while the register held the version it expected",
                Some(op),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linearizable::{self, ops::op, ops::read, ops::write};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    const START: Register = Register {
        value: 0,
        version: 0,
    };

    #[test]
    fn a_stale_read_after_a_completed_write_is_caught() {
        let ops = [write(7, 1, 0, 10), read(0, 0, 20, 30)];
        assert!(check(&ops, START).is_err());
        let ops = [write(7, 1, 0, 10), read(7, 1, 20, 30)];
        assert_eq!(check(&ops, START), Ok(()));
    }

    #[test]
    fn an_unknown_write_may_be_seen_or_not() {
        let unknown = op(Input::Write { value: 9 }, Output::Unknown, 0, 5);
        assert_eq!(check(&[unknown, read(9, 1, 10, 20)], START), Ok(()));
        assert_eq!(check(&[unknown, read(0, 0, 10, 20)], START), Ok(()));
        // Seen before it was called: impossible.
        let late = op(Input::Write { value: 9 }, Output::Unknown, 30, 35);
        assert!(check(&[late, read(9, 1, 10, 20)], START).is_err());
    }

    #[test]
    fn a_version_nobody_can_have_made_is_caught() {
        assert!(check(&[write(4, 2, 0, 10)], START).is_err());
    }

    #[test]
    fn a_refused_swap_while_the_version_held_is_caught() {
        let swap = op(
            Input::Cas {
                expect: 1,
                value: 5,
            },
            Output::BadVersion,
            20,
            30,
        );
        assert!(check(&[write(7, 1, 0, 10), swap], START).is_err());
        // A write that may have come first makes the refusal fine.
        let racing = op(Input::Write { value: 8 }, Output::Unknown, 15, 16);
        assert_eq!(check(&[write(7, 1, 0, 10), racing, swap], START), Ok(()));
    }

    /// A register run by a few concurrent clients, some answers lost.
    fn simulate(rng: &mut StdRng, clients: usize, steps: usize) -> Vec<Operation> {
        let mut state = START;
        let mut ops = Vec::new();
        let mut clock = 0u64;
        let mut value = 0u64;
        for _ in 0..steps {
            let batch = rng.gen_range(1..=clients);
            let call = clock;
            let mut answers = Vec::new();
            for _ in 0..batch {
                value += 1;
                let (input, output) = match rng.gen_range(0..4) {
                    0 => (Input::Read, Output::Read(state)),
                    1 => {
                        state = Register {
                            value,
                            version: state.version + 1,
                        };
                        (
                            Input::Write { value },
                            Output::Written {
                                version: state.version,
                            },
                        )
                    }
                    2 => {
                        let expect = state.version - rng.gen_range(0..2);
                        if expect == state.version {
                            state = Register {
                                value,
                                version: state.version + 1,
                            };
                            (
                                Input::Cas { expect, value },
                                Output::Written {
                                    version: state.version,
                                },
                            )
                        } else {
                            (Input::Cas { expect, value }, Output::BadVersion)
                        }
                    }
                    // Lost answers: half of those writes happened.
                    _ => {
                        if rng.gen_bool(0.5) {
                            state = Register {
                                value,
                                version: state.version + 1,
                            };
                        }
                        (Input::Write { value }, Output::Unknown)
                    }
                };
                answers.push((input, output));
            }
            for (input, output) in answers {
                let ret = call + rng.gen_range(1..20) + 20;
                ops.push(op(input, output, call + rng.gen_range(0..3), ret));
            }
            clock += 50;
        }
        ops
    }

    #[test]
    fn agrees_with_the_exhaustive_search_on_random_histories() {
        let mut rng = StdRng::seed_from_u64(7);
        // [not linearizable, linearizable]: both must be common, or the
        // agreement proves little.
        let mut verdicts = [0usize; 2];
        for round in 0..3000 {
            let mut ops = simulate(&mut rng, 1 + round % 4, 12);
            if round % 2 == 1 {
                // Make one read stale: it may or may not still linearize.
                if let Some(read) = ops
                    .iter_mut()
                    .find(|o| matches!(o.output, Output::Read(r) if r.version >= 2))
                {
                    if let Output::Read(r) = read.output {
                        read.output = Output::Read(Register {
                            value: 0,
                            version: 0,
                        });
                        let _ = r;
                    }
                }
            }
            let exhaustive = linearizable::linearizable(&ops, START);
            let versioned = check(&ops, START).is_ok();
            verdicts[usize::from(exhaustive)] += 1;
            assert_eq!(
                exhaustive,
                versioned,
                "round {round}: {:?} {ops:#?}",
                check(&ops, START)
            );
        }
        assert!(verdicts.iter().all(|count| *count > 300), "{verdicts:?}");
    }
}
