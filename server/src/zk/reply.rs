//! What a ZooKeeper client is sent: Arbor's [`ServerMessage`]s written as
//! jute frames (a 4-byte length, then the record).
//!
//! A reply's shape comes from the op code its native xid carries (see
//! [`super::request::native_xid`]): the same `Created` result is a
//! `CreateResponse` to `create` and a `Create2Response` to `create2`; an
//! `exists` that found nothing is ZooKeeper's NoNode error.

use arbor_protocol::acl::Acl;
use arbor_protocol::{
    ConnectResponse, ErrorCode, MultiOpOutcome, OpResult, ServerMessage, Stat, WatchEvent,
    SESSION_PASSWORD_BYTES,
};

use super::codes::{err, error_code, event_type, op, xid, STATE_SYNC_CONNECTED};
use super::jute::Write;
use super::request::split_xid;

/// ZooKeeper's protocol version, the only one there is.
pub const PROTOCOL_VERSION: i32 = 0;

/// The length prefix of a frame.
const LENGTH_BYTES: usize = 4;

/// What the encoder knows of its connection.
#[derive(Debug, Default)]
pub struct ReplyState {
    /// Whether the handshake has been answered: before, a refusal is a
    /// `ConnectResponse` that says so; after, the connection just ends.
    connected: bool,
}

/// What became of a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Encoded {
    /// Framed onto the buffer.
    Framed,
    /// Nothing to send for it.
    Nothing,
    /// The reply's frame would be over `frame_bytes_max` bytes.
    TooLarge { len: usize },
}

impl ReplyState {
    /// As after the handshake was answered (for the fuzz target, which
    /// writes messages without one).
    #[doc(hidden)]
    pub fn mark_connected(&mut self) {
        self.connected = true;
    }

    /// Appends `message` as a frame to `out`. A reply over the frame limit
    /// is not appended (the caller answers it with an error instead).
    pub fn encode(
        &mut self,
        message: &ServerMessage,
        frame_bytes_max: usize,
        out: &mut Vec<u8>,
    ) -> Encoded {
        let start = out.len();
        out.extend_from_slice(&[0; LENGTH_BYTES]);
        match message {
            ServerMessage::Connected(response) => {
                self.connected = true;
                connect_response(response, out);
            }
            ServerMessage::Reply { xid, zxid, result } => {
                let (op_code, xid) = split_xid(*xid);
                reply(op_code, xid, *zxid, result, out);
            }
            ServerMessage::Event(event) => notification(event, out),
            // ZooKeeper says nothing when it closes a connection, except to
            // a client whose session is gone (or whose password is wrong,
            // the only refusal with AuthFailed before a handshake is
            // answered): a handshake answer with no session, which its
            // clients take as "expired".
            ServerMessage::Closing { code, .. } => {
                let no_session = matches!(code, ErrorCode::SessionExpired | ErrorCode::AuthFailed);
                if self.connected || !no_session {
                    out.truncate(start);
                    return Encoded::Nothing;
                }
                expired_response(out);
            }
        }
        let len = out.len() - start - LENGTH_BYTES;
        if len > frame_bytes_max {
            out.truncate(start);
            return Encoded::TooLarge { len };
        }
        let prefix = i32::try_from(len).unwrap_or(i32::MAX).to_be_bytes();
        out[start..start + LENGTH_BYTES].copy_from_slice(&prefix);
        Encoded::Framed
    }
}

/// `ConnectResponse` and the read-only flag every client since 3.4 reads.
fn connect_response(response: &ConnectResponse, out: &mut Vec<u8>) {
    out.put_int(PROTOCOL_VERSION);
    out.put_int(i32::try_from(response.session_timeout_ms).unwrap_or(i32::MAX));
    out.put_long(response.session_id as i64);
    out.put_bytes(&response.password);
    out.put_bool(false);
}

fn expired_response(out: &mut Vec<u8>) {
    out.put_int(PROTOCOL_VERSION);
    out.put_int(0);
    out.put_long(0);
    out.put_bytes(&[0; SESSION_PASSWORD_BYTES]);
    out.put_bool(false);
}

fn notification(event: &WatchEvent, out: &mut Vec<u8>) {
    out.put_int(xid::NOTIFICATION);
    out.put_long(event.zxid as i64);
    out.put_int(err::OK);
    out.put_int(event_type(event.event_type));
    out.put_int(STATE_SYNC_CONNECTED);
    out.put_string(&event.path);
}

