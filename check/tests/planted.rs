//! Each promise's check, through the public `check`: a clean history built
//! by hand passes, and each fault planted into it is reported as exactly
//! its own violation (plus, where one member is changed, that the members
//! now differ).

use std::collections::BTreeMap;

use arbor_check::linearizable::{Input, Operation, Output, Register};
use arbor_check::{
    check, CheckConfig, ChildCreate, Grant, GrantEnd, History, MarkerCheck, MarkerDeletion,
    MemberFinal, Observation, QueueNode, Report, SessionEnd, SessionLife, StoreWrite, Violation,
};

const TIMEOUT_US: u64 = 6_000_000;
const CONFIG: CheckConfig = CheckConfig {
    expiry_slack_us: 100_000,
};
const LOCK: &str = "/locks/a";
/// Sessions 1 (open to the end), 2 (closed) and 3 (expired).
const S1: u64 = 0x100;
const S2: u64 = 0x200;
const S3: u64 = 0x300;

fn session(session: u64, process: u32, heard_us: Vec<u64>, end: SessionEnd) -> SessionLife {
    SessionLife {
        session,
        process,
        timeout_us: TIMEOUT_US,
        marker: format!("/markers/{process}"),
        opened_us: 0,
        heard_us,
        end,
    }
}

fn op(key: u32, input: Input, output: Output, call: u64, ret: u64) -> Operation {
    Operation {
        key,
        input,
        output,
        call,
        ret,
    }
}

fn register(value: u64, version: i32) -> Register {
    Register { value, version }
}

fn seen(process: u32, session: u64, key: u32, version: i32, at_us: u64) -> Observation {
    Observation {
        process,
        session,
        key,
        version,
        at_us,
    }
}

fn child(process: u32, call_us: u64, ret_us: u64, sequence: Option<u64>) -> ChildCreate {
    ChildCreate {
        process,
        call_us,
        ret_us,
        name: sequence.map(name),
        sequence,
    }
}

fn name(sequence: u64) -> String {
    format!("c-{sequence:010}")
}

fn grant(process: u32, session: u64, token: u64, granted_us: u64, ended: Option<u64>) -> Grant {
    let end = match ended {
        Some(_) => GrantEnd::Released,
        None => GrantEnd::RunEnded,
    };
    Grant {
        lock: LOCK.to_string(),
        process,
        session,
        token,
        granted_us,
        ended_us: ended,
        end,
    }
}

fn store(process: u32, token: u64, at_us: u64, accepted: bool) -> StoreWrite {
    StoreWrite {
        lock: LOCK.to_string(),
        process,
        token,
        at_us,
        accepted,
    }
}

fn member(name: &str) -> MemberFinal {
    MemberFinal {
        member: name.to_string(),
        registers: BTreeMap::from([(0, register(2, 2)), (1, register(9, 2))]),
        children: (0..4).map(self::name).collect(),
        markers: vec!["/markers/1".to_string()],
        // Read, and empty: every contender cleaned up after itself.
        lock_queues: BTreeMap::from([(LOCK.to_string(), Vec::new())]),
    }
}

