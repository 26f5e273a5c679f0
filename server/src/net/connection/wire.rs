//! The wire format a connection speaks: Arbor's own protocol, or
//! ZooKeeper's ([`crate::zk`]). Only decoding frames and encoding messages
//! differ; the handshake, the reader, the responder and the writer are the
//! same for both.

use arbor_protocol::frame::{encode_frame, FrameError};
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
