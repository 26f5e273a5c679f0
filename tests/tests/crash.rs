//! Crash recovery: `arbord` runs as a child process while several clients
//! write, is killed with SIGKILL at a random moment, and is restarted on the
//! same data directory, over and over. After every restart each acknowledged
//! write is there, nothing that was never requested is, and zxids only grow
//! across all the runs.
//!
//! The default test runs 20 cycles; the long one runs 500:
//!
//! ```text
//! cargo build -p arbor-server
//! cargo test -p arbor-tests --test crash -- --ignored
//! ```
//!
//! `ARBOR_CRASH_CYCLES=N` sets the number of cycles of whichever test runs.
//! The random choices (how long the server lives, which writes the clients
//! make) come from a seed printed at the start; `ARBOR_CRASH_SEED=S` replays
//! them (the timing of the kill against the writes cannot be replayed
//! exactly). A failed run keeps its data directory for `arbord --verify`.
//!
//! What the model allows: a write answered `Ok` is acknowledged and must
//! survive. A write whose call failed (the server was killed under it) may or
//! may not have landed; the first restart after it decides, and from then on
//! what that restart showed must stay, as a client may have read it.
//!
//! Layout: `/crash/counter-w{worker}` is each worker's counter, set again and
//! again; `/crash/c{cycle}/w{worker}/{i}` are its unique creates. The cycle
//! and worker directories keep every listing short (see [`STATS_LISTING_MAX`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arbor_client::{Client, ClientOptions, CreateMode, Error, Stat, Zxid};
use arbor_tests::{fresh_data_dir, TestServer, ANSWER_TIMEOUT};
use futures_util::stream::{self, StreamExt};
use tokio::task::JoinHandle;

/// Concurrent writing clients per cycle.
const WORKERS: usize = 4;
const DEFAULT_CYCLES: usize = 20;
const LONG_CYCLES: usize = 500;
/// How long the server serves the writers before it is killed, in ms.
const KILL_AFTER_MS: RangeInclusive<u64> = 30..=300;
/// Frequent snapshots, and so frequent log purging.
const SERVER_FLAGS: &[&str] = &[
    "--snap-count",
    "50",
    "--snap-tree-percent",
    "0",
    "--snap-retain",
    "2",
];
const ROOT: &str = "/crash";
const SESSION_TIMEOUT: Duration = Duration::from_millis(4000);
/// Nodes whose data was already checked once that each verification reads
/// again, chosen at random (the final verification reads them all).
const RESAMPLED: usize = 64;
const READS_IN_FLIGHT: usize = 64;
/// Directories with at most this many children are listed with their stats,
/// longer ones by name only, so no reply is large. (A decode limit that
/// ignores in-memory expansion, as `arbor_protocol::codec` had, refuses a
/// listing of 683 to about 1,000 children with stats: 96 bytes each in memory
/// for about 60 on the wire. The connection is lost.)
const STATS_LISTING_MAX: usize = 500;
const VERIFY_TIMEOUT: Duration = Duration::from_secs(120);

// Proves that through 20 kill -9 and restart cycles under concurrent writes
// every acknowledged write survives, nothing unrequested appears, and zxids
// only grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_write_survives_kill_9() {
    crash_cycles(cycles_from_env(DEFAULT_CYCLES)).await;
}

// Proves the same through 500 cycles:
// `cargo test -p arbor-tests --test crash -- --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: 500 kill -9 cycles; run with `cargo test -p arbor-tests --test crash -- --ignored`"]
async fn long_crash_run() {
    crash_cycles(cycles_from_env(LONG_CYCLES)).await;
}

