//! The one place that knows how messages become bytes (bincode 2).
//!
//! Decoding is always bounded: bincode checks every length it reads against a
//! limit before allocating, so a forged length inside a small frame can never
//! make us allocate gigabytes. The limit is picked from a few fixed tiers as the
//! smallest one at least as large as the input, so it stays proportional to the
//! bytes actually received. Decoding also insists that the whole input is used:
//! trailing bytes mean a peer that speaks something else.

use bincode::config::{self, Configuration};
use bincode::{Decode, Encode};

/// The largest input [`decode`] accepts, and so the ceiling for any frame limit.
pub const DECODE_INPUT_BYTES_MAX: usize = 64 * 1024 * 1024;

const CONFIG: Configuration = config::standard();

/// Why bytes could not be turned into a message.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("message of {len} bytes exceeds the decoder's ceiling of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("malformed message: {0}")]
    Malformed(#[from] bincode::error::DecodeError),
    #[error("{extra} trailing bytes after a {used}-byte message")]
    TrailingBytes { used: usize, extra: usize },
}

/// Why a message could not be turned into bytes.
#[derive(Debug, thiserror::Error)]
#[error("cannot encode message: {0}")]
pub struct EncodeError(#[from] bincode::error::EncodeError);

/// Encodes `value` and appends it to `out`.
pub fn encode_into<T: Encode>(value: &T, out: &mut Vec<u8>) -> Result<usize, EncodeError> {
    Ok(bincode::encode_into_std_write(value, out, CONFIG)?)
}

/// Encodes `value` into a fresh buffer.
pub fn encode<T: Encode>(value: &T) -> Result<Vec<u8>, EncodeError> {
    Ok(bincode::encode_to_vec(value, CONFIG)?)
}

/// Decodes exactly one `T` from the whole of `bytes`.
pub fn decode<T: Decode<()>>(bytes: &[u8]) -> Result<T, DecodeError> {
    let len = bytes.len();
    let (value, used) = match len {
        0..=65_536 => decode_limited::<T, 65_536>(bytes)?,
        65_537..=1_048_576 => decode_limited::<T, 1_048_576>(bytes)?,
        1_048_577..=16_777_216 => decode_limited::<T, 16_777_216>(bytes)?,
        _ if len <= DECODE_INPUT_BYTES_MAX => decode_limited::<T, DECODE_INPUT_BYTES_MAX>(bytes)?,
        _ => {
            return Err(DecodeError::TooLarge {
                len,
                max: DECODE_INPUT_BYTES_MAX,
            })
        }
    };
    if used != len {
        return Err(DecodeError::TrailingBytes {
            used,
            extra: len - used,
        });
    }
    Ok(value)
}

fn decode_limited<T: Decode<()>, const LIMIT: usize>(
    bytes: &[u8],
) -> Result<(T, usize), DecodeError> {
    Ok(bincode::decode_from_slice(
        bytes,
        CONFIG.with_limit::<LIMIT>(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_a_value() {
        let value = (7u64, String::from("/a/b"), vec![1u8, 2, 3]);
        let bytes = encode(&value).expect("encodes");
        let back: (u64, String, Vec<u8>) = decode(&bytes).expect("decodes");
        assert_eq!(back, value);
    }

    #[test]
    fn forged_length_is_refused_without_allocating_it() {
        // A varint claiming a 2^40-byte vector inside a 9-byte input.
        let mut bytes = vec![253u8];
        bytes.extend_from_slice(&(1u64 << 40).to_le_bytes());
        let err = decode::<Vec<u8>>(&bytes).expect_err("must not decode");
        assert!(matches!(err, DecodeError::Malformed(_)), "{err}");
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut bytes = encode(&5u32).expect("encodes");
        bytes.push(0);
        let err = decode::<u32>(&bytes).expect_err("must not decode");
        assert!(
            matches!(err, DecodeError::TrailingBytes { extra: 1, .. }),
            "{err}"
        );
    }
}
