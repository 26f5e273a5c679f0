//! ZooKeeper's requests, read into Arbor's own ops: after the handshake,
//! every frame is a `RequestHeader` (xid, op code) and the op's record,
//! and it becomes the [`Op`] the native protocol would have sent, so it
//! runs through the same prep, commit, apply and read path.
//!
//! The op code travels with the request inside the native xid (see
//! [`native_xid`]): a reply's shape depends on it (`create` answers a path,
//! `create2` a path and a stat), and so it reaches the encoder with the
//! reply, in order, with no table to keep.

use arbor_protocol::acl::{Acl, Perms};
use arbor_protocol::{
    AddWatchMode, CreateMode, ErrorCode, MultiOp, Op, ReadOp, SetWatches, WatcherKind,
};

use super::codes::{add_watch_mode, create_flags, op, watcher_type};
use super::jute::{JuteError, Reader};
use crate::config::MULTI_OPS_MAX;

/// One request, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub xid: i32,
    pub op_code: i32,
    pub then: Decoded,
}

/// What a request becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// Run as Arbor's op.
    Op(Op),
    /// Answered at once with this error, no body: an op Arbor does not run
    /// (`reconfig`, `sasl`, an unknown code) or arguments it refuses before
    /// running (an unknown create mode, bad permission bits).
    Refuse(ErrorCode),
}

/// The native xid a ZooKeeper request runs under: its op code in the high
/// half, its own xid in the low half.
pub fn native_xid(op_code: i32, xid: i32) -> u64 {
    (u64::from(op_code as u32) << 32) | u64::from(xid as u32)
}

/// The op code and xid a native xid was made from.
pub fn split_xid(native: u64) -> (i32, i32) {
    ((native >> 32) as u32 as i32, native as u32 as i32)
}

/// Reads one request frame.
pub fn decode(frame: &[u8]) -> Result<Request, JuteError> {
    let mut reader = Reader::new(frame);
    let xid = reader.int("xid")?;
    let op_code = reader.int("type")?;
    let then = body(op_code, &mut reader)?;
    Ok(Request { xid, op_code, then })
}

fn body(op_code: i32, reader: &mut Reader<'_>) -> Result<Decoded, JuteError> {
    let path = |reader: &mut Reader<'_>| reader.string("path");
    let decoded = match op_code {
        op::CREATE | op::CREATE2 | op::CREATE_CONTAINER | op::CREATE_TTL => {
            return create(op_code, reader).map(|create| match create {
                Ok((path, data, mode, acl)) => Decoded::Op(create_op(path, data, mode, acl)),
                Err(code) => Decoded::Refuse(code),
            })
        }
        op::DELETE => Op::Delete {
            path: path(reader)?,
            version: reader.int("version")?,
        },
        op::EXISTS => Op::Exists {
            path: path(reader)?,
            watch: reader.bool("watch")?,
        },
        op::GET_DATA => Op::GetData {
            path: path(reader)?,
            watch: reader.bool("watch")?,
        },
        op::SET_DATA => Op::SetData {
            path: path(reader)?,
            data: reader.data("data")?,
            version: reader.int("version")?,
        },
        op::GET_ACL => Op::GetAcl {
            path: path(reader)?,
        },
        op::SET_ACL => {
            let path = path(reader)?;
            let Ok(acl) = acl_list(reader)? else {
                return Ok(Decoded::Refuse(ErrorCode::InvalidAcl));
            };
            Op::SetAcl {
                path,
                acl,
                version: reader.int("version")?,
            }
        }
        op::GET_CHILDREN | op::GET_CHILDREN2 => Op::GetChildren {
            path: path(reader)?,
            watch: reader.bool("watch")?,
        },
        op::SYNC => Op::Sync {
            path: path(reader)?,
        },
        op::PING => Op::Ping,
        // A check on its own is a multi of one check: same rule, same result.
        op::CHECK => Op::Multi {
            ops: vec![MultiOp::Check {
                path: path(reader)?,
                version: reader.int("version")?,
            }],
        },
        op::MULTI => match multi(reader)? {
            Ok(ops) => Op::Multi { ops },
            Err(code) => return Ok(Decoded::Refuse(code)),
        },
        op::AUTH => {
            let _type = reader.int("type")?;
            Op::Auth {
                scheme: reader.string("scheme")?,
                credentials: reader.data("auth")?,
            }
        }
        op::SET_WATCHES | op::SET_WATCHES2 => {
            let relative_zxid = reader.long("relativeZxid")?;
            let mut watches = SetWatches {
                relative_zxid: relative_zxid.max(0) as u64,
                data: reader.strings("dataWatches")?,
                exist: reader.strings("existWatches")?,
                child: reader.strings("childWatches")?,
                ..SetWatches::default()
            };
            if op_code == op::SET_WATCHES2 {
                watches.persistent = reader.strings("persistentWatches")?;
                watches.persistent_recursive = reader.strings("persistentRecursiveWatches")?;
            }
            Op::SetWatches(watches)
        }
        op::ADD_WATCH => {
            let path = path(reader)?;
            let mode = match reader.int("mode")? {
                add_watch_mode::PERSISTENT => AddWatchMode::Persistent,
                add_watch_mode::PERSISTENT_RECURSIVE => AddWatchMode::PersistentRecursive,
                _ => return Ok(Decoded::Refuse(ErrorCode::BadArguments)),
            };
            Op::AddWatch { path, mode }
        }
        op::REMOVE_WATCHES => match watcher(reader)? {
            Some((path, kind)) => Op::RemoveWatches { path, kind },
            None => return Ok(Decoded::Refuse(ErrorCode::BadArguments)),
        },
        op::WHO_AM_I => Op::WhoAmI,
        op::GET_EPHEMERALS => Op::GetEphemerals {
            prefix: reader.string("prefixPath")?,
        },
        op::GET_ALL_CHILDREN_NUMBER => Op::CountDescendants {
            path: path(reader)?,
        },
        op::MULTI_READ => match multi_read(reader)? {
            Ok(ops) => Op::MultiRead { ops },
            Err(code) => return Ok(Decoded::Refuse(code)),
        },
        op::CHECK_WATCHES => match watcher(reader)? {
            Some((path, kind)) => Op::CheckWatches { path, kind },
            None => return Ok(Decoded::Refuse(ErrorCode::BadArguments)),
        },
        op::CLOSE_SESSION => Op::CloseSession,
        // Membership changes go through Arbor's own admin ops; the reply
        // says ReconfigDisabled (see `reply`).
        op::RECONFIG => return Ok(Decoded::Refuse(ErrorCode::Unimplemented)),
        _ => return Ok(Decoded::Refuse(ErrorCode::Unimplemented)),
    };
    Ok(Decoded::Op(decoded))
}

