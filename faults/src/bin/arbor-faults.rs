//! `arbor-faults`: runs the real-process fault suite over seeds and sums
//! up what it found (see the `arbor_faults` crate docs). Must run as root
//! (it makes network namespaces).
//!
//! ```text
//! arbor-faults --seeds 20                          # 20 random seeds against target/release/arbord
//! arbor-faults --seed 1234                         # replay one seed
//! arbor-faults --target zookeeper --seeds 5        # the control: Apache ZooKeeper
//! arbor-faults --plant early-expiry --seeds 1      # a check shown to fail
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _};
use arbor_faults::arbor::ArborOptions;
use arbor_faults::failover::quantile;
use arbor_faults::lab::Lab;
use arbor_faults::nemesis::FaultKind;
use arbor_faults::plant::Plant;
use arbor_faults::run::{run, RunOptions, RunOutcome};
use arbor_faults::target::TargetKind;
use arbor_faults::zookeeper::{ZkEnsemble, ZkTiming};
use clap::{Parser, ValueEnum};

#[derive(Parser)]
#[command(
    about = "Arbor's real-process fault suite: partitions, pauses and kill -9 against real members, with the promises users rely on checked"
)]
struct Args {
    /// What to run against.
    #[arg(long, value_enum, default_value_t = Which::Arbor)]
    target: Which,
    /// The arbord binary.
    #[arg(long, default_value = "target/release/arbord")]
    arbord: PathBuf,
    /// Random seeds to run (each printed, to replay with --seed).
    #[arg(long, default_value_t = 1)]
    seeds: u32,
    /// Run these seeds instead (repeatable).
    #[arg(long)]
    seed: Vec<u64>,
    /// Seconds of faults per seed.
    #[arg(long, default_value_t = 90)]
    faults_for: u64,
    /// The workload's session timeout.
    #[arg(long, default_value_t = 6000)]
    session_timeout_ms: u64,
    /// Arbor's tick.
    #[arg(long, default_value_t = 2000)]
    tick_ms: u32,
    /// ZooKeeper's timing: as Debian ships it, or tuned.
    #[arg(long, value_enum, default_value_t = ZkProfile::Shipped)]
    zk_timing: ZkProfile,
    /// Register workers per protocol.
    #[arg(long, default_value_t = 4)]
    register_workers: u32,
    /// Lock workers per protocol.
    #[arg(long, default_value_t = 3)]
    lock_workers: u32,
    /// Plant a fault the checks must catch: early-expiry, stale-read or
    /// dropped-child.
    #[arg(long)]
    plant: Option<Plant>,
    /// Where runs keep their members' data, logs and records.
    #[arg(long, default_value = "target/faults")]
    dir: PathBuf,
    /// Run nothing: check the history a run left in this directory again
    /// (with --tick-ms as it ran).
    #[arg(long, value_name = "RUN_DIR")]
    recheck: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Which {
    Arbor,
    Zookeeper,
}

#[derive(Clone, Copy, ValueEnum)]
enum ZkProfile {
    Shipped,
    Tuned,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "arbor_faults=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let result = match &args.recheck {
        Some(dir) => recheck(dir, args.tick_ms),
        None => suite(args),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("arbor-faults: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// Checks a recorded history again; whether it passed.
fn recheck(dir: &std::path::Path, tick_ms: u32) -> anyhow::Result<bool> {
    let path = dir.join(arbor_faults::run::HISTORY_FILE);
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let history: arbor_check::History =
        serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
    let report = arbor_check::check(&history, &arbor_faults::run::check_config(tick_ms));
    println!("{report}");
    Ok(report.violations.is_empty())
}

/// Runs every seed; whether the suite passed.
fn suite(args: Args) -> anyhow::Result<bool> {
    Lab::check_available().context("this machine cannot run the fault suite")?;
    let target = target(&args)?;
    if matches!(args.plant, Some(Plant::EarlyExpiry)) && matches!(args.target, Which::Zookeeper) {
        bail!("early-expiry is planted through Arbor's eviction; ZooKeeper has none");
    }
    let seeds: Vec<u64> = match args.seed.is_empty() {
        true => (0..args.seeds)
            .map(|_| rand::random::<u32>().into())
            .collect(),
        false => args.seed.clone(),
    };
    let mut outcomes = Vec::new();
    for seed in seeds {
        let options = RunOptions {
            seed,
            target: target.clone(),
            faults_for: Duration::from_secs(args.faults_for),
            session_timeout: Duration::from_millis(args.session_timeout_ms),
            register_workers: args.register_workers,
            lock_workers: args.lock_workers,
            dir: args.dir.join(format!("{}-{seed}", target.name())),
            plant: args.plant,
        };
        println!("seed {seed}: {} ...", target.name());
        let outcome = run(&options).with_context(|| format!("seed {seed}"))?;
        print_run(&outcome, args.plant);
        outcomes.push(outcome);
    }
    Ok(summary(&outcomes, args.plant))
}

fn target(args: &Args) -> anyhow::Result<TargetKind> {
    Ok(match args.target {
        Which::Arbor => {
            let binary = std::fs::canonicalize(&args.arbord).with_context(|| {
                format!(
                    "{} not found: build it (cargo build --release -p arbor-server) or give --arbord",
                    args.arbord.display()
                )
            })?;
            TargetKind::Arbor(ArborOptions {
                binary,
                tick_ms: args.tick_ms,
            })
        }
        Which::Zookeeper => {
            ZkEnsemble::check_installed()?;
            TargetKind::ZooKeeper(match args.zk_timing {
                ZkProfile::Shipped => ZkTiming::shipped(),
                ZkProfile::Tuned => ZkTiming::tuned(),
            })
        }
    })
}

/// Whether a run passed: no violation, or with a plant, the planted kind
/// and nothing the plant does not explain.
fn passed(outcome: &RunOutcome, plant: Option<Plant>) -> bool {
    let kinds: Vec<&str> = outcome.report.violations.iter().map(|v| v.kind()).collect();
    match plant {
        None => kinds.is_empty(),
        Some(plant) => {
            kinds.contains(&plant.required()) && kinds.iter().all(|kind| plant.explains(kind))
        }
    }
}

fn print_run(outcome: &RunOutcome, plant: Option<Plant>) {
    let verdict = if passed(outcome, plant) {
        "PASS"
    } else {
        "FAIL"
    };
    println!(
        "seed {} {}: {verdict}: {} faults, {} violations (records in {})",
        outcome.seed,
        outcome.target,
        outcome.events.len(),
        outcome.report.violations.len(),
        outcome.dir.display()
    );
    for violation in outcome.report.violations.iter().take(20) {
        println!("  {violation}");
    }
    println!("  {}", outcome.report.counts);
}

/// Prints the totals; whether every run passed.
fn summary(outcomes: &[RunOutcome], plant: Option<Plant>) -> bool {
    let mut faults: BTreeMap<String, usize> = BTreeMap::new();
    let mut violations: BTreeMap<&str, usize> = BTreeMap::new();
    let mut failovers: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut no_write = 0;
    for outcome in outcomes {
        for event in &outcome.events {
            *faults.entry(format!("{:?}", event.kind)).or_default() += 1;
        }
        for violation in &outcome.report.violations {
            *violations.entry(violation.kind()).or_default() += 1;
        }
        for failover in &outcome.failovers {
            match failover.first_write_ms {
                Some(ms) => failovers.entry(group(failover.kind)).or_default().push(ms),
                None => no_write += 1,
            }
        }
    }
    let passed_runs = outcomes.iter().filter(|o| passed(o, plant)).count();
    println!("\n{passed_runs} of {} runs passed", outcomes.len());
    println!("faults: {faults:?}");
    println!("violations: {violations:?}");
    for (group, values) in &failovers {
        println!(
            "first write on a healthy member after {group}: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms over {}",
            quantile(values, 0.5).unwrap_or(f64::NAN),
            quantile(values, 0.99).unwrap_or(f64::NAN),
            quantile(values, 1.0).unwrap_or(f64::NAN),
            values.len()
        );
    }
    if no_write > 0 {
        println!("{no_write} leader faults saw no write before the ensemble served again");
    }
    passed_runs == outcomes.len()
}

fn group(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::PartitionLeader => "a leader partition",
        FaultKind::PauseLeaderShort | FaultKind::PauseLeaderLong => "a leader pause",
        FaultKind::KillLeader => "kill -9 of the leader",
        _ => "other faults",
    }
}
