//! Time, read in one place. The tree, the session tracker and the watch
//! manager never read the clock: callers pass them the time as a value.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The server's clocks.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
        }
    }

    /// Milliseconds since the server started, never going backwards: for
    /// session deadlines, which must not jump with the wall clock.
    pub fn monotonic_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Milliseconds since the Unix epoch: for ctime/mtime and TTLs, which
    /// users read as dates.
    pub fn wall_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}
