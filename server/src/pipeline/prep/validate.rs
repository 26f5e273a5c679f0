//! What prep checks without the tree: path syntax, sizes, TTL range, a
//! closing session creating ephemerals, so that bad requests never reach
//! the log. Checks that need the tree (existence, versions) are made by
//! apply, in order. Pure functions of the request and the configuration.

use arbor_protocol::{path, CreateMode, ErrorCode, MultiOp, Op, SessionId};

use crate::config::{Config, MULTI_OPS_MAX, TTL_MS_MAX};
use crate::txn::{CloseReason, Txn};

/// Who is asking, as prep needs to know it.
#[derive(Debug, Clone, Copy)]
pub struct Requester {
    pub session_id: SessionId,
    /// The session exists and is not closing.
    pub active: bool,
}

/// Turns a write op into a txn, or refuses it.
pub fn prep_write(op: Op, who: Requester, config: &Config) -> Result<Txn, ErrorCode> {
    match op {
        Op::Create { path, data, mode } => write(who, MultiOp::Create { path, data, mode }, config),
        Op::CreateWithAcl {
            path,
            data,
            mode,
            acl,
        } => write(
            who,
            MultiOp::CreateWithAcl {
                path,
                data,
                mode,
                acl,
            },
            config,
        ),
        Op::SetAcl { path, acl, version } => {
            check_path(&path)?;
            crate::acl::validate(&acl)?;
            Ok(Txn::SetAcl {
                session_id: who.session_id,
                path,
                acl,
                version,
            })
        }
        Op::Delete { path, version } => write(who, MultiOp::Delete { path, version }, config),
        Op::SetData {
            path,
            data,
            version,
        } => write(
            who,
            MultiOp::SetData {
                path,
                data,
                version,
            },
            config,
        ),
        Op::Multi { ops } => {
            if ops.len() > MULTI_OPS_MAX {
                return Err(ErrorCode::TooLarge);
            }
            for op in &ops {
                check_multi_op(op, who, config)?;
            }
            Ok(Txn::Multi {
                session_id: who.session_id,
                ops,
            })
        }
        Op::CloseSession => Ok(Txn::CloseSession {
            session_id: who.session_id,
            reason: CloseReason::Closed,
        }),
        other => {
            debug_assert!(!other.is_write(), "every write op is handled above");
            Err(ErrorCode::Internal)
        }
    }
}

fn write(who: Requester, op: MultiOp, config: &Config) -> Result<Txn, ErrorCode> {
    check_multi_op(&op, who, config)?;
    Ok(Txn::Write {
        session_id: who.session_id,
        op,
    })
}

fn check_multi_op(op: &MultiOp, who: Requester, config: &Config) -> Result<(), ErrorCode> {
    match op {
        MultiOp::Create { path, data, mode } => check_create(path, data, *mode, who, config),
        MultiOp::CreateWithAcl {
            path,
            data,
            mode,
            acl,
        } => {
            check_create(path, data, *mode, who, config)?;
            crate::acl::validate(acl)
        }
        MultiOp::SetData { path, data, .. } => {
            check_path(path)?;
            check_data(data, config)
        }
        MultiOp::Check { path, .. } | MultiOp::Delete { path, .. } => check_path(path),
    }
}

fn check_create(
    path: &str,
    data: &[u8],
    mode: CreateMode,
    who: Requester,
    config: &Config,
) -> Result<(), ErrorCode> {
    if mode.is_sequential() {
        path::validate_sequential_prefix(path).map_err(|_| ErrorCode::InvalidPath)?;
    } else {
        check_path(path)?;
    }
    check_data(data, config)?;
    if let Some(ttl_ms) = mode.ttl_ms() {
        if ttl_ms == 0 || ttl_ms > TTL_MS_MAX {
            return Err(ErrorCode::BadArguments);
        }
    }
    if mode.is_ephemeral() && !who.active {
        return Err(ErrorCode::SessionExpired);
    }
    Ok(())
}

/// Checks a path's syntax.
pub fn check_path(path: &str) -> Result<(), ErrorCode> {
    path::validate(path).map_err(|_| ErrorCode::InvalidPath)
}

fn check_data(data: &[u8], config: &Config) -> Result<(), ErrorCode> {
    if data.len() > config.data_bytes_max {
        return Err(ErrorCode::TooLarge);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALIVE: Requester = Requester {
        session_id: 5,
        active: true,
    };

    fn create(path: &str, mode: CreateMode, who: Requester) -> Result<Txn, ErrorCode> {
        let op = Op::Create {
            path: path.into(),
            data: vec![],
            mode,
        };
        prep_write(op, who, &Config::default())
    }

    #[test]
    fn bad_paths_are_invalid_path() {
        for bad in ["", "a", "/a/", "/a//b", "/a/./b", "/\u{1}"] {
            assert_eq!(
                create(bad, CreateMode::Persistent, ALIVE),
                Err(ErrorCode::InvalidPath),
                "{bad:?}"
            );
        }
        assert!(create("/q/", CreateMode::PersistentSequential, ALIVE).is_ok());
    }

    #[test]
    fn oversized_data_is_too_large() {
        let config = Config::default();
        let op = Op::SetData {
            path: "/a".into(),
            data: vec![0; config.data_bytes_max + 1],
            version: -1,
        };
        assert_eq!(prep_write(op, ALIVE, &config), Err(ErrorCode::TooLarge));
    }

    #[test]
    fn a_closing_session_cannot_create_ephemerals() {
        let closing = Requester {
            session_id: 5,
            active: false,
        };
        assert_eq!(
            create("/e", CreateMode::Ephemeral, closing),
            Err(ErrorCode::SessionExpired)
        );
        assert!(create("/p", CreateMode::Persistent, closing).is_ok());
    }

    #[test]
    fn ttl_must_be_in_range() {
        let zero = CreateMode::PersistentWithTtl { ttl_ms: 0 };
        assert_eq!(create("/t", zero, ALIVE), Err(ErrorCode::BadArguments));
    }
}