async fn crash_cycles(cycles: usize) {
    assert!(cycles > 0, "at least one cycle");
    let seed = seed_from_env();
    let data_dir = fresh_data_dir();
    println!(
        "crash test: {cycles} cycles, seed {seed} (ARBOR_CRASH_SEED={seed} replays it), data dir {}",
        data_dir.display()
    );
    let started = Instant::now();
    let mut run = Run {
        seed,
        cycle: 0,
        data_dir: data_dir.clone(),
    };
    let mut rng = Rng::new(seed);
    let mut model = Model::new();
    let mut process: Option<TestServer> = None;

    for cycle in 0..cycles {
        run.cycle = cycle;
        let server = start_or_restart(&mut process, &data_dir);
        let verifier = connect(&run, server).await;
        let mut zxids = CycleZxids::new(&model);
        verify(&run, &verifier, &mut model, &mut rng, false).await;
        set_up(&run, &verifier, &mut model, &mut zxids).await;

        let killed = Arc::new(AtomicBool::new(false));
        let mut writers = Vec::with_capacity(WORKERS);
        for worker in 0..WORKERS {
            let client = connect(&run, server).await;
            let choices = Rng::new(seed ^ ((cycle as u64) << 8) ^ worker as u64);
            let next_value = model.counters[worker].next;
            writers.push(tokio::spawn(write_until_failure(
                client,
                worker,
                cycle,
                next_value,
                choices,
                killed.clone(),
            )));
        }
        let lifetime = rng.in_range(&KILL_AFTER_MS);
        tokio::time::sleep(Duration::from_millis(lifetime)).await;
        // Set before the kill: an error seen while it is unset is the
        // server's, not the kill's.
        killed.store(true, Ordering::SeqCst);
        tokio::task::block_in_place(|| server.kill());

        let mut reports = Vec::with_capacity(WORKERS);
        for writer in writers {
            reports.push(finish(&run, writer).await);
        }
        zxids.saw(verifier.last_zxid());
        drop(verifier);
        fold(&run, &mut model, &mut zxids, reports);
        model.finish_cycle(zxids);
    }

    run.cycle = cycles;
    let server = start_or_restart(&mut process, &data_dir);
    let verifier = connect(&run, server).await;
    verify(&run, &verifier, &mut model, &mut rng, true).await;
    drop(verifier);

    let snapshots = count_files(&data_dir.join("snapshots"));
    let logs = count_files(&data_dir.join("log"));
    println!(
        "crash test: {cycles} kill -9 cycles in {:.1} s: {} acknowledged writes, {} maybe-writes \
         ({} landed, {} lost), {} nodes, {snapshots} snapshots and {logs} log files at the end; seed {seed}",
        started.elapsed().as_secs_f64(),
        model.acked,
        model.maybe,
        model.maybe_landed,
        model.maybe_lost,
        model.present_nodes(),
    );
    drop(process);
    let _ = std::fs::remove_dir_all(&data_dir);
}

/// Where a failure happened, for every message: enough to replay and inspect.
struct Run {
    seed: u64,
    cycle: usize,
    data_dir: PathBuf,
}

impl Run {
    fn fail(&self, what: fmt::Arguments<'_>) -> ! {
        panic!(
            "crash test seed {} cycle {} (data dir {} is kept): {what}",
            self.seed,
            self.cycle,
            self.data_dir.display()
        )
    }

    fn ok<T>(&self, what: &str, result: Result<T, Error>) -> T {
        result.unwrap_or_else(|err| self.fail(format_args!("{what}: {err}")))
    }
}

macro_rules! ensure {
    ($run:expr, $cond:expr, $($arg:tt)+) => {
        if !$cond {
            $run.fail(format_args!($($arg)+))
        }
    };
}

/// What the test knows the tree must, may and must not hold.
struct Model {
    /// The root, cycle and worker directories, all created with the server
    /// up: path → czxid.
    dirs: BTreeMap<String, Zxid>,
    /// The children of `/` before the test created anything.
    top_level: Option<BTreeSet<String>>,
    creates: BTreeMap<String, Created>,
    counters: Vec<Counter>,
    cycles: Vec<CycleRecord>,
    /// The newest acknowledged write.
    max_acked: Zxid,
    /// The newest zxid any client saw in a finished cycle.
    seen_before: Zxid,
    /// The epoch of the newest cycle that had an acknowledged write.
    last_epoch: Option<u64>,
    acked: usize,
    maybe: usize,
    maybe_landed: usize,
    maybe_lost: usize,
}

/// A unique path some create asked for.
struct Created {
    cycle: usize,
    data_len: u32,
    fate: Fate,
    data_checked: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Acknowledged, or shown by a restart: must be there, created at `czxid`.
    Present { czxid: Zxid, acknowledged: bool },
    /// The create failed in flight, and no restart has looked yet.
    Maybe,
    /// A restart showed the failed create did not land: must never appear.
    Absent,
}

/// A worker's counter node, which only that worker writes.
struct Counter {
    path: String,
    czxid: Zxid,
    /// Every value ever asked for.
    requested: BTreeSet<u64>,
    next: u64,
    /// The newest state known to be durable.
    floor: Option<CounterState>,
    /// A set that failed in flight after the floor, if any.
    pending: Option<PendingSet>,
}

