//! At most one log line per interval for an event that can come in floods.
//!
//! A client refused over a connection limit is worth a line to the operator,
//! but a flood of them would write a line per socket: thousands a second of
//! log I/O, on the disk the log syncs to, for whoever opens sockets fastest.
//! The metrics count every refusal; the log says the first of each interval
//! and, on the next line, how many it left out.

use std::time::{Duration, Instant};

/// How often a refused connection is logged at most.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct LogThrottle {
    interval: Duration,
    last: Option<Instant>,
    left_out: u64,
}

impl LogThrottle {
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: None,
            left_out: 0,
        }
    }

    /// Whether the event at `now` gets a line: `Some(n)` with the number of
    /// events left out since the last line, or `None` (counted) if a line was
    /// written less than an interval ago.
    pub fn admit(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(at) if now.saturating_duration_since(at) < self.interval => {
                self.left_out += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.left_out))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_and_the_next_counts_what_was_left_out() {
        let mut throttle = LogThrottle::new(Duration::from_secs(10));
        let start = Instant::now();
        assert_eq!(throttle.admit(start), Some(0));
        for k in 1..=500 {
            assert_eq!(throttle.admit(start + Duration::from_millis(k)), None);
        }
        assert_eq!(throttle.admit(start + Duration::from_secs(10)), Some(500));
        assert_eq!(throttle.admit(start + Duration::from_secs(11)), None);
        assert_eq!(throttle.admit(start + Duration::from_secs(25)), Some(1));
    }
}
