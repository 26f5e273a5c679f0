//! The open-files limit of this process: workloads holding thousands of
//! sessions (one socket each) raise the soft limit up to the hard one first,
//! since shells commonly start with a soft limit of 1024.

use anyhow::{anyhow, Result};

/// Descriptors kept free beyond the sessions: the runtime's epoll and
/// wake-up descriptors, stdio, `/proc` reads, a few spare sockets.
pub const SPARE_FDS: u64 = 64;

/// Makes sure this process may hold `sessions` sockets at once (plus
/// [`SPARE_FDS`]), raising the soft `RLIMIT_NOFILE` towards the hard limit if
/// needed. Returns the soft limit in effect.
pub fn ensure_open_files(sessions: u64) -> Result<u64> {
    let needed = sessions.saturating_add(SPARE_FDS);
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(anyhow!(
            "getrlimit(RLIMIT_NOFILE): {}",
            std::io::Error::last_os_error()
        ));
    }
    if limit.rlim_cur >= needed {
        return Ok(limit.rlim_cur);
    }
    if limit.rlim_max < needed {
        return Err(anyhow!(
            "{sessions} sessions need {needed} open files, but the hard limit is {} \
             (raise it: ulimit -Hn, or LimitNOFILE= for a service)",
            limit.rlim_max
        ));
    }
    limit.rlim_cur = limit.rlim_max;
    // SAFETY: setrlimit only reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(anyhow!(
            "raising the open-files limit to {}: {}",
            limit.rlim_max,
            std::io::Error::last_os_error()
        ));
    }
    Ok(limit.rlim_cur)
}