#[derive(Debug, Clone, Copy)]
struct CounterState {
    value: u64,
    mzxid: Zxid,
    version: i32,
    source: Source,
}

#[derive(Debug, Clone, Copy)]
enum Source {
    Acknowledged { cycle: usize },
    ReadAfterRestart { cycle: usize },
}

#[derive(Debug, Clone, Copy)]
struct PendingSet {
    value: u64,
    cycle: usize,
}

/// What a finished cycle fixed about zxids.
struct CycleRecord {
    /// Every zxid seen before the cycle's server started is at most this.
    before: Zxid,
    /// The epoch of its acknowledged writes, if it had any.
    epoch: Option<u64>,
}

impl Model {
    fn new() -> Self {
        Model {
            dirs: BTreeMap::new(),
            top_level: None,
            creates: BTreeMap::new(),
            counters: (0..WORKERS)
                .map(|worker| Counter {
                    path: counter_path(worker),
                    czxid: 0,
                    requested: BTreeSet::new(),
                    next: 1,
                    floor: None,
                    pending: None,
                })
                .collect(),
            cycles: Vec::new(),
            max_acked: 0,
            seen_before: 0,
            last_epoch: None,
            acked: 0,
            maybe: 0,
            maybe_landed: 0,
            maybe_lost: 0,
        }
    }

    fn finish_cycle(&mut self, zxids: CycleZxids) {
        self.cycles.push(CycleRecord {
            before: zxids.before,
            epoch: zxids.epoch,
        });
        self.max_acked = self.max_acked.max(zxids.max_acked);
        self.seen_before = self.seen_before.max(zxids.seen).max(zxids.max_acked);
        self.last_epoch = zxids.epoch.or(self.last_epoch);
    }

    fn present_nodes(&self) -> usize {
        let creates = self
            .creates
            .values()
            .filter(|c| matches!(c.fate, Fate::Present { .. }))
            .count();
        creates + self.counters.len() + self.dirs.len()
    }
}

/// The zxid checks of one cycle.
struct CycleZxids {
    before: Zxid,
    previous_epoch: Option<u64>,
    epoch: Option<u64>,
    seen: Zxid,
    max_acked: Zxid,
    acked: HashSet<Zxid>,
}

impl CycleZxids {
    fn new(model: &Model) -> Self {
        CycleZxids {
            before: model.seen_before,
            previous_epoch: model.last_epoch,
            epoch: None,
            seen: 0,
            max_acked: 0,
            acked: HashSet::new(),
        }
    }

    fn saw(&mut self, zxid: Zxid) {
        self.seen = self.seen.max(zxid);
    }

    /// An acknowledged write at `zxid`, answered with `reply_zxid`, by the
    /// client whose previous acknowledged write this cycle was at `previous`.
    fn acked(
        &mut self,
        run: &Run,
        write: &dyn fmt::Display,
        zxid: Zxid,
        reply_zxid: Zxid,
        previous: &mut Option<Zxid>,
    ) {
        ensure!(
            run,
            zxid > self.before,
            "{write} was acknowledged at zxid {zxid:#x}, not above {:#x}, the newest zxid seen before this restart",
            self.before
        );
        if let Some(previous) = *previous {
            ensure!(
                run,
                zxid > previous,
                "one client's acknowledged writes went back: {previous:#x}, then {zxid:#x} for {write}"
            );
        }
        ensure!(
            run,
            reply_zxid >= zxid,
            "{write} at zxid {zxid:#x} was answered with the older zxid {reply_zxid:#x}"
        );
        ensure!(
            run,
            self.acked.insert(zxid),
            "two acknowledged writes have zxid {zxid:#x}, the second {write}"
        );
        let epoch = zxid >> 32;
        match self.epoch {
            Some(current) => ensure!(
                run,
                epoch == current,
                "{write} at zxid {zxid:#x} has epoch {epoch}, while this run's writes had epoch {current}"
            ),
            None => {
                if let Some(previous_epoch) = self.previous_epoch {
                    ensure!(
                        run,
                        epoch > previous_epoch,
                        "{write} at zxid {zxid:#x} has epoch {epoch}, not above {previous_epoch}, the epoch of the previous run's writes"
                    );
                }
                self.epoch = Some(epoch);
            }
        }
        *previous = Some(zxid);
        self.max_acked = self.max_acked.max(zxid);
        self.saw(reply_zxid);
    }
}