fn stat(stat: &Stat, out: &mut Vec<u8>) {
    out.put_long(stat.czxid as i64);
    out.put_long(stat.mzxid as i64);
    out.put_long(stat.ctime_ms as i64);
    out.put_long(stat.mtime_ms as i64);
    out.put_int(stat.version);
    out.put_int(stat.cversion);
    out.put_int(stat.aversion);
    out.put_long(stat.ephemeral_owner as i64);
    out.put_int(i32::try_from(stat.data_length).unwrap_or(i32::MAX));
    out.put_int(i32::try_from(stat.num_children).unwrap_or(i32::MAX));
    out.put_long(stat.pzxid as i64);
}

fn acl_list(acl: &[Acl], out: &mut Vec<u8>) {
    out.put_count(acl.len());
    for entry in acl {
        out.put_int(entry.perms.bits() as i32);
        out.put_string(&entry.id.scheme);
        out.put_string(&entry.id.id);
    }
}

/// A `MultiHeader` of a multi's or multiRead's answer.
fn multi_header(op_code: i32, done: bool, code: i32, out: &mut Vec<u8>) {
    out.put_int(op_code);
    out.put_bool(done);
    out.put_int(code);
}

/// The header that ends a multi's or multiRead's answer.
fn multi_end(out: &mut Vec<u8>) {
    multi_header(op::ERROR, true, op::ERROR, out);
}

fn header(xid: i32, zxid: u64, code: i32, out: &mut Vec<u8>) {
    out.put_int(xid);
    out.put_long(zxid as i64);
    out.put_int(code);
}

/// A `ReplyHeader` and, for a success, the record of `op_code`'s response.
fn reply(
    op_code: i32,
    xid: i32,
    zxid: u64,
    result: &Result<OpResult, ErrorCode>,
    out: &mut Vec<u8>,
) {
    let result = match result {
        Ok(result) => result,
        Err(code) => {
            let code = match (op_code, code) {
                (op::RECONFIG, ErrorCode::Unimplemented) => err::RECONFIG_DISABLED,
                (_, code) => error_code(*code),
            };
            return header(xid, zxid, code, out);
        }
    };
    match (op_code, result) {
        // A check on its own ran as a multi of one; its answer is the
        // header alone, the result in its error code. No ZooKeeper release
        // sends a record after it: see the test
        // `a_check_on_its_own_answers_the_header_alone`.
        (op::CHECK, OpResult::Multi(outcomes)) => {
            let code = match outcomes.first() {
                Some(MultiOpOutcome::Failed(code)) => error_code(*code),
                Some(MultiOpOutcome::Applied(_)) => err::OK,
                _ => err::SYSTEM_ERROR,
            };
            header(xid, zxid, code, out);
        }
        (_, OpResult::Exists(None)) => header(xid, zxid, err::NO_NODE, out),
        // ZooKeeper answers addWatch with an ErrorResponse of OK, and its
        // Java client reads one (without it, the client drops the
        // connection as broken).
        (op::ADD_WATCH, _) => {
            header(xid, zxid, err::OK, out);
            out.put_int(err::OK);
        }
        _ => {
            header(xid, zxid, err::OK, out);
            body(op_code, result, out);
        }
    }
}

fn body(op_code: i32, result: &OpResult, out: &mut Vec<u8>) {
    match result {
        OpResult::Created {
            path,
            stat: created,
        } => {
            out.put_string(path);
            if op_code != op::CREATE {
                stat(created, out);
            }
        }
        OpResult::SetData(changed) | OpResult::SetAcl(changed) => stat(changed, out),
        OpResult::Exists(Some(found)) => stat(found, out),
        OpResult::Data { data, stat: found } => {
            out.put_bytes(data);
            stat(found, out);
        }
        OpResult::Children {
            names,
            stat: parent,
        } => {
            let names = names.clone().into_vec();
            out.put_count(names.len());
            for name in &names {
                out.put_string(name);
            }
            if op_code == op::GET_CHILDREN2 {
                stat(parent, out);
            }
        }
        OpResult::ChildrenWithStat {
            children,
            stat: parent,
        } => {
            out.put_count(children.len());
            for child in children {
                out.put_string(&child.name);
            }
            if op_code == op::GET_CHILDREN2 {
                stat(parent, out);
            }
        }
        OpResult::Acl { acl, stat: node } => {
            acl_list(acl, out);
            stat(node, out);
        }
        OpResult::Synced { path } => out.put_string(path),
        OpResult::Multi(outcomes) => multi(outcomes, out),
        OpResult::Ephemerals(paths) => {
            out.put_count(paths.len());
            for path in paths {
                out.put_string(path);
            }
        }
        OpResult::DescendantCount(count) => out.put_int(i32::try_from(*count).unwrap_or(i32::MAX)),
        OpResult::MultiRead(results) => multi_read(results, out),
        OpResult::WhoAmI(ids) => {
            out.put_count(ids.len());
            for id in ids {
                out.put_string(&id.scheme);
                out.put_string(&id.id);
            }
        }
        // Nothing follows the header for these.
        OpResult::Deleted
        | OpResult::Checked
        | OpResult::Exists(None)
        | OpResult::Pong
        | OpResult::SessionClosed
        | OpResult::WatchesChanged
        | OpResult::Authenticated
        | OpResult::ClusterStatus(_) => {}
        // Native-only answers: the ZooKeeper port never asks for them.
        OpResult::AdminReport(_) | OpResult::BackupStarted(_) | OpResult::BackupChunk(_) => {}
    }
}

