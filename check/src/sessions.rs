//! Promises: a session that any member heard from within its timeout is
//! not expired, and its ephemeral lives exactly as long as it does.
//!
//! A session ended by expiry is one whose marker an observer saw deleted,
//! or whose client was told `Expired`, with no close sent at or before
//! that moment; it expired no later than the earlier of the two
//! (`expired`). The last moment a member heard from it before then
//! (`heard`, a send time, or its connect if nothing later) is no later
//! than the real one, so `expired < heard + timeout - slack` proves it
//! expired early. The slack covers what the server may round down: the
//! touch interval and the expiry bucket.
//!
//! The ephemeral is gone while its session lived if the session was heard
//! from after its marker was seen deleted (unless it had sent its close by
//! then), or if its own synced `exists` found the marker absent: that
//! answer proves the session alive, and its ephemeral should be too.

use crate::history::{History, SessionLife};
use crate::report::{Report, Violation};
use crate::CheckConfig;

pub(crate) fn check(history: &History, config: &CheckConfig, report: &mut Report) {
    let deletions = history.first_deletions();
    for life in &history.sessions {
        let deleted_us = deletions.get(&life.session).copied();
        check_expiry(life, deleted_us, config, report);
        check_heard_after_deletion(life, deleted_us, report);
    }
    let absent = history.marker_checks.iter().filter(|check| !check.present);
    report
        .violations
        .extend(absent.map(|check| Violation::MarkerAbsent {
            session: check.session,
            call_us: check.call_us,
            ret_us: check.ret_us,
        }));
}

fn check_expiry(
    life: &SessionLife,
    deleted_us: Option<u64>,
    config: &CheckConfig,
    report: &mut Report,
) {
    let Some(expired_us) = life.expired_us(deleted_us) else {
        return;
    };
    let heard_us = life
        .heard_us
        .iter()
        .copied()
        .filter(|&heard_us| heard_us <= expired_us)
        .fold(life.opened_us, u64::max);
    let due_us = heard_us.saturating_add(life.timeout_us);
    if expired_us.saturating_add(config.expiry_slack_us) < due_us {
        report.violations.push(Violation::EarlyExpiry {
            process: life.process,
            session: life.session,
            heard_us,
            expired_us,
            timeout_us: life.timeout_us,
        });
    }
}

