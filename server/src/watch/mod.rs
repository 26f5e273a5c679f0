//! Watches: who wants to hear about which path.

mod manager;

pub use manager::{WatchKind, WatchManager, WatchSummary};