/// A `MultiResponse`: a `MultiHeader` (type, done, err) and a record per
/// op, then a closing header. A multi that failed answers every op with an
/// error record, as ZooKeeper does: OK for those before the failing op,
/// its error for it, RuntimeInconsistency for those after.
fn multi(outcomes: &[MultiOpOutcome], out: &mut Vec<u8>) {
    let failed = outcomes
        .iter()
        .any(|outcome| !matches!(outcome, MultiOpOutcome::Applied(_)));
    for outcome in outcomes {
        let (op_code, code) = match outcome {
            MultiOpOutcome::Applied(_) if failed => (op::ERROR, err::OK),
            MultiOpOutcome::Applied(result) => (multi_op_code(result), err::OK),
            MultiOpOutcome::RolledBack => (op::ERROR, err::OK),
            MultiOpOutcome::Failed(code) => (op::ERROR, error_code(*code)),
            MultiOpOutcome::NotRun => (op::ERROR, err::RUNTIME_INCONSISTENCY),
        };
        multi_header(op_code, false, code, out);
        match outcome {
            MultiOpOutcome::Applied(result) if !failed => match result {
                // Every create in a multi answers as `create` does (a path):
                // the form every client reads, kazoo's included.
                OpResult::Created { path, .. } => out.put_string(path),
                OpResult::SetData(changed) => stat(changed, out),
                _ => {}
            },
            _ => out.put_int(code),
        }
    }
    multi_end(out);
}

/// A multiRead's answer: a `MultiHeader` and a record per read (its
/// `GetDataResponse` or `GetChildrenResponse`, or its error), then the
/// closing header. Each read stands on its own.
fn multi_read(results: &[Result<OpResult, ErrorCode>], out: &mut Vec<u8>) {
    for result in results {
        match result {
            Ok(OpResult::Data { data, stat: found }) => {
                multi_header(op::GET_DATA, false, err::OK, out);
                out.put_bytes(data);
                stat(found, out);
            }
            Ok(OpResult::Children { names, .. }) => {
                multi_header(op::GET_CHILDREN, false, err::OK, out);
                let names = names.clone().into_vec();
                out.put_count(names.len());
                for name in &names {
                    out.put_string(name);
                }
            }
            other => {
                let code = match other {
                    Err(code) => error_code(*code),
                    Ok(_) => err::SYSTEM_ERROR,
                };
                multi_header(op::ERROR, false, code, out);
                out.put_int(code);
            }
        }
    }
    multi_end(out);
}

