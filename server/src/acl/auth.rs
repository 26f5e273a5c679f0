//! Proving an id: what a client's auth request is worth.

use arbor_protocol::acl::{digest_id, Id, DIGEST};
use arbor_protocol::ErrorCode;

/// Auth requests one connection may make; past it the connection is closed
/// (each costs a hash, and a client has no reason to need more).
pub const AUTH_ATTEMPTS_PER_CONNECTION_MAX: u32 = 16;

/// What an accepted auth request proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proved {
    pub id: Id,
    /// The credentials are the server's superuser's (`--super-digest`).
    pub superuser: bool,
}

/// Checks `credentials` in `scheme`. Only `digest` (`user:password`) is
/// proved by a request; `ip` and `x509` ids come with the connection. An
/// unknown scheme or malformed credentials is `AuthFailed`, as in
/// ZooKeeper, which then closes the connection.
pub fn prove(
    scheme: &str,
    credentials: &[u8],
    super_digest: Option<&str>,
) -> Result<Proved, ErrorCode> {
    if scheme != DIGEST {
        return Err(ErrorCode::AuthFailed);
    }
    let credentials = std::str::from_utf8(credentials).map_err(|_| ErrorCode::AuthFailed)?;
    let id = digest_id(credentials).map_err(|_| ErrorCode::AuthFailed)?;
    let superuser = super_digest.is_some_and(|expected| constant_time_eq(&id, expected));
    Ok(Proved {
        id: Id::new(DIGEST, id),
        superuser,
    })
}

/// Compares without stopping at the first difference: how long the
/// comparison with the superuser's digest takes says nothing about it.
fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUPER: &str = "super:D/InIHSb7yEEbrWz8b9l71RjZJU=";

    #[test]
    fn digest_credentials_prove_their_digest_id() {
        let proved = prove(DIGEST, b"alice:secret", Some(SUPER)).expect("proves");
        assert_eq!(proved.id.scheme, DIGEST);
        assert!(proved.id.id.starts_with("alice:"));
        assert!(!proved.superuser);
        let root = prove(DIGEST, b"super:test", Some(SUPER)).expect("proves");
        assert!(root.superuser);
        assert!(
            !prove(DIGEST, b"super:test", None)
                .expect("proves")
                .superuser
        );
        assert!(
            !prove(DIGEST, b"super:wrong", Some(SUPER))
                .expect("proves")
                .superuser
        );
    }

    #[test]
    fn other_schemes_and_bad_credentials_fail() {
        for (scheme, credentials) in [
            ("sasl", &b"alice:secret"[..]),
            ("ip", b"127.0.0.1"),
            (DIGEST, b"no-colon"),
            (DIGEST, b":empty-user"),
            (DIGEST, &[0xff, b':', 0xfe]),
        ] {
            assert_eq!(
                prove(scheme, credentials, None),
                Err(ErrorCode::AuthFailed),
                "{scheme}"
            );
        }
    }
}
