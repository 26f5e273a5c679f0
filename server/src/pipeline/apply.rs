//! The state machine: the znode tree and the session table, changed only by
//! applying txns in zxid order.
//!
//! `apply` is a pure function of the current state and the entry. It checks
//! each write in full (so a failed write is a no-op that still takes its place
//! in the order, as ZooKeeper's error txns do), and reports the tree changes
//! for the watch manager and the session changes for the tracker.

use std::collections::HashMap;
use std::sync::Arc;

use arbor_protocol::{ErrorCode, OpResult, SessionId, Zxid, SESSION_PASSWORD_BYTES};

use crate::acl::identity::{Origin, ANYBODY, AUTH_IDS_PER_SESSION_MAX};
use crate::acl::Identity;
use crate::cluster::records::AppliedPosition;
use crate::tree::{Change, DataTree, TreeView, Writer};
use crate::txn::{CloseReason, Txn, TxnEntry};

/// A session as the state machine knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    pub timeout_ms: u32,
    pub password: [u8; SESSION_PASSWORD_BYTES],
    /// Who the session is, for ACL checks.
    pub identity: Arc<Identity>,
}

/// The state as of one zxid, detached from the live state machine.
#[derive(Debug, Clone)]
pub struct StateView {
    pub tree: TreeView,
    pub sessions: Vec<(SessionId, SessionRecord)>,
    pub last_zxid: Zxid,
    pub replica: AppliedPosition,
}

/// A session that began or ended with a txn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionChange {
    Started {
        session_id: SessionId,
        timeout_ms: u32,
    },
    Ended {
        session_id: SessionId,
        reason: CloseReason,
    },
}

/// What applying one entry did.
#[derive(Debug)]
pub struct Applied {
    pub result: Result<OpResult, ErrorCode>,
    pub changes: Vec<Change>,
    pub session: Option<SessionChange>,
}

#[derive(Debug, Default)]
pub struct StateMachine {
    pub tree: DataTree,
    sessions: HashMap<SessionId, SessionRecord>,
    last_zxid: Zxid,
    /// Where in the replicated log this state is (an ensemble member only;
    /// empty standalone).
    pub replica: AppliedPosition,
}

impl StateMachine {
    pub fn new() -> Self {
        Self::default()
    }

    /// The zxid of the last applied entry.
    pub fn last_zxid(&self) -> Zxid {
        self.last_zxid
    }

    pub fn session(&self, session_id: SessionId) -> Option<&SessionRecord> {
        self.sessions.get(&session_id)
    }

    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Every session, in no particular order.
    pub fn sessions(&self) -> impl Iterator<Item = (SessionId, &SessionRecord)> {
        self.sessions.iter().map(|(id, record)| (*id, record))
    }

    /// A frozen copy of the whole state for a snapshot (see [`DataTree::view`]).
    pub fn view(&self) -> StateView {
        StateView {
            tree: self.tree.view(),
            sessions: self
                .sessions()
                .map(|(id, record)| (id, record.clone()))
                .collect(),
            last_zxid: self.last_zxid,
            replica: self.replica.clone(),
        }
    }

    /// A state machine as a snapshot recorded it.
    pub fn from_parts(
        tree: DataTree,
        sessions: impl IntoIterator<Item = (SessionId, SessionRecord)>,
        last_zxid: Zxid,
    ) -> Self {
        Self {
            tree,
            sessions: sessions.into_iter().collect(),
            last_zxid,
            replica: AppliedPosition::default(),
        }
    }

    /// Who `session_id` is; a session that is gone is nobody.
    pub fn identity(&self, session_id: SessionId) -> &Identity {
        self.sessions
            .get(&session_id)
            .map_or(&ANYBODY, |record| &record.identity)
    }

    fn open_session(
        &mut self,
        session_id: SessionId,
        password: [u8; SESSION_PASSWORD_BYTES],
        timeout_ms: u32,
        origin: &Origin,
    ) -> (Result<OpResult, ErrorCode>, Option<SessionChange>) {
        if self.sessions.contains_key(&session_id) {
            return (Err(ErrorCode::SessionMoved), None);
        }
        let record = SessionRecord {
            timeout_ms,
            password,
            identity: Arc::new(Identity::from_origin(origin)),
        };
        self.sessions.insert(session_id, record);
        let started = SessionChange::Started {
            session_id,
            timeout_ms,
        };
        (Ok(OpResult::Pong), Some(started))
    }

