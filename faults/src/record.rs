//! The run's clock and the history every task of the workload writes
//! into ([`arbor_check::History`]): one lock, held for a push at a time.

use std::sync::Arc;
use std::time::Instant;

use arbor_check::{History, SessionEnd, SessionLife};
use parking_lot::Mutex;

/// Microseconds since the run began, from one monotonic clock, so that any
/// two times the workload records compare.
#[derive(Debug, Clone, Copy)]
pub struct RunClock {
    start: Instant,
    /// The wall time at the start, to line records up with server logs.
    started_unix_ms: u64,
}

impl RunClock {
    pub fn start() -> Self {
        let started_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(0));
        Self {
            start: Instant::now(),
            started_unix_ms,
        }
    }

    pub fn started_unix_ms(&self) -> u64 {
        self.started_unix_ms
    }

    pub fn now_us(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

/// The history being recorded, shared by every task of a run.
#[derive(Clone)]
pub struct Recorder {
    pub clock: RunClock,
    history: Arc<Mutex<History>>,
}

impl Recorder {
    pub fn new(clock: RunClock) -> Self {
        Self {
            clock,
            history: Arc::default(),
        }
    }

    pub fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    /// Adds to the history under its lock.
    pub fn with<R>(&self, f: impl FnOnce(&mut History) -> R) -> R {
        f(&mut self.history.lock())
    }

    /// A session begins; its index in `sessions`.
    pub fn session_opened(&self, life: SessionLife) -> usize {
        self.with(|history| {
            history.sessions.push(life);
            history.sessions.len() - 1
        })
    }

    /// Session `index` was heard from by a request sent at `call_us`.
    pub fn heard(&self, index: usize, call_us: u64) {
        self.with(|history| {
            let heard = &mut history.sessions[index].heard_us;
            // Requests of one session may answer out of their send order
            // (a ping, a sync); the list stays ascending.
            let at = heard.partition_point(|us| *us <= call_us);
            heard.insert(at, call_us);
        });
    }

    pub fn session_ended(&self, index: usize, end: SessionEnd) {
        self.with(|history| {
            let life = &mut history.sessions[index];
            if life.end == SessionEnd::Open {
                life.end = end;
            }
        });
    }

    /// The history recorded, taken out.
    pub fn take(&self) -> History {
        std::mem::take(&mut self.history.lock())
    }
}
