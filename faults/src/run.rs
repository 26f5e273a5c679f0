//! One run of the suite, from an empty lab to a verdict:
//!
//! 1. a lab of three hosts and the target ensemble in it;
//! 2. the workload ([`crate::workload`]) on every protocol the target
//!    speaks, warmed up;
//! 3. the nemesis's seeded schedule ([`crate::nemesis`]);
//! 4. the workload stops, every fault is healed, the ensemble serves
//!    again, and after a session timeout (every session that ended has
//!    expired by then) each member's final state is read;
//! 5. the checks ([`arbor_check::check`]) and the failover figures.
//!
//! The history, the schedule, the events and the report are written to
//! the run's directory, so a failing seed can be studied and replayed.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arbor_check::{CheckConfig, Report};
use arbor_client::recipes::Fence;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::client::{Failure, Kind, Protocol, Refusal, Session};
use crate::failover::{self, Failover};
use crate::lab::Lab;
use crate::nemesis::{self, Event};
use crate::plant::Plant;
use crate::record::{Recorder, RunClock};
use crate::target::{Target, TargetKind};
use crate::workload::{self, probes, Context, Servers, Tracked};

/// How long the workload runs before the first fault.
const WARM_UP: Duration = Duration::from_secs(3);
/// How long the ensemble may take to serve after it starts or is healed.
const SERVING_TIMEOUT: Duration = Duration::from_secs(60);

/// What one run does.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub seed: u64,
    pub target: TargetKind,
    /// How long the nemesis plans faults for.
    pub faults_for: Duration,
    pub session_timeout: Duration,
    /// Register workers and lock workers per protocol.
    pub register_workers: u32,
    pub lock_workers: u32,
    /// Where the members keep their data and logs, and the run its records.
    pub dir: PathBuf,
    pub plant: Option<Plant>,
}

/// What a run found.
pub struct RunOutcome {
    pub seed: u64,
    pub target: &'static str,
    pub events: Vec<Event>,
    pub report: Report,
    pub failovers: Vec<Failover>,
    pub dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the lab: {0}")]
    Lab(#[from] crate::lab::LabError),
    #[error("the target ensemble: {0}")]
    Target(String),
    #[error("the workload's nodes could not be made: {0}")]
    Setup(Failure),
    #[error("cannot write the run's records in {dir}: {source}")]
    Records {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("the async runtime: {0}")]
    Runtime(std::io::Error),
}

/// Runs once; see the module docs.
pub fn run(options: &RunOptions) -> Result<RunOutcome, RunError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    // Absolute: the servers run elsewhere than here (ZooKeeper refuses a
    // relative data directory).
    let dir = std::fs::create_dir_all(&options.dir)
        .and_then(|()| std::path::absolute(&options.dir))
        .map_err(|source| RunError::Records {
            dir: options.dir.clone(),
            source,
        })?;
    let options = &RunOptions {
        dir,
        ..options.clone()
    };
    let lab = Lab::new(3)?;
    let mut target =
        Target::start(&options.target, &lab, &options.dir).map_err(RunError::Target)?;
    let servers = target.servers();
    let clock = RunClock::start();
    let recorder = Recorder::new(clock);
    let stop = CancellationToken::new();
    let context = Context {
        recorder: recorder.clone(),
        servers: servers.clone(),
        session_timeout: options.session_timeout,
        stop: stop.clone(),
    };
    runtime
        .block_on(setup(&servers, options.session_timeout))
        .map_err(RunError::Setup)?;
    let acks = probes::Acks::default();
    let (workers, helpers) = runtime.block_on(async { spawn(&context, options, &acks) });
    std::thread::sleep(WARM_UP);
    let plan = nemesis::schedule(options.seed, options.faults_for, options.session_timeout);
    info!(
        seed = options.seed,
        faults = plan.len(),
        "the nemesis begins"
    );
    let planted = options
        .plant
        .map(|plant| runtime.spawn(crate::plant::live(plant, context.clone())));
    let events = nemesis::run(&plan, &mut target, &lab, clock, options.seed, &stop);
    stop.cancel();
    let planted = planted.and_then(|planted| runtime.block_on(planted).ok().flatten());
    let open = runtime.block_on(finish(workers, helpers));
    lab.heal_all()?;
    if let Err(why) = target.wait_serving(SERVING_TIMEOUT) {
        warn!(%why, "the ensemble does not serve after the run");
    }
    // Every session that ended without its client closing it has expired
    // by now, everywhere.
    let tick = Duration::from_millis(u64::from(options.target.tick_ms()));
    std::thread::sleep(options.session_timeout + 2 * tick);
    let final_protocol = *servers.protocols().first().unwrap_or(&Protocol::ZooKeeper);
    runtime.block_on(workload::finals::record(&context, final_protocol));
    runtime.block_on(close_all(open));
    if let Some(session) = planted {
        runtime.block_on(session.close());
    }
    let mut history = recorder.take();
    if let Some(plant) = options.plant {
        crate::plant::in_history(plant, &mut history);
    }
    let failovers = failover::measure(&events, &acks.lock());
    let meta = serde_json::json!({
        "seed": options.seed,
        "target": options.target.name(),
        "started_unix_ms": clock.started_unix_ms(),
    });
    write_record(&options.dir, "run.json", meta.to_string())?;
    write_record(&options.dir, "probe_acks.json", to_json(&*acks.lock()))?;
    write_records(options, &plan, &events, &history, &failovers)?;
    let report = arbor_check::check(&history, &check_config(options.target.tick_ms()));
    write_record(&options.dir, "report.txt", report.to_string())?;
    drop(target);
    Ok(RunOutcome {
        seed: options.seed,
        target: options.target.name(),
        events,
        report,
        failovers,
        dir: options.dir.clone(),
    })
}

