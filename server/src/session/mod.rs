//! Session liveness: who is alive, who is due to expire.
//!
//! The session *table* (ids, passwords, timeouts) is part of the replicated
//! state machine; the [`SessionTracker`] here is the local, in-memory view of
//! deadlines that decides when to propose an expiry. Time comes in as a value
//! (milliseconds on a monotonic clock), so tests drive it directly.

mod expiry_queue;
mod tracker;

pub use expiry_queue::ExpiryQueue;
pub use tracker::SessionTracker;

/// Clamps a requested session timeout to [2, 20] ticks, as ZooKeeper does.
pub fn negotiate_timeout_ms(requested_ms: u32, tick_ms: u32) -> u32 {
    requested_ms.clamp(tick_ms.saturating_mul(2), tick_ms.saturating_mul(20))
}

#[cfg(test)]
mod tests {
    #[test]
    fn timeout_is_clamped_to_two_and_twenty_ticks() {
        assert_eq!(super::negotiate_timeout_ms(100, 2000), 4000);
        assert_eq!(super::negotiate_timeout_ms(10_000, 2000), 10_000);
        assert_eq!(super::negotiate_timeout_ms(1_000_000, 2000), 40_000);
    }
}
