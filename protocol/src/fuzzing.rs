//! The bodies of the fuzz targets for this crate's decoders. `fuzz/` (cargo-fuzz,
//! nightly) calls them from libFuzzer, and the stable smoke test
//! (`server/tests/fuzz_smoke.rs`) calls them on seeds and seeded mutations in
//! every `cargo test`: one body, two drivers, so the smoke proves what the
//! fuzzer runs and nothing drifts. They live in the crate that owns the
//! decoders (hidden from the docs) because `fuzz/` is a workspace of its own
//! and can only call public items.
//!
//! Each target takes arbitrary bytes and returns. A panic, here or in the
//! decoder, is a bug: the decoders must answer every input with a value or an
//! error, and what they accept must re-encode to something that decodes to
//! the same value.

use bytes::BytesMut;
use tokio_util::codec::Decoder;

use crate::codec;
use crate::frame::{FrameDecoder, FrameError, FRAME_HEADER_BYTES};
use crate::{ClientMessage, ServerMessage};

/// The frame limit of the frame target: small, so that forged lengths over
/// the limit are common and refused as a server refuses them.
pub const FUZZ_FRAME_BYTES_MAX: usize = 64 * 1024;

/// How a byte stream split into frames.
#[derive(Debug, PartialEq, Eq)]
struct Split {
    frames: Vec<Vec<u8>>,
    /// The error that ended the stream, as text (`FrameError` has no `Eq`).
    error: Option<String>,
}

/// Splits `stream`, arriving in reads of `piece` bytes, into frames, as a
/// connection's `FramedRead` does; stops at the first error.
fn split(stream: &[u8], piece: usize, payload_bytes_max: usize) -> Split {
    let mut decoder = FrameDecoder::new(payload_bytes_max);
    let mut buffer = BytesMut::new();
    let mut frames = Vec::new();
    for chunk in stream.chunks(piece.max(1)) {
        buffer.extend_from_slice(chunk);
        loop {
            match decoder.decode(&mut buffer) {
                Ok(Some(frame)) => {
                    assert!(frame.len() <= payload_bytes_max, "a frame over the limit");
                    frames.push(frame.to_vec());
                }
                Ok(None) => break,
                Err(err) => return stopped(frames, &err),
            }
        }
        // Never more buffered than one frame in the making and one read.
        assert!(
            buffer.len() < FRAME_HEADER_BYTES + payload_bytes_max + piece,
            "{} bytes buffered",
            buffer.len()
        );
    }
    Split {
        frames,
        error: None,
    }
}

fn stopped(frames: Vec<Vec<u8>>, err: &FrameError) -> Split {
    Split {
        frames,
        error: Some(err.to_string()),
    }
}

/// The frame decoder over a byte stream. The first input byte is the read
/// size. The frames must not depend on how the stream was cut into reads,
/// and framed again they must be the bytes they came from.
pub fn frames(data: &[u8]) {
    let Some((&piece, stream)) = data.split_first() else {
        return;
    };
    let in_pieces = split(stream, usize::from(piece), FUZZ_FRAME_BYTES_MAX);
    let at_once = split(stream, stream.len(), FUZZ_FRAME_BYTES_MAX);
    assert_eq!(in_pieces, at_once, "the frames depend on the read size");
    let mut again = Vec::new();
    for frame in &in_pieces.frames {
        let len = u32::try_from(frame.len()).expect("a frame is under the limit");
        again.extend_from_slice(&len.to_be_bytes());
        again.extend_from_slice(frame);
    }
    assert_eq!(
        &stream[..again.len()],
        &again[..],
        "frames are not their bytes"
    );
}

/// Decodes `bytes` as a `T`. What decodes must encode, to no more bytes
/// than it came from (the codec's bounds assume a message is never larger
/// than its wire form), and decode to the same value.
pub fn round_trip<T>(bytes: &[u8]) -> Option<T>
where
    T: bincode::Decode<()> + bincode::Encode + PartialEq + std::fmt::Debug,
{
    let value = codec::decode::<T>(bytes).ok()?;
    let encoded = codec::encode(&value).expect("a decoded message encodes");
    assert!(
        encoded.len() <= bytes.len(),
        "{} bytes decoded to a message of {} bytes",
        bytes.len(),
        encoded.len()
    );
    let again = codec::decode::<T>(&encoded).expect("an encoded message decodes");
    assert_eq!(again, value, "decode(encode(message)) != message");
    Some(value)
}

/// One frame's payload as the server decodes it: a client's request or
/// handshake.
pub fn client_message(data: &[u8]) {
    let _ = round_trip::<ClientMessage>(data);
}

/// One frame's payload as the client decodes it: a server's reply, event
/// or closing word.
pub fn server_message(data: &[u8]) {
    let _ = round_trip::<ServerMessage>(data);
}
