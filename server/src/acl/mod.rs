//! Access control: what a node's ACL allows, to whom, and the lists a
//! create or set-ACL may give a node (ZooKeeper's model; see
//! `arbor_protocol::acl`).
//!
//! * [`identity`]: who a session is; whether an ACL grants it a permission.
//! * [`table`]: the distinct lists the tree's nodes use, each held once.
//! * [`auth`]: proving an id (digest credentials) and the superuser.
//! * [`x509`]: what a client certificate names (its `x509` id).
//!
//! Checks of a write run in apply, against the session's identity in the
//! session table, so they see every earlier write in the log (a set-ACL
//! just ahead of a write governs it) and give the same answer on every
//! member. Checks of a read run where the read does, against the applied
//! state.

use std::borrow::Cow;

pub mod auth;
pub mod identity;
pub mod table;
pub mod x509;

use arbor_protocol::acl::{Acl, Perms, ACL_ENTRIES_MAX, ACL_ID_BYTES_MAX, ANYONE, AUTH, DIGEST};
use arbor_protocol::acl::{IP, WORLD, X509};
use arbor_protocol::ErrorCode;

pub use identity::Identity;
pub use table::{AclId, AclTable};

/// Checks what can be checked of an ACL without the session: known schemes,
/// ids of the right form, permissions ZooKeeper knows, sizes within limits.
/// `auth` entries are resolved later, by [`resolve`].
pub fn validate(acl: &[Acl]) -> Result<(), ErrorCode> {
    if acl.is_empty() {
        return Err(ErrorCode::InvalidAcl);
    }
    if acl.len() > ACL_ENTRIES_MAX {
        return Err(ErrorCode::LimitExceeded);
    }
    for entry in acl {
        if Perms::from_bits(entry.perms.bits()).is_none()
            || entry.id.id.len() > ACL_ID_BYTES_MAX
            || entry.id.scheme.len() > ACL_ID_BYTES_MAX
        {
            return Err(ErrorCode::InvalidAcl);
        }
        let valid = match entry.id.scheme.as_str() {
            WORLD => entry.id.id == ANYONE,
            AUTH => true,
            // user:base64 hash; the hash has no colon.
            DIGEST => {
                let mut parts = entry.id.id.split(':');
                matches!((parts.next(), parts.next(), parts.next()), (Some(user), Some(hash), None) if !user.is_empty() && !hash.is_empty())
            }
            IP => identity::parse_ip_range(&entry.id.id).is_some(),
            X509 => !entry.id.id.is_empty(),
            _ => false,
        };
        if !valid {
            return Err(ErrorCode::InvalidAcl);
        }
    }
    Ok(())
}

/// The list a node gets from a create or set-ACL by `who`: each `auth` entry
/// replaced by one entry per id the session proved (none proved:
/// `InvalidAcl`), repeats dropped, order kept. Deterministic: apply calls
/// it, with the session's identity from the session table.
pub fn resolve<'a>(acl: &'a [Acl], who: &Identity) -> Result<Cow<'a, [Acl]>, ErrorCode> {
    // The common case, a list with no `auth` entry and no repeat, is used
    // as it came: a create with an ACL copies nothing here.
    let plain = acl
        .iter()
        .enumerate()
        .all(|(at, entry)| entry.id.scheme != AUTH && !acl[..at].contains(entry));
    if plain {
        return Ok(Cow::Borrowed(acl));
    }
    let mut resolved: Vec<Acl> = Vec::with_capacity(acl.len());
    let mut push = |entry: Acl| {
        if !resolved.contains(&entry) {
            resolved.push(entry);
        }
    };
    for entry in acl {
        if entry.id.scheme == AUTH {
            if who.ids.is_empty() {
                return Err(ErrorCode::InvalidAcl);
            }
            for id in &who.ids {
                push(Acl {
                    perms: entry.perms,
                    id: id.clone(),
                });
            }
        } else {
            push(entry.clone());
        }
    }
    if resolved.len() > ACL_ENTRIES_MAX {
        return Err(ErrorCode::LimitExceeded);
    }
    Ok(Cow::Owned(resolved))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbor_protocol::acl::Id;

    #[test]
    fn lists_are_checked_as_zookeeper_checks_them() {
        let ok = |text: &str| validate(&Acl::parse_list(text).expect("parses"));
        assert_eq!(ok("world:anyone:cdrwa"), Ok(()));
        assert_eq!(
            ok("digest:alice:x1Y=:r,ip:10.0.0.0/8:c,x509:CN=a:r"),
            Ok(())
        );
        assert_eq!(ok("auth::cdrwa"), Ok(()));
        for bad in [
            "world:somebody:r",
            "digest:alice:r",
            "digest:alice:a:b:r",
            "ip:10.0.0.300:r",
            "x509::r",
            "sasl:alice:r",
        ] {
            assert_eq!(ok(bad), Err(ErrorCode::InvalidAcl), "{bad}");
        }
        assert_eq!(validate(&[]), Err(ErrorCode::InvalidAcl));
        let too_many = vec![Acl::new(Perms::READ, WORLD, ANYONE); ACL_ENTRIES_MAX + 1];
        assert_eq!(validate(&too_many), Err(ErrorCode::LimitExceeded));
    }

    #[test]
    fn auth_entries_become_the_sessions_proved_ids() {
        let alice = Identity {
            ids: vec![Id::new(DIGEST, "alice:h"), Id::new(X509, "CN=alice")],
            ..Identity::default()
        };
        let acl = Acl::parse_list("auth::cdrwa,world:anyone:r,auth::cdrwa").expect("parses");
        assert_eq!(
            resolve(&acl, &alice).map(Cow::into_owned),
            Ok(vec![
                Acl::new(Perms::ALL, DIGEST, "alice:h"),
                Acl::new(Perms::ALL, X509, "CN=alice"),
                Acl::new(Perms::READ, WORLD, ANYONE),
            ])
        );
        assert_eq!(
            resolve(&acl, &Identity::default()),
            Err(ErrorCode::InvalidAcl)
        );
        let open = Acl::open();
        assert!(matches!(
            resolve(&open, &Identity::default()),
            Ok(Cow::Borrowed(list)) if list == &open[..]
        ));
        let repeated = Acl::parse_list("world:anyone:r,world:anyone:r").expect("parses");
        assert_eq!(
            resolve(&repeated, &alice).map(Cow::into_owned),
            Ok(vec![Acl::new(Perms::READ, WORLD, ANYONE)])
        );
    }
}
