//! The one place that knows how messages become bytes (bincode 2).
//!
//! Decoding is always bounded: bincode checks the memory every length it
//! reads would claim against a limit before allocating, so a forged length
//! inside a small frame can never make us allocate gigabytes. The limit is
//! picked from a few fixed tiers as [`EXPANSION_MAX`] times the smallest tier
//! at least as large as the input: bincode counts in-memory bytes (a
//! `Vec<String>` of empty names costs 24 bytes per one-byte entry on the
//! wire), so a legitimate message needs up to ~24 times its size, and a
//! hostile one gets at most that much. Decoding also insists that the whole
//! input is used: trailing bytes mean a peer that speaks something else.

use bincode::config::{self, Configuration};
use bincode::{Decode, Encode};

/// The largest input [`decode`] accepts, and so the ceiling for any frame limit.
pub const DECODE_INPUT_BYTES_MAX: usize = 64 * 1024 * 1024;

/// How many bytes of memory a decode may claim per byte of input tier. The
/// widest legitimate ratio is an empty `String` (1 byte on the wire, 24 in
/// memory); 32 leaves room without letting input become unbounded memory.
pub const EXPANSION_MAX: usize = 32;

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
    const KIB_64: usize = 64 * 1024;
    const MIB_1: usize = 1024 * 1024;
    const MIB_16: usize = 16 * 1024 * 1024;
    let (value, used) = match len {
        _ if len <= KIB_64 => decode_limited::<T, { KIB_64 * EXPANSION_MAX }>(bytes)?,
        _ if len <= MIB_1 => decode_limited::<T, { MIB_1 * EXPANSION_MAX }>(bytes)?,
        _ if len <= MIB_16 => decode_limited::<T, { MIB_16 * EXPANSION_MAX }>(bytes)?,
        _ if len <= DECODE_INPUT_BYTES_MAX => {
            decode_limited::<T, { DECODE_INPUT_BYTES_MAX * EXPANSION_MAX }>(bytes)?
        }
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
    fn the_widest_legitimate_expansion_decodes() {
        // Empty strings: one byte each on the wire, 24 bytes each in memory.
        let names = vec![String::new(); 60_000];
        let bytes = encode(&names).expect("encodes");
        assert!(bytes.len() <= 65_536);
        let back: Vec<String> = decode(&bytes).expect("decodes");
        assert_eq!(back.len(), 60_000);
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
