//! Sessions as prep makes them: a new session's id, password and timeout
//! are chosen here and go through the log as a txn; a resume is checked
//! against the session table (password, liveness), then claimed through
//! the log, which orders it after every request the session made before.

use std::time::Duration;

use arbor_protocol::{ErrorCode, SessionId, SESSION_PASSWORD_BYTES};

use crate::acl::identity::Origin;
use crate::context::{Shared, Standing, CUT_OFF_MESSAGE};
use crate::session::negotiate_timeout_ms;
use crate::txn::Txn;

/// Tries at a handshake's txn through a leader change, and the pause
/// between them.
const HANDSHAKE_PROPOSAL_ATTEMPTS: u32 = 3;
const HANDSHAKE_PROPOSAL_RETRY_PAUSE: Duration = Duration::from_millis(200);

/// A session a connection may serve.
#[derive(Debug, Clone, Copy)]
pub struct Grant {
    pub session_id: SessionId,
    pub password: [u8; SESSION_PASSWORD_BYTES],
    pub timeout_ms: u32,
}

/// Why a session could not be opened or resumed: the handshake's answer.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
}

impl Refusal {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Lets a handshake go on once this server serves: at once if it does;
/// otherwise once it does again, if that takes at most [`JOINING_WAIT`]
/// for a member still joining (just started) or [`CUT_OFF_WAIT`] for one
/// cut off from the majority; else never (the majority would not hear of
/// the session: the client tries another member).
pub async fn admit(shared: &Shared) -> Result<(), Refusal> {
    let started = tokio::time::Instant::now();
    loop {
        let waited = started.elapsed();
        match shared.standing() {
            Standing::Serving => return Ok(()),
            Standing::Joining if waited < JOINING_WAIT => {}
            Standing::CutOff if waited < CUT_OFF_WAIT => {}
            Standing::Joining | Standing::CutOff => {
                return Err(Refusal::new(ErrorCode::Unavailable, CUT_OFF_MESSAGE))
            }
        }
        tokio::time::sleep(STANDING_POLL).await;
    }
}

/// How long a handshake may wait for a starting member to join: joining
/// takes an append and a touch, tens of milliseconds, unless the member
/// starts cut off.
const JOINING_WAIT: Duration = Duration::from_secs(2);

/// How long a handshake may wait for a member cut off from the majority
/// to be in contact again. Most often the member only waits for an
/// election that ends in a moment, and its clients, closed when its proof
/// went stale, are reconnecting to it: held, they are served as soon as
/// it ends instead of after their reconnect backoff. Short, because a
/// member truly cut off delays each client that tries it by this much.
const CUT_OFF_WAIT: Duration = Duration::from_millis(500);

/// How often a waiting handshake looks at the member's standing.
const STANDING_POLL: Duration = Duration::from_millis(10);

/// Opens a session for a client whose connection proves `origin`, with a
/// timeout negotiated from `requested_ms`; answers once its creation is
/// applied here.
pub async fn open(shared: &Shared, requested_ms: u32, origin: Origin) -> Result<Grant, Refusal> {
    let timeout_ms = negotiate_timeout_ms(requested_ms, shared.config.tick_ms);
    let session_id = loop {
        let id: u64 = rand::random();
        if id != 0 {
            break id;
        }
    };
    let password: [u8; SESSION_PASSWORD_BYTES] = rand::random();
    // Without a certificate, the txn members of an older release read too:
    // an ensemble can be upgraded one member at a time.
    let txn = match origin.x509 {
        None => Txn::OpenSession {
            session_id,
            password,
            timeout_ms,
            ip: origin.ip,
        },
        Some(_) => Txn::OpenSessionFrom {
            session_id,
            password,
            timeout_ms,
            origin,
        },
    };
    // Found already there on a second try: an earlier try went through.
    propose_through_leader_changes(shared, txn, |attempt, code| {
        attempt > 1 && code == ErrorCode::SessionMoved
    })
    .await
    .map_err(|code| Refusal::new(code, format!("cannot open a session: {code}")))?;
    Ok(Grant {
        session_id,
        password,
        timeout_ms,
    })
}

/// A resume of a live session whose password matches; its deadline moves
/// as for any request. The caller then [`claim`]s it.
pub fn check(
    shared: &Shared,
    session_id: SessionId,
    password: [u8; SESSION_PASSWORD_BYTES],
) -> Result<Grant, Refusal> {
    let expired = || {
        Refusal::new(
            ErrorCode::SessionExpired,
            format!("session {session_id:#x} has expired"),
        )
    };
    let state = shared.state.read();
    let record = state.session(session_id).ok_or_else(expired)?;
    if record.password != password {
        let message = format!("wrong password for session {session_id:#x}");
        return Err(Refusal::new(ErrorCode::AuthFailed, message));
    }
    if !shared
        .tracker
        .lock()
        .touch(session_id, shared.clock.monotonic_ms())
    {
        return Err(expired());
    }
    Ok(Grant {
        session_id,
        password: record.password,
        timeout_ms: record.timeout_ms,
    })
}

/// Takes over a session a client resumes here, through the log: every
/// write the session's earlier connections handed over (here, or through
/// another member) is ordered before the claim and applied by the time it
/// is answered, so the client's next request sees them, as a session's
/// requests must. In an ensemble any write the session might still make
/// through another member is refused after it with `SessionMoved`. The
/// session's address and certificate id become the new connection's.
pub async fn claim(shared: &Shared, session_id: SessionId, origin: Origin) -> Result<(), Refusal> {
    let txn = match origin.x509 {
        None => Txn::ClaimSession {
            session_id,
            ip: origin.ip,
        },
        Some(_) => Txn::ClaimSessionFrom { session_id, origin },
    };
    propose_through_leader_changes(shared, txn, |_, _| false)
        .await
        .map_err(|code| {
            Refusal::new(
                code,
                format!("cannot resume session {session_id:#x}: {code}"),
            )
        })
}

/// Proposes a handshake's txn and waits for it. In an ensemble a leader
/// change can refuse it (`NotLeader`) or leave its outcome unknown; the same
/// txn is proposed again, and `landed(attempt, code)` recognises the answer
/// of a retry whose earlier try went through.
async fn propose_through_leader_changes(
    shared: &Shared,
    txn: Txn,
    landed: impl Fn(u32, ErrorCode) -> bool,
) -> Result<(), ErrorCode> {
    for attempt in 1..=HANDSHAKE_PROPOSAL_ATTEMPTS {
        let proposal = super::proposal(shared, txn.clone());
        let result = shared.committer.propose_answered(proposal).await?;
        let code = match result.await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(code)) if landed(attempt, code) => return Ok(()),
            Ok(Err(
                code @ (ErrorCode::NotLeader | ErrorCode::Unavailable | ErrorCode::OutcomeUnknown),
            )) => code,
            Ok(Err(code)) => return Err(code),
            Err(_) => ErrorCode::Unavailable,
        };
        if attempt == HANDSHAKE_PROPOSAL_ATTEMPTS || shared.shutdown.is_cancelled() {
            return Err(code);
        }
        tokio::time::sleep(HANDSHAKE_PROPOSAL_RETRY_PAUSE).await;
    }
    Err(ErrorCode::Unavailable)
}
