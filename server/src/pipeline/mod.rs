//! The write pipeline: prep → commit log → apply.
//!
//! * [`prep`] validates a request and fixes everything non-deterministic
//!   (time, session ids, passwords), producing a [`crate::txn::Txn`].
//! * [`commit`] gives each txn the next zxid, makes batches durable through a
//!   [`commit::CommitLog`] (one sync per batch: group commit), then applies
//!   them in order and answers.
//! * [`applier`] is the apply loop every replica runs over committed
//!   entries: state machine, watches, session tracker.
//! * [`apply`] is the state machine: the tree plus the session table, changed
//!   only by txns, deterministically.
//! * [`read`] answers reads from the applied state; they never wait for the
//!   log, only for the earlier requests of their own session.

pub mod applier;
pub mod apply;
pub mod commit;
pub mod prep;
pub mod read;
