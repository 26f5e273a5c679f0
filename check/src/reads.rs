//! Promise: a session never sees a register go back in time. ZooKeeper
//! orders each session's requests and a member answers a reconnecting
//! session only once it has seen the session's last zxid, so even reads
//! without `sync` never go back within one session.
//!
//! Observations are in the order the session saw them, so the check is
//! that each (session, key)'s versions never go down from one to the next.

use std::collections::HashMap;

use crate::history::{History, Observation};
use crate::report::{Report, Violation};

pub(crate) fn check(history: &History, report: &mut Report) {
    let mut last: HashMap<(u64, u32), &Observation> = HashMap::new();
    for seen in &history.observations {
        let Some(before) = last.insert((seen.session, seen.key), seen) else {
            continue;
        };
        if seen.version < before.version {
            report.violations.push(Violation::ReadWentBack {
                process: seen.process,
                session: seen.session,
                key: seen.key,
                from_version: before.version,
                from_us: before.at_us,
                to_version: seen.version,
                to_us: seen.at_us,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(session: u64, key: u32, version: i32, at_us: u64) -> Observation {
        Observation {
            process: 1,
            session,
            key,
            version,
            at_us,
        }
    }

    fn violations(observations: Vec<Observation>) -> Vec<Violation> {
        let history = History {
            observations,
            ..History::default()
        };
        let mut report = Report::default();
        check(&history, &mut report);
        report.violations
    }

    #[test]
    fn versions_may_repeat_and_interleave_across_keys_and_sessions() {
        // Only one session's one key is ordered: others may be behind.
        let found = violations(vec![
            seen(1, 0, 3, 10),
            seen(1, 0, 3, 20),
            seen(2, 0, 1, 30),
            seen(1, 1, 0, 40),
            seen(1, 0, 4, 50),
        ]);
        assert_eq!(found, []);
    }

    #[test]
    fn a_version_going_down_in_one_session_is_caught_once() {
        // 5 then 3 then 4: one step down, reported with both sightings.
        let found = violations(vec![
            seen(1, 0, 5, 10),
            seen(1, 0, 3, 20),
            seen(1, 0, 4, 30),
        ]);
        assert_eq!(
            found,
            [Violation::ReadWentBack {
                process: 1,
                session: 1,
                key: 0,
                from_version: 5,
                from_us: 10,
                to_version: 3,
                to_us: 20,
            }]
        );
    }
}
