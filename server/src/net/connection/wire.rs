//! The wire format a connection speaks: Arbor's own protocol, or
//! ZooKeeper's ([`crate::zk`]). Only decoding frames and encoding messages
//! differ; the handshake, the reader, the responder and the writer are the
//! same for both.

use arbor_protocol::frame::{encode_frame, FrameError, FRAME_HEADER_BYTES};
use arbor_protocol::{codec, ClientMessage, ConnectRequest, ErrorCode, Op, ServerMessage};

use crate::zk;

/// Which protocol a listener's connections speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Native,
    ZooKeeper,
}

/// A request frame, read.
pub(super) enum Incoming {
    Request {
        xid: u64,
        op: Op,
    },
    /// Answered at once with an error: an op this server does not run, or
    /// arguments the decoder already refused.
    Refused {
        xid: u64,
        code: ErrorCode,
    },
    /// A second handshake (only the native protocol can tell).
    Connect,
}

impl Wire {
    /// The handshake frame; the error is what to tell the client.
    pub(super) fn decode_connect(self, frame: &[u8]) -> Result<ConnectRequest, String> {
        match self {
            Wire::Native => match codec::decode::<ClientMessage>(frame) {
                Ok(ClientMessage::Connect(request)) => Ok(request),
                Ok(ClientMessage::Request { .. }) => {
                    Err("the first message must be a Connect handshake".to_owned())
                }
                Err(err) => Err(format!("cannot decode handshake: {err}")),
            },
            Wire::ZooKeeper => zk::handshake::decode(frame).map_err(|err| err.to_string()),
        }
    }

    /// A frame after the handshake; the error is what to tell the client.
    pub(super) fn decode_request(self, frame: &[u8]) -> Result<Incoming, String> {
        match self {
            Wire::Native => match codec::decode::<ClientMessage>(frame) {
                Ok(ClientMessage::Request { xid, op }) => Ok(Incoming::Request { xid, op }),
                Ok(ClientMessage::Connect(_)) => Ok(Incoming::Connect),
                Err(err) => Err(format!("cannot decode request: {err}")),
            },
            Wire::ZooKeeper => {
                let request = zk::request::decode(frame)
                    .map_err(|err| format!("cannot decode request: {err}"))?;
                let xid = zk::request::native_xid(request.op_code, request.xid);
                Ok(match request.then {
                    zk::request::Decoded::Op(op) => Incoming::Request { xid, op },
                    zk::request::Decoded::Refuse(code) => Incoming::Refused { xid, code },
                })
            }
        }
    }
}

/// Requests past the one in hand the reader decodes, at most, to learn
/// whether all that it has buffered are reads (see
/// [`Wire::only_reads_buffered`]); more than this counts as a burst.
pub(super) const LOOKAHEAD_REQUESTS_MAX: usize = 4;

/// Buffered bytes past which the reader does not look ahead at all: room
/// for [`LOOKAHEAD_REQUESTS_MAX`] reads of the longest path. More is a
/// burst, or a big write whose decoding would only be thrown away.
pub(super) const LOOKAHEAD_BYTES_MAX: usize =
    LOOKAHEAD_REQUESTS_MAX * (arbor_protocol::path::PATH_BYTES_MAX + 64);

impl Wire {
    /// Whether `buffered`, the bytes read past the request in hand, is
    /// nothing but whole requests that need no commit, at most
    /// [`LOOKAHEAD_REQUESTS_MAX`] of them in at most [`LOOKAHEAD_BYTES_MAX`]
    /// bytes. A lock contender sends its create and a look at the queue
    /// together; the look waits for the create anyway (a session is
    /// answered in order), so the create may still be committed on the
    /// reader's thread. A partial frame may be the start of a burst of
    /// writes: not only reads.
    pub(super) fn only_reads_buffered(self, mut buffered: &[u8]) -> bool {
        if buffered.len() > LOOKAHEAD_BYTES_MAX {
            return false;
        }
        // The frames first, from their headers alone: a burst (more
        // requests than the lookahead takes, or one not yet whole) is told
        // without decoding any of them.
        let mut frames = [&[][..]; LOOKAHEAD_REQUESTS_MAX];
        let mut count = 0;
        while !buffered.is_empty() {
            let Some((header, rest)) = buffered.split_first_chunk::<FRAME_HEADER_BYTES>() else {
                return false;
            };
            let len = u32::from_be_bytes(*header) as usize;
            let (Some((frame, rest)), Some(slot)) =
                (rest.split_at_checked(len), frames.get_mut(count))
            else {
                return false;
            };
            *slot = frame;
            count += 1;
            buffered = rest;
        }
        frames[..count]
            .iter()
            .all(|frame| match self.decode_request(frame) {
                Ok(Incoming::Request { op, .. }) => !op.is_write(),
                Ok(Incoming::Refused { .. }) => true,
                _ => false,
            })
    }
}