fn check_heard_after_deletion(life: &SessionLife, deleted_us: Option<u64>, report: &mut Report) {
    let Some(deleted_us) = deleted_us else {
        return;
    };
    if life
        .close_sent_us()
        .is_some_and(|close_us| close_us <= deleted_us)
    {
        return;
    }
    let after = life.heard_us.iter().copied().filter(|&t| t > deleted_us);
    if let Some(heard_us) = after.min() {
        report.violations.push(Violation::EphemeralGoneWhileLive {
            process: life.process,
            session: life.session,
            deleted_seen_us: deleted_us,
            heard_us,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::SessionEnd;
    use crate::history::{MarkerCheck, MarkerDeletion};

    const TIMEOUT_US: u64 = 6_000_000;
    const SLACK_US: u64 = 100_000;

    fn life(heard_us: Vec<u64>, end: SessionEnd) -> SessionLife {
        SessionLife {
            session: 0xa1,
            process: 7,
            timeout_us: TIMEOUT_US,
            marker: "/markers/a1".to_string(),
            opened_us: 1_000,
            heard_us,
            end,
        }
    }

    fn deleted(seen_us: u64) -> MarkerDeletion {
        MarkerDeletion {
            session: 0xa1,
            seen_us,
        }
    }

    fn violations(life: SessionLife, deletions: Vec<MarkerDeletion>) -> Vec<Violation> {
        let history = History {
            sessions: vec![life],
            marker_deletions: deletions,
            ..History::default()
        };
        let config = CheckConfig {
            expiry_slack_us: SLACK_US,
        };
        let mut report = Report::default();
        check(&history, &config, &mut report);
        report.violations
    }

    #[test]
    fn an_expiry_a_full_timeout_after_the_last_touch_is_on_time() {
        // Deleted and told just after the timeout ran out: no violation.
        let life = life(
            vec![10_000, 2_000_000],
            SessionEnd::Expired { seen_us: 8_100_000 },
        );
        assert_eq!(violations(life, vec![deleted(8_000_500)]), []);
    }

    #[test]
    fn the_slack_is_honoured_and_no_more() {
        // Half the slack early passes; twice the slack early is a violation.
        let heard_us = 2_000_000;
        let expiry = |early_us: u64| {
            let expired_us = heard_us + TIMEOUT_US - early_us;
            let life = life(vec![heard_us], SessionEnd::Open);
            violations(life, vec![deleted(expired_us)])
        };
        assert_eq!(expiry(SLACK_US / 2), []);
        assert_eq!(
            expiry(SLACK_US * 2),
            [Violation::EarlyExpiry {
                process: 7,
                session: 0xa1,
                heard_us,
                expired_us: heard_us + TIMEOUT_US - SLACK_US * 2,
                timeout_us: TIMEOUT_US,
            }]
        );
    }

    #[test]
    fn the_client_being_told_expired_counts_even_without_a_deletion_seen() {
        // No observer saw the marker go; the client's own Expired is enough.
        let life = life(vec![2_000_000], SessionEnd::Expired { seen_us: 2_300_000 });
        let found = violations(life, vec![]);
        assert!(
            matches!(
                found[..],
                [Violation::EarlyExpiry {
                    expired_us: 2_300_000,
                    ..
                }]
            ),
            "{found:?}"
        );
    }

    #[test]
    fn with_nothing_heard_the_connect_starts_the_timeout() {
        // A session never heard from after connecting still gets its full timeout.
        let life = life(vec![], SessionEnd::Abandoned { at_us: 50_000 });
        let found = violations(life, vec![deleted(3_000_000)]);
        assert!(
            matches!(
                found[..],
                [Violation::EarlyExpiry {
                    heard_us: 1_000,
                    ..
                }]
            ),
            "{found:?}"
        );
    }

    #[test]
    fn a_close_sent_before_the_deletion_is_not_an_expiry() {
        // Closing deletes the marker at once; neither check applies.
        let life = life(vec![2_000_000], SessionEnd::Closed { at_us: 2_100_000 });
        assert_eq!(violations(life, vec![deleted(2_150_000)]), []);
    }

    #[test]
    fn a_session_heard_from_after_its_marker_went_is_caught() {
        // The first request after the deletion is named.
        let life = life(
            vec![2_000_000, 9_000_000, 9_500_000],
            SessionEnd::Expired { seen_us: 9_600_000 },
        );
        assert_eq!(
            violations(life, vec![deleted(8_500_000), deleted(8_400_000)]),
            [Violation::EphemeralGoneWhileLive {
                process: 7,
                session: 0xa1,
                deleted_seen_us: 8_400_000,
                heard_us: 9_000_000,
            }]
        );
    }

    #[test]
    fn a_marker_check_that_finds_nothing_is_caught() {
        // The session's own synced exists answered, so it lived: the marker must too.
        let history = History {
            sessions: vec![life(vec![1_000_000], SessionEnd::Open)],
            marker_checks: vec![
                MarkerCheck {
                    session: 0xa1,
                    call_us: 1_000_000,
                    ret_us: 1_001_000,
                    present: true,
                },
                MarkerCheck {
                    session: 0xa1,
                    call_us: 2_000_000,
                    ret_us: 2_001_000,
                    present: false,
                },
            ],
            ..History::default()
        };
        let mut report = Report::default();
        check(&history, &CheckConfig::default(), &mut report);
        assert_eq!(
            report.violations,
            [Violation::MarkerAbsent {
                session: 0xa1,
                call_us: 2_000_000,
                ret_us: 2_001_000,
            }]
        );
    }
}
