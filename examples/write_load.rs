//! Write load against a running arbord, and the disk's raw fsync latency, in
//! one run: how close does group commit get to the device's limit?
//!
//! ```text
//! cargo run --release -p arbor-examples --example write_load -- \
//!     [--server 127.0.0.1:7181] [--in-flight 64] [--connections 8] [--secs 5] [--probe-dir ./arbor-data]
//! cargo run --release -p arbor-examples --example write_load -- --fill 1000000
//! ```
//!
//! `--fill N` instead creates N znodes of 32 bytes (in multis of 1000) and
//! exits: a large tree for recovery and memory measurements.
//!
//! Each request creates a 100-byte persistent node. `--probe-dir` times
//! 4 KiB write + fdatasync cycles in that directory (the data directory's
//! filesystem), before and after the load.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arbor_client::{Client, ClientOptions, CreateMode, Error};

struct Args {
    server: String,
    in_flight: usize,
    connections: usize,
    secs: u64,
    probe_dir: Option<PathBuf>,
    fill: Option<u64>,
}

fn parse_args() -> Args {
    let mut args = Args {
        server: std::env::var("ARBOR_SERVER").unwrap_or_else(|_| "127.0.0.1:7181".into()),
        in_flight: 64,
        connections: 8,
        secs: 5,
        probe_dir: None,
        fill: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--server" => args.server = value,
            "--in-flight" => args.in_flight = value.parse().expect("a number"),
            "--connections" => args.connections = value.parse().expect("a number"),
            "--secs" => args.secs = value.parse().expect("a number"),
            "--probe-dir" => args.probe_dir = Some(PathBuf::from(value)),
            "--fill" => args.fill = Some(value.parse().expect("a number")),
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Times `count` cycles of a 4 KiB write + fdatasync in `dir`.
fn fsync_probe(dir: &std::path::Path, count: usize) -> Vec<Duration> {
    let path = dir.join("fsync-probe.tmp");
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .expect("probe file");
    let block = vec![7u8; 4096];
    let mut times = Vec::with_capacity(count);
    for _ in 0..count {
        let start = Instant::now();
        file.write_all(&block).expect("write");
        file.sync_data().expect("fdatasync");
        times.push(start.elapsed());
    }
    let _ = std::fs::remove_file(path);
    times.sort();
    times
}

/// Znodes per multi when filling.
const FILL_BATCH: u64 = 1000;

/// Creates `count` znodes of 32 bytes under `/fill-<pid>`, `in_flight` multis at a time.
async fn fill(args: &Args, count: u64) -> Result<(), Error> {
    let client = Client::connect(&args.server, ClientOptions::default()).await?;
    let root = format!("/fill-{}", std::process::id());
    client
        .create(&root, Vec::new(), CreateMode::Persistent)
        .await?;
    let started = Instant::now();
    let batches = count.div_ceil(FILL_BATCH);
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.in_flight.min(16) {
        let (client, root, next) = (client.clone(), root.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let batch = next.fetch_add(1, Ordering::Relaxed);
                if batch >= batches {
                    return Ok::<_, Error>(());
                }
                let first = batch * FILL_BATCH;
                let ops = (first..(first + FILL_BATCH).min(count))
                    .map(|i| {
                        arbor_client::multi::create(
                            format!("{root}/n{i}"),
                            vec![7u8; 32],
                            CreateMode::Persistent,
                        )
                    })
                    .collect();
                client.multi(ops).await?;
            }
        }));
    }
    for task in tasks {
        task.await.expect("task joins")?;
    }
    println!(
        "filled {count} znodes under {root} in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = parse_args();
    if let Some(count) = args.fill {
        return fill(&args, count).await;
    }
    let probe = |label: &str| {
        if let Some(dir) = &args.probe_dir {
            let times = fsync_probe(dir, 500);
            println!(
                "raw fsync ({label}): p50 {:?} p99 {:?} (500 x 4 KiB write + fdatasync in {})",
                percentile(&times, 0.5),
                percentile(&times, 0.99),
                dir.display()
            );
        }
    };
    probe("before");
    let options = ClientOptions::default().with_max_in_flight(args.in_flight);
    let mut clients = Vec::new();
    for _ in 0..args.connections {
        clients.push(Client::connect(&args.server, options.clone()).await?);
    }
    let root = format!("/load-{}", std::process::id());
    clients[0]
        .create(&root, Vec::new(), CreateMode::Persistent)
        .await?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for slot in 0..args.in_flight {
        let client = clients[slot % clients.len()].clone();
        let stop = stop.clone();
        let root = root.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let start = Instant::now();
                client
                    .create(
                        &format!("{root}/s{slot}-{i}"),
                        vec![1u8; 100],
                        CreateMode::Persistent,
                    )
                    .await?;
                latencies.push(start.elapsed());
                i += 1;
            }
            Ok::<_, Error>(latencies)
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("task joins")?);
    }
    let secs = started.elapsed().as_secs_f64();
    all.sort();
    println!(
        "creates: {} in {secs:.1} s = {:.0}/s at {} in flight over {} connections; latency p50 {:?} p99 {:?} max {:?}",
        all.len(),
        all.len() as f64 / secs,
        args.in_flight,
        args.connections,
        percentile(&all, 0.5),
        percentile(&all, 0.99),
        all.last().copied().unwrap_or_default()
    );
    probe("after");
    Ok(())
}
