//! Who a session is, and whether an ACL lets it do something.

use std::net::IpAddr;

use arbor_protocol::acl::{Acl, Id, Perms, ANYONE, IP, WORLD, X509};
use bincode::{Decode, Encode};

/// The identities a session holds: the address of its connection, and the
/// ids it has proved (digest credentials; later a certificate). Part of the
/// session table, so apply checks a write against what the session was when
/// the write took its place in the log, on every member alike.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Encode, Decode)]
pub struct Identity {
    /// The address of the session's connection (for `ip` ACL entries).
    pub ip: Option<IpAddr>,
    /// Authenticated ids, in the order they were proved, no repeats.
    pub ids: Vec<Id>,
    /// Proved the server's superuser credentials: every check passes.
    pub superuser: bool,
}

/// What a connection proves by itself, before any auth request: the
/// client's address, and with mutual TLS the subject of its certificate.
/// Both belong to the connection: a session resumed on another connection
/// holds that one's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Encode, Decode)]
pub struct Origin {
    pub ip: Option<IpAddr>,
    pub x509: Option<String>,
}

/// A session that proved nothing and has no address: what `world` grants.
pub static ANYBODY: Identity = Identity {
    ip: None,
    ids: Vec::new(),
    superuser: false,
};

/// The server's own writes (reaping containers and TTL nodes, closing
/// sessions): nothing is refused to it.
pub static SERVER: Identity = Identity {
    ip: None,
    ids: Vec::new(),
    superuser: true,
};

/// Ids one session may prove (each is checked against every ACL it meets).
pub const AUTH_IDS_PER_SESSION_MAX: usize = 8;

impl Identity {
    /// A session connected from `ip`, with nothing proved yet.
    pub fn from_ip(ip: Option<IpAddr>) -> Identity {
        Identity {
            ip,
            ..Identity::default()
        }
    }

    /// A session opened from a connection that proves `origin`.
    pub fn from_origin(origin: &Origin) -> Identity {
        Identity {
            ip: origin.ip,
            ids: origin
                .x509
                .iter()
                .map(|subject| Id::new(X509, subject.clone()))
                .collect(),
            superuser: false,
        }
    }

    /// The session moved to a connection that proves `origin`: the address
    /// and certificate id are the new connection's; what the session proved
    /// by auth requests it keeps.
    pub fn move_to(&mut self, origin: &Origin) {
        self.ip = origin.ip;
        self.ids.retain(|id| id.scheme != X509);
        if let Some(subject) = &origin.x509 {
            self.ids.insert(0, Id::new(X509, subject.clone()));
        }
    }

    /// Whether this identity already is what a connection proving `origin`
    /// would make it (so a resume changes nothing).
    pub fn holds(&self, origin: &Origin) -> bool {
        let certified = self.ids.iter().find(|id| id.scheme == X509);
        self.ip == origin.ip && certified.map(|id| &id.id) == origin.x509.as_ref()
    }

    /// Whether `acl` grants every permission of `wanted` to this identity.
    pub fn may(&self, acl: &[Acl], wanted: Perms) -> bool {
        self.superuser
            || acl
                .iter()
                .any(|entry| entry.perms.contains(wanted) && self.is(&entry.id))
    }

    /// Whether `acl` grants at least one permission of `any` (get-ACL asks
    /// for READ or ADMIN).
    pub fn may_any(&self, acl: &[Acl], any: Perms) -> bool {
        self.superuser
            || acl
                .iter()
                .any(|entry| entry.perms.bits() & any.bits() != 0 && self.is(&entry.id))
    }

    /// Whether this identity is the one an ACL entry names.
    fn is(&self, id: &Id) -> bool {
        match id.scheme.as_str() {
            WORLD => id.id == ANYONE,
            IP => self.ip.is_some_and(|ip| ip_matches(&id.id, ip)),
            _ => self.ids.iter().any(|held| held == id),
        }
    }

    /// Every id this session holds as ZooKeeper's `whoAmI` lists them: the
    /// address first, then what it proved.
    pub fn listed(&self) -> Vec<Id> {
        let ip = self.ip.map(|ip| Id::new(IP, ip.to_string()));
        let superuser = self.superuser.then(|| Id::new("super", ""));
        ip.into_iter()
            .chain(self.ids.iter().cloned())
            .chain(superuser)
            .collect()
    }
}

/// An `ip` entry's id: an address, or an address and a prefix length
/// (`10.0.0.0/8`). `None` if it is neither.
pub fn parse_ip_range(text: &str) -> Option<(IpAddr, u8)> {
    let (address, bits) = match text.split_once('/') {
        Some((address, bits)) => (address, Some(bits)),
        None => (text, None),
    };
    let address: IpAddr = address.parse().ok()?;
    let width = if address.is_ipv4() { 32 } else { 128 };
    let bits = match bits {
        Some(bits) => bits.parse::<u8>().ok().filter(|&b| b <= width)?,
        None => width,
    };
    Some((address, bits))
}

