//! The first bytes of a native connection, looked at before the handshake
//! is read as a frame: a peer that speaks something else (a browser or
//! `curl`, a ZooKeeper four-letter word, a ZooKeeper client, TLS on the
//! plain port) would otherwise be told "frame of 1195725856 bytes is over
//! the limit", which helps nobody. Those that can read text get a line
//! saying which port they want; every one is logged once, at info, with
//! its address.
//!
//! Nothing an Arbor client sends is mistaken for them: its first frame is
//! a `Connect` of a few dozen bytes, so its length prefix starts with
//! three zero bytes, and its payload's first two bytes are the message tag
//! (0) and the protocol version (1).

/// Bytes looked at: a frame length and the start of its payload.
pub const SNIFF_BYTES: usize = 8;

/// What the first bytes say the peer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// Possibly an Arbor client: read its handshake.
    Native,
    Http,
    FourLetterWord,
    /// A TLS ClientHello on the plain port.
    Tls,
    /// A ZooKeeper client's ConnectRequest (protocol version 0).
    ZooKeeper,
}

/// The HTTP methods a request can start with (four bytes each, as read).
const HTTP_STARTS: [&[u8; 4]; 9] = [
    b"GET ", b"POST", b"HEAD", b"PUT ", b"DELE", b"OPTI", b"PATC", b"CONN", b"PRI ",
];

/// What the first four bytes alone say, if they are enough.
pub fn classify_start(start: &[u8]) -> Option<Peer> {
    let word: &[u8; 4] = start.get(..4)?.try_into().ok()?;
    if HTTP_STARTS.contains(&word) {
        return Some(Peer::Http);
    }
    if crate::zk::four_letter::is_word(word) {
        return Some(Peer::FourLetterWord);
    }
    // A TLS record: handshake (22), then a 3.x version.
    if word[0] == 0x16 && word[1] == 0x03 {
        return Some(Peer::Tls);
    }
    None
}

/// The shortest ZooKeeper ConnectRequest: its fixed fields alone.
const ZK_CONNECT_BYTES_MIN: u8 = 20;

/// Whether four bytes read leave the peer undecided: a frame length that
/// could be ZooKeeper's handshake (three zero bytes, then at least
/// [`ZK_CONNECT_BYTES_MIN`]), so four more bytes of it are sure to come.
/// Anything else is known already, or is left to the frame reader (which
/// reads a short frame as it is, and refuses an oversized length at once).
pub fn needs_more(start: &[u8]) -> bool {
    classify_start(start).is_none()
        && matches!(start, [0, 0, 0, length] if *length >= ZK_CONNECT_BYTES_MIN)
}

/// What the bytes read say (four, or [`SNIFF_BYTES`] when
/// [`needs_more`] asked for them).
pub fn classify(first: &[u8]) -> Peer {
    if let Some(peer) = classify_start(first) {
        return peer;
    }
    // A short frame whose payload starts with a big-endian protocol version
    // of 0: ZooKeeper's ConnectRequest. Arbor's Connect starts with its tag
    // (0) then its own version.
    if let [0, 0, 0, length, 0, 0, 0, 0] = first {
        if *length >= ZK_CONNECT_BYTES_MIN {
            return Peer::ZooKeeper;
        }
    }
    Peer::Native
}

/// What a peer that can read text is told, if anything (a TLS or
/// ZooKeeper client cannot read plain text: it is only closed).
pub fn answer(peer: Peer) -> Option<String> {
    const HINT: &str = "This is Arbor's native client port. Metrics, /health, /ready and \
        admin commands are served over HTTP on the admin port (--admin-listen, \
        127.0.0.1:7182 by default); ZooKeeper clients and four-letter words use \
        the ZooKeeper port (--zk-listen, 127.0.0.1:2181 by default).\n";
    match peer {
        Peer::Http => Some(format!(
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{HINT}",
            HINT.len()
        )),
        Peer::FourLetterWord => Some(HINT.to_owned()),
        Peer::Native | Peer::Tls | Peer::ZooKeeper => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbor_protocol::frame::encode_frame;
    use arbor_protocol::{ClientMessage, ConnectRequest, PROTOCOL_VERSION};

    fn first(bytes: &[u8]) -> [u8; SNIFF_BYTES] {
        let mut first = [0; SNIFF_BYTES];
        first.copy_from_slice(&bytes[..SNIFF_BYTES]);
        first
    }

    // Proves an Arbor client's real handshake is read as one, whatever its
    // fields, and what other peers send is told apart.
    #[test]
    fn peers_are_told_apart() {
        for session_timeout_ms in [0, 4000, u32::MAX] {
            let connect = ClientMessage::Connect(ConnectRequest {
                protocol_version: PROTOCOL_VERSION,
                last_zxid_seen: u64::MAX,
                session_timeout_ms,
                session: None,
            });
            let mut frame = Vec::new();
            encode_frame(&connect, usize::MAX, &mut frame).expect("encoded");
            // The tag, then the version (a varint: one byte under 128).
            assert_eq!(frame[4..6], [0, PROTOCOL_VERSION as u8]);
            let read = if needs_more(&frame[..4]) {
                SNIFF_BYTES
            } else {
                4
            };
            assert_eq!(classify(&frame[..read]), Peer::Native);
        }
        assert_eq!(classify(&first(b"GET /metrics HTTP/1.1")), Peer::Http);
        assert_eq!(classify(&first(b"ruok\0\0\0\0")), Peer::FourLetterWord);
        assert_eq!(classify(&first(&[0x16, 3, 1, 2, 0, 1, 0, 1])), Peer::Tls);
        // kazoo's ConnectRequest: length 44, protocolVersion 0, lastZxidSeen 0.
        assert_eq!(
            classify(&first(&[0, 0, 0, 44, 0, 0, 0, 0])),
            Peer::ZooKeeper
        );
        // An oversized length is left to the frame reader, which says so.
        assert!(!needs_more(&65_537u32.to_be_bytes()));
        assert_eq!(classify(&65_537u32.to_be_bytes()), Peer::Native);
        assert!(!needs_more(b"ruok"));
        // A frame too short to be ZooKeeper's handshake is not waited on.
        assert!(!needs_more(&[0, 0, 0, 3]));
        assert!(answer(Peer::Http).is_some_and(|a| a.starts_with("HTTP/1.1 400")));
        assert!(answer(Peer::Tls).is_none());
    }
}