/// Creates the cycle's directories (and, in the first cycle, the root and
/// the counters) with the server up: these must work.
async fn set_up(run: &Run, client: &Client, model: &mut Model, zxids: &mut CycleZxids) {
    let mut previous = None;
    let mut dirs = Vec::new();
    if run.cycle == 0 {
        dirs.push(ROOT.to_owned());
    }
    dirs.push(cycle_dir(run.cycle));
    dirs.extend((0..WORKERS).map(|worker| worker_dir(run.cycle, worker)));
    for dir in dirs {
        let (_, stat) = run.ok(
            &format!("create {dir}"),
            client
                .create_with_stat(&dir, Vec::new(), CreateMode::Persistent)
                .await,
        );
        let what = format!("create {dir}");
        zxids.acked(run, &what, stat.czxid, client.last_zxid(), &mut previous);
        model.acked += 1;
        model.dirs.insert(dir, stat.czxid);
    }
    if run.cycle != 0 {
        return;
    }
    for counter in &mut model.counters {
        let stat = match client
            .create_with_stat(&counter.path, b"0".to_vec(), CreateMode::Persistent)
            .await
        {
            Ok((_, stat)) => {
                let what = format!("create {} = 0", counter.path);
                zxids.acked(run, &what, stat.czxid, client.last_zxid(), &mut previous);
                model.acked += 1;
                stat
            }
            Err(Error::NodeExists { .. }) => {
                // Only a create that was sent twice could find it; take it if
                // it holds what was asked for.
                let (data, stat) = run.ok(&counter.path, client.get_data(&counter.path).await);
                ensure!(
                    run,
                    data == b"0",
                    "{} already existed with {data:?}",
                    counter.path
                );
                stat
            }
            Err(err) => run.fail(format_args!("create {}: {err}", counter.path)),
        };
        counter.czxid = stat.czxid;
        counter.requested.insert(0);
        counter.floor = Some(CounterState {
            value: 0,
            mzxid: stat.mzxid,
            version: stat.version,
            source: Source::Acknowledged { cycle: run.cycle },
        });
    }
}

/// One write a worker asked for.
#[derive(Debug)]
enum Write {
    Create { path: String },
    Set { path: String, value: u64 },
}

impl fmt::Display for Write {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Write::Create { path } => write!(f, "create {path}"),
            Write::Set { path, value } => write!(f, "set {path} = {value}"),
        }
    }
}

enum Outcome {
    Acked { stat: Stat, reply_zxid: Zxid },
    Failed { error: Error, after_kill: bool },
}

/// Everything one worker did in one cycle, in order.
struct Report {
    worker: usize,
    writes: Vec<(Write, Outcome)>,
    next_value: u64,
    last_zxid: Zxid,
}

/// Writes one request at a time (so a client's acknowledged writes are in
/// order) until a call fails, which ends the client: it never retries.
async fn write_until_failure(
    client: Client,
    worker: usize,
    cycle: usize,
    mut next_value: u64,
    mut rng: Rng,
    killed: Arc<AtomicBool>,
) -> Report {
    let counter = counter_path(worker);
    let mut writes = Vec::new();
    let mut created = 0;
    loop {
        let write = if rng.below(2) == 0 {
            created += 1;
            Write::Create {
                path: format!("{}/{}", worker_dir(cycle, worker), created - 1),
            }
        } else {
            next_value += 1;
            Write::Set {
                path: counter.clone(),
                value: next_value - 1,
            }
        };
        let result = match &write {
            Write::Create { path } => client
                .create_with_stat(path, create_data(path), CreateMode::Persistent)
                .await
                .map(|(created, stat)| {
                    assert_eq!(&created, path, "a persistent create named another node");
                    stat
                }),
            Write::Set { path, value } => client.set_data(path, value.to_string(), None).await,
        };
        match result {
            Ok(stat) => {
                let reply_zxid = client.last_zxid();
                writes.push((write, Outcome::Acked { stat, reply_zxid }));
            }
            Err(error) => {
                let after_kill = killed.load(Ordering::SeqCst);
                writes.push((write, Outcome::Failed { error, after_kill }));
                break;
            }
        }
    }
    Report {
        worker,
        writes,
        next_value,
        last_zxid: client.last_zxid(),
    }
}

