//! The ensemble: Arbor's write path on a replicated log (openraft).
//!
//! Every openraft type stays inside this module, so a move to a new openraft
//! release stays here too. The pieces, as in openraft's own examples:
//!
//! * [`types`]: the type configuration; a log entry carries a [`types::Command`]
//!   (a txn fixed by prep, its wall time, and the member that proposed it);
//! * [`records`]: our own on-disk forms of log positions, votes and
//!   memberships, independent of openraft's serde layout;
//! * [`log_files`] and [`log_store`]: the replicated log on disk (term and
//!   index in every record, a fsynced vote, truncation of any suffix, purge
//!   up to a position) and openraft's log storage over it, with group commit;
//! * [`meta_file`]: the small replace-whole files (vote, purged, committed);
//! * [`state_machine`]: openraft's state machine over the same state machine
//!   and apply loop a standalone server runs, snapshotted from the
//!   copy-on-write view and installable on a lagging member; it also keeps
//!   which member owns each session;
//! * [`peer`], [`network`], [`peer_server`]: the peer protocol over TCP
//!   (raft's messages, forwarded writes, read indexes, session touches),
//!   and [`peer_tls`]: members proving who they are to each other;
//! * [`member`]: what a running member adds to the server (its write path,
//!   who leads, `sync`); [`liveness`]: its sessions' liveness at the
//!   leader, and [`contact`]: when it may vouch for its clients at all;
//!   [`campaign`]: when it stands for election sooner than raft's timers;
//!   [`bootstrap`] starts and stops it.
//!
//! An entry carries a batch of writes ([`types::Command`]); each write
//! applied takes the next zxid. Every member applies the same entries from
//! the same state, so zxids are the same on every member and increase
//! across leader changes and restarts: a lock's fencing token (the czxid of
//! its node) keeps increasing through a failover.

pub mod bootstrap;
pub mod campaign;
pub mod contact;
pub mod liveness;
pub mod log_files;
pub mod log_store;
pub mod member;
pub mod meta_file;
pub mod network;
pub mod peer;
pub mod peer_server;
pub mod peer_tls;
pub mod records;
pub mod state_machine;
pub mod types;

#[cfg(test)]
mod ensemble_tests;
#[cfg(test)]
mod history_tests;
#[cfg(test)]
mod session_tests;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
