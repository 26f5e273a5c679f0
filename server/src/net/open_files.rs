//! The process's open-files limit, shared by connections and storage.
//!
//! Every connection holds a descriptor, and so does every file the server
//! opens for itself: a log segment it rolls into, a snapshot, the directory
//! it syncs. If connections took the last descriptors, the next segment roll
//! or snapshot would fail, and a log that fails stops the server. So
//! connections stop at the limit less [`OPEN_FILES_RESERVED`]; past it a
//! client is refused with the reason, like any connection over the limit,
//! instead of waiting in the kernel's accept queue for a descriptor.
//!
//! `arbord` first raises its soft limit to the hard one, as the JVM does for
//! ZooKeeper: shells and containers often start processes at a soft limit of
//! 1024, below the default `max_connections`.

use std::io;

/// Descriptors connections never take: the server's own files (log segment
/// and its spare, snapshots written and read, directory syncs, the lock
/// file), the listeners, the runtime's, the admin port's connections
/// (`crate::admin::ADMIN_CONNECTIONS_MAX`), an ensemble's peer links, and
/// connections being refused ([`REFUSALS_IN_FLIGHT_MAX`]).
pub const OPEN_FILES_RESERVED: u64 = 128;

/// Refused connections held open at once, each to tell its client why. A
/// flood past the limit gets the rest closed at once, so refusals cannot
/// use up the descriptors kept for the server's files.
pub const REFUSALS_IN_FLIGHT_MAX: usize = 32;

/// Where the kernel keeps the highest limit an unprivileged process may set
/// (Linux; `RLIM_INFINITY` as a hard limit means this).
const NR_OPEN_PATH: &str = "/proc/sys/fs/nr_open";

/// The process's `RLIMIT_NOFILE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFilesLimit {
    /// The limit in force.
    pub soft: u64,
    /// How far the process may raise it.
    pub hard: u64,
}

impl OpenFilesLimit {
    /// The limit in force now.
    pub fn current() -> io::Result<Self> {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit only writes the struct it is given.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            soft: limit.rlim_cur,
            hard: limit.rlim_max,
        })
    }

    /// Raises the soft limit as far as the hard one allows, and returns the
    /// limit then in force. A process-wide change: for the server binary,
    /// not for a server embedded in someone else's process.
    pub fn raise_to_hard() -> io::Result<Self> {
        let limit = Self::current()?;
        let mut target = limit.hard;
        if limit.hard == libc::RLIM_INFINITY {
            // Linux refuses a soft limit above nr_open even when the hard
            // one is unlimited.
            match std::fs::read_to_string(NR_OPEN_PATH)
                .ok()
                .and_then(|text| text.trim().parse::<u64>().ok())
            {
                Some(nr_open) => target = nr_open,
                None => return Ok(limit),
            }
        }
        if limit.soft >= target {
            return Ok(limit);
        }
        let raised = libc::rlimit {
            rlim_cur: target,
            rlim_max: limit.hard,
        };
        // SAFETY: setrlimit only reads the struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Self::current()
    }

    /// Connections this limit leaves room for beside the server's own files.
    pub fn connections_allowed(&self) -> usize {
        usize::try_from(self.soft.saturating_sub(OPEN_FILES_RESERVED)).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_leave_the_reserve_to_the_server() {
        let limit = OpenFilesLimit {
            soft: 1024,
            hard: 4096,
        };
        assert_eq!(limit.connections_allowed(), 1024 - 128);
        let tiny = OpenFilesLimit {
            soft: 100,
            hard: 100,
        };
        assert_eq!(tiny.connections_allowed(), 0);
    }

    #[test]
    fn the_current_limit_reads_and_raising_never_lowers_it() {
        let before = OpenFilesLimit::current().expect("getrlimit");
        assert!(before.soft <= before.hard);
        let after = OpenFilesLimit::raise_to_hard().expect("setrlimit up to the hard limit");
        assert!(after.soft >= before.soft);
        assert_eq!(after.hard, before.hard);
    }
}
