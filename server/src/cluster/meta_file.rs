//! Small files that are replaced whole: the vote, the purged position, the
//! committed position.
//!
//! ```text
//! file = magic:8 bytes | crc:u32 BE (crc32c of the body) | body (bincode)
//! ```
//!
//! A new value is written to `<name>.tmp`, synced, renamed over the old file
//! and the directory synced, so a crash leaves the old value or the new one,
//! never a mix. A file that fails its checksum is an error, not a default:
//! forgetting a vote could let a member vote twice in one term.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use arbor_protocol::codec;
use bincode::{Decode, Encode};

use super::log_files::{sync_dir, LogError};

/// The vote: durable before a vote is granted or a term is entered.
pub const VOTE_FILE: &str = "vote";
pub const VOTE_MAGIC: [u8; 8] = *b"ARBORVOT";
/// The last purged log position.
pub const PURGED_FILE: &str = "purged";
pub const PURGED_MAGIC: [u8; 8] = *b"ARBORPRG";
/// The last committed log position known here: a hint that lets a
/// restarted member apply what it already has before it hears from a
/// leader. Not synced: losing it, or finding it empty or stale after a
/// power cut, only delays that (see `log_store::committed_hint`).
pub const COMMITTED_FILE: &str = "committed";
pub const COMMITTED_MAGIC: [u8; 8] = *b"ARBORCMT";

/// Meta files are a few dozen bytes.
const META_FILE_BYTES_MAX: u64 = 4096;

/// Replaces `dir/name` with `value`; durable on return when `sync`.
pub fn write<T: Encode>(
    dir: &Path,
    name: &str,
    magic: [u8; 8],
    value: &T,
    sync: bool,
) -> Result<(), LogError> {
    let path = dir.join(name);
    let temp = dir.join(format!("{name}.tmp"));
    let body = codec::encode(value).map_err(|err| LogError::Encode {
        index: 0,
        reason: err.to_string(),
    })?;
    let mut bytes = Vec::with_capacity(12 + body.len());
    bytes.extend_from_slice(&magic);
    bytes.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
    bytes.extend_from_slice(&body);
    let io = |op: &'static str, path: &Path| {
        let path = path.to_owned();
        move |source| LogError::Io { op, path, source }
    };
    let mut file = File::create(&temp).map_err(io("create", &temp))?;
    file.write_all(&bytes).map_err(io("write", &temp))?;
    if sync {
        file.sync_all().map_err(io("fsync", &temp))?;
    }
    drop(file);
    fs::rename(&temp, &path).map_err(io("rename", &path))?;
    if sync {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Reads `dir/name`; `None` if it does not exist.
pub fn read<T: Decode<()>>(dir: &Path, name: &str, magic: [u8; 8]) -> Result<Option<T>, LogError> {
    let path = dir.join(name);
    let corrupt = |problem: &str| LogError::Corrupt {
        path: path.clone(),
        offset: 0,
        problem: problem.to_owned(),
    };
    let bytes = match fs::metadata(&path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(LogError::Io {
                op: "read",
                path,
                source,
            })
        }
        Ok(meta) if meta.len() > META_FILE_BYTES_MAX => {
            return Err(corrupt("the file is larger than any value it could hold"))
        }
        Ok(_) => fs::read(&path).map_err(|source| LogError::Io {
            op: "read",
            path: path.clone(),
            source,
        })?,
    };
    if bytes.len() < 12 || bytes[..8] != magic {
        return Err(corrupt("the file does not start with its magic number"));
    }
    let crc = u32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[12..]) != crc {
        return Err(corrupt("the file fails its checksum"));
    }
    codec::decode(&bytes[12..])
        .map(Some)
        .map_err(|err| corrupt(&format!("the value does not decode: {err}")))
}