async fn finish(run: &Run, writer: JoinHandle<Report>) -> Report {
    match tokio::time::timeout(ANSWER_TIMEOUT, writer).await {
        Ok(Ok(report)) => report,
        Ok(Err(err)) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
        Ok(Err(err)) => run.fail(format_args!("a writer task ended: {err}")),
        Err(_) => run.fail(format_args!(
            "a writer was still waiting {ANSWER_TIMEOUT:?} after the kill"
        )),
    }
}

/// Adds what the writers did to the model, checking their zxids.
fn fold(run: &Run, model: &mut Model, zxids: &mut CycleZxids, reports: Vec<Report>) {
    for report in reports {
        zxids.saw(report.last_zxid);
        model.counters[report.worker].next = report.next_value;
        let mut previous = None;
        for (write, outcome) in report.writes {
            match (&write, outcome) {
                (Write::Create { path }, Outcome::Acked { stat, reply_zxid }) => {
                    let data_len = create_data(path).len() as u32;
                    ensure!(
                        run,
                        stat.czxid == stat.mzxid && is_new_node(&stat, data_len),
                        "{write} answered with {stat:?}; expected a new node of {data_len} bytes"
                    );
                    zxids.acked(run, &write, stat.czxid, reply_zxid, &mut previous);
                    model.acked += 1;
                    let fate = Fate::Present {
                        czxid: stat.czxid,
                        acknowledged: true,
                    };
                    insert_create(model, path.clone(), run.cycle, data_len, fate);
                }
                (Write::Set { value, .. }, Outcome::Acked { stat, reply_zxid }) => {
                    zxids.acked(run, &write, stat.mzxid, reply_zxid, &mut previous);
                    model.acked += 1;
                    let counter = &mut model.counters[report.worker];
                    counter.requested.insert(*value);
                    ensure!(
                        run,
                        stat.czxid == counter.czxid
                            && stat.data_length as usize == value.to_string().len(),
                        "{write} answered with {stat:?}; the counter was created at {:#x}",
                        counter.czxid
                    );
                    if let Some(floor) = counter.floor {
                        ensure!(
                            run,
                            *value > floor.value && stat.version > floor.version,
                            "{write} answered with version {} after {} at version {} ({})",
                            stat.version,
                            floor.value,
                            floor.version,
                            floor.source
                        );
                    }
                    counter.floor = Some(CounterState {
                        value: *value,
                        mzxid: stat.mzxid,
                        version: stat.version,
                        source: Source::Acknowledged { cycle: run.cycle },
                    });
                }
                (_, Outcome::Failed { error, after_kill }) => {
                    ensure!(
                        run,
                        after_kill,
                        "{write} failed while the server was up: {error}"
                    );
                    model.maybe += 1;
                    match write {
                        Write::Create { path } => {
                            let data_len = create_data(&path).len() as u32;
                            insert_create(model, path, run.cycle, data_len, Fate::Maybe);
                        }
                        Write::Set { value, .. } => {
                            let counter = &mut model.counters[report.worker];
                            counter.requested.insert(value);
                            counter.pending = Some(PendingSet {
                                value,
                                cycle: run.cycle,
                            });
                        }
                    }
                }
            }
        }
    }
}

/// Whether `stat` is that of a node created and never changed since, with
/// `data_len` bytes and no children.
fn is_new_node(stat: &Stat, data_len: u32) -> bool {
    stat.mzxid == stat.czxid
        && stat.version == 0
        && stat.data_length == data_len
        && stat.num_children == 0
}

fn insert_create(model: &mut Model, path: String, cycle: usize, data_len: u32, fate: Fate) {
    let created = Created {
        cycle,
        data_len,
        fate,
        data_checked: false,
    };
    let old = model.creates.insert(path, created);
    assert!(old.is_none(), "the test asked for a path twice");
}

/// Checks the restarted server against the model, and settles the writes
/// that failed in flight: from now on they must stay as this found them.
async fn verify(run: &Run, client: &Client, model: &mut Model, rng: &mut Rng, all_data: bool) {
    let checked = tokio::time::timeout(
        VERIFY_TIMEOUT,
        verify_now(run, client, model, rng, all_data),
    );
    if checked.await.is_err() {
        run.fail(format_args!(
            "verification took more than {VERIFY_TIMEOUT:?}"
        ));
    }
}