/// Frames messages for the writer, in the connection's wire format.
pub(super) enum Encoder {
    Native,
    ZooKeeper(zk::reply::ReplyState),
}

/// Why a message was not framed.
pub(super) enum NotFramed {
    /// It would be over the frame limit by this many bytes.
    TooLarge {
        len: usize,
    },
    Failed(String),
}

impl Encoder {
    pub(super) fn new(wire: Wire) -> Self {
        match wire {
            Wire::Native => Encoder::Native,
            Wire::ZooKeeper => Encoder::ZooKeeper(zk::reply::ReplyState::default()),
        }
    }

    /// Appends `message`'s frame to `out` (for ZooKeeper, some messages
    /// have none: see [`zk::reply`]).
    pub(super) fn encode(
        &mut self,
        message: &ServerMessage,
        frame_bytes_max: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), NotFramed> {
        match self {
            Encoder::Native => match encode_frame(message, frame_bytes_max, out) {
                Ok(()) => Ok(()),
                Err(FrameError::TooLarge { len, .. }) => Err(NotFramed::TooLarge { len }),
                Err(err) => Err(NotFramed::Failed(err.to_string())),
            },
            Encoder::ZooKeeper(state) => match state.encode(message, frame_bytes_max, out) {
                zk::reply::Encoded::Framed | zk::reply::Encoded::Nothing => Ok(()),
                zk::reply::Encoded::TooLarge { len } => Err(NotFramed::TooLarge { len }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use arbor_protocol::frame::DEFAULT_FRAME_BYTES_MAX;
    use arbor_protocol::{ClientMessage, CreateMode};

    use super::*;

    fn frame(op: Op) -> Vec<u8> {
        let mut out = Vec::new();
        let message = ClientMessage::Request { xid: 7, op };
        encode_frame(&message, DEFAULT_FRAME_BYTES_MAX, &mut out).expect("framed");
        out
    }

    fn look() -> Vec<u8> {
        frame(Op::ChildrenBelow {
            path: "/locks/a".to_owned(),
            sequence: u64::MAX,
            limit: 2,
        })
    }

    fn create() -> Vec<u8> {
        frame(Op::Create {
            path: "/locks/a/n".to_owned(),
            data: Vec::new(),
            mode: CreateMode::EphemeralSequential,
        })
    }

    #[test]
    fn nothing_or_whole_reads_buffered_are_only_reads() {
        assert!(Wire::Native.only_reads_buffered(&[]));
        assert!(Wire::Native.only_reads_buffered(&look()));
        let reads: Vec<u8> = (0..LOOKAHEAD_REQUESTS_MAX).flat_map(|_| look()).collect();
        assert!(Wire::Native.only_reads_buffered(&reads));
    }

    #[test]
    fn a_write_a_partial_frame_or_a_long_run_may_be_a_burst() {
        let mut read_then_write = look();
        read_then_write.extend(create());
        assert!(!Wire::Native.only_reads_buffered(&create()));
        assert!(!Wire::Native.only_reads_buffered(&read_then_write));
        let whole = look();
        assert!(!Wire::Native.only_reads_buffered(&whole[..2]));
        assert!(!Wire::Native.only_reads_buffered(&whole[..whole.len() - 1]));
        let reads: Vec<u8> = (0..=LOOKAHEAD_REQUESTS_MAX).flat_map(|_| look()).collect();
        assert!(!Wire::Native.only_reads_buffered(&reads));
        // A frame that does not decode is not known to be a read.
        assert!(!Wire::Native.only_reads_buffered(&[0, 0, 0, 2, 0xff, 0xff]));
    }

    #[test]
    fn more_bytes_than_a_few_reads_take_are_not_looked_at() {
        let long = |path: String| frame(Op::GetData { path, watch: false });
        // One read of the longest path fits; a bigger one is a burst.
        let longest = format!("/{}", "a".repeat(arbor_protocol::path::PATH_BYTES_MAX - 1));
        assert!(Wire::Native.only_reads_buffered(&long(longest)));
        let over = format!("/{}", "a".repeat(LOOKAHEAD_BYTES_MAX));
        assert!(!Wire::Native.only_reads_buffered(&long(over)));
    }

    #[test]
    fn zookeeper_frames_are_looked_at_in_their_own_format() {
        // getData("/a", no watch): xid 1, op 4, path, watch flag.
        let mut get = vec![0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 2, b'/', b'a', 0];
        let len = (get.len() as u32).to_be_bytes();
        get.splice(0..0, len);
        assert!(Wire::ZooKeeper.only_reads_buffered(&get));
        // The same bytes read natively are no request.
        assert!(!Wire::Native.only_reads_buffered(&get));
        // delete("/a", -1): op 2.
        let mut delete = vec![0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, b'/', b'a'];
        delete.extend((-1i32).to_be_bytes());
        let len = (delete.len() as u32).to_be_bytes();
        delete.splice(0..0, len);
        assert!(!Wire::ZooKeeper.only_reads_buffered(&delete));
    }
}