/// The path and watcher type of removeWatches and checkWatches; `None`
/// for a type ZooKeeper does not define.
fn watcher(reader: &mut Reader<'_>) -> Result<Option<(String, WatcherKind)>, JuteError> {
    let path = reader.string("path")?;
    let kind = watcher_kind(reader.int("type")?);
    Ok(kind.map(|kind| (path, kind)))
}

fn watcher_kind(code: i32) -> Option<WatcherKind> {
    Some(match code {
        watcher_type::CHILDREN => WatcherKind::Children,
        watcher_type::DATA => WatcherKind::Data,
        watcher_type::ANY => WatcherKind::Any,
        watcher_type::PERSISTENT => WatcherKind::Persistent,
        watcher_type::PERSISTENT_RECURSIVE => WatcherKind::PersistentRecursive,
        _ => return None,
    })
}

/// A multiRead's reads (getData and getChildren, each with its `watch`
/// flag, which ZooKeeper ignores in a multiRead), until a header with
/// `done`. The inner `Err` is a refusal code.
fn multi_read(reader: &mut Reader<'_>) -> Result<Result<Vec<ReadOp>, ErrorCode>, JuteError> {
    let mut ops = Vec::new();
    loop {
        let op_code = reader.int("multi type")?;
        let done = reader.bool("multi done")?;
        let _err = reader.int("multi err")?;
        if done {
            return Ok(Ok(ops));
        }
        if ops.len() == MULTI_OPS_MAX {
            return Ok(Err(ErrorCode::TooLarge));
        }
        let path = reader.string("path")?;
        let _watch = reader.bool("watch")?;
        ops.push(match op_code {
            op::GET_DATA => ReadOp::GetData { path },
            op::GET_CHILDREN => ReadOp::GetChildren { path },
            _ => return Ok(Err(ErrorCode::Unimplemented)),
        });
    }
}

type Create = (String, Vec<u8>, CreateMode, Vec<Acl>);

