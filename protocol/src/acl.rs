//! Access control lists, as ZooKeeper has them: each node carries a list of
//! (permissions, scheme, id), and a request is allowed when one entry whose
//! id matches one of the session's identities grants the permission asked.
//!
//! Schemes: `world` (id `anyone`: everybody), `auth` (in a create or
//! set-ACL only: replaced by the session's authenticated ids), `digest`
//! (`user:base64(sha1("user:password"))`), `ip` (an address or a CIDR
//! range), `x509` (a client certificate's subject). The text form is
//! zkCli's: `scheme:id:perms`, perms as letters of `cdrwa`, lists
//! comma-separated.

use std::fmt;

use bincode::{Decode, Encode};

/// What an ACL entry allows, as ZooKeeper's bits (READ 1, WRITE 2, CREATE 4,
/// DELETE 8, ADMIN 16).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Encode, Decode)]
pub struct Perms(u32);

impl Perms {
    /// Read the data, the stat and the children; see the ACL.
    pub const READ: Perms = Perms(1);
    /// Set the data.
    pub const WRITE: Perms = Perms(2);
    /// Create a child.
    pub const CREATE: Perms = Perms(4);
    /// Delete a child.
    pub const DELETE: Perms = Perms(8);
    /// Set the ACL (and see its digests).
    pub const ADMIN: Perms = Perms(16);
    pub const NONE: Perms = Perms(0);
    pub const ALL: Perms = Perms(31);

    /// The letters of zkCli, in its order.
    const LETTERS: [(char, Perms); 5] = [
        ('c', Perms::CREATE),
        ('d', Perms::DELETE),
        ('r', Perms::READ),
        ('w', Perms::WRITE),
        ('a', Perms::ADMIN),
    ];

    /// The bits as ZooKeeper sends them; `None` for bits it has no meaning for.
    pub fn from_bits(bits: u32) -> Option<Perms> {
        (bits & !Perms::ALL.0 == 0).then_some(Perms(bits))
    }

    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether every permission of `other` is in `self`.
    pub fn contains(self, other: Perms) -> bool {
        self.0 & other.0 == other.0
    }

    /// `cdrwa` letters; any order, no repeats needed.
    pub fn parse(letters: &str) -> Result<Perms, AclError> {
        let mut perms = Perms::NONE;
        for letter in letters.chars() {
            let (_, perm) = Perms::LETTERS
                .iter()
                .find(|(known, _)| *known == letter)
                .ok_or_else(|| AclError::Perms(letters.to_owned()))?;
            perms = perms | *perm;
        }
        Ok(perms)
    }
}

impl std::ops::BitOr for Perms {
    type Output = Perms;
    fn bitor(self, other: Perms) -> Perms {
        Perms(self.0 | other.0)
    }
}

/// As zkCli prints them: `cdrwa`, a letter for each permission held.
impl fmt::Display for Perms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (letter, perm) in Perms::LETTERS {
            if self.contains(perm) {
                write!(f, "{letter}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Perms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Perms({self})")
    }
}

/// An identity: a scheme and an id in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Encode, Decode)]
pub struct Id {
    pub scheme: String,
    pub id: String,
}

impl Id {
    pub fn new(scheme: impl Into<String>, id: impl Into<String>) -> Id {
        Id {
            scheme: scheme.into(),
            id: id.into(),
        }
    }

    /// `world:anyone`: everybody.
    pub fn anyone() -> Id {
        Id::new(WORLD, ANYONE)
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.scheme, self.id)
    }
}

/// One entry of a node's ACL.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Encode, Decode)]
pub struct Acl {
    pub perms: Perms,
    pub id: Id,
}

impl Acl {
    pub fn new(perms: Perms, scheme: impl Into<String>, id: impl Into<String>) -> Acl {
        Acl {
            perms,
            id: Id::new(scheme, id),
        }
    }

    /// Everybody may do everything: ZooKeeper's `OPEN_ACL_UNSAFE`, the ACL of
    /// every node created without one.
    pub fn open() -> Vec<Acl> {
        vec![Acl {
            perms: Perms::ALL,
            id: Id::anyone(),
        }]
    }

    /// Whether `acl` is [`Acl::open`]'s list, without making one.
    pub fn is_open(acl: &[Acl]) -> bool {
        matches!(acl, [only] if only.perms == Perms::ALL && only.id.scheme == WORLD && only.id.id == ANYONE)
    }

    /// Everybody may read: `READ_ACL_UNSAFE`.
    pub fn read_only() -> Vec<Acl> {
        vec![Acl {
            perms: Perms::READ,
            id: Id::anyone(),
        }]
    }

    /// Everything for the creator's authenticated ids: `CREATOR_ALL_ACL`.
    pub fn creator_all() -> Vec<Acl> {
        vec![Acl::new(Perms::ALL, AUTH, "")]
    }

