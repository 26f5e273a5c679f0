//! CPU time spent by processes, from `/proc/<pid>/stat`: how much a server
//! (and the load generator itself) pays per operation, which throughput on a
//! shared two-core machine hides. And the machine's steal time, from
//! `/proc/stat`: on a virtual machine the hypervisor may run someone else on
//! our cores mid-run, which slows every process here at once (measured: a
//! run with a third of its ticks stolen made creates 40 % slower and every
//! process's CPU per op higher), so a row says how much of it it saw.

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

/// The machine's CPU ticks since boot (every core): all of them, and those
/// the hypervisor gave to another guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineTicks {
    total: u64,
    steal: u64,
}

impl MachineTicks {
    pub fn now() -> Result<Self> {
        let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
        Self::parse(&stat)
    }

    /// The `cpu` line: user nice system idle iowait irq softirq steal guest
    /// guest_nice. Guest time is already inside user, so it is not added.
    fn parse(stat: &str) -> Result<Self> {
        let line = stat
            .lines()
            .find(|line| line.starts_with("cpu "))
            .ok_or_else(|| anyhow!("/proc/stat has no cpu line"))?;
        let ticks = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(|field| field.parse::<u64>().context("parsing /proc/stat"))
            .collect::<Result<Vec<u64>>>()?;
        if ticks.len() < 8 {
            return Err(anyhow!("/proc/stat's cpu line has no steal field"));
        }
        Ok(Self {
            total: ticks.iter().sum(),
            steal: ticks[7],
        })
    }

    /// Percent of the machine's ticks since `self` that were stolen.
    pub fn steal_percent_since(&self, later: &MachineTicks) -> f64 {
        let total = later.total.saturating_sub(self.total);
        if total == 0 {
            return 0.0;
        }
        let steal = later.steal.saturating_sub(self.steal);
        (steal as f64 * 1000.0 / total as f64).round() / 10.0
    }
}

/// CPU time of the servers (summed) and of this process, and the machine's
/// ticks, taken together.
#[derive(Debug, Clone, Copy)]
pub struct CpuMark {
    servers_us: u64,
    bench_us: u64,
    machine: MachineTicks,
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
            machine: MachineTicks::now()?,
        })
    }

    /// Percent of the machine's CPU ticks since `self` stolen by the
    /// hypervisor.
    pub fn steal_percent_since(&self, later: &CpuMark) -> f64 {
        self.machine.steal_percent_since(&later.machine)
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
    fn steal_is_the_eighth_tick_count_of_the_cpu_line() {
        let before = MachineTicks::parse(
            "cpu  100 0 50 800 20 0 10 20 0 0\ncpu0 50 0 25 400 10 0 5 10 0 0\n",
        )
        .expect("parses");
        let after = MachineTicks::parse("cpu  200 0 100 1500 40 0 20 140 7 0\n").expect("parses");
        // 1000 ticks passed (guest time is inside user), 120 of them stolen.
        assert_eq!(before.steal_percent_since(&after), 12.0);
        assert_eq!(after.steal_percent_since(&after), 0.0);
        assert!(MachineTicks::parse("cpu  1 2 3 4\n").is_err());
        assert!(MachineTicks::parse("intr 5\n").is_err());
    }

    #[test]
    fn this_machine_has_a_steal_count() {
        let now = MachineTicks::now().expect("reads /proc/stat");
        assert!(now.total >= now.steal);
    }

    #[test]
    fn a_missing_process_is_an_error() {
        assert!(cpu_us(Some(u32::MAX)).is_err());
    }
}