/// A create of any kind: `CreateRequest`, or `CreateTTLRequest` (with a
/// TTL after the flags). The inner `Err` is a refusal code.
fn create(op_code: i32, reader: &mut Reader<'_>) -> Result<Result<Create, ErrorCode>, JuteError> {
    let path = reader.string("path")?;
    let data = reader.data("data")?;
    let acl = acl_list(reader)?;
    let flags = reader.int("flags")?;
    let ttl = if op_code == op::CREATE_TTL {
        Some(reader.long("ttl")?)
    } else {
        None
    };
    let Ok(acl) = acl else {
        return Ok(Err(ErrorCode::InvalidAcl));
    };
    Ok(create_mode(op_code, flags, ttl).map(|mode| (path, data, mode, acl)))
}

/// The mode of a create, as ZooKeeper's server checks it: a TTL only with a
/// TTL mode and op (and positive), a container only with createContainer.
fn create_mode(op_code: i32, flags: i32, ttl: Option<i64>) -> Result<CreateMode, ErrorCode> {
    let ttl_ms = match ttl {
        Some(ttl) if ttl > 0 => Some(ttl as u64),
        Some(_) => return Err(ErrorCode::BadArguments),
        None => None,
    };
    let mode = match (flags, ttl_ms) {
        (create_flags::PERSISTENT, None) => CreateMode::Persistent,
        (create_flags::EPHEMERAL, None) => CreateMode::Ephemeral,
        (create_flags::PERSISTENT_SEQUENTIAL, None) => CreateMode::PersistentSequential,
        (create_flags::EPHEMERAL_SEQUENTIAL, None) => CreateMode::EphemeralSequential,
        (create_flags::CONTAINER, None) => CreateMode::Container,
        (create_flags::PERSISTENT_WITH_TTL, Some(ttl_ms)) => {
            CreateMode::PersistentWithTtl { ttl_ms }
        }
        (create_flags::PERSISTENT_SEQUENTIAL_WITH_TTL, Some(ttl_ms)) => {
            CreateMode::PersistentSequentialWithTtl { ttl_ms }
        }
        _ => return Err(ErrorCode::BadArguments),
    };
    let container_op = op_code == op::CREATE_CONTAINER;
    if container_op != mode.is_container() {
        return Err(ErrorCode::BadArguments);
    }
    Ok(mode)
}

/// A create with the ACL it names; an open one is a plain create, which
/// carries no ACL bytes in the log.
fn create_op(path: String, data: Vec<u8>, mode: CreateMode, acl: Vec<Acl>) -> Op {
    if Acl::is_open(&acl) {
        Op::Create { path, data, mode }
    } else {
        Op::CreateWithAcl {
            path,
            data,
            mode,
            acl,
        }
    }
}

fn multi_create(path: String, data: Vec<u8>, mode: CreateMode, acl: Vec<Acl>) -> MultiOp {
    if Acl::is_open(&acl) {
        MultiOp::Create { path, data, mode }
    } else {
        MultiOp::CreateWithAcl {
            path,
            data,
            mode,
            acl,
        }
    }
}

/// A `vector<ACL>`; the inner `Err` if a permission has bits ZooKeeper
/// gives no meaning (its InvalidACL).
fn acl_list(reader: &mut Reader<'_>) -> Result<Result<Vec<Acl>, ()>, JuteError> {
    let count = reader.count("acl")?;
    let mut acl = Vec::with_capacity(count);
    let mut valid = true;
    for _ in 0..count {
        let perms = reader.int("perms")?;
        let scheme = reader.string("scheme")?;
        let id = reader.string("id")?;
        match u32::try_from(perms).ok().and_then(Perms::from_bits) {
            Some(perms) => acl.push(Acl::new(perms, scheme, id)),
            None => valid = false,
        }
    }
    Ok(if valid { Ok(acl) } else { Err(()) })
}