    /// One entry in zkCli's form: `scheme:id:perms` (the id may hold
    /// colons, as a digest's does; `auth::cdrwa` has an empty one).
    pub fn parse(text: &str) -> Result<Acl, AclError> {
        let bad = || AclError::Syntax(text.to_owned());
        let (scheme, rest) = text.split_once(':').ok_or_else(bad)?;
        let (id, perms) = rest.rsplit_once(':').ok_or_else(bad)?;
        if scheme.is_empty() {
            return Err(bad());
        }
        Ok(Acl::new(Perms::parse(perms)?, scheme, id))
    }

    /// A comma-separated list of [`Acl::parse`] entries.
    pub fn parse_list(text: &str) -> Result<Vec<Acl>, AclError> {
        text.split(',')
            .map(|entry| Acl::parse(entry.trim()))
            .collect()
    }
}

/// zkCli's form, `scheme:id:perms`.
impl fmt::Display for Acl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.id, self.perms)
    }
}

pub const WORLD: &str = "world";
pub const ANYONE: &str = "anyone";
pub const AUTH: &str = "auth";
pub const DIGEST: &str = "digest";
pub const IP: &str = "ip";
pub const X509: &str = "x509";

/// Entries one ACL may hold (ZooKeeper has no limit; a node's ACL is read on
/// every request to it).
pub const ACL_ENTRIES_MAX: usize = 64;

/// Bytes of one id or scheme.
pub const ACL_ID_BYTES_MAX: usize = 1024;

/// Why an ACL's text did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    #[error("'{0}' is not an ACL entry (scheme:id:perms, e.g. world:anyone:cdrwa)")]
    Syntax(String),
    #[error("'{0}' are not permissions (letters of cdrwa)")]
    Perms(String),
    #[error("'{0}' is not user:password")]
    Credentials(String),
}

/// The digest id of `user:password`: `user:base64(sha1("user:password"))`,
/// what a `digest` ACL entry names and what authenticating with those
/// credentials proves.
///
/// ```
/// use arbor_protocol::acl::digest_id;
/// assert_eq!(digest_id("super:test").unwrap(), "super:D/InIHSb7yEEbrWz8b9l71RjZJU=");
/// ```
pub fn digest_id(user_password: &str) -> Result<String, AclError> {
    use sha1::{Digest, Sha1};
    let (user, _) = user_password
        .split_once(':')
        .filter(|(user, _)| !user.is_empty())
        .ok_or_else(|| AclError::Credentials(redacted(user_password)))?;
    let hash = Sha1::digest(user_password.as_bytes());
    Ok(format!("{user}:{}", base64(&hash)))
}

/// The user part only: credentials must not reach an error message whole.
fn redacted(user_password: &str) -> String {
    match user_password.split_once(':') {
        Some((user, _)) => format!("{user}:…"),
        None => "…".to_owned(),
    }
}

/// Standard base64 with padding (RFC 4648): twenty bytes of digest do not
/// call for a dependency.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_matches_zookeepers_test_vector() {
        assert_eq!(
            digest_id("super:test").unwrap(),
            "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
        );
        assert!(digest_id("nopassword").is_err());
        assert!(digest_id(":pw").is_err());
        let err = digest_id("secret").unwrap_err().to_string();
        assert!(!err.contains("secret"), "{err}");
    }

    #[test]
    fn base64_pads_as_rfc_4648_says() {
        for (input, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), encoded, "{input}");
        }
    }

    #[test]
    fn perms_parse_and_print_in_zkclis_letters() {
        assert_eq!(Perms::parse("cdrwa").unwrap(), Perms::ALL);
        assert_eq!(Perms::parse("ar").unwrap(), Perms::READ | Perms::ADMIN);
        assert_eq!((Perms::READ | Perms::ADMIN).to_string(), "ra");
        assert_eq!(Perms::ALL.to_string(), "cdrwa");
        assert_eq!(Perms::parse("").unwrap(), Perms::NONE);
        assert!(Perms::parse("rx").is_err());
        assert_eq!(Perms::from_bits(31), Some(Perms::ALL));
        assert_eq!(Perms::from_bits(32), None);
        assert!(Perms::ALL.contains(Perms::WRITE));
        assert!(!Perms::READ.contains(Perms::WRITE));
    }

    #[test]
    fn entries_parse_in_zkclis_syntax() {
        let list =
            Acl::parse_list("digest:alice:x1Y=:cdrwa, auth::rw,world:anyone:r,ip:10.0.0.0/8:c")
                .unwrap();
        assert_eq!(
            list,
            vec![
                Acl::new(Perms::ALL, DIGEST, "alice:x1Y="),
                Acl::new(Perms::READ | Perms::WRITE, AUTH, ""),
                Acl::new(Perms::READ, WORLD, ANYONE),
                Acl::new(Perms::CREATE, IP, "10.0.0.0/8"),
            ]
        );
        assert_eq!(list[0].to_string(), "digest:alice:x1Y=:cdrwa");
        assert!(Acl::is_open(&Acl::open()));
        assert!(!Acl::is_open(&Acl::read_only()));
        assert!(!Acl::is_open(&list));
        for bad in ["world", "world:anyone", ":x:r", "world:anyone:q"] {
            assert!(Acl::parse(bad).is_err(), "{bad}");
        }
    }
}
