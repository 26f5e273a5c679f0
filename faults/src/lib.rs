//! The real-process fault suite: Arbor's promises checked from outside,
//! as a user's ensemble meets partitions, pauses and crashes.
//!
//! Three real `arbord` members (or, as the control, three Apache
//! ZooKeeper servers) run in network namespaces the suite makes itself
//! ([`lab`]); a seeded [`nemesis`] cuts the leader or a follower off,
//! SIGSTOPs members for less and more than a session timeout, and kills
//! and restarts them; meanwhile a [`workload`] of sessions speaking both
//! Arbor's protocol and ZooKeeper's reads, writes, compare-and-sets,
//! creates sequential children, holds ephemerals and takes fair locks
//! guarding a fenced store, recording every answer ([`record`]). Once the
//! faults are healed, [`arbor_check`] judges the history: linearizable
//! registers, each session's reads in order, sequential children unique,
//! ordered and kept, no session expired within its timeout of being heard
//! from, ephemerals gone only with their session, one lock holder at a
//! time and no stale write admitted, and every member agreeing at the end.
//! [`failover`] measures how long writes stopped after each fault of the
//! leader. [`plant`]s make the checks show they can fail.
//!
//! [`run::run`] does one seed; the `arbor-faults` binary runs many and
//! sums them up.

pub mod arbor;
pub mod client;
pub mod failover;
pub mod lab;
pub mod nemesis;
pub mod plant;
pub mod process;
pub mod record;
pub mod run;
pub mod target;
pub mod workload;
pub mod zookeeper;