    /// A session moved to a connection that proves `origin`.
    fn claim_session(
        &mut self,
        session_id: SessionId,
        origin: &Origin,
    ) -> Result<OpResult, ErrorCode> {
        let record = self
            .sessions
            .get_mut(&session_id)
            .ok_or(ErrorCode::SessionExpired)?;
        if !record.identity.holds(origin) {
            Arc::make_mut(&mut record.identity).move_to(origin);
        }
        Ok(OpResult::Pong)
    }

    /// Adds a proved id to a session's identity (once; at most
    /// [`AUTH_IDS_PER_SESSION_MAX`]).
    fn authenticate(
        &mut self,
        session_id: SessionId,
        id: &arbor_protocol::acl::Id,
        superuser: bool,
    ) -> Result<OpResult, ErrorCode> {
        let record = self
            .sessions
            .get_mut(&session_id)
            .ok_or(ErrorCode::SessionExpired)?;
        if !record.identity.ids.contains(id) {
            if record.identity.ids.len() >= AUTH_IDS_PER_SESSION_MAX {
                return Err(ErrorCode::LimitExceeded);
            }
            Arc::make_mut(&mut record.identity).ids.push(id.clone());
        }
        if superuser && !record.identity.superuser {
            Arc::make_mut(&mut record.identity).superuser = true;
        }
        Ok(OpResult::Authenticated)
    }