/// A multi's ops: each a `MultiHeader` (type, done, err) and the op's
/// record, until a header with `done`. The inner `Err` is a refusal code.
fn multi(reader: &mut Reader<'_>) -> Result<Result<Vec<MultiOp>, ErrorCode>, JuteError> {
    let mut ops = Vec::new();
    let mut refusal = None;
    loop {
        let op_code = reader.int("multi type")?;
        let done = reader.bool("multi done")?;
        let _err = reader.int("multi err")?;
        if done {
            break;
        }
        // Refused here as prep would refuse it, before the ops are made.
        if ops.len() == MULTI_OPS_MAX {
            return Ok(Err(ErrorCode::TooLarge));
        }
        let op = match op_code {
            op::CREATE | op::CREATE2 | op::CREATE_CONTAINER | op::CREATE_TTL => {
                match create(op_code, reader)? {
                    Ok((path, data, mode, acl)) => multi_create(path, data, mode, acl),
                    Err(code) => {
                        refusal.get_or_insert(code);
                        continue;
                    }
                }
            }
            op::DELETE => MultiOp::Delete {
                path: reader.string("path")?,
                version: reader.int("version")?,
            },
            op::SET_DATA => MultiOp::SetData {
                path: reader.string("path")?,
                data: reader.data("data")?,
                version: reader.int("version")?,
            },
            op::CHECK => MultiOp::Check {
                path: reader.string("path")?,
                version: reader.int("version")?,
            },
            // Its record cannot be skipped without knowing it: the rest of
            // the frame is unreadable.
            _ => return Ok(Err(ErrorCode::Unimplemented)),
        };
        ops.push(op);
    }
    Ok(match refusal {
        Some(code) => Err(code),
        None => Ok(ops),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zk::jute::Write;

    fn header(xid: i32, op_code: i32) -> Vec<u8> {
        let mut out = Vec::new();
        out.put_int(xid);
        out.put_int(op_code);
        out
    }

    fn open_acl(out: &mut Vec<u8>) {
        out.put_count(1);
        out.put_int(31);
        out.put_string("world");
        out.put_string("anyone");
    }

    #[test]
    fn xids_carry_the_op_code() {
        for (op_code, xid) in [
            (op::CREATE2, 7),
            (op::PING, -2),
            (op::CLOSE_SESSION, i32::MAX),
        ] {
            assert_eq!(split_xid(native_xid(op_code, xid)), (op_code, xid));
        }
        assert_eq!(split_xid(native_xid(op::AUTH, -4)), (op::AUTH, -4));
    }

    #[test]
    fn creates_read_their_mode_acl_and_ttl() {
        let mut frame = header(5, op::CREATE_TTL);
        frame.put_string("/t");
        frame.put_bytes(b"x");
        open_acl(&mut frame);
        frame.put_int(create_flags::PERSISTENT_SEQUENTIAL_WITH_TTL);
        frame.put_long(5_000);
        assert_eq!(
            decode(&frame),
            Ok(Request {
                xid: 5,
                op_code: op::CREATE_TTL,
                then: Decoded::Op(Op::Create {
                    path: "/t".into(),
                    data: b"x".to_vec(),
                    mode: CreateMode::PersistentSequentialWithTtl { ttl_ms: 5_000 },
                })
            })
        );

        let mut digest = header(6, op::CREATE2);
        digest.put_string("/d");
        digest.put_int(-1); // null data
        digest.put_count(1);
        digest.put_int(1);
        digest.put_string("digest");
        digest.put_string("alice:hash");
        digest.put_int(create_flags::EPHEMERAL);
        assert_eq!(
            decode(&digest).map(|request| request.then),
            Ok(Decoded::Op(Op::CreateWithAcl {
                path: "/d".into(),
                data: Vec::new(),
                mode: CreateMode::Ephemeral,
                acl: vec![Acl::new(Perms::READ, "digest", "alice:hash")],
            }))
        );

        // A container flag on a plain create, a TTL mode without a TTL, bits
        // past ADMIN: refused as ZooKeeper refuses them.
        let refused = |op_code: i32, flags: i32, perms: i32| {
            let mut frame = header(1, op_code);
            frame.put_string("/x");
            frame.put_bytes(b"");
            frame.put_count(1);
            frame.put_int(perms);
            frame.put_string("world");
            frame.put_string("anyone");
            frame.put_int(flags);
            decode(&frame).map(|request| request.then)
        };
        let bad = Ok(Decoded::Refuse(ErrorCode::BadArguments));
        assert_eq!(refused(op::CREATE, create_flags::CONTAINER, 31), bad);
        assert_eq!(
            refused(op::CREATE, create_flags::PERSISTENT_WITH_TTL, 31),
            bad
        );
        assert_eq!(
            refused(op::CREATE_CONTAINER, create_flags::PERSISTENT, 31),
            bad
        );
        assert_eq!(refused(op::CREATE, 9, 31), bad);
        assert_eq!(
            refused(op::CREATE, create_flags::PERSISTENT, 32),
            Ok(Decoded::Refuse(ErrorCode::InvalidAcl))
        );
        assert!(matches!(
            refused(op::CREATE_CONTAINER, create_flags::CONTAINER, 31),
            Ok(Decoded::Op(Op::Create {
                mode: CreateMode::Container,
                ..
            }))
        ));
    }

    #[test]
    fn a_multi_reads_every_op_until_done() {
        let mut frame = header(9, op::MULTI);
        let sub = |frame: &mut Vec<u8>, op_code: i32| {
            frame.put_int(op_code);
            frame.put_bool(false);
            frame.put_int(-1);
        };
        sub(&mut frame, op::CREATE);
        frame.put_string("/a");
        frame.put_bytes(b"1");
        open_acl(&mut frame);
        frame.put_int(create_flags::PERSISTENT);
        sub(&mut frame, op::CHECK);
        frame.put_string("/a");
        frame.put_int(0);
        sub(&mut frame, op::SET_DATA);
        frame.put_string("/a");
        frame.put_bytes(b"2");
        frame.put_int(-1);
        sub(&mut frame, op::DELETE);
        frame.put_string("/a");
        frame.put_int(1);
        frame.put_int(-1);
        frame.put_bool(true);
        frame.put_int(-1);
        let ops = match decode(&frame).map(|request| request.then) {
            Ok(Decoded::Op(Op::Multi { ops })) => ops,
            other => panic!("not a multi: {other:?}"),
        };
        assert_eq!(
            ops,
            vec![
                MultiOp::Create {
                    path: "/a".into(),
                    data: b"1".to_vec(),
                    mode: CreateMode::Persistent
                },
                MultiOp::Check {
                    path: "/a".into(),
                    version: 0
                },
                MultiOp::SetData {
                    path: "/a".into(),
                    data: b"2".to_vec(),
                    version: -1
                },
                MultiOp::Delete {
                    path: "/a".into(),
                    version: 1
                },
            ]
        );
        // Without its closing header the frame is short, not a multi.
        assert!(decode(&frame[..frame.len() - 9]).is_err());
    }

    #[test]
    fn the_reads_only_zookeeper_has() {
        let with_path = |op_code: i32, path: &str| {
            let mut frame = header(2, op_code);
            frame.put_string(path);
            frame
        };
        let decoded = |frame: &[u8]| decode(frame).map(|request| request.then);
        assert_eq!(
            decoded(&with_path(op::GET_EPHEMERALS, "/a")),
            Ok(Decoded::Op(Op::GetEphemerals {
                prefix: "/a".into()
            }))
        );
        assert_eq!(
            decoded(&with_path(op::GET_ALL_CHILDREN_NUMBER, "/a")),
            Ok(Decoded::Op(Op::CountDescendants { path: "/a".into() }))
        );
        let mut check = with_path(op::CHECK_WATCHES, "/a");
        check.put_int(watcher_type::DATA);
        assert_eq!(
            decoded(&check),
            Ok(Decoded::Op(Op::CheckWatches {
                path: "/a".into(),
                kind: WatcherKind::Data
            }))
        );
        let mut reads = header(3, op::MULTI_READ);
        for (op_code, path) in [(op::GET_DATA, "/a"), (op::GET_CHILDREN, "/b")] {
            reads.put_int(op_code);
            reads.put_bool(false);
            reads.put_int(-1);
            reads.put_string(path);
            reads.put_bool(true);
        }
        reads.put_int(-1);
        reads.put_bool(true);
        reads.put_int(-1);
        assert_eq!(
            decoded(&reads),
            Ok(Decoded::Op(Op::MultiRead {
                ops: vec![
                    ReadOp::GetData { path: "/a".into() },
                    ReadOp::GetChildren { path: "/b".into() }
                ]
            }))
        );
    }

    #[test]
    fn ops_arbor_does_not_run_are_refused_and_every_prefix_is_an_error() {
        let mut reconfig = header(3, op::RECONFIG);
        reconfig.put_string("");
        assert_eq!(
            decode(&reconfig).map(|request| request.then),
            Ok(Decoded::Refuse(ErrorCode::Unimplemented))
        );
        assert_eq!(
            decode(&header(3, 999)).map(|request| request.then),
            Ok(Decoded::Refuse(ErrorCode::Unimplemented))
        );
        let mut watches = header(-8, op::SET_WATCHES2);
        watches.put_long(42);
        for paths in [&["/a"][..], &[], &["/b", "/c"], &[], &["/"]] {
            watches.put_count(paths.len());
            for path in paths {
                watches.put_string(path);
            }
        }
        assert_eq!(
            decode(&watches).map(|request| request.then),
            Ok(Decoded::Op(Op::SetWatches(SetWatches {
                relative_zxid: 42,
                data: vec!["/a".into()],
                exist: vec![],
                child: vec!["/b".into(), "/c".into()],
                persistent: vec![],
                persistent_recursive: vec!["/".into()],
            })))
        );
        for len in 0..watches.len() {
            assert!(decode(&watches[..len]).is_err(), "{len}-byte prefix");
        }
    }
}
