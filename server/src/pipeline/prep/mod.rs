//! Prep: the one stage between a connection and the commit log. It decides,
//! once and before anything is ordered, what apply must never decide
//! itself: the wall time a write carries, session ids and passwords, and
//! liveness (every request moves its session's deadline; a session past
//! it, or closing, is refused here). Connections only frame bytes and keep
//! each session's order; apply reads nothing but the txn.
//!
//! * [`request`]: one request of a live session → what its connection does
//!   with it.
//! * [`sessions`]: opening, resuming and (in an ensemble) claiming sessions.
//! * [`expired_sessions`] and [`due_nodes`]: the server's own writes.
//! * [`validate`]: the checks that need no state.

pub mod sessions;
pub mod validate;

use arbor_protocol::Hex;
use arbor_protocol::{ErrorCode, Op, OpResult, SessionId};
use std::sync::Arc;

use tokio::sync::oneshot;
use tracing::{debug, info};

use crate::context::{Decider, Shared, CUT_OFF_MESSAGE};
use crate::pipeline::commit::{Proposal, WriteResult};
use crate::pipeline::read;
use crate::txn::{CloseReason, Decision, Txn};

pub use validate::{check_path, prep_write, Requester};

/// What a connection does with a request, as prep decided.
pub struct Prepped {
    pub then: Then,
    /// The session is closing or gone: the connection takes nothing after this.
    pub last: bool,
}