/// Whether `ip` is in the range an `ip` entry names. An IPv4 client seen
/// through an IPv6 socket (`::ffff:a.b.c.d`) matches IPv4 ranges.
fn ip_matches(range: &str, ip: IpAddr) -> bool {
    let Some((network, bits)) = parse_ip_range(range) else {
        return false;
    };
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match (network, ip) {
        (IpAddr::V4(network), IpAddr::V4(ip)) => {
            prefix_equal(&network.octets(), &ip.octets(), bits)
        }
        (IpAddr::V6(network), IpAddr::V6(ip)) => {
            prefix_equal(&network.octets(), &ip.octets(), bits)
        }
        _ => false,
    }
}

fn prefix_equal(a: &[u8], b: &[u8], bits: u8) -> bool {
    let (whole, rest) = (usize::from(bits / 8), bits % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        a[whole] & mask == b[whole] & mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbor_protocol::acl::DIGEST;

    fn ip(text: &str) -> Option<IpAddr> {
        Some(text.parse().expect("an address"))
    }

    #[test]
    fn ranges_match_by_prefix() {
        let client = Identity::from_ip(ip("10.1.2.3"));
        let allows = |range: &str| client.may(&[Acl::new(Perms::READ, IP, range)], Perms::READ);
        assert!(allows("10.1.2.3"));
        assert!(allows("10.0.0.0/8"));
        assert!(allows("10.1.2.0/23"));
        assert!(allows("0.0.0.0/0"));
        assert!(!allows("10.1.2.4"));
        assert!(!allows("11.0.0.0/8"));
        assert!(!allows("10.1.4.0/23"));
        assert!(!allows("not an address"));
        assert!(!allows("10.0.0.0/33"));
        assert!(!allows("::1"));
        let mapped = Identity::from_ip(ip("::ffff:10.1.2.3"));
        assert!(mapped.may(&[Acl::new(Perms::READ, IP, "10.0.0.0/8")], Perms::READ));
        let v6 = Identity::from_ip(ip("fd00::17"));
        assert!(v6.may(&[Acl::new(Perms::READ, IP, "fd00::/8")], Perms::READ));
        assert!(!v6.may(&[Acl::new(Perms::READ, IP, "fe00::/8")], Perms::READ));
    }

    #[test]
    fn certificate_ids_go_with_the_connection_and_proved_ids_stay() {
        let certified = |subject: &str| Origin {
            ip: ip("10.0.0.1"),
            x509: Some(subject.to_owned()),
        };
        let mut carol = Identity::from_origin(&certified("CN=carol"));
        carol.ids.push(Id::new(DIGEST, "carol:hash"));
        let acl = [Acl::new(Perms::READ, X509, "CN=carol")];
        assert!(carol.may(&acl, Perms::READ));
        assert!(carol.holds(&certified("CN=carol")));

        // Resumed over a plain connection: the certificate id is gone.
        let plain = Origin {
            ip: ip("10.0.0.2"),
            x509: None,
        };
        assert!(!carol.holds(&plain));
        carol.move_to(&plain);
        assert!(!carol.may(&acl, Perms::READ));
        assert_eq!(carol.ids, vec![Id::new(DIGEST, "carol:hash")]);
        assert_eq!(carol.ip, ip("10.0.0.2"));

        // Over another certificate: that one's id only.
        carol.move_to(&certified("CN=dave"));
        assert_eq!(
            carol.ids,
            vec![Id::new(X509, "CN=dave"), Id::new(DIGEST, "carol:hash")]
        );
        assert!(carol.holds(&certified("CN=dave")));
    }

    #[test]
    fn an_entry_grants_only_its_perms_to_only_its_id() {
        let alice = Identity {
            ip: ip("127.0.0.1"),
            ids: vec![Id::new(DIGEST, "alice:hash")],
            superuser: false,
        };
        let acl = [
            Acl::new(Perms::READ | Perms::WRITE, DIGEST, "alice:hash"),
            Acl::new(Perms::READ, WORLD, ANYONE),
        ];
        assert!(alice.may(&acl, Perms::WRITE));
        assert!(alice.may(&acl, Perms::READ | Perms::WRITE));
        assert!(!alice.may(&acl, Perms::ADMIN));
        let anyone = Identity::from_ip(ip("127.0.0.1"));
        assert!(anyone.may(&acl, Perms::READ));
        assert!(!anyone.may(&acl, Perms::WRITE));
        assert!(!anyone.may(&[Acl::new(Perms::ALL, WORLD, "somebody")], Perms::READ));
        assert!(SERVER.may(&[], Perms::ADMIN));
        assert!(!ANYBODY.may(&[], Perms::READ));
        assert!(anyone.may_any(&acl, Perms::READ | Perms::ADMIN));
        assert!(!anyone.may_any(&acl, Perms::WRITE | Perms::ADMIN));
        assert_eq!(
            alice.listed(),
            vec![Id::new(IP, "127.0.0.1"), Id::new(DIGEST, "alice:hash")]
        );
    }
}
