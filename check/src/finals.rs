//! Promises about the end state: an ephemeral does not outlive its
//! session, no lock queue keeps a node once its contenders have stopped,
//! and every member holds the same tree once healed and caught up.
//!
//! The recorder takes finals once the faults are healed, while open
//! sessions' clients still run, and long enough after the heal for every
//! ended session to have expired (a timeout and a few ticks): only then
//! must a non-open session's marker be gone from every member.
//!
//! An open session whose marker a member lacks is a warning, not a
//! violation: the session may have expired after its client last looked,
//! which the promises allow; a marker gone while the session was heard
//! from is caught by the session checks.
//!
//! Members are compared with the first: registers by key, children and
//! markers as sets (listing order is not state); one violation per member
//! that differs, naming the first difference.

use std::collections::{BTreeMap, BTreeSet};

use crate::history::{History, MemberFinal, SessionEnd};
use crate::linearizable::Register;
use crate::report::{Difference, Report, Violation, Warning};

pub(crate) fn check(history: &History, report: &mut Report) {
    for member in &history.finals {
        check_markers(history, member, report);
        check_lock_queues(member, report);
    }
    let Some((first, others)) = history.finals.split_first() else {
        return;
    };
    for other in others {
        if let Some(difference) = first_difference(first, other) {
            report.violations.push(Violation::MembersDiffer {
                member: first.member.clone(),
                other: other.member.clone(),
                difference,
            });
        }
    }
}

fn check_markers(history: &History, member: &MemberFinal, report: &mut Report) {
    let markers: BTreeSet<&str> = member.markers.iter().map(String::as_str).collect();
    for life in &history.sessions {
        let present = markers.contains(life.marker.as_str());
        match (life.end, present) {
            (SessionEnd::Open, false) => report.warnings.push(Warning::OpenSessionMarkerMissing {
                member: member.member.clone(),
                session: life.session,
                marker: life.marker.clone(),
            }),
            (SessionEnd::Open, true) | (_, false) => {}
            (end, true) => report.violations.push(Violation::EphemeralOutlivedSession {
                member: member.member.clone(),
                session: life.session,
                marker: life.marker.clone(),
                end,
            }),
        }
    }
}

/// Every contender has stopped by the time finals are read: a release or
/// a cancelled attempt deletes its node, so a queue must be empty. A node
/// left there belongs to a live session that does not know it has it (a
/// create made twice after a lost reply, say) and blocks every later
/// contender for as long as that session lives.
fn check_lock_queues(member: &MemberFinal, report: &mut Report) {
    for (lock, nodes) in &member.lock_queues {
        if !nodes.is_empty() {
            report.violations.push(Violation::LockNodeLeftBehind {
                member: member.member.clone(),
                lock: lock.clone(),
                nodes: nodes.clone(),
            });
        }
    }
}

fn first_difference(member: &MemberFinal, other: &MemberFinal) -> Option<Difference> {
    register_difference(&member.registers, &other.registers)
        .or_else(|| {
            only_on_one(&member.children, &other.children)
                .map(|(name, on_member)| Difference::Child { name, on_member })
        })
        .or_else(|| {
            only_on_one(&member.markers, &other.markers)
                .map(|(path, on_member)| Difference::Marker { path, on_member })
        })
}

fn register_difference(
    member: &BTreeMap<u32, Register>,
    other: &BTreeMap<u32, Register>,
) -> Option<Difference> {
    let keys: BTreeSet<u32> = member.keys().chain(other.keys()).copied().collect();
    keys.into_iter().find_map(|key| {
        let (a, b) = (member.get(&key).copied(), other.get(&key).copied());
        (a != b).then_some(Difference::Register {
            key,
            member: a,
            other: b,
        })
    })
}

/// The first (in sorted order) name held by only one side, and whether
/// that side is `member`.
fn only_on_one(member: &[String], other: &[String]) -> Option<(String, bool)> {
    let member: BTreeSet<&String> = member.iter().collect();
    let other: BTreeSet<&String> = other.iter().collect();
    member
        .symmetric_difference(&other)
        .next()
        .map(|name| (name.to_string(), member.contains(name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::SessionLife;

    fn session(id: u64, end: SessionEnd) -> SessionLife {
        SessionLife {
            session: id,
            process: 1,
            timeout_us: 6_000_000,
            marker: format!("/markers/{id}"),
            opened_us: 0,
            heard_us: Vec::new(),
            end,
        }
    }

    fn member(name: &str, children: &[&str], markers: &[&str]) -> MemberFinal {
        MemberFinal {
            member: name.to_string(),
            registers: BTreeMap::from([(0, Register::default())]),
            children: children.iter().map(|c| c.to_string()).collect(),
            markers: markers.iter().map(|m| m.to_string()).collect(),
            lock_queues: BTreeMap::new(),
        }
    }

    fn report(sessions: Vec<SessionLife>, finals: Vec<MemberFinal>) -> Report {
        let history = History {
            sessions,
            finals,
            ..History::default()
        };
        let mut report = Report::default();
        check(&history, &mut report);
        report
    }

    #[test]
    fn listing_order_is_not_a_difference() {
        // Children and markers are sets: two orders of one set agree.
        let found = report(
            vec![session(1, SessionEnd::Open), session(2, SessionEnd::Open)],
            vec![
                member("a", &["x", "y"], &["/markers/1", "/markers/2"]),
                member("b", &["y", "x"], &["/markers/2", "/markers/1"]),
            ],
        );
        assert_eq!(found, Report::default());
    }

    #[test]
    fn a_marker_of_an_ended_session_is_a_violation_and_a_missing_open_one_a_warning() {
        // Ended sessions must leave nothing; open ones may have expired since.
        let found = report(
            vec![
                session(1, SessionEnd::Open),
                session(2, SessionEnd::Abandoned { at_us: 5 }),
            ],
            vec![member("a", &[], &["/markers/2"])],
        );
        assert_eq!(
            found.violations,
            [Violation::EphemeralOutlivedSession {
                member: "a".to_string(),
                session: 2,
                marker: "/markers/2".to_string(),
                end: SessionEnd::Abandoned { at_us: 5 },
            }]
        );
        assert!(
            matches!(
                found.warnings[..],
                [Warning::OpenSessionMarkerMissing { session: 1, .. }]
            ),
            "{:?}",
            found.warnings
        );
    }

    #[test]
    fn each_differing_member_is_named_with_its_first_difference() {
        // Registers are compared before children, children before markers.
        let mut register_differs = member("c", &["x"], &[]);
        register_differs.registers.insert(
            1,
            Register {
                value: 4,
                version: 1,
            },
        );
        let found = report(
            vec![],
            vec![
                member("a", &["x"], &[]),
                member("b", &["x", "z"], &["/m"]),
                register_differs,
            ],
        );
        let differences: Vec<(String, Difference)> = found
            .violations
            .into_iter()
            .map(|violation| match violation {
                Violation::MembersDiffer {
                    other, difference, ..
                } => (other, difference),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            differences,
            [
                (
                    "b".to_string(),
                    Difference::Child {
                        name: "z".to_string(),
                        on_member: false
                    }
                ),
                (
                    "c".to_string(),
                    Difference::Register {
                        key: 1,
                        member: None,
                        other: Some(Register {
                            value: 4,
                            version: 1
                        })
                    }
                ),
            ]
        );
    }
}
