//! Length-prefixed framing.
//!
//! ```text
//! frame   = length payload
//! length  = u32, big-endian, the number of payload bytes (0 < length <= limit)
//! payload = one bincode-encoded ClientMessage or ServerMessage (see `codec`)
//! ```
//!
//! The limit is a property of the connection (`--max-frame-bytes` on the server,
//! announced to the client in the handshake). A length over the limit is
//! reported before a single payload byte is buffered, so a hostile peer cannot
//! make us hold more than the limit.

use bincode::Encode;
use bytes::{Buf, BytesMut};
use tokio_util::codec::Decoder;

use crate::codec::{self, DecodeError, EncodeError};

/// Bytes of the length prefix.
pub const FRAME_HEADER_BYTES: usize = 4;

/// The default payload limit, as ZooKeeper's `jute.maxbuffer`: 1 MiB.
pub const DEFAULT_FRAME_BYTES_MAX: usize = 1024 * 1024;

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("empty frame")]
    Empty,
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// Splits a byte stream into frame payloads of at most `payload_bytes_max`.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    payload_bytes_max: usize,
}

impl FrameDecoder {
    pub fn new(payload_bytes_max: usize) -> Self {
        Self { payload_bytes_max }
    }
}

impl Decoder for FrameDecoder {
    type Item = BytesMut;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, FrameError> {
        if src.len() < FRAME_HEADER_BYTES {
            return Ok(None);
        }
        let mut header = [0u8; FRAME_HEADER_BYTES];
        header.copy_from_slice(&src[..FRAME_HEADER_BYTES]);
        let len = u32::from_be_bytes(header) as usize;
        if len == 0 {
            return Err(FrameError::Empty);
        }
        if len > self.payload_bytes_max {
            return Err(FrameError::TooLarge {
                len,
                max: self.payload_bytes_max,
            });
        }
        if src.len() < FRAME_HEADER_BYTES + len {
            src.reserve(FRAME_HEADER_BYTES + len - src.len());
            return Ok(None);
        }
        src.advance(FRAME_HEADER_BYTES);
        Ok(Some(src.split_to(len)))
    }
}

/// Appends one frame holding `message` to `out`. On error `out` is unchanged.
pub fn encode_frame<T: Encode>(
    message: &T,
    payload_bytes_max: usize,
    out: &mut Vec<u8>,
) -> Result<(), FrameError> {
    let start = out.len();
    out.extend_from_slice(&[0u8; FRAME_HEADER_BYTES]);
    let len = match codec::encode_into(message, out) {
        Ok(len) => len,
        Err(err) => {
            out.truncate(start);
            return Err(err.into());
        }
    };
    if len > payload_bytes_max || len > u32::MAX as usize {
        out.truncate(start);
        return Err(FrameError::TooLarge {
            len,
            max: payload_bytes_max,
        });
    }
    out[start..start + FRAME_HEADER_BYTES].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_across_reads_are_reassembled() {
        let mut wire = Vec::new();
        encode_frame(&String::from("hello"), 64, &mut wire).expect("encodes");
        encode_frame(&String::from("world"), 64, &mut wire).expect("encodes");
        let mut decoder = FrameDecoder::new(64);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for byte in wire {
            buf.extend_from_slice(&[byte]);
            while let Some(payload) = decoder.decode(&mut buf).expect("valid") {
                got.push(codec::decode::<String>(&payload).expect("decodes"));
            }
        }
        assert_eq!(got, vec!["hello", "world"]);
    }

    #[test]
    fn oversized_length_is_refused_before_buffering() {
        let mut buf = BytesMut::from(&(1_000_000u32).to_be_bytes()[..]);
        let err = FrameDecoder::new(1000)
            .decode(&mut buf)
            .expect_err("too large");
        assert!(matches!(
            err,
            FrameError::TooLarge {
                len: 1_000_000,
                max: 1000
            }
        ));
    }

    #[test]
    fn oversized_message_is_not_written() {
        let mut out = vec![9u8];
        let err = encode_frame(&vec![0u8; 100], 50, &mut out).expect_err("too large");
        assert!(matches!(err, FrameError::TooLarge { .. }));
        assert_eq!(out, vec![9u8]);
    }
}
