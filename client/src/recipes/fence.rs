//! Fencing: the protected resource's half of a lock.
//!
//! A lock alone cannot stop a holder that was paused (a GC pause, a frozen
//! VM, a long network stall) from writing after its lease ran out and someone
//! else took the lock. The fencing token closes that gap: every grant of an
//! Arbor lock carries a larger token than the grants before it (the zxid that
//! created the lock node), the holder sends it with every write, and the
//! resource refuses any write whose token is older than the newest it has
//! seen. [`Fence`] is that check, for a resource written in Rust.
//!
//! The check and the write must be one atomic step, or a stale writer could
//! pass the check, pause, and write after a newer one: [`Fence::write`] runs
//! the write while holding the fence.

use parking_lot::Mutex;

/// A fencing token: larger means a later grant.
pub type FencingToken = u64;

/// A write was refused because a newer token has been seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("fencing token {token} is stale: token {highest} has already been admitted")]
pub struct StaleToken {
    pub token: FencingToken,
    pub highest: FencingToken,
}

/// Admits tokens at least as new as the newest seen, and refuses older ones.
///
/// ```
/// use arbor_client::recipes::Fence;
///
/// let fence = Fence::new();
/// let mut store = Vec::new();
/// fence.write(7, || store.push("from holder 7")).unwrap();
/// fence.write(9, || store.push("from holder 9")).unwrap();
/// // Holder 7 wakes up from a long pause and tries again: refused.
/// assert!(fence.write(7, || store.push("stale")).is_err());
/// assert_eq!(store, ["from holder 7", "from holder 9"]);
/// // Persist `fence.highest()` with the data; restore with `Fence::starting_at`.
/// assert_eq!(fence.highest(), 9);
/// ```
#[derive(Debug, Default)]
pub struct Fence {
    highest: Mutex<FencingToken>,
}

impl Fence {
    /// A fence that has seen no token.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fence restored from a persisted [`Fence::highest`].
    pub fn starting_at(highest: FencingToken) -> Self {
        Self {
            highest: Mutex::new(highest),
        }
    }

    /// The newest token admitted so far (0 if none): persist it with the
    /// resource so a restart does not readmit stale holders.
    pub fn highest(&self) -> FencingToken {
        *self.highest.lock()
    }

    /// Admits `token` if it is at least the newest seen, and records it.
    /// For a check followed by a write, use [`Fence::write`] instead.
    pub fn admit(&self, token: FencingToken) -> Result<(), StaleToken> {
        self.write(token, || ())
    }

    /// Admits `token` and runs `write` while holding the fence, so no newer
    /// holder can be admitted between the check and the write.
    pub fn write<R>(
        &self,
        token: FencingToken,
        write: impl FnOnce() -> R,
    ) -> Result<R, StaleToken> {
        let mut highest = self.highest.lock();
        if token < *highest {
            return Err(StaleToken {
                token,
                highest: *highest,
            });
        }
        *highest = token;
        Ok(write())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn equal_tokens_pass_and_older_ones_are_refused() {
        // One holder writes many times with its token; an older holder never again.
        let fence = Fence::new();
        assert!(fence.admit(5).is_ok());
        assert!(fence.admit(5).is_ok());
        assert_eq!(
            fence.admit(4),
            Err(StaleToken {
                token: 4,
                highest: 5
            })
        );
        assert!(fence.admit(6).is_ok());
        assert_eq!(
            Fence::starting_at(6).admit(5).map_err(|e| e.highest),
            Err(6)
        );
    }

    #[test]
    fn a_stale_writer_cannot_slip_in_after_a_newer_one() {
        // Writers race with interleaved tokens: the store sees tokens only grow.
        let fence = Arc::new(Fence::new());
        let store = Arc::new(Mutex::new(Vec::new()));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (fence, store) = (fence.clone(), store.clone());
                std::thread::spawn(move || {
                    for i in 0..1000u64 {
                        let token = i * 4 + t;
                        let _ = fence.write(token, || store.lock().push(token));
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("joins");
        }
        let store = store.lock();
        assert!(
            store.windows(2).all(|w| w[0] <= w[1]),
            "a stale write landed"
        );
    }
}
