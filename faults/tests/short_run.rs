//! The fault suite's short run, part of `./scripts/test.sh`: one seed of
//! partitions, pauses and kill -9 against three real `arbord` members (the
//! build under test), every promise checked; and a planted early expiry,
//! which the same checks must catch, so a pass means something.
//! `scripts/faults.sh` runs the long suite.
//!
//! Runs as root (it makes network namespaces), as CI does.

use std::path::PathBuf;
use std::time::Duration;

use arbor_faults::arbor::ArborOptions;
use arbor_faults::plant::Plant;
use arbor_faults::run::{run, RunOptions, RunOutcome};
use arbor_faults::target::TargetKind;

/// How long the short run plans faults for: every kind of fault once or
/// twice.
const FAULTS_FOR: Duration = Duration::from_secs(60);

fn options(seed: u64, faults_for: Duration, plant: Option<Plant>) -> RunOptions {
    let dir = std::env::temp_dir().join(format!("arbor-faults-{}-{seed}", std::process::id()));
    RunOptions {
        seed,
        target: TargetKind::Arbor(ArborOptions {
            binary: arbor_tests::arbord_path(),
            tick_ms: 2000,
        }),
        faults_for,
        session_timeout: Duration::from_secs(6),
        register_workers: 3,
        lock_workers: 2,
        dir,
        plant,
    }
}

fn seed() -> u64 {
    let seed = std::env::var("ARBOR_FAULTS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u32>)
        .into();
    println!("ARBOR_FAULTS_SEED={seed}");
    seed
}

fn kinds(outcome: &RunOutcome) -> Vec<&'static str> {
    outcome.report.violations.iter().map(|v| v.kind()).collect()
}

fn cleanup(dir: PathBuf) {
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_short_run_keeps_every_promise_and_a_planted_expiry_is_caught() {
    arbor_faults::lab::Lab::check_available().expect("the fault suite runs as root with ip netns");
    let seed = seed();
    // The control first: an operator's eviction of a live session is an
    // early expiry, and the checks must say so.
    let planted = run(&options(
        seed,
        Duration::from_secs(12),
        Some(Plant::EarlyExpiry),
    ))
    .expect("the planted run completes");
    let found = kinds(&planted);
    assert!(
        found.contains(&"early-expiry")
            && found.iter().all(|kind| Plant::EarlyExpiry.explains(kind)),
        "the planted early expiry was not caught alone: {}",
        planted.report
    );
    cleanup(planted.dir);
    let outcome = run(&options(seed, FAULTS_FOR, None)).expect("the run completes");
    assert!(
        outcome.report.violations.is_empty(),
        "seed {seed} broke a promise (replay: ARBOR_FAULTS_SEED={seed}; records in {}):\n{}",
        outcome.dir.display(),
        outcome.report
    );
    assert!(
        outcome.events.len() >= 5,
        "too few faults: {:?}",
        outcome.events
    );
    cleanup(outcome.dir);
}
