//! CPU time spent by processes, from `/proc/<pid>/stat`: how much a server
//! (and the load generator itself) pays per operation, which throughput on a
//! shared two-core machine hides.

use anyhow::{anyhow, Context, Result};

/// `/proc/<pid>/stat` counts in USER_HZ, which Linux fixes at 100 for
/// user space whatever the kernel's own tick.
const TICKS_PER_SECOND: u64 = 100;

/// User plus system CPU time of `pid` (every thread, living or ended), in
/// microseconds; `None` for this process.
pub fn cpu_us(pid: Option<u32>) -> Result<u64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let after_name = stat
        .rfind(')')
        .map(|end| &stat[end + 1..])
        .ok_or_else(|| anyhow!("no command name in {path}"))?;
    // Fields 3.. follow; utime and stime are fields 14 and 15.
    let mut fields = after_name.split_whitespace().skip(11);
    let mut next = |name: &str| -> Result<u64> {
        fields
            .next()
            .ok_or_else(|| anyhow!("{path} has no {name} field"))?
            .parse::<u64>()
            .with_context(|| format!("parsing {name} in {path}"))
    };
    let ticks = next("utime")? + next("stime")?;
    Ok(ticks * 1_000_000 / TICKS_PER_SECOND)
}

/// CPU time of the servers (summed) and of this process, taken together.
#[derive(Debug, Clone, Copy)]
pub struct CpuMark {
    servers_us: u64,
    bench_us: u64,
}

impl CpuMark {
    pub fn now(server_pids: &[u32]) -> Result<Self> {
        let mut servers_us = 0;
        for pid in server_pids {
            servers_us += cpu_us(Some(*pid))?;
        }
        Ok(Self {
            servers_us,
            bench_us: cpu_us(None)?,
        })
    }

    /// Microseconds of CPU per op since `self`: (servers, load generator).
    pub fn per_op_since(&self, later: &CpuMark, ops: u64) -> (f64, f64) {
        let ops = ops.max(1) as f64;
        (
            later.servers_us.saturating_sub(self.servers_us) as f64 / ops,
            later.bench_us.saturating_sub(self.bench_us) as f64 / ops,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_spent_some_cpu_and_a_busy_loop_adds_to_it() {
        let before = cpu_us(None).expect("reads /proc/self/stat");
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < std::time::Duration::from_millis(60) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = cpu_us(None).expect("reads again");
        assert!(after >= before + 20_000, "{before} -> {after}");
    }

    #[test]
    fn a_missing_process_is_an_error() {
        assert!(cpu_us(Some(u32::MAX)).is_err());
    }
}
