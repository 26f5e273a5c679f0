//! Promise: a lock has one holder at a time, every grant's fencing token
//! is larger than the grants' before it, and the fenced store never takes
//! a token older than one it has already taken.
//!
//! Holding is what the holder believes: from the lock call's return to when
//! it started its release or learned it might have lost the lock. Two
//! beliefs overlapping is the failure a lock exists to prevent; with
//! ZooKeeper's design it means a session expired (and its lock went to
//! another) before its client could learn it had been cut off.
//!
//! The store is checked in the order it decided (its own times). Fencing
//! can refuse only tokens older than one it has seen, so a deposed holder's
//! write that reaches the store after a newer grant, but before the newer
//! holder's first write, is admitted by design: that is a warning, not a
//! violation (and overlapping beliefs behind it are caught as two holders).

use std::collections::BTreeMap;

use crate::history::{Grant, History, StoreWrite};
use crate::report::{Holder, Report, Violation, Warning};

pub(crate) fn check(history: &History, report: &mut Report) {
    let mut grants: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
    for grant in &history.grants {
        grants.entry(grant.lock.as_str()).or_default().push(grant);
    }
    for lock_grants in grants.values_mut() {
        lock_grants.sort_by_key(|grant| (grant.granted_us, grant.token));
        check_holders(lock_grants, report);
        check_tokens(lock_grants, report);
    }
    let mut writes: BTreeMap<&str, Vec<&StoreWrite>> = BTreeMap::new();
    for write in history.store_writes.iter().filter(|write| write.accepted) {
        writes.entry(write.lock.as_str()).or_default().push(write);
    }
    for (lock, lock_writes) in &mut writes {
        lock_writes.sort_by_key(|write| write.at_us);
        let lock_grants = grants.get(lock).map_or(&[][..], Vec::as_slice);
        check_store(lock_writes, lock_grants, report);
    }
}

fn holder(grant: &Grant) -> Holder {
    Holder {
        process: grant.process,
        session: grant.session,
        token: grant.token,
        granted_us: grant.granted_us,
        ended_us: grant.ended_us,
    }
}

/// `grants` in grant order: each against the earlier grant that ended last.
fn check_holders(grants: &[&Grant], report: &mut Report) {
    let ends_later = |a: &Grant, b: &Grant| match (a.ended_us, b.ended_us) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(a), Some(b)) => a > b,
    };
    let Some((&first, rest)) = grants.split_first() else {
        return;
    };
    let mut last_ending = first;
    for &grant in rest {
        if last_ending
            .ended_us
            .is_none_or(|ended_us| grant.granted_us < ended_us)
        {
            report.violations.push(Violation::TwoHolders {
                lock: grant.lock.clone(),
                first: holder(last_ending),
                second: holder(grant),
            });
        }
        if ends_later(grant, last_ending) {
            last_ending = grant;
        }
    }
}

/// `grants` in grant order: each token larger than the one before.
fn check_tokens(grants: &[&Grant], report: &mut Report) {
    for pair in grants.windows(2) {
        let [earlier, later] = pair else {
            unreachable!("windows of two");
        };
        if later.token <= earlier.token {
            report.violations.push(Violation::TokenNotIncreasing {
                lock: later.lock.clone(),
                earlier: holder(earlier),
                later: holder(later),
            });
        }
    }
}