/// Makes the nodes the workload uses (those already there are fine).
async fn setup(servers: &Servers, session_timeout: Duration) -> Result<(), Failure> {
    let protocol = Protocol::ZooKeeper;
    let session = Session::open(protocol, &servers.all(protocol), session_timeout).await?;
    let mut paths = vec![
        workload::ROOT.to_owned(),
        workload::SEQUENTIAL_PARENT.to_owned(),
        workload::MARKERS.to_owned(),
        workload::LOCKS.to_owned(),
    ];
    paths.extend(
        servers
            .protocols()
            .into_iter()
            .map(workload::locks::lock_path),
    );
    paths.extend((0..workload::REGISTERS).map(workload::register_path));
    paths.extend((1..=servers.members()).map(probes::probe_path));
    for path in paths {
        match session.create(&path, b"", Kind::Persistent).await {
            Ok(_) | Err(Failure::Refused(Refusal::NodeExists)) => {}
            Err(failure) => return Err(failure),
        }
    }
    session.close().await;
    Ok(())
}

/// Starts every task of the workload: the workers (whose last sessions
/// come back when they stop) and the observers and probes.
fn spawn(
    context: &Context,
    options: &RunOptions,
    acks: &probes::Acks,
) -> (JoinSet<Option<Tracked>>, JoinSet<()>) {
    let mut workers = JoinSet::new();
    let mut helpers = JoinSet::new();
    let protocols = context.servers.protocols();
    let mut process = 0u32;
    for &protocol in &protocols {
        for _ in 0..options.register_workers {
            process += 1;
            let run = workload::registers::run(context.clone(), process, protocol, options.seed);
            workers.spawn(run);
        }
        let fence = Arc::new(Fence::new());
        for _ in 0..options.lock_workers {
            process += 1;
            let run = workload::locks::run(
                context.clone(),
                process,
                protocol,
                fence.clone(),
                options.seed,
            );
            workers.spawn(run);
        }
    }
    // Observers and probes: the target's own protocol first (Arbor's for
    // Arbor); probes speak ZooKeeper's on both, so their figures compare.
    let observed = protocols[0];
    for member in 1..=context.servers.members() {
        helpers.spawn(workload::observers::run(context.clone(), member, observed));
        let probe = probes::run(context.clone(), member, Protocol::ZooKeeper, acks.clone());
        helpers.spawn(probe);
    }
    (workers, helpers)
}

/// Waits for every task to stop; the workers' open sessions.
async fn finish(mut workers: JoinSet<Option<Tracked>>, mut helpers: JoinSet<()>) -> Vec<Tracked> {
    let mut open = Vec::new();
    while let Some(done) = workers.join_next().await {
        if let Ok(Some(tracked)) = done {
            open.push(tracked);
        }
    }
    while helpers.join_next().await.is_some() {}
    open
}

async fn close_all(open: Vec<Tracked>) {
    for tracked in open {
        tracked.session.close().await;
    }
}

/// What the checks allow for a target with `tick_ms`.
pub fn check_config(tick_ms: u32) -> CheckConfig {
    CheckConfig {
        // Followers touch their sessions at the leader every half tick
        // (ZooKeeper's default; Arbor's at most): a session heard by a
        // member just before it stopped may be that much late there.
        expiry_slack_us: u64::from(tick_ms) * 1000 / 2,
    }
}

/// The records of a run, written before the checks (which may take a
/// while), so that a run can be studied or checked again.
fn write_records(
    options: &RunOptions,
    plan: &[nemesis::Planned],
    events: &[Event],
    history: &arbor_check::History,
    failovers: &[Failover],
) -> Result<(), RunError> {
    write_record(&options.dir, "schedule.json", to_json(plan))?;
    write_record(&options.dir, "events.json", to_json(events))?;
    write_record(&options.dir, HISTORY_FILE, to_json(history))?;
    write_record(&options.dir, "failovers.json", to_json(failovers))
}

/// The history's file in a run's directory.
pub const HISTORY_FILE: &str = "history.json";

fn write_record(dir: &std::path::Path, name: &str, text: String) -> Result<(), RunError> {
    std::fs::write(dir.join(name), text).map_err(|source| RunError::Records {
        dir: dir.to_owned(),
        source,
    })
}

fn to_json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|err| format!("\"{err}\""))
}
