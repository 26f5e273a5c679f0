//! The write pipeline: prep → commit log → apply.
//!
//! * [`prep`] is the one stage that decides what apply must not: it
//!   validates a request, fixes its wall time, draws session ids and
//!   passwords, and keeps sessions alive (or refuses them), producing a
//!   [`crate::txn::Txn`] or an answer. Connections only frame bytes.
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
