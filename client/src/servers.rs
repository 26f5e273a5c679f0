//! The servers of a connect string, and the order they are tried in.
//!
//! A connect string is a comma-separated list of `host:port`. Every attempt
//! (the first connect and each reconnect round) tries them all, in a fresh
//! random order, so that many clients spread over the servers instead of all
//! crowding the first one. The shuffle uses a tiny xorshift generator seeded
//! from the clock and the process id: it needs to differ between clients, not
//! to be unpredictable.
//!
//! Invariants: the list holds at most [`SERVERS_MAX`] addresses, none empty.

use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::error::Error;

/// Most servers a connect string may name; each reconnect round tries them all.
pub const SERVERS_MAX: usize = 64;

/// The parsed connect string.
#[derive(Debug)]
pub(crate) struct ServerList {
    addrs: Vec<String>,
    rng: Mutex<XorShift>,
}

impl ServerList {
    /// Parses `connect_string`; an empty list is kept (connecting then fails
    /// with [`Error::Connect`]), too many servers is [`Error::BadArguments`].
    pub(crate) fn parse(connect_string: &str) -> Result<ServerList, Error> {
        let addrs: Vec<String> = connect_string
            .split(',')
            .map(str::trim)
            .filter(|addr| !addr.is_empty())
            .map(str::to_owned)
            .collect();
        if addrs.len() > SERVERS_MAX {
            return Err(Error::BadArguments);
        }
        Ok(ServerList {
            addrs,
            rng: Mutex::new(XorShift::from_entropy()),
        })
    }

    /// Every address once, in a fresh random order (Fisher-Yates).
    pub(crate) fn shuffled(&self) -> Vec<String> {
        let mut order = self.addrs.clone();
        let mut rng = self.rng.lock();
        for i in (1..order.len()).rev() {
            // `i + 1` is at most SERVERS_MAX, so the cast cannot truncate.
            let j = (rng.next() % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
        order
    }
}

/// Marsaglia's xorshift64: a few instructions, good enough to spread clients.
#[derive(Debug)]
struct XorShift(u64);

impl XorShift {
    fn from_entropy() -> XorShift {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos() as u64);
        let seed = nanos ^ (u64::from(std::process::id()) << 32) ^ next_instance();
        // xorshift's only fixed point is 0.
        XorShift(seed | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Distinguishes clients created in the same nanosecond of the same process.
fn next_instance() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static INSTANCES: AtomicU64 = AtomicU64::new(0);
    INSTANCES
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves every shuffle is a permutation, and that orders actually vary.
    #[test]
    fn shuffles_are_permutations_that_vary() {
        let list = ServerList::parse(" a:1, b:2 ,,c:3,d:4").expect("parses");
        let mut sorted_all = list.addrs.clone();
        sorted_all.sort();
        let mut firsts = std::collections::HashSet::new();
        for _ in 0..200 {
            let mut order = list.shuffled();
            firsts.insert(order[0].clone());
            order.sort();
            assert_eq!(order, sorted_all);
        }
        assert_eq!(firsts.len(), 4, "every server comes first sometimes");
        let too_many = vec!["h:1"; SERVERS_MAX + 1].join(",");
        assert!(matches!(
            ServerList::parse(&too_many),
            Err(Error::BadArguments)
        ));
    }
}