fn multi_op_code(result: &OpResult) -> i32 {
    match result {
        OpResult::Created { .. } => op::CREATE,
        OpResult::Deleted => op::DELETE,
        OpResult::SetData(_) => op::SET_DATA,
        _ => op::CHECK,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zk::jute::Reader;
    use crate::zk::request::native_xid;
    use arbor_protocol::{EventType, ServerLimits};

    fn encoded(state: &mut ReplyState, message: &ServerMessage) -> Vec<u8> {
        let mut out = Vec::new();
        assert_eq!(state.encode(message, 1 << 20, &mut out), Encoded::Framed);
        let len = i32::from_be_bytes(out[..4].try_into().expect("prefix")) as usize;
        assert_eq!(len, out.len() - 4, "the length prefix");
        out.split_off(4)
    }

    fn sample_stat() -> Stat {
        Stat {
            czxid: 1,
            mzxid: 2,
            pzxid: 3,
            ctime_ms: 4,
            mtime_ms: 5,
            version: 6,
            cversion: 7,
            aversion: 8,
            ephemeral_owner: 9,
            data_length: 10,
            num_children: 11,
        }
    }

    fn read_stat(reader: &mut Reader<'_>) -> [i64; 11] {
        let l = |reader: &mut Reader<'_>| reader.long("stat").expect("long");
        let i = |reader: &mut Reader<'_>| i64::from(reader.int("stat").expect("int"));
        [
            l(reader),
            l(reader),
            l(reader),
            l(reader),
            i(reader),
            i(reader),
            i(reader),
            l(reader),
            i(reader),
            i(reader),
            l(reader),
        ]
    }

    fn reply_to(op_code: i32, result: Result<OpResult, ErrorCode>) -> Vec<u8> {
        let message = ServerMessage::Reply {
            xid: native_xid(op_code, 12),
            zxid: 99,
            result,
        };
        encoded(&mut ReplyState::default(), &message)
    }

    #[test]
    fn stats_are_in_zookeepers_order_with_pzxid_last() {
        let bytes = reply_to(op::SET_DATA, Ok(OpResult::SetData(sample_stat())));
        let mut reader = Reader::new(&bytes);
        assert_eq!(
            (reader.int("xid"), reader.long("zxid"), reader.int("err")),
            (Ok(12), Ok(99), Ok(0))
        );
        assert_eq!(read_stat(&mut reader), [1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 3]);
        assert!(reader.is_empty());
    }

    #[test]
    fn a_create_answers_as_its_op_asked() {
        let created = || {
            Ok(OpResult::Created {
                path: "/a0000000001".into(),
                stat: sample_stat(),
            })
        };
        let plain = reply_to(op::CREATE, created());
        let mut reader = Reader::new(&plain[16..]);
        assert_eq!(reader.string("path").as_deref(), Ok("/a0000000001"));
        assert!(reader.is_empty(), "create answers the path only");
        for op_code in [op::CREATE2, op::CREATE_CONTAINER, op::CREATE_TTL] {
            let bytes = reply_to(op_code, created());
            let mut reader = Reader::new(&bytes[16..]);
            assert_eq!(reader.string("path").as_deref(), Ok("/a0000000001"));
            assert_eq!(read_stat(&mut reader)[10], 3);
            assert!(reader.is_empty());
        }
    }

    #[test]
    fn errors_are_zookeepers_codes_with_no_body() {
        let bytes = reply_to(op::EXISTS, Ok(OpResult::Exists(None)));
        assert_eq!(bytes.len(), 16);
        assert_eq!(Reader::new(&bytes[12..]).int("err"), Ok(err::NO_NODE));
        let bytes = reply_to(op::DELETE, Err(ErrorCode::NotEmpty));
        assert_eq!(Reader::new(&bytes[12..]).int("err"), Ok(err::NOT_EMPTY));
        let bytes = reply_to(op::RECONFIG, Err(ErrorCode::Unimplemented));
        assert_eq!(
            Reader::new(&bytes[12..]).int("err"),
            Ok(err::RECONFIG_DISABLED)
        );
        let bytes = reply_to(
            op::CHECK,
            Ok(OpResult::Multi(vec![MultiOpOutcome::Failed(
                ErrorCode::BadVersion,
            )])),
        );
        assert_eq!(bytes.len(), 16);
        assert_eq!(Reader::new(&bytes[12..]).int("err"), Ok(err::BAD_VERSION));
    }

    // Proves a check on its own (op 13) is answered with the header alone,
    // passing or failing. Checked against ZooKeeper's sources
    // (zookeeper-server/.../server/FinalRequestProcessor.java and
    // Request.java):
    // * 3.8.0–3.8.4 and 3.9.0–3.9.2 prep it as a txn; a failure is answered
    //   with the header alone; a success builds `SetDataResponse(rc.stat)`,
    //   but `DataTree.processTxn` never sets `rc.stat` for a check, so the
    //   record cannot be written (jute's `writeRecord` of null): no client
    //   ever read a stat after a check (ZOOKEEPER-2623).
    // * 3.8.5+ and 3.9.3+ refuse it (`Request.isValid`: check only inside
    //   a multi): a header with Unimplemented, then the connection closed.
    // Arbor keeps the check's own result in the header, as the first
    // ZOOKEEPER-2623 fix on master (b31f776) answered it: a client that
    // sends one learns what the check found, and no record follows.
    #[test]
    fn a_check_on_its_own_answers_the_header_alone() {
        let passed = reply_to(
            op::CHECK,
            Ok(OpResult::Multi(vec![MultiOpOutcome::Applied(
                OpResult::Checked,
            )])),
        );
        let mut reader = Reader::new(&passed);
        assert_eq!(
            (reader.int("xid"), reader.long("zxid"), reader.int("err")),
            (Ok(12), Ok(99), Ok(err::OK))
        );
        assert!(reader.is_empty(), "no record after the header");
        for (failure, code) in [
            (ErrorCode::BadVersion, err::BAD_VERSION),
            (ErrorCode::NoNode, err::NO_NODE),
        ] {
            let failed = reply_to(
                op::CHECK,
                Ok(OpResult::Multi(vec![MultiOpOutcome::Failed(failure)])),
            );
            assert_eq!(failed.len(), 16, "the header alone");
            assert_eq!(Reader::new(&failed[12..]).int("err"), Ok(code));
        }
    }

    #[test]
    fn add_watch_answers_with_an_error_response_of_ok() {
        let bytes = reply_to(op::ADD_WATCH, Ok(OpResult::WatchesChanged));
        let mut reader = Reader::new(&bytes[12..]);
        assert_eq!(
            (reader.int("err"), reader.int("ErrorResponse")),
            (Ok(0), Ok(0))
        );
        assert!(reader.is_empty());
        let bytes = reply_to(op::REMOVE_WATCHES, Ok(OpResult::WatchesChanged));
        assert_eq!(bytes.len(), 16, "removeWatches answers the header alone");
    }

    #[test]
    fn a_failed_multi_answers_every_op_with_an_error_record() {
        let outcomes = vec![
            MultiOpOutcome::RolledBack,
            MultiOpOutcome::Failed(ErrorCode::NoNode),
            MultiOpOutcome::NotRun,
        ];
        let bytes = reply_to(op::MULTI, Ok(OpResult::Multi(outcomes)));
        let mut reader = Reader::new(&bytes[16..]);
        for expected in [err::OK, err::NO_NODE, err::RUNTIME_INCONSISTENCY] {
            assert_eq!(reader.int("type"), Ok(op::ERROR));
            assert_eq!(reader.bool("done"), Ok(false));
            assert_eq!(reader.int("err"), Ok(expected));
            assert_eq!(reader.int("ErrorResponse"), Ok(expected));
        }
        assert_eq!(
            (reader.int("type"), reader.bool("done"), reader.int("err")),
            (Ok(-1), Ok(true), Ok(-1))
        );
        assert!(reader.is_empty());

        let applied = vec![
            MultiOpOutcome::Applied(OpResult::Created {
                path: "/x".into(),
                stat: sample_stat(),
            }),
            MultiOpOutcome::Applied(OpResult::Deleted),
            MultiOpOutcome::Applied(OpResult::SetData(sample_stat())),
        ];
        let bytes = reply_to(op::MULTI, Ok(OpResult::Multi(applied)));
        let mut reader = Reader::new(&bytes[16..]);
        assert_eq!(
            (reader.int("type"), reader.bool("done"), reader.int("err")),
            (Ok(op::CREATE), Ok(false), Ok(0))
        );
        assert_eq!(reader.string("path").as_deref(), Ok("/x"));
        assert_eq!(
            (reader.int("type"), reader.bool("done"), reader.int("err")),
            (Ok(op::DELETE), Ok(false), Ok(0))
        );
        assert_eq!(
            (reader.int("type"), reader.bool("done"), reader.int("err")),
            (Ok(op::SET_DATA), Ok(false), Ok(0))
        );
        assert_eq!(read_stat(&mut reader)[0], 1);
        assert_eq!(
            (reader.int("type"), reader.bool("done"), reader.int("err")),
            (Ok(-1), Ok(true), Ok(-1))
        );
        assert!(reader.is_empty());
    }

    #[test]
    fn a_multi_read_answers_each_read_on_its_own() {
        let results = vec![
            Ok(OpResult::Data {
                data: b"d".to_vec(),
                stat: sample_stat(),
            }),
            Err(ErrorCode::NoNode),
            Ok(OpResult::Children {
                names: vec!["x".to_owned()].into(),
                stat: sample_stat(),
            }),
        ];
        let bytes = reply_to(op::MULTI_READ, Ok(OpResult::MultiRead(results)));
        let mut reader = Reader::new(&bytes[16..]);
        let head = |reader: &mut Reader<'_>| {
            (
                reader.int("type").expect("type"),
                reader.bool("done").expect("done"),
                reader.int("err").expect("err"),
            )
        };
        assert_eq!(head(&mut reader), (op::GET_DATA, false, 0));
        assert_eq!(reader.buffer("data"), Ok(Some(&b"d"[..])));
        assert_eq!(read_stat(&mut reader)[0], 1);
        assert_eq!(head(&mut reader), (op::ERROR, false, err::NO_NODE));
        assert_eq!(reader.int("ErrorResponse"), Ok(err::NO_NODE));
        assert_eq!(head(&mut reader), (op::GET_CHILDREN, false, 0));
        assert_eq!(reader.strings("children"), Ok(vec!["x".to_owned()]));
        assert_eq!(head(&mut reader), (-1, true, -1));
        assert!(reader.is_empty());
    }

    #[test]
    fn the_handshake_answer_and_what_follows_it() {
        let mut state = ReplyState::default();
        let expired = ServerMessage::Closing {
            code: ErrorCode::SessionExpired,
            message: "gone".into(),
        };
        // Before the handshake is answered, "expired" (or a wrong
        // password) is a session of 0.
        let wrong_password = ServerMessage::Closing {
            code: ErrorCode::AuthFailed,
            message: "wrong password".into(),
        };
        assert_eq!(
            encoded(&mut ReplyState::default(), &wrong_password),
            encoded(&mut ReplyState::default(), &expired)
        );
        let bytes = encoded(&mut ReplyState::default(), &expired);
        let mut reader = Reader::new(&bytes);
        assert_eq!(
            (
                reader.int("v"),
                reader.int("timeout"),
                reader.long("session")
            ),
            (Ok(0), Ok(0), Ok(0))
        );
        assert_eq!(reader.buffer("passwd"), Ok(Some(&[0u8; 16][..])));
        assert_eq!(reader.bool("readOnly"), Ok(false));

        let connected = ServerMessage::Connected(ConnectResponse {
            protocol_version: 1,
            session_id: 0x1234,
            password: [7; 16],
            session_timeout_ms: 4_000,
            zxid: 5,
            limits: ServerLimits {
                frame_bytes_max: 1 << 20,
                data_bytes_max: 1 << 20,
            },
        });
        let bytes = encoded(&mut state, &connected);
        let mut reader = Reader::new(&bytes);
        assert_eq!(
            (
                reader.int("v"),
                reader.int("timeout"),
                reader.long("session")
            ),
            (Ok(0), Ok(4_000), Ok(0x1234))
        );
        assert_eq!(reader.buffer("passwd"), Ok(Some(&[7u8; 16][..])));
        assert_eq!(reader.bool("readOnly"), Ok(false));
        assert!(reader.is_empty());

        // After it, closing says nothing: the connection just ends.
        let mut out = Vec::new();
        assert_eq!(state.encode(&expired, 1 << 20, &mut out), Encoded::Nothing);
        assert!(out.is_empty());

        let event = ServerMessage::Event(WatchEvent {
            event_type: EventType::NodeChildrenChanged,
            path: "/a".into(),
            zxid: 77,
        });
        let bytes = encoded(&mut state, &event);
        let mut reader = Reader::new(&bytes);
        assert_eq!(
            (reader.int("xid"), reader.long("zxid"), reader.int("err")),
            (Ok(-1), Ok(77), Ok(0))
        );
        assert_eq!(
            (reader.int("type"), reader.int("state")),
            (Ok(4), Ok(STATE_SYNC_CONNECTED))
        );
        assert_eq!(reader.string("path").as_deref(), Ok("/a"));
    }

    #[test]
    fn a_reply_over_the_frame_limit_is_not_written() {
        let mut out = b"kept".to_vec();
        let message = ServerMessage::Reply {
            xid: native_xid(op::GET_DATA, 1),
            zxid: 1,
            result: Ok(OpResult::Data {
                data: vec![0; 200],
                stat: Stat::default(),
            }),
        };
        assert_eq!(
            ReplyState::default().encode(&message, 100, &mut out),
            Encoded::TooLarge {
                len: 16 + 4 + 200 + 68
            }
        );
        assert_eq!(out, b"kept");
    }
}
