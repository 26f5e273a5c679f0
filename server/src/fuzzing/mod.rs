//! The bodies of the fuzz targets for what the server decodes: a
//! connection's first bytes, log segments, snapshots, certificates, and
//! the ZooKeeper port's jute (and what it writes back).
//! `fuzz/` (cargo-fuzz, nightly) calls them from libFuzzer, and the stable
//! smoke test (`server/tests/fuzz_smoke.rs`) calls them on seeds and seeded
//! mutations in every `cargo test`: one body, two drivers. They are public
//! (hidden from the docs) because `fuzz/` is a workspace of its own.
//!
//! Each target runs the server's own code on the input, not a copy: the log
//! and snapshot readers through entry points that take bytes instead of
//! files ([`crate::storage::txnlog::read_segments`],
//! [`crate::storage::snapshot::load_from`]), the handshake through
//! [`crate::net::serve`] over an in-memory stream. A panic is a bug; so is an
//! assertion here failing, each of which states a property the reader
//! promises.
//!
//! Log and snapshot records are guarded by checksums a mutation almost
//! always breaks, so those targets read their input's first byte as a mode:
//! the rest is taken as the file's bytes, or (odd modes) as record bodies
//! that the target frames with valid lengths and checksums behind a valid
//! header, so the fuzzer also reaches what is decoded and built from them.

mod handshake;
mod snapshot;
mod txnlog;

pub use handshake::handshake;
pub use snapshot::snapshot;
pub use txnlog::txnlog;

use arbor_protocol::{codec, ServerMessage};

use crate::acl::x509;
use crate::cluster::peer_tls;
use crate::zk;

/// A certificate a TLS client or peer presented (DER), as the server reads
/// its subject (the x509 ACL id), its DNS names and the member it names.
pub fn certificate(data: &[u8]) {
    let _ = x509::subject_name(data);
    let _ = x509::dns_names(data);
    let _ = peer_tls::named_member(data);
}

/// A frame from a ZooKeeper client, as the ZooKeeper port reads it: as a
/// handshake (`ConnectRequest`) and as a request after one. Whatever it
/// holds, each is read or refused; a request's op code and xid survive
/// the native xid they travel in.
pub fn zk_request(data: &[u8]) {
    let _ = zk::handshake::decode(data);
    if let Ok(request) = zk::request::decode(data) {
        let native = zk::request::native_xid(request.op_code, request.xid);
        assert_eq!(
            zk::request::split_xid(native),
            (request.op_code, request.xid)
        );
    }
}

/// What the ZooKeeper port writes for any message the server could send
/// (read here from its native encoding): a frame whose length prefix is its
/// length, or nothing; never a panic, whichever op code the xid names.
pub fn zk_reply(data: &[u8]) {
    let Ok(message) = codec::decode::<ServerMessage>(data) else {
        return;
    };
    let frame_bytes_max = 1 << 20;
    for connected in [false, true] {
        let mut state = zk::reply::ReplyState::default();
        if connected {
            state.mark_connected();
        }
        let mut out = Vec::new();
        match state.encode(&message, frame_bytes_max, &mut out) {
            zk::reply::Encoded::Framed => {
                let prefix: [u8; 4] = out[..4].try_into().expect("a length prefix");
                assert_eq!(u32::from_be_bytes(prefix) as usize, out.len() - 4);
                assert!(out.len() - 4 <= frame_bytes_max);
            }
            zk::reply::Encoded::Nothing | zk::reply::Encoded::TooLarge { .. } => {
                assert!(out.is_empty(), "bytes left behind");
            }
        }
    }
}

/// The input's mode byte: whether to frame the rest as records, and the
/// mode's other bits for the target's own choices.
struct Mode {
    framed: bool,
    bits: u8,
}

fn mode(data: &[u8]) -> Option<(Mode, &[u8])> {
    let (&mode, rest) = data.split_first()?;
    let mode = Mode {
        framed: mode & 1 == 1,
        bits: mode >> 1,
    };
    Some((mode, rest))
}

/// Frames `data` as the log and snapshots frame records: each record's
/// body length comes from two bytes of the input (cut short at the end), its
/// body from the bytes after them, and its checksum is made to match.
fn frame_records(mut data: &[u8], out: &mut Vec<u8>) {
    use crate::storage::txnlog::format::record_crc;
    while let [high, low, rest @ ..] = data {
        let wanted = usize::from(u16::from_be_bytes([*high, *low]));
        let (body, after) = rest.split_at(wanted.min(rest.len()));
        let length = u32::try_from(body.len()).expect("at most u16::MAX bytes");
        out.extend_from_slice(&length.to_be_bytes());
        out.extend_from_slice(&record_crc(length, body).to_be_bytes());
        out.extend_from_slice(body);
        data = after;
    }
}