/// A run where every promise held: three sessions (one open, one closed,
/// one expired a full timeout after it was last heard from), two
/// registers with an unknown write, a lock handed on three times, four
/// sequential creates (one unknown, which did happen), three members.
fn clean() -> History {
    History {
        sessions: vec![
            session(
                S1,
                1,
                vec![10_000, 1_000_000, 2_000_000, 2_900_000, 4_000_000],
                SessionEnd::Open,
            ),
            session(
                S2,
                2,
                vec![20_000, 1_500_000],
                SessionEnd::Closed { at_us: 3_000_000 },
            ),
            session(
                S3,
                3,
                vec![30_000, 2_500_000],
                SessionEnd::Expired { seen_us: 9_000_000 },
            ),
        ],
        registers: vec![
            op(
                0,
                Input::Write { value: 1 },
                Output::Written { version: 1 },
                1_000_000,
                1_010_000,
            ),
            op(
                0,
                Input::Read,
                Output::Read(register(1, 1)),
                1_500_000,
                1_510_000,
            ),
            op(
                0,
                Input::Cas {
                    expect: 1,
                    value: 2,
                },
                Output::Written { version: 2 },
                2_000_000,
                2_010_000,
            ),
            op(
                1,
                Input::Write { value: 5 },
                Output::Written { version: 1 },
                2_500_000,
                2_510_000,
            ),
            op(
                1,
                Input::Write { value: 9 },
                Output::Unknown,
                2_700_000,
                2_800_000,
            ),
            op(
                1,
                Input::Read,
                Output::Read(register(9, 2)),
                2_900_000,
                2_910_000,
            ),
        ],
        observations: vec![
            seen(1, S1, 0, 1, 1_010_000),
            seen(2, S2, 0, 1, 1_510_000),
            seen(1, S1, 0, 2, 2_010_000),
            seen(3, S3, 1, 1, 2_510_000),
            seen(1, S1, 1, 2, 2_910_000),
        ],
        marker_checks: vec![MarkerCheck {
            session: S1,
            call_us: 4_000_000,
            ret_us: 4_010_000,
            present: true,
        }],
        marker_deletions: vec![
            MarkerDeletion {
                session: S2,
                seen_us: 3_050_000,
            },
            MarkerDeletion {
                session: S3,
                seen_us: 8_600_000,
            },
        ],
        children: vec![
            child(1, 100_000, 110_000, Some(0)),
            child(2, 120_000, 130_000, Some(1)),
            child(3, 140_000, 150_000, None),
            child(1, 200_000, 210_000, Some(3)),
        ],
        grants: vec![
            grant(1, S1, 100, 1_100_000, Some(1_400_000)),
            Grant {
                end: GrantEnd::Lost,
                ..grant(3, S3, 120, 1_450_000, Some(2_700_000))
            },
            grant(1, S1, 200, 8_700_000, None),
        ],
        store_writes: vec![
            store(1, 100, 1_200_000, true),
            store(3, 120, 1_500_000, true),
            store(1, 200, 8_750_000, true),
            store(3, 120, 8_760_000, false),
        ],
        finals: vec![member("m1"), member("m2"), member("m3")],
    }
}

fn planted(plant: impl FnOnce(&mut History)) -> Report {
    let mut history = clean();
    plant(&mut history);
    check(&history, &CONFIG)
}

/// `report` holds a violation of `kind`, and nothing but `kind` and `also`.
fn assert_only(report: &Report, kind: &str, also: &[&str]) {
    let kinds: Vec<&str> = report.violations.iter().map(Violation::kind).collect();
    assert!(kinds.contains(&kind), "no {kind} in\n{report}");
    assert!(
        kinds.iter().all(|k| *k == kind || also.contains(k)),
        "unrelated violations in\n{report}"
    );
    for violation in &report.violations {
        let line = violation.to_string();
        assert!(
            line.starts_with(violation.kind()) && !line.contains('\n'),
            "{line}"
        );
    }
}

#[test]
fn the_clean_history_passes() {
    // A run where every promise held has no violation, no warning, and counts what it holds.
    let report = check(&clean(), &CONFIG);
    assert!(report.passed(), "{report}");
    assert_eq!(report.warnings, []);
    let counts = &report.counts;
    assert_eq!(
        (
            counts.register_operations,
            counts.writes_unknown,
            counts.sessions_expired
        ),
        (6, 1, 1)
    );
    assert_eq!(
        (counts.grants, counts.children_acknowledged, counts.members),
        (3, 3, 3)
    );
}

#[test]
fn a_stale_synced_read() {
    // Reading version 1 after the compare-and-set to version 2 returned.
    let report = planted(|h| {
        h.registers.push(op(
            0,
            Input::Read,
            Output::Read(register(1, 1)),
            2_100_000,
            2_110_000,
        ));
    });
    assert_only(&report, "register-not-linearizable", &[]);
    assert!(matches!(
        report.violations[..],
        [Violation::RegisterNotLinearizable { key: 0, .. }]
    ));
}

#[test]
fn finals_that_lost_an_acknowledged_write() {
    // Every member ends before the last acknowledged write: no read at the end could see that.
    let report = planted(|h| {
        for member in &mut h.finals {
            member.registers.insert(0, register(1, 1));
        }
    });
    assert_only(&report, "final-register-impossible", &[]);
    assert_eq!(report.violations.len(), 3);
}

#[test]
fn a_read_going_back_in_one_session() {
    // Session 1 saw version 2 of key 0, then version 1.
    let report = planted(|h| h.observations.push(seen(1, S1, 0, 1, 2_020_000)));
    assert_only(&report, "read-went-back", &[]);
}