/// `writes`: one lock's admitted writes in the store's order.
fn check_store(writes: &[&StoreWrite], grants: &[&Grant], report: &mut Report) {
    let mut newest: Option<&StoreWrite> = None;
    for &write in writes {
        match newest {
            Some(newer) if write.token < newer.token => {
                report.violations.push(Violation::StaleWriteAccepted {
                    lock: write.lock.clone(),
                    process: write.process,
                    token: write.token,
                    at_us: write.at_us,
                    newer_process: newer.process,
                    newer_token: newer.token,
                    newer_at_us: newer.at_us,
                });
                continue;
            }
            _ => newest = Some(write),
        }
        let granted_before = grants.iter().filter(|grant| grant.granted_us < write.at_us);
        if let Some(newer) = granted_before.max_by_key(|grant| grant.token) {
            if write.token < newer.token {
                report.warnings.push(Warning::LateWriteAdmitted {
                    lock: write.lock.clone(),
                    process: write.process,
                    token: write.token,
                    at_us: write.at_us,
                    newer_token: newer.token,
                    newer_granted_us: newer.granted_us,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::GrantEnd;

    fn grant(process: u32, token: u64, granted_us: u64, ended_us: Option<u64>) -> Grant {
        Grant {
            lock: "/locks/l".to_string(),
            process,
            session: 0x10 + u64::from(process),
            token,
            granted_us,
            ended_us,
            end: if ended_us.is_some() {
                GrantEnd::Released
            } else {
                GrantEnd::RunEnded
            },
        }
    }

    fn write(process: u32, token: u64, at_us: u64, accepted: bool) -> StoreWrite {
        StoreWrite {
            lock: "/locks/l".to_string(),
            process,
            token,
            at_us,
            accepted,
        }
    }

    fn report(grants: Vec<Grant>, store_writes: Vec<StoreWrite>) -> Report {
        let history = History {
            grants,
            store_writes,
            ..History::default()
        };
        let mut report = Report::default();
        check(&history, &mut report);
        report
    }

    #[test]
    fn grants_one_after_another_with_growing_tokens_pass() {
        // A handoff at the very moment of release is not an overlap.
        let found = report(
            vec![
                grant(2, 20, 100, Some(200)),
                grant(1, 10, 0, Some(100)),
                grant(3, 30, 200, None),
            ],
            vec![write(1, 10, 50, true), write(2, 20, 150, true)],
        );
        assert_eq!(found, Report::default());
    }

    #[test]
    fn a_grant_during_a_long_tenure_is_caught_against_that_tenure() {
        // The overlap is found against the holder still holding, not the one just before.
        let long = grant(1, 10, 0, None);
        let short = grant(2, 20, 100, Some(200));
        let third = grant(3, 30, 300, Some(400));
        let found = report(vec![long.clone(), short.clone(), third.clone()], vec![]);
        assert_eq!(
            found.violations,
            [
                Violation::TwoHolders {
                    lock: "/locks/l".to_string(),
                    first: holder(&long),
                    second: holder(&short),
                },
                Violation::TwoHolders {
                    lock: "/locks/l".to_string(),
                    first: holder(&long),
                    second: holder(&third),
                },
            ]
        );
    }

    #[test]
    fn a_token_reused_or_going_down_is_caught() {
        // Equal tokens are as wrong as smaller ones.
        let grants = vec![
            grant(1, 10, 0, Some(100)),
            grant(2, 10, 100, Some(200)),
            grant(3, 5, 200, Some(300)),
        ];
        let kinds: Vec<&str> = report(grants, vec![])
            .violations
            .iter()
            .map(Violation::kind)
            .collect();
        assert_eq!(kinds, ["token-not-increasing", "token-not-increasing"]);
    }

    #[test]
    fn an_older_token_after_a_newer_one_was_admitted_is_caught() {
        // Refused writes are the fence working; an admitted old token is not.
        let found = report(
            vec![grant(1, 10, 0, Some(100)), grant(2, 20, 100, None)],
            vec![
                write(1, 10, 50, true),
                write(2, 20, 150, true),
                write(1, 10, 160, false),
                write(1, 10, 170, true),
            ],
        );
        assert_eq!(
            found.violations,
            [Violation::StaleWriteAccepted {
                lock: "/locks/l".to_string(),
                process: 1,
                token: 10,
                at_us: 170,
                newer_process: 2,
                newer_token: 20,
                newer_at_us: 150,
            }]
        );
        assert_eq!(found.warnings, []);
    }

    #[test]
    fn a_late_write_before_the_new_holder_writes_is_only_a_warning() {
        // Fencing cannot refuse a token before it has seen a newer one.
        let found = report(
            vec![grant(1, 10, 0, Some(100)), grant(2, 20, 100, None)],
            vec![write(1, 10, 120, true), write(2, 20, 150, true)],
        );
        assert_eq!(found.violations, []);
        assert!(
            matches!(
                found.warnings[..],
                [Warning::LateWriteAdmitted {
                    token: 10,
                    newer_token: 20,
                    ..
                }]
            ),
            "{:?}",
            found.warnings
        );
    }
}
