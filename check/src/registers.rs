//! Promise: the registers are linearizable, and what the members hold at
//! the end is what a read after the whole run could return.
//!
//! Each key's operations go to [`crate::versioned`] (linear in their
//! number, where a search would be exponential in the unknown outcomes),
//! with one read per member appended after everything else, returning
//! that member's final value. A clean key costs one pass. Only when it
//! fails is it checked again without the final reads (is the run itself
//! at fault?) and then with each member's read alone (whose final is
//! impossible?). If every member's final fits alone but not together, the
//! members disagree, and [`crate::finals`] reports that.

use std::collections::BTreeSet;

use crate::history::History;
use crate::linearizable::{self, Input, Operation, Output, Register};
use crate::report::{Report, Violation};
use crate::versioned;

/// Every register starts empty (see [`crate::history`]).
const INITIAL: Register = Register {
    value: 0,
    version: 0,
};

pub(crate) fn check(history: &History, report: &mut Report) {
    let by_key = linearizable::by_key(&history.registers);
    let final_keys = history.finals.iter().flat_map(|f| f.registers.keys());
    let keys: BTreeSet<u32> = by_key.keys().chain(final_keys).copied().collect();
    let end_us = after_everything(&history.registers);
    for key in keys {
        let ops = by_key.get(&key).map_or(&[][..], Vec::as_slice);
        let finals: Vec<(&str, Operation)> = history
            .finals
            .iter()
            .filter_map(|f| Some((f.member.as_str(), *f.registers.get(&key)?)))
            .map(|(member, register)| (member, final_read(key, register, end_us)))
            .collect();
        check_key(key, ops, &finals, report);
    }
}

fn check_key(key: u32, ops: &[Operation], finals: &[(&str, Operation)], report: &mut Report) {
    let reads = finals.iter().map(|(_, read)| *read);
    let all: Vec<Operation> = ops.iter().copied().chain(reads).collect();
    if versioned::check(&all, INITIAL).is_ok() {
        return;
    }
    if let Err(anomaly) = versioned::check(ops, INITIAL) {
        return report
            .violations
            .push(Violation::RegisterNotLinearizable { key, anomaly });
    }
    for (member, read) in finals {
        let with_read: Vec<Operation> = ops.iter().copied().chain([*read]).collect();
        if versioned::check(&with_read, INITIAL).is_err() {
            let Output::Read(register) = read.output else {
                unreachable!("final_read makes reads");
            };
            report.violations.push(Violation::FinalRegisterImpossible {
                member: member.to_string(),
                key,
                register,
            });
        }
    }
}

/// A moment after every call and return in `ops`.
fn after_everything(ops: &[Operation]) -> u64 {
    let last = ops.iter().map(|op| op.call.max(op.ret)).max().unwrap_or(0);
    last.saturating_add(1)
}

/// A read at `end_us` that returned `register`. It returns a moment later,
/// since the checker orders an operation called when another returned
/// after it (so `call == ret` could never be placed).
fn final_read(key: u32, register: Register, end_us: u64) -> Operation {
    Operation {
        key,
        input: Input::Read,
        output: Output::Read(register),
        call: end_us,
        ret: end_us.saturating_add(1),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::history::MemberFinal;
    use crate::linearizable::ops::write;

    fn member(name: &str, value: u64, version: i32) -> MemberFinal {
        MemberFinal {
            member: name.to_string(),
            registers: BTreeMap::from([(0, Register { value, version })]),
            children: Vec::new(),
            markers: Vec::new(),
            lock_queues: BTreeMap::new(),
        }
    }

    fn violations(history: &History) -> Vec<Violation> {
        let mut report = Report::default();
        check(history, &mut report);
        report.violations
    }

    #[test]
    fn finals_equal_to_the_last_write_pass() {
        // A member ending with the last acknowledged write is what a read could return.
        let history = History {
            registers: vec![write(1, 1, 0, 10), write(2, 2, 20, 30)],
            finals: vec![member("a", 2, 2), member("b", 2, 2)],
            ..History::default()
        };
        assert_eq!(violations(&history), []);
    }

    #[test]
    fn a_final_that_lost_an_acknowledged_write_is_named() {
        // A member ending before the last acknowledged write is caught, and only that member.
        let history = History {
            registers: vec![write(1, 1, 0, 10), write(2, 2, 20, 30)],
            finals: vec![member("a", 2, 2), member("b", 1, 1)],
            ..History::default()
        };
        assert_eq!(
            violations(&history),
            [Violation::FinalRegisterImpossible {
                member: "b".to_string(),
                key: 0,
                register: Register {
                    value: 1,
                    version: 1
                },
            }]
        );
    }

    #[test]
    fn an_unknown_write_may_or_may_not_be_in_the_finals() {
        // A write with an unknown outcome may have happened, or not, by the end.
        let unknown = Operation {
            output: Output::Unknown,
            ..write(5, 0, 40, 50)
        };
        for (value, version) in [(2, 2), (5, 3)] {
            let history = History {
                registers: vec![write(1, 1, 0, 10), write(2, 2, 20, 30), unknown],
                finals: vec![member("a", value, version)],
                ..History::default()
            };
            assert_eq!(violations(&history), [], "final {value} v{version}");
        }
    }

    #[test]
    fn members_that_each_fit_but_disagree_are_left_to_the_finals_check() {
        // An unknown write lets each final fit alone; their disagreement is another check's.
        let unknown = Operation {
            output: Output::Unknown,
            ..write(5, 0, 40, 50)
        };
        let history = History {
            registers: vec![write(1, 1, 0, 10), unknown],
            finals: vec![member("a", 1, 1), member("b", 5, 2)],
            ..History::default()
        };
        assert_eq!(violations(&history), []);
    }

    #[test]
    fn a_key_only_in_the_finals_must_still_hold_its_initial_value() {
        // With no operations, a final other than the empty register is impossible.
        let history = History {
            finals: vec![member("a", 0, 0), member("b", 3, 1)],
            ..History::default()
        };
        let found = violations(&history);
        assert!(
            matches!(&found[..], [Violation::FinalRegisterImpossible { member, .. }] if member == "b"),
            "{found:?}"
        );
    }
}
