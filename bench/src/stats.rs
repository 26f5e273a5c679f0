//! Latency summaries and the one JSON line every run prints.
//!
//! Latencies are whole microseconds in `u32` (71 minutes at most, far past
//! any request timeout), recorded per task into plain vectors and merged and
//! sorted once at the end: exact percentiles, no histogram dependency.

use std::time::Duration;

use serde_json::{Map, Value};

/// Converts a duration to recorded microseconds, saturating.
pub fn micros(duration: Duration) -> u32 {
    u32::try_from(duration.as_micros()).unwrap_or(u32::MAX)
}

/// Percentiles of a set of latency samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub count: usize,
    /// Rounded to the microsecond.
    pub mean: u32,
    pub p50: u32,
    pub p99: u32,
    pub p999: u32,
    pub max: u32,
}

impl Summary {
    /// Summarizes `samples` (sorted in place).
    pub fn of(samples: &mut [u32]) -> Summary {
        samples.sort_unstable();
        let total: u64 = samples.iter().map(|&sample| u64::from(sample)).sum();
        let mean = if samples.is_empty() {
            0
        } else {
            (total as f64 / samples.len() as f64).round() as u32
        };
        Summary {
            count: samples.len(),
            mean,
            p50: percentile(samples, 0.50),
            p99: percentile(samples, 0.99),
            p999: percentile(samples, 0.999),
            max: samples.last().copied().unwrap_or(0),
        }
    }
}

/// Nearest-rank percentile of sorted samples (0 when there are none).
pub fn percentile(sorted: &[u32], quantile: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (quantile * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The JSON object of one run, printed as a single line on stdout.
pub struct Report {
    fields: Map<String, Value>,
}

impl Report {
    pub fn new(workload: &str, target: &str, server: &str) -> Report {
        let mut fields = Map::new();
        fields.insert("workload".into(), workload.into());
        fields.insert("target".into(), target.into());
        fields.insert("server".into(), server.into());
        Report { fields }
    }

    /// A report without target fields (for `fsync-probe`).
    pub fn bare(workload: &str) -> Report {
        let mut fields = Map::new();
        fields.insert("workload".into(), workload.into());
        Report { fields }
    }

    /// Adds (or replaces) a field.
    pub fn field(&mut self, key: &str, value: impl Into<Value>) -> &mut Report {
        self.fields.insert(key.to_owned(), value.into());
        self
    }

    /// The standard throughput and latency fields.
    pub fn throughput(&mut self, ops: u64, elapsed: Duration, latency: &Summary) -> &mut Report {
        let secs = elapsed.as_secs_f64();
        let rate = if secs > 0.0 { ops as f64 / secs } else { 0.0 };
        self.field("ops", ops)
            .field("secs", round3(secs))
            .field("ops_per_s", round3(rate))
            .field("mean_us", latency.mean)
            .field("p50_us", latency.p50)
            .field("p99_us", latency.p99)
            .field("p999_us", latency.p999)
            .field("max_us", latency.max)
    }

    /// Adds `<prefix>_p50_us` and `<prefix>_p99_us`.
    pub fn percentiles(&mut self, prefix: &str, latency: &Summary) -> &mut Report {
        self.field(&format!("{prefix}_p50_us"), latency.p50)
            .field(&format!("{prefix}_p99_us"), latency.p99)
    }

    /// The single line to print.
    pub fn line(&self) -> String {
        Value::Object(self.fields.clone()).to_string()
    }
}

/// Rounds to three decimals, for readable JSON.
pub fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves nearest-rank percentiles pick real samples and handle edges.
    #[test]
    fn percentiles_are_nearest_rank() {
        let mut samples: Vec<u32> = (1..=1000).rev().collect();
        let summary = Summary::of(&mut samples);
        assert_eq!(summary.p50, 500);
        assert_eq!(summary.p99, 990);
        assert_eq!(summary.p999, 999);
        assert_eq!(summary.max, 1000);
        assert_eq!(Summary::of(&mut []), Summary::default());
        assert_eq!(Summary::of(&mut [7]).p50, 7);
    }

    #[test]
    fn the_mean_counts_every_sample() {
        let mut samples = vec![10, 10, 10, 1_000];
        let summary = Summary::of(&mut samples);
        assert_eq!(summary.mean, 258);
        assert_eq!(summary.p50, 10);
        // Large samples do not overflow the sum.
        let mut large = vec![u32::MAX; 3];
        assert_eq!(Summary::of(&mut large).mean, u32::MAX);
    }
}
