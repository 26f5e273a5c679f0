//! Durable storage: the write-ahead log, snapshots, and recovery.
//!
//! ```text
//! <data-dir>/LOCK                       held while an arbord uses the directory
//! <data-dir>/log/log.<first zxid>       write-ahead log segments (txnlog)
//! <data-dir>/snapshots/snapshot.<zxid>  snapshots (snapshot)
//! ```
//!
//! A write is acknowledged only after its log record is fsynced ([`wal`]).
//! Snapshots are taken in the background ([`snapshotter`]) and let old log
//! segments be purged. On start, [`recovery`] rebuilds the state from the
//! newest snapshot that verifies plus the log after it, and refuses to start
//! rather than guess when something is missing or corrupt.

pub mod error;
pub mod recovery;
pub mod snapshot;
pub mod snapshotter;
pub mod txnlog;
pub mod wal;