async fn verify_now(run: &Run, client: &Client, model: &mut Model, rng: &mut Rng, all_data: bool) {
    // The handshake's zxid: the server's newest, before any read.
    let recovered = client.last_zxid();
    ensure!(
        run,
        recovered >= model.max_acked,
        "the restarted server is at zxid {recovered:#x}, behind the acknowledged write at {:#x}",
        model.max_acked
    );
    ensure!(
        run,
        recovered >= model.seen_before,
        "the restarted server is at zxid {recovered:#x}, behind {:#x}, which a client saw before the kill",
        model.seen_before
    );

    let top: BTreeSet<String> = run
        .ok("list /", client.get_children("/").await)
        .into_iter()
        .collect();
    let root_name = &ROOT[1..];
    match &model.top_level {
        None => {
            ensure!(
                run,
                !top.contains(root_name),
                "{ROOT} exists in a fresh data directory: {top:?}"
            );
            model.top_level = Some(top);
        }
        Some(before) => {
            let mut expected = before.clone();
            if model.dirs.contains_key(ROOT) {
                expected.insert(root_name.to_owned());
            }
            ensure!(
                run,
                top == expected,
                "/ holds {top:?}; expected {expected:?}"
            );
        }
    }
    if model.dirs.is_empty() {
        return;
    }

    // Every directory is listed: what is there, with stats where short enough.
    let mut expected_children: HashMap<&str, usize> = HashMap::new();
    let paths = model
        .dirs
        .keys()
        .chain(model.creates.keys())
        .chain(model.counters.iter().map(|c| &c.path));
    for path in paths.filter(|path| path.as_str() != ROOT) {
        *expected_children.entry(parent(path)).or_default() += 1;
    }
    let listings = stream::iter(model.dirs.keys())
        .map(|dir| {
            let expected = expected_children.get(dir.as_str()).copied().unwrap_or(0);
            async move { (dir, list(client, dir, expected).await) }
        })
        .buffer_unordered(READS_IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
    let mut listed: HashMap<String, Option<Stat>> = HashMap::new();
    for (dir, listing) in listings {
        for (name, stat) in run.ok(&format!("list {dir}"), listing) {
            let path = format!("{dir}/{name}");
            if let Some(stat) = &stat {
                ensure!(
                    run,
                    stat.czxid <= recovered && stat.mzxid <= recovered,
                    "{path} has {stat:?}, newer than the server's zxid {recovered:#x}"
                );
            }
            let requested = model.dirs.contains_key(&path)
                || model.creates.contains_key(&path)
                || model.counters.iter().any(|c| c.path == path);
            ensure!(
                run,
                requested,
                "{path} exists, but no client ever asked for it ({stat:?})"
            );
            if let Some(old) = listed.insert(path.clone(), stat) {
                run.fail(format_args!("{path} is listed twice: {old:?}, {stat:?}"));
            }
        }
    }

    for (dir, &czxid) in model.dirs.iter().filter(|(dir, _)| dir.as_str() != ROOT) {
        match listed.get(dir) {
            None => run.fail(format_args!(
                "{dir} is missing: it was acknowledged at zxid {czxid:#x}"
            )),
            Some(Some(stat)) => ensure!(
                run,
                stat.czxid == czxid && stat.mzxid == czxid && stat.version == 0,
                "{dir} has {stat:?}; it was acknowledged at zxid {czxid:#x}"
            ),
            Some(None) => {}
        }
    }

    // (path, the czxid it must have, or None for a create that just landed)
    let mut to_read: Vec<(String, Option<Zxid>)> = Vec::new();
    let mut resample = Vec::new();
    for (path, created) in &mut model.creates {
        match (created.fate, listed.get(path)) {
            (
                Fate::Present {
                    czxid,
                    acknowledged,
                },
                Some(stat),
            ) => {
                if let Some(stat) = stat {
                    ensure!(
                        run,
                        stat.czxid == czxid && is_new_node(stat, created.data_len),
                        "{path} ({}) has {stat:?}; expected czxid {czxid:#x}, {} bytes, unchanged",
                        describe(acknowledged, created.cycle),
                        created.data_len
                    );
                }
                if all_data || !created.data_checked {
                    to_read.push((path.clone(), Some(czxid)));
                    created.data_checked = true;
                } else {
                    resample.push((path.clone(), Some(czxid)));
                }
            }
            (
                Fate::Present {
                    czxid,
                    acknowledged,
                },
                None,
            ) => run.fail(format_args!(
                "{path} is missing: it was {}, created at zxid {czxid:#x}",
                describe(acknowledged, created.cycle)
            )),
            // Settled by its read below.
            (Fate::Maybe, Some(_)) => to_read.push((path.clone(), None)),
            (Fate::Maybe, None) => {
                created.fate = Fate::Absent;
                model.maybe_lost += 1;
            }
            (Fate::Absent, Some(stat)) => run.fail(format_args!(
                "{path} has appeared ({stat:?}): its create failed in flight in cycle {} and an \
                 earlier restart showed it absent",
                created.cycle
            )),
            (Fate::Absent, None) => {}
        }
    }
    for _ in 0..RESAMPLED.min(resample.len()) {
        let pick = rng.below(resample.len() as u64) as usize;
        to_read.push(resample.swap_remove(pick));
    }

    for counter in &mut model.counters {
        let path = &counter.path;
        let Some(floor) = counter.floor else {
            ensure!(
                run,
                !listed.contains_key(path),
                "{path} exists, but was never created"
            );
            continue;
        };
        ensure!(
            run,
            listed.contains_key(path),
            "{path} is missing; it was created at zxid {:#x}",
            counter.czxid
        );
        let (data, stat) = run.ok(path, client.get_data(path).await);
        let value = std::str::from_utf8(&data)
            .ok()
            .and_then(|text| text.parse::<u64>().ok());
        let Some(value) = value else {
            run.fail(format_args!(
                "{path} holds {data:?}, which no client ever wrote"
            ));
        };
        ensure!(
            run,
            counter.requested.contains(&value),
            "{path} holds {value}, which no client ever wrote (the writes asked for 0..{})",
            counter.next
        );
        ensure!(
            run,
            stat.czxid == counter.czxid && stat.mzxid <= recovered,
            "{path} has {stat:?}; it was created at {:#x} and the server is at {recovered:#x}",
            counter.czxid
        );
        ensure!(
            run,
            value >= floor.value,
            "{path} holds {value}, older than {} ({})",
            floor.value,
            floor.source
        );
        if value == floor.value {
            ensure!(
                run,
                stat.mzxid == floor.mzxid && stat.version == floor.version,
                "{path} holds {value} with mzxid {:#x} version {}; it was written at {:#x} version {} ({})",
                stat.mzxid,
                stat.version,
                floor.mzxid,
                floor.version,
                floor.source
            );
            if counter.pending.take().is_some() {
                model.maybe_lost += 1;
            }
        } else {
            let Some(pending) = counter.pending.take() else {
                run.fail(format_args!(
                    "{path} holds {value}, newer than {} ({}), though no later write is in doubt",
                    floor.value, floor.source
                ));
            };
            ensure!(
                run,
                value == pending.value,
                "{path} holds {value}; only {} ({}) or {}, which failed in flight in cycle {}, may be there",
                floor.value,
                floor.source,
                pending.value,
                pending.cycle
            );
            let before = model.cycles[pending.cycle].before;
            ensure!(
                run,
                stat.mzxid > floor.mzxid && stat.mzxid > before && stat.version == floor.version + 1,
                "{path} holds {value} with {stat:?}; expected the one write after {} at {:#x} version {} ({})",
                floor.value,
                floor.mzxid,
                floor.version,
                floor.source
            );
            model.maybe_landed += 1;
        }
        counter.floor = Some(CounterState {
            value,
            mzxid: stat.mzxid,
            version: stat.version,
            source: Source::ReadAfterRestart { cycle: run.cycle },
        });
    }

    let reads = stream::iter(to_read)
        .map(|(path, czxid)| async move {
            let read = client.get_data(&path).await;
            (path, czxid, read)
        })
        .buffer_unordered(READS_IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
    for (path, czxid, read) in reads {
        let (data, stat) = run.ok(&format!("read {path}"), read);
        let expected = create_data(&path);
        if data != expected {
            let first_difference = data
                .iter()
                .zip(&expected)
                .position(|(a, b)| a != b)
                .unwrap_or(data.len().min(expected.len()));
            run.fail(format_args!(
                "{path} holds {} bytes that differ from the {} asked for, first at byte {first_difference}",
                data.len(),
                expected.len()
            ));
        }
        let created = model
            .creates
            .get_mut(&path)
            .expect("read only what was asked for");
        ensure!(
            run,
            is_new_node(&stat, created.data_len) && stat.czxid <= recovered,
            "{path} read back with {stat:?}; expected a node of {} bytes, unchanged, older than {recovered:#x}",
            created.data_len
        );
        match czxid {
            Some(czxid) => ensure!(
                run,
                stat.czxid == czxid,
                "{path} read back with {stat:?}; it was created at {czxid:#x}"
            ),
            None => {
                // A create that failed in flight, and landed.
                let record = &model.cycles[created.cycle];
                ensure!(
                    run,
                    stat.czxid > record.before,
                    "{path}, whose create failed in flight in cycle {}, has czxid {:#x}, not above {:#x}, \
                     the newest zxid seen before that cycle",
                    created.cycle,
                    stat.czxid,
                    record.before
                );
                if let Some(epoch) = record.epoch {
                    ensure!(
                        run,
                        stat.czxid >> 32 == epoch,
                        "{path}, whose create failed in flight in cycle {}, has czxid {:#x}, outside that \
                         run's epoch {epoch}",
                        created.cycle,
                        stat.czxid
                    );
                }
                created.fate = Fate::Present {
                    czxid: stat.czxid,
                    acknowledged: false,
                };
                created.data_checked = true;
                model.maybe_landed += 1;
            }
        }
    }
}

/// `dir`'s children, with their stats when `expected` is small enough.
async fn list(
    client: &Client,
    dir: &str,
    expected: usize,
) -> Result<Vec<(String, Option<Stat>)>, Error> {
    if expected <= STATS_LISTING_MAX {
        let (children, _) = client.get_children_with_stat(dir).await?;
        Ok(children
            .into_iter()
            .map(|child| (child.name, Some(child.stat)))
            .collect())
    } else {
        let names = client.get_children(dir).await?;
        Ok(names.into_iter().map(|name| (name, None)).collect())
    }
}

fn describe(acknowledged: bool, cycle: usize) -> String {
    if acknowledged {
        format!("acknowledged in cycle {cycle}")
    } else {
        format!("failed in flight in cycle {cycle}, then shown by a restart")
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Acknowledged { cycle } => write!(f, "acknowledged in cycle {cycle}"),
            Source::ReadAfterRestart { cycle } => {
                write!(f, "read after the restart of cycle {cycle}")
            }
        }
    }
}

fn counter_path(worker: usize) -> String {
    format!("{ROOT}/counter-w{worker}")
}

fn cycle_dir(cycle: usize) -> String {
    format!("{ROOT}/c{cycle}")
}

fn worker_dir(cycle: usize, worker: usize) -> String {
    format!("{}/w{worker}", cycle_dir(cycle))
}

fn parent(path: &str) -> &str {
    &path[..path.rfind('/').expect("an absolute path")]
}

/// The data of a create, from its path: mostly short, now and then a few
/// kilobytes, so records and batches vary in size.
fn create_data(path: &str) -> Vec<u8> {
    let hash = path.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut rng = Rng::new(hash);
    let extra = if hash % 16 == 0 {
        2048 + rng.below(6144)
    } else {
        rng.below(200)
    };
    let mut data = format!("{path}:").into_bytes();
    data.extend((0..extra).map(|_| rng.next_u64() as u8));
    data
}

fn start_or_restart<'a>(server: &'a mut Option<TestServer>, data_dir: &Path) -> &'a mut TestServer {
    tokio::task::block_in_place(|| match server {
        Some(running) => running.restart(),
        None => *server = Some(TestServer::start_in(data_dir, SERVER_FLAGS)),
    });
    server.as_mut().expect("started")
}

async fn connect(run: &Run, server: &TestServer) -> Client {
    let options = ClientOptions::default().with_session_timeout(SESSION_TIMEOUT);
    run.ok(
        &format!("connect to {}", server.addr()),
        Client::connect(server.addr(), options).await,
    )
}

fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| entries.count())
}

fn cycles_from_env(default: usize) -> usize {
    match std::env::var("ARBOR_CRASH_CYCLES") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("ARBOR_CRASH_CYCLES={text:?} is not a number")),
        Err(_) => default,
    }
}

fn seed_from_env() -> u64 {
    match std::env::var("ARBOR_CRASH_SEED") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("ARBOR_CRASH_SEED={text:?} is not a number")),
        Err(_) => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("the clock is after 1970");
            now.as_nanos() as u64 ^ u64::from(std::process::id())
        }
    }
}

/// xorshift64, seeded through splitmix64: enough for test choices, and no
/// extra crate.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    fn in_range(&mut self, range: &RangeInclusive<u64>) -> u64 {
        range.start() + self.below(range.end() - range.start() + 1)
    }
}