#[test]
fn an_expiry_soon_after_a_write() {
    // Expired 0.3 s after a write, with a 6 s timeout.
    let report = planted(|h| {
        h.marker_deletions[1].seen_us = 2_800_000;
        h.sessions[2].end = SessionEnd::Expired { seen_us: 2_900_000 };
    });
    assert_only(&report, "early-expiry", &[]);
    assert!(matches!(
        report.violations[..],
        [Violation::EarlyExpiry {
            session: S3,
            heard_us: 2_500_000,
            expired_us: 2_800_000,
            ..
        }]
    ));
}

#[test]
fn an_expiry_within_the_slack_is_on_time() {
    // Half the slack short of the timeout after the last touch is still on time.
    let report = planted(|h| {
        h.marker_deletions[1].seen_us = 2_500_000 + TIMEOUT_US - CONFIG.expiry_slack_us / 2;
    });
    assert!(report.passed(), "{report}");
}

#[test]
fn a_marker_check_that_says_absent() {
    // Session 1's own synced exists finds its marker gone.
    let report = planted(|h| {
        h.sessions[0].heard_us.push(5_000_000);
        h.marker_checks.push(MarkerCheck {
            session: S1,
            call_us: 5_000_000,
            ret_us: 5_010_000,
            present: false,
        });
    });
    assert_only(&report, "marker-absent", &[]);
}

#[test]
fn a_session_heard_from_after_its_marker_was_deleted() {
    // Session 3 got an answer after an observer saw its marker go.
    let report = planted(|h| h.sessions[2].heard_us.push(8_650_000));
    assert_only(&report, "ephemeral-gone-while-live", &[]);
}

#[test]
fn a_marker_left_on_a_member() {
    // m2 still holds the marker of expired session 3.
    let report = planted(|h| h.finals[1].markers.push("/markers/3".to_string()));
    assert_only(&report, "ephemeral-outlived-session", &["members-differ"]);
}

#[test]
fn a_lock_node_left_behind() {
    // m1 still has a node in the lock's queue after every contender stopped.
    let report = planted(|h| {
        h.finals[0].lock_queues.insert(
            LOCK.to_string(),
            vec![QueueNode {
                name: "_c_1-lock-0000000007".to_string(),
                owner: 2,
                czxid: 70,
            }],
        );
    });
    assert_only(&report, "lock-node-left-behind", &[]);
}

#[test]
fn two_overlapping_grants() {
    // Process 3 is granted the lock before process 1 began its release.
    let report = planted(|h| h.grants[1].granted_us = 1_350_000);
    assert_only(&report, "two-holders", &[]);
}

#[test]
fn a_token_that_goes_down() {
    // A grant after token 120 carries token 110.
    let report = planted(|h| h.grants.push(grant(2, S2, 110, 2_800_000, Some(2_900_000))));
    assert_only(&report, "token-not-increasing", &[]);
}

#[test]
fn a_stale_store_write_accepted() {
    // The store takes token 120 after it took 200.
    let report = planted(|h| h.store_writes[3].accepted = true);
    assert_only(&report, "stale-write-accepted", &[]);
}

#[test]
fn a_duplicate_child() {
    // A later create is acknowledged with a name already given.
    let report = planted(|h| h.children.push(child(3, 300_000, 310_000, Some(3))));
    assert_only(&report, "duplicate-child", &[]);
}

#[test]
fn children_out_of_order() {
    // Sequence 2 acknowledged to a create called after sequence 3 returned.
    let report = planted(|h| h.children.push(child(2, 400_000, 410_000, Some(2))));
    assert_only(&report, "children-out-of-order", &[]);
}

#[test]
fn a_child_missing_from_one_member() {
    // m3 lacks an acknowledged child.
    let report = planted(|h| h.finals[2].children.retain(|c| *c != name(1)));
    assert_only(&report, "child-lost", &["members-differ"]);
}

#[test]
fn members_that_differ() {
    // m2 holds a child the others do not (one no check needs: only the disagreement shows).
    let report = planted(|h| h.finals[1].children.push(name(4)));
    assert_only(&report, "members-differ", &[]);
}

#[test]
fn a_history_survives_a_json_round_trip() {
    // What the fault run writes is what the checker reads.
    let history = clean();
    let json = serde_json::to_string(&history).expect("a history serializes");
    let back: History = serde_json::from_str(&json).expect("and deserializes");
    assert_eq!(back, history);
}
