//! Promise: sequential creates under one parent get unique names whose
//! sequence numbers follow real time, and an acknowledged create survives.
//! Queues, elections and the lock recipe itself order contenders by these
//! numbers: a repeat or a reversal hands two of them the same place.
//!
//! Only acknowledged creates are checked; a create whose outcome is unknown
//! may or may not exist. "Follows real time": if A was acknowledged before
//! B was called, A's sequence is smaller. Each create is checked against
//! the largest sequence acknowledged before its call, by one sweep over
//! returns and calls. A repeated name is reported as a duplicate, not also
//! as out of order.

use std::collections::{HashMap, HashSet};

use crate::history::{ChildCreate, History};
use crate::report::{Child, Report, Violation};

pub(crate) fn check(history: &History, report: &mut Report) {
    let acknowledged: Vec<Child> = history.children.iter().filter_map(child).collect();
    check_unique(&acknowledged, report);
    check_order(&acknowledged, report);
    check_kept(history, &acknowledged, report);
}

fn child(create: &ChildCreate) -> Option<Child> {
    Some(Child {
        name: create.name.clone()?,
        sequence: create.sequence,
        process: create.process,
        call_us: create.call_us,
        ret_us: create.ret_us,
    })
}

fn check_unique(children: &[Child], report: &mut Report) {
    let mut first: HashMap<&str, &Child> = HashMap::new();
    for child in children {
        if let Some(earlier) = first.insert(&child.name, child) {
            report.violations.push(Violation::DuplicateChild {
                first: earlier.clone(),
                second: child.clone(),
            });
        }
    }
}

fn check_order(children: &[Child], report: &mut Report) {
    let numbered: Vec<(&Child, u64)> = children
        .iter()
        .filter_map(|child| Some((child, child.sequence?)))
        .collect();
    let mut by_return = numbered.clone();
    by_return.sort_by_key(|(child, _)| child.ret_us);
    let mut by_call = numbered;
    by_call.sort_by_key(|(child, _)| child.call_us);
    let mut returned = by_return.iter().peekable();
    // The largest sequence acknowledged before the current call.
    let mut largest: Option<(&Child, u64)> = None;
    for &(later, sequence) in &by_call {
        while let Some(&(earlier, earlier_sequence)) =
            returned.next_if(|(earlier, _)| earlier.ret_us < later.call_us)
        {
            if largest.is_none_or(|(_, largest)| earlier_sequence > largest) {
                largest = Some((earlier, earlier_sequence));
            }
        }
        let Some((earlier, earlier_sequence)) = largest else {
            continue;
        };
        let reversed = earlier_sequence > sequence
            || (earlier_sequence == sequence && earlier.name != later.name);
        if reversed {
            report.violations.push(Violation::ChildrenOutOfOrder {
                earlier: earlier.clone(),
                later: later.clone(),
            });
        }
    }
}

fn check_kept(history: &History, children: &[Child], report: &mut Report) {
    for member in &history.finals {
        let names: HashSet<&str> = member.children.iter().map(String::as_str).collect();
        let lost = children
            .iter()
            .filter(|child| !names.contains(child.name.as_str()));
        report
            .violations
            .extend(lost.map(|child| Violation::ChildLost {
                member: member.member.clone(),
                child: child.clone(),
            }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(process: u32, call_us: u64, ret_us: u64, sequence: Option<u64>) -> ChildCreate {
        ChildCreate {
            process,
            call_us,
            ret_us,
            name: sequence.map(|sequence| format!("c-{sequence:010}")),
            sequence,
        }
    }

    fn kinds(children: Vec<ChildCreate>) -> Vec<&'static str> {
        let history = History {
            children,
            ..History::default()
        };
        let mut report = Report::default();
        check(&history, &mut report);
        report.violations.iter().map(Violation::kind).collect()
    }

    #[test]
    fn concurrent_creates_may_take_numbers_in_either_order() {
        // Overlapping creates are unordered; unknown outcomes are not checked.
        let children = vec![
            create(1, 0, 100, Some(2)),
            create(2, 10, 90, Some(1)),
            create(3, 20, 30, None),
            create(1, 200, 300, Some(4)),
        ];
        assert_eq!(kinds(children), Vec::<&str>::new());
    }

    #[test]
    fn a_smaller_number_after_an_acknowledged_larger_one_is_caught() {
        // The earlier create is the one with the largest number acknowledged before.
        let history = History {
            children: vec![
                create(1, 0, 10, Some(5)),
                create(2, 5, 15, Some(7)),
                create(3, 20, 30, Some(6)),
            ],
            ..History::default()
        };
        let mut report = Report::default();
        check(&history, &mut report);
        let [Violation::ChildrenOutOfOrder { earlier, later }] = &report.violations[..] else {
            panic!("{:?}", report.violations);
        };
        assert_eq!((earlier.sequence, later.sequence), (Some(7), Some(6)));
    }

    #[test]
    fn a_repeated_name_is_a_duplicate_only() {
        // The same name twice, one after the other, is not also reported out of order.
        let children = vec![create(1, 0, 10, Some(3)), create(2, 20, 30, Some(3))];
        assert_eq!(kinds(children), ["duplicate-child"]);
    }
}