pub enum Then {
    /// Answered already: a ping, or a refusal.
    Answer(WriteResult),
    /// A write for the committer, its time fixed.
    Propose(Proposal),
    /// A read, run against the applied state when its turn comes.
    Read(Op),
    /// Answered later, off the write path (an ensemble's `sync`, a
    /// membership change).
    Await(oneshot::Receiver<WriteResult>),
    /// Not answered: the connection closes after what it owes, saying why.
    Leave(ErrorCode, &'static str),
}

impl Prepped {
    fn answer(result: WriteResult) -> Self {
        Self {
            then: Then::Answer(result),
            last: false,
        }
    }
}

/// A txn with its wall time fixed now; nobody waits on its result unless a
/// reply is set.
pub fn proposal(shared: &Shared, txn: Txn) -> Proposal {
    Proposal {
        txn,
        time_ms: shared.clock.wall_ms(),
        reply: None,
    }
}

/// Preps request `xid` of `session_id`, which is attached to the asking
/// connection.
pub fn request(shared: &Arc<Shared>, session_id: SessionId, xid: u64, op: Op) -> Prepped {
    if !shared.vouches() {
        // Cut off from the majority, which may expire this session: the
        // client must go where its session is heard (see
        // `crate::cluster::contact`).
        return Prepped {
            then: Then::Leave(ErrorCode::Unavailable, CUT_OFF_MESSAGE),
            last: true,
        };
    }
    if !shared
        .tracker
        .lock()
        .touch(session_id, shared.clock.monotonic_ms())
    {
        return Prepped {
            then: Then::Answer(Err(ErrorCode::SessionExpired)),
            last: true,
        };
    }
    debug!(session_id = %Hex(session_id), xid, op = op.name(), "request");
    match op {
        Op::Ping => Prepped::answer(Ok(OpResult::Pong)),
        Op::CloseSession => {
            if !shared.tracker.lock().start_closing(session_id) {
                return Prepped {
                    then: Then::Answer(Err(ErrorCode::SessionExpired)),
                    last: true,
                };
            }
            let txn = Txn::CloseSession {
                session_id,
                reason: CloseReason::Closed,
            };
            Prepped {
                then: Then::Propose(proposal(shared, txn)),
                last: true,
            }
        }
        op if op.is_write() => {
            let who = Requester {
                session_id,
                active: true,
            };
            match prep_write(op, who, &shared.config) {
                Ok(txn) => Prepped {
                    then: Then::Propose(proposal(shared, txn)),
                    last: false,
                },
                Err(code) => Prepped::answer(Err(code)),
            }
        }
        Op::Auth {
            scheme,
            credentials,
        } => authenticate(shared, session_id, &scheme, &credentials),
        Op::Sync { .. } if shared.ensemble().is_some() => Prepped {
            then: synced(shared, session_id, op),
            last: false,
        },
        Op::AddMember { .. } | Op::RemoveMember { .. } => Prepped {
            then: change_member(shared, op),
            last: false,
        },
        Op::Admin(command) => Prepped {
            then: crate::admin::native::answer(shared, session_id, command),
            last: false,
        },
        op => Prepped {
            then: Then::Read(op),
            last: false,
        },
    }
}

/// An auth request: credentials that prove an id go to the log (apply adds
/// the id to the session); refused ones end the connection, as ZooKeeper
/// does.
fn authenticate(
    shared: &Shared,
    session_id: SessionId,
    scheme: &str,
    credentials: &[u8],
) -> Prepped {
    let super_digest = shared.config.super_digest.as_deref();
    match crate::acl::auth::prove(scheme, credentials, super_digest) {
        Ok(proved) => {
            info!(session_id = %Hex(session_id), scheme, id = %proved.id, superuser = proved.superuser, "session authenticated");
            let txn = Txn::Authenticate {
                session_id,
                id: proved.id,
                superuser: proved.superuser,
            };
            Prepped {
                then: Then::Propose(proposal(shared, txn)),
                last: false,
            }
        }
        Err(code) => {
            info!(
                session_id = %Hex(session_id),
                scheme, "authentication failed; closing the connection"
            );
            Prepped {
                then: Then::Answer(Err(code)),
                last: true,
            }
        }
    }
}

/// An ensemble member's `sync`: answered once this member has applied what
/// the leader had committed, so the session's next read is linearizable.
fn synced(shared: &Shared, session_id: SessionId, op: Op) -> Then {
    let checked = read::execute(shared, session_id, &op, |checked, _| checked);
    let Some(barrier) = shared.ensemble().map(|ensemble| ensemble.sync()) else {
        return Then::Answer(checked);
    };
    let (answer, result) = oneshot::channel();
    tokio::spawn(async move {
        let _ = answer.send(barrier.await.and(checked));
    });
    Then::Await(result)
}

/// Adds or removes an ensemble member; a standalone server has none.
fn change_member(shared: &Shared, op: Op) -> Then {
    let Some(ensemble) = shared.ensemble() else {
        return Then::Answer(Err(ErrorCode::Unimplemented));
    };
    let change = match op {
        Op::AddMember {
            id,
            client_addr,
            peer_addr,
        } => ensemble.change_member(id, Some((client_addr, peer_addr))),
        Op::RemoveMember { id } => ensemble.change_member(id, None),
        _ => return Then::Answer(Err(ErrorCode::BadRequest)),
    };
    let ensemble = ensemble.clone();
    let (answer, result) = oneshot::channel();
    tokio::spawn(async move {
        let result = change
            .await
            .map(|()| OpResult::ClusterStatus(ensemble.status()));
        let _ = answer.send(result);
    });
    Then::Await(result)
}

/// Expiries of every session whose deadline has passed by now, if this
/// server decides them. A leader decides only from deadlines it has
/// tracked since its own term began (see [`SessionTracker::renew_all`]).
///
/// [`SessionTracker::renew_all`]: crate::session::SessionTracker::renew_all
pub fn expired_sessions(shared: &Shared) -> Vec<Proposal> {
    let Some(decider) = shared.decider() else {
        return Vec::new();
    };
    let expired = {
        let mut tracker = shared.tracker.lock();
        if let Decider::Leader { term } = decider {
            if tracker.leading_term() != Some(term) {
                return Vec::new();
            }
        }
        tracker.take_expired(shared.clock.monotonic_ms())
    };
    expired
        .into_iter()
        .map(|session_id| {
            info!(session_id = %Hex(session_id), ?decider, "session deadline passed; proposing expiry");
            proposal(shared, decider.txn(Decision::Expire { session_id }))
        })
        .collect()
}

/// Deletions of the containers and TTL nodes due by now, at most
/// `reap_batch_max` of them, if this server decides them.
pub fn due_nodes(shared: &Shared) -> Vec<Proposal> {
    let Some(decider) = shared.decider() else {
        return Vec::new();
    };
    let now_ms = shared.clock.wall_ms();
    let due = shared
        .state
        .read()
        .tree
        .reap_candidates(now_ms, shared.config.reap_batch_max);
    due.iter()
        .filter_map(Decision::of)
        .map(|decision| proposal(shared, decider.txn(decision)))
        .collect()
}
