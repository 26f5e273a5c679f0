//! # arbord — theory of operation
//!
//! Arbor keeps a tree of znodes, shared by client sessions, and orders every
//! change to it in one sequence numbered by the *zxid*.
//!
//! ## One path for every write
//!
//! ```text
//! connection ──► prep ──► commit log ──► apply ──► reply + watch events
//!  (net)        (pipeline::prep)  (pipeline::commit)  (pipeline::apply)
//! ```
//!
//! A connection ([`net`]) decodes frames and keeps its session's requests in
//! arrival order; it decides nothing about them. A write is *prepped* into a
//! [`txn::Txn`]: validated, with everything non-deterministic fixed (wall
//! time, session ids, passwords); prep also moves the session's deadline,
//! and is the only stage that reads the clock ([`clock::Clock`], which tests
//! can drive) on a request's behalf. The
//! committer ([`pipeline::commit::Committer`], one lock) gives each txn the
//! next zxid, makes whole batches durable at once through the
//! [`pipeline::commit::CommitLog`] (group commit), then applies them in zxid
//! order to the state machine
//! ([`pipeline::apply::StateMachine`]: the [`tree::DataTree`] plus the session
//! table) and answers. Queued writes are committed by the commit thread; a
//! lone write on an idle server is committed by its connection's own thread,
//! which saves two thread wake-ups per write and never overtakes a write
//! proposed before it. Apply is deterministic, so replaying the log rebuilds
//! the same state. Session creation, close and expiry are txns too: a
//! session's ephemerals vanish through the log like any other write.
//!
//! ## Ordering
//!
//! * Writes are totally ordered by zxid; replies carry the last applied zxid,
//!   which never decreases on a connection.
//! * A session's replies come in request order. A read waits only for the
//!   session's own earlier requests, never for another session's sync: reads
//!   are answered from the applied state under a read lock.
//! * Watches ([`watch`]) fire during apply. The event is queued to the
//!   connection before any reply that reflects the change, so a client never
//!   sees the new state before the event that announces it. The other way
//!   round, a read that sets a watch queues its reply before it lets go of
//!   the read lock, so no event of that watch overtakes the reply (clients
//!   that attach a watcher when the reply comes would lose the event).
//!
//! ## Durability
//!
//! Standalone, the commit log is the write-ahead log ([`storage`]): a write
//! is acknowledged only after its record is fsynced, and one fsync covers every
//! write queued meanwhile. Snapshots are taken in the background from a
//! copy-on-write view of the state, exact as of their zxid, and let old log
//! segments go. A start recovers from the newest snapshot that verifies plus
//! the log after it, truncates a torn tail, and refuses to guess about
//! anything else. Each start opens a new zxid epoch.
//!
//! ## Sessions
//!
//! The [`session::SessionTracker`] keeps deadlines in tick-sized buckets
//! ([`session::ExpiryQueue`]); any request or ping moves a session's deadline.
//! Once per tick the expired sessions are proposed for closing. A session can
//! move to a new connection with its id and password while it is alive; the
//! move waits until the old connection reads no more and then goes through
//! the log (`MoveSession`), so everything the session asked before is
//! applied by the time the new connection takes a request.
//!
//! ## The ensemble
//!
//! With `--member-id` and `--member`, arbord is one member of an ensemble
//! ([`cluster`]) on openraft. The write path keeps its shape: prep fixes the
//! txn, the committer's queue takes it in the connection's order, and then,
//! instead of the local log, the member's replicator
//! ([`cluster::member`]) puts it into the replicated log: on a follower,
//! forwarded over one pipelined peer connection; on the leader, together
//! with everything else waiting (its own writes and its followers'
//! forwards) in one entry, since openraft 0.9 syncs the leader's log once
//! per entry before it takes the next: that is the ensemble's group
//! commit. Committed entries reach the same apply loop ([`pipeline::applier`]) on
//! every member, whether or not that member took the request; the member
//! that did answers after its own apply, so event-before-reply and
//! read-your-writes hold on followers too. Each write applied takes the
//! next zxid, as on a standalone server: the same everywhere (every member
//! applies the same entries from the same state) and increasing through
//! leader changes and restarts. Reads are local; `sync`
//! asks the leader for a read index and waits for the local apply. Only the
//! leader expires sessions and reaps nodes; followers pass their clients'
//! liveness on each half tick, and a new leader gives every session a full
//! timeout. A session belongs to the member it was last opened or resumed
//! on (a resume is a `MoveSession` txn, answered after its own apply); a
//! write of the session proposed by any other member after that is
//! refused with `SessionMoved`. The log store keeps term and index in every record, syncs the
//! vote before it counts and cuts any suffix raft asks it to; the state
//! machine snapshots from the copy-on-write view and installs a leader's
//! snapshot on a member too far behind.
//!
//! ## Limits
//!
//! Every queue is bounded ([`config::Config`]): frames, data, requests in
//! flight per connection (past it the socket is not read: back-pressure),
//! events queued per connection (past it the connection is closed), watches
//! per session, connections in all and per address, the commit queue.

pub mod acl;
pub mod admin;
pub mod allocator;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod context;
pub mod embedded;
/// Fuzz target bodies, shared by `fuzz/` and the stable smoke test.
#[doc(hidden)]
pub mod fuzzing;
pub mod housekeeping;
pub mod net;
pub mod pipeline;
pub mod server;
pub mod session;
pub mod stats;
pub mod storage;
pub mod tree;
pub mod txn;
pub mod watch;
pub mod zk;

pub use config::Config;
pub use embedded::TemporaryServer;
pub use server::{run, Server, ServerError};
