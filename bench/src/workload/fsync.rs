//! `fsync-probe`: what one small durable write costs on a disk — the floor
//! under every acknowledged write of both servers. Each op writes `--size`
//! bytes at the end of a scratch file and calls `fdatasync`
//! (`File::sync_data`); the file is removed afterwards.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};

use crate::stats::{micros, Report, Summary};

#[derive(clap::Args, Clone, Debug)]
pub struct FsyncArgs {
    /// Directory to write the scratch file in (the server's data disk).
    #[arg(long)]
    pub dir: PathBuf,
    /// Writes, each followed by fdatasync.
    #[arg(long, default_value_t = 1000)]
    pub count: u64,
    /// Bytes per write.
    #[arg(long, default_value_t = 4096)]
    pub size: usize,
}

pub fn run(args: &FsyncArgs) -> Result<Report> {
    if args.count == 0 {
        return Err(anyhow!("--count must be positive"));
    }
    let path = args
        .dir
        .join(format!("arbor-bench-fsync-{}.tmp", std::process::id()));
    let mut file =
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let block = vec![0xa5u8; args.size];
    let mut samples = Vec::with_capacity(usize::try_from(args.count).unwrap_or(0));
    let started = Instant::now();
    let result = (|| -> Result<()> {
        for _ in 0..args.count {
            let issued = Instant::now();
            file.write_all(&block)?;
            file.sync_data()?;
            samples.push(micros(issued.elapsed()));
        }
        Ok(())
    })();
    let elapsed = started.elapsed();
    drop(file);
    let removed = std::fs::remove_file(&path);
    result.with_context(|| format!("writing {}", path.display()))?;
    removed.with_context(|| format!("removing {}", path.display()))?;

    let latency = Summary::of(&mut samples);
    let mut report = Report::bare("fsync-probe");
    report
        .field("dir", args.dir.display().to_string())
        .field("size", args.size)
        .field("count", args.count)
        .throughput(args.count, elapsed, &latency);
    Ok(report)
}
