//! Time, read in one place. The tree, the session tracker and the watch
//! manager never read the clock: callers pass them the time as a value, and
//! every caller reads it from the server's [`Clock`], which tests can drive.
//!
//! ```
//! use std::time::Duration;
//! use arbor_server::clock::Clock;
//!
//! let (clock, driver) = Clock::manual(1_700_000_000_000);
//! driver.advance(Duration::from_secs(30));
//! assert_eq!(clock.monotonic_ms(), 30_000);
//! assert_eq!(clock.wall_ms(), 1_700_000_030_000);
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The server's clocks: the system's, or a manual one a test moves.
#[derive(Debug, Clone)]
pub struct Clock {
    source: Source,
}

#[derive(Debug, Clone)]
enum Source {
    System { start: Instant },
    Manual(Arc<ManualTime>),
}

#[derive(Debug)]
struct ManualTime {
    monotonic_ms: AtomicU64,
    wall_ms: AtomicU64,
}

/// Moves a manual [`Clock`] (and every clone of it) forward.
#[derive(Debug, Clone)]
pub struct ClockDriver(Arc<ManualTime>);

impl Default for Clock {
    fn default() -> Self {
        Self::system()
    }
}

impl Clock {
    /// The system's clocks, monotonic time counted from now.
    pub fn system() -> Self {
        Self {
            source: Source::System {
                start: Instant::now(),
            },
        }
    }

    /// A clock that stands still at monotonic 0 and wall time `wall_ms`
    /// until its driver moves it: sessions then expire, and TTL nodes fall
    /// due, exactly when a test says, however slow the machine.
    pub fn manual(wall_ms: u64) -> (Self, ClockDriver) {
        let time = Arc::new(ManualTime {
            monotonic_ms: AtomicU64::new(0),
            wall_ms: AtomicU64::new(wall_ms),
        });
        let clock = Self {
            source: Source::Manual(time.clone()),
        };
        (clock, ClockDriver(time))
    }

    /// Milliseconds since the server started, never going backwards: for
    /// session deadlines, which must not jump with the wall clock.
    pub fn monotonic_ms(&self) -> u64 {
        match &self.source {
            Source::System { start } => start.elapsed().as_millis() as u64,
            Source::Manual(time) => time.monotonic_ms.load(Ordering::Acquire),
        }
    }

    /// Milliseconds since the Unix epoch: for ctime/mtime and TTLs, which
    /// users read as dates.
    pub fn wall_ms(&self) -> u64 {
        match &self.source {
            Source::System { .. } => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            Source::Manual(time) => time.wall_ms.load(Ordering::Acquire),
        }
    }
}

impl ClockDriver {
    /// Moves both clocks forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = by.as_millis() as u64;
        self.0.monotonic_ms.fetch_add(ms, Ordering::AcqRel);
        self.0.wall_ms.fetch_add(ms, Ordering::AcqRel);
    }
}
