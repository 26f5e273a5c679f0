//! ZooKeeper's `ConnectRequest`, read as Arbor's handshake: protocol
//! version, last zxid seen, session timeout, session id and password (zero
//! and empty for a new session), then, from clients since 3.4, whether the
//! client would take a read-only server.

use arbor_protocol::{
    ConnectRequest, SessionCredentials, PROTOCOL_VERSION, SESSION_PASSWORD_BYTES,
};

use super::jute::{JuteError, Reader};
use super::reply;

/// Why a handshake frame was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot read ConnectRequest: {0}")]
    Jute(#[from] JuteError),
    #[error("ZooKeeper protocol version {0} is not supported; this server speaks 0")]
    Version(i32),
}

/// Reads a `ConnectRequest` as the native handshake it stands for.
pub fn decode(frame: &[u8]) -> Result<ConnectRequest, ConnectError> {
    let mut reader = Reader::new(frame);
    let version = reader.int("protocolVersion")?;
    if version != reply::PROTOCOL_VERSION {
        return Err(ConnectError::Version(version));
    }
    let last_zxid_seen = reader.long("lastZxidSeen")?;
    let timeout_ms = reader.int("timeOut")?;
    let session_id = reader.long("sessionId")?;
    let password = reader.buffer("passwd")?.unwrap_or_default();
    // `readOnly` follows from 3.4 on; Arbor serves writes, and says so in
    // its answer whatever the client asked.
    let session = (session_id != 0).then(|| SessionCredentials {
        id: session_id as u64,
        password: fixed_password(password),
    });
    Ok(ConnectRequest {
        protocol_version: PROTOCOL_VERSION,
        last_zxid_seen: last_zxid_seen.max(0) as u64,
        session_timeout_ms: timeout_ms.max(0) as u32,
        session,
    })
}

/// A session password of the wrong length can be no session's: it is
/// checked as one that does not match (all zeros never is one a server
/// hands out, as [`SESSION_PASSWORD_BYTES`] random bytes).
fn fixed_password(password: &[u8]) -> [u8; SESSION_PASSWORD_BYTES] {
    password.try_into().unwrap_or([0; SESSION_PASSWORD_BYTES])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zk::jute::Write;

    fn request(version: i32, session_id: i64, password: &[u8], read_only: bool) -> Vec<u8> {
        let mut out = Vec::new();
        out.put_int(version);
        out.put_long(17);
        out.put_int(6_000);
        out.put_long(session_id);
        out.put_bytes(password);
        if read_only {
            out.put_bool(false);
        }
        out
    }

    #[test]
    fn new_and_resumed_sessions() {
        let fresh = decode(&request(0, 0, &[0; 16], true)).expect("decodes");
        assert_eq!(fresh.session, None);
        assert_eq!(
            (fresh.last_zxid_seen, fresh.session_timeout_ms),
            (17, 6_000)
        );
        // Clients before 3.4 end at the password.
        let resumed = decode(&request(0, 0x1234, &[5; 16], false)).expect("decodes");
        assert_eq!(
            resumed.session,
            Some(SessionCredentials {
                id: 0x1234,
                password: [5; 16]
            })
        );
        let short = decode(&request(0, 0x1234, &[5; 3], true)).expect("decodes");
        assert_eq!(short.session.map(|session| session.password), Some([0; 16]));
        assert_eq!(
            decode(&request(1, 0, &[], true)),
            Err(ConnectError::Version(1))
        );
        let whole = request(0, 0, &[0; 16], false);
        for len in 0..whole.len() {
            assert!(decode(&whole[..len]).is_err(), "{len}-byte prefix");
        }
    }
}