    /// Applies one entry. Entries must come in strictly increasing zxid order.
    pub fn apply(&mut self, entry: &TxnEntry) -> Applied {
        if let Txn::Decided { decision, .. } = &entry.txn {
            // Whether a decision may apply is the ensemble's to judge, by
            // its term, before it gets here; applying it is its txn's work.
            return self.apply(&TxnEntry {
                zxid: entry.zxid,
                time_ms: entry.time_ms,
                txn: decision.txn(),
            });
        }
        debug_assert!(entry.zxid > self.last_zxid, "zxids must increase");
        self.last_zxid = entry.zxid;
        let (zxid, time_ms) = (entry.zxid, entry.time_ms);
        let mut changes = Vec::new();
        let mut session = None;
        let result = match &entry.txn {
            Txn::CreateSession {
                session_id,
                password,
                timeout_ms,
            } => {
                let (result, started) =
                    self.open_session(*session_id, *password, *timeout_ms, &Origin::default());
                session = started;
                result
            }
            Txn::OpenSession {
                session_id,
                password,
                timeout_ms,
                ip,
            } => {
                let origin = Origin {
                    ip: *ip,
                    x509: None,
                };
                let (result, started) =
                    self.open_session(*session_id, *password, *timeout_ms, &origin);
                session = started;
                result
            }
            Txn::CloseSession { session_id, reason } => {
                if self.sessions.remove(session_id).is_some() {
                    self.tree.remove_ephemerals(*session_id, zxid, &mut changes);
                    session = Some(SessionChange::Ended {
                        session_id: *session_id,
                        reason: *reason,
                    });
                    Ok(OpResult::SessionClosed)
                } else {
                    Err(ErrorCode::SessionExpired)
                }
            }
            Txn::Write { session_id, op } => {
                let record = self.sessions.get(session_id);
                let who = Writer {
                    session_id: *session_id,
                    alive: record.is_some(),
                    identity: record.map_or(&ANYBODY, |record| &record.identity),
                };
                self.tree.write(who, op, zxid, time_ms, &mut changes)
            }
            Txn::Multi { session_id, ops } => {
                let record = self.sessions.get(session_id);
                let who = Writer {
                    session_id: *session_id,
                    alive: record.is_some(),
                    identity: record.map_or(&ANYBODY, |record| &record.identity),
                };
                let outcomes = self.tree.write_multi(who, ops, zxid, time_ms, &mut changes);
                Ok(OpResult::Multi(outcomes))
            }
            Txn::SetAcl {
                session_id,
                path,
                acl,
                version,
            } => {
                let who = self
                    .sessions
                    .get(session_id)
                    .map_or(&ANYBODY, |record| &record.identity);
                let stat = self.tree.set_acl(who, path, acl, *version);
                stat.map(OpResult::SetAcl)
            }
            Txn::Authenticate {
                session_id,
                id,
                superuser,
            } => self.authenticate(*session_id, id, *superuser),
            Txn::ClaimSession { session_id, ip } => {
                let origin = Origin {
                    ip: *ip,
                    x509: None,
                };
                self.claim_session(*session_id, &origin)
            }
            Txn::OpenSessionFrom {
                session_id,
                password,
                timeout_ms,
                origin,
            } => {
                let (result, started) =
                    self.open_session(*session_id, *password, *timeout_ms, origin);
                session = started;
                result
            }
            Txn::ClaimSessionFrom { session_id, origin } => self.claim_session(*session_id, origin),
            Txn::ReapContainer { path } => self
                .tree
                .reap_container(path, zxid, &mut changes)
                .map(|()| OpResult::Deleted),
            Txn::ReapTtl { path } => self
                .tree
                .reap_ttl(path, zxid, time_ms, &mut changes)
                .map(|()| OpResult::Deleted),
            Txn::MoveSession { session_id } => {
                if self.sessions.contains_key(session_id) {
                    Ok(OpResult::Pong)
                } else {
                    Err(ErrorCode::SessionExpired)
                }
            }
            Txn::Decided { .. } => unreachable!("a decision is applied as its txn, above"),
        };
        Applied {
            result,
            changes,
            session,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbor_protocol::{CreateMode, MultiOp};

    fn entry(zxid: Zxid, txn: Txn) -> TxnEntry {
        TxnEntry {
            zxid,
            time_ms: 1,
            txn,
        }
    }

    fn log() -> Vec<TxnEntry> {
        vec![
            entry(
                1,
                Txn::CreateSession {
                    session_id: 9,
                    password: [1; 16],
                    timeout_ms: 4000,
                },
            ),
            entry(
                2,
                Txn::Write {
                    session_id: 9,
                    op: MultiOp::Create {
                        path: "/a".into(),
                        data: vec![],
                        mode: CreateMode::Persistent,
                    },
                },
            ),
            entry(
                3,
                Txn::Write {
                    session_id: 9,
                    op: MultiOp::Create {
                        path: "/a/e".into(),
                        data: vec![],
                        mode: CreateMode::EphemeralSequential,
                    },
                },
            ),
            entry(
                4,
                Txn::Write {
                    session_id: 9,
                    op: MultiOp::SetData {
                        path: "/a".into(),
                        data: b"v".to_vec(),
                        version: 0,
                    },
                },
            ),
            entry(
                5,
                Txn::CloseSession {
                    session_id: 9,
                    reason: CloseReason::Expired,
                },
            ),
            entry(
                6,
                Txn::Write {
                    session_id: 9,
                    op: MultiOp::Create {
                        path: "/late".into(),
                        data: vec![],
                        mode: CreateMode::Ephemeral,
                    },
                },
            ),
        ]
    }

    #[test]
    fn closing_a_session_deletes_its_ephemerals_and_refuses_new_ones() {
        let mut sm = StateMachine::new();
        let applied: Vec<Applied> = log().iter().map(|e| sm.apply(e)).collect();
        assert!(sm.tree.node("/a/e0000000000").is_none());
        assert!(applied[4]
            .changes
            .contains(&Change::Deleted("/a/e0000000000".into(), None)));
        assert_eq!(applied[5].result, Err(ErrorCode::SessionExpired));
        assert_eq!(sm.session_count(), 0);
        assert_eq!(sm.last_zxid(), 6);
    }

    #[test]
    fn replaying_the_same_log_gives_the_same_state() {
        let (mut one, mut two) = (StateMachine::new(), StateMachine::new());
        for e in log() {
            one.apply(&e);
            two.apply(&e);
        }
        let a = one.tree.node("/a").expect("exists");
        let b = two.tree.node("/a").expect("exists");
        assert_eq!((a.stat(), a.data()), (b.stat(), b.data()));
        assert_eq!(a.version, 1);
    }
}
