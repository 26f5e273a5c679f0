//! What a certificate says about its holder: the subject's distinguished
//! name, as the `x509` ACL scheme names it, and the DNS names of its
//! subject-alternative-name extension, by which an ensemble member is known.
//!
//! A small DER reader of our own rather than an X.509 crate: rustls has
//! already verified the chain, so only two fields are read, and a general
//! parser (with its own ASN.1 stack) would be most of the build for it. It
//! reads what the server was handed over the network, so every length is
//! checked and every failure is an error, never a panic.
//!
//! The name is written as RFC 4514 (RFC 2253's successor) writes it, the
//! form ZooKeeper's x509 provider takes from Java's
//! `X500Principal.getName()`: the most specific part first
//! (`CN=alice,OU=eng,O=Example`), the usual attribute keywords, other
//! attributes as their dotted OID with the value's DER in hex.

use std::fmt::Write;

/// Why a certificate could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed certificate: {0}")]
pub struct CertificateError(&'static str);

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const BOOLEAN: u8 = 0x01;
const OCTET_STRING: u8 = 0x04;
const UTF8_STRING: u8 = 0x0c;
const PRINTABLE_STRING: u8 = 0x13;
const TELETEX_STRING: u8 = 0x14;
const IA5_STRING: u8 = 0x16;
const UNIVERSAL_STRING: u8 = 0x1c;
const BMP_STRING: u8 = 0x1e;
/// `[0] EXPLICIT` version of a TBSCertificate.
const VERSION: u8 = 0xa0;
/// `[1]` and `[2] IMPLICIT` unique ids.
const ISSUER_UNIQUE_ID: u8 = 0x81;
const SUBJECT_UNIQUE_ID: u8 = 0x82;
/// `[3] EXPLICIT` extensions.
const EXTENSIONS: u8 = 0xa3;
/// `dNSName [2] IA5String` of a GeneralName.
const DNS_NAME: u8 = 0x82;

/// id-ce-subjectAltName, 2.5.29.17.
const SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];

/// Attribute keywords of RFC 4514, by OID.
const KEYWORDS: &[(&[u8], &str)] = &[
    (&[0x55, 0x04, 0x03], "CN"),
    (&[0x55, 0x04, 0x06], "C"),
    (&[0x55, 0x04, 0x07], "L"),
    (&[0x55, 0x04, 0x08], "ST"),
    (&[0x55, 0x04, 0x09], "STREET"),
    (&[0x55, 0x04, 0x0a], "O"),
    (&[0x55, 0x04, 0x0b], "OU"),
    (
        &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19],
        "DC",
    ),
    (
        &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01],
        "UID",
    ),
];

/// A subject longer than this is refused: it becomes an ACL id, whose
/// limit is [`arbor_protocol::acl::ACL_ID_BYTES_MAX`].
pub const SUBJECT_BYTES_MAX: usize = arbor_protocol::acl::ACL_ID_BYTES_MAX;

/// One DER element: its tag, its content, and what follows it.
struct Element<'a> {
    tag: u8,
    content: &'a [u8],
    whole: &'a [u8],
}

/// Reads one element off the front of `input`; returns it and the rest.
fn element(input: &[u8]) -> Result<(Element<'_>, &[u8]), CertificateError> {
    let truncated = CertificateError("truncated element");
    let (&tag, rest) = input.split_first().ok_or(truncated.clone())?;
    if tag & 0x1f == 0x1f {
        return Err(CertificateError(
            "multi-byte tags are not used in certificates",
        ));
    }
    let (&first, rest) = rest.split_first().ok_or(truncated.clone())?;
    let (length, rest) = match first {
        short @ 0..=0x7f => (usize::from(short), rest),
        0x81..=0x84 => {
            let count = usize::from(first & 0x7f);
            if rest.len() < count {
                return Err(truncated);
            }
            let (bytes, rest) = rest.split_at(count);
            let length = bytes
                .iter()
                .fold(0usize, |length, &byte| (length << 8) | usize::from(byte));
            (length, rest)
        }
        _ => return Err(CertificateError("unsupported length form")),
    };
    if rest.len() < length {
        return Err(truncated);
    }
    let (content, rest) = rest.split_at(length);
    let header = input.len() - rest.len() - length;
    let whole = &input[..header + length];
    Ok((
        Element {
            tag,
            content,
            whole,
        },
        rest,
    ))
}

/// Reads one element that must have tag `tag`.
fn expect<'a>(
    input: &'a [u8],
    tag: u8,
    what: &'static str,
) -> Result<(&'a [u8], &'a [u8]), CertificateError> {
    let (found, rest) = element(input)?;
    if found.tag != tag {
        return Err(CertificateError(what));
    }
    Ok((found.content, rest))
}

/// The elements of a TBSCertificate we need: the subject name and the
/// extensions, if any.
struct Tbs<'a> {
    subject: &'a [u8],
    extensions: Option<&'a [u8]>,
}

fn tbs(certificate: &[u8]) -> Result<Tbs<'_>, CertificateError> {
    let (certificate, _) = expect(certificate, SEQUENCE, "not a certificate")?;
    let (tbs, _) = expect(certificate, SEQUENCE, "no TBSCertificate")?;
    let mut rest = tbs;
    let (first, after) = element(rest)?;
    if first.tag == VERSION {
        rest = after;
    }
    let (_serial, after) = element(rest)?;
    let (_signature, after) = expect(after, SEQUENCE, "no signature algorithm")?;
    let (_issuer, after) = expect(after, SEQUENCE, "no issuer")?;
    let (_validity, after) = expect(after, SEQUENCE, "no validity")?;
    let (subject, after) = expect(after, SEQUENCE, "no subject")?;
    let (_key, mut rest) = expect(after, SEQUENCE, "no public key")?;
    let mut extensions = None;
    while !rest.is_empty() {
        let (next, after) = element(rest)?;
        match next.tag {
            ISSUER_UNIQUE_ID | SUBJECT_UNIQUE_ID => {}
            EXTENSIONS => extensions = Some(next.content),
            _ => return Err(CertificateError("unexpected TBSCertificate field")),
        }
        rest = after;
    }
    Ok(Tbs {
        subject,
        extensions,
    })
}

/// The subject's distinguished name in RFC 4514 form: the `x509` id of a
/// client that presents this certificate (DER, as rustls hands it over).
pub fn subject_name(certificate: &[u8]) -> Result<String, CertificateError> {
    let name = tbs(certificate)?.subject;
    let mut rdns = Vec::new();
    let mut rest = name;
    while !rest.is_empty() {
        let (rdn, after) = expect(rest, SET, "a name part is not a SET")?;
        rdns.push(rdn);
        rest = after;
    }
    let mut out = String::new();
    // RFC 4514 writes the last part of the sequence first.
    for (index, rdn) in rdns.iter().rev().enumerate() {
        if index > 0 {
            out.push(',');
        }
        let mut rest = *rdn;
        let mut first = true;
        while !rest.is_empty() {
            let (attribute, after) = expect(rest, SEQUENCE, "an attribute is not a SEQUENCE")?;
            if !first {
                out.push('+');
            }
            first = false;
            write_attribute(attribute, &mut out)?;
            rest = after;
        }
        if out.len() > SUBJECT_BYTES_MAX {
            return Err(CertificateError("subject name too long"));
        }
    }
    Ok(out)
}

fn write_attribute(attribute: &[u8], out: &mut String) -> Result<(), CertificateError> {
    let (oid, rest) = expect(attribute, OID, "an attribute type is not an OID")?;
    let (value, _) = element(rest)?;
    match KEYWORDS.iter().find(|(known, _)| *known == oid) {
        Some((_, keyword)) => out.push_str(keyword),
        None => write_dotted_oid(oid, out)?,
    }
    out.push('=');
    match decode_string(value.tag, value.content) {
        Some(text) => escape_value(&text, out),
        None => {
            // RFC 4514: a value of a type without a string form is its DER in hex.
            out.push('#');
            for byte in value.whole {
                let _ = write!(out, "{byte:02x}");
            }
        }
    }
    Ok(())
}

/// The text of a directory string, `None` for other types or bad encodings.
fn decode_string(tag: u8, content: &[u8]) -> Option<String> {
    match tag {
        UTF8_STRING | PRINTABLE_STRING | IA5_STRING => {
            std::str::from_utf8(content).ok().map(str::to_owned)
        }
        // T.61 is in practice Latin-1 in certificates.
        TELETEX_STRING => Some(content.iter().map(|&byte| char::from(byte)).collect()),
        BMP_STRING => {
            if !content.len().is_multiple_of(2) {
                return None;
            }
            let units = content
                .chunks_exact(2)
                .map(|pair| u16::from_be_bytes([pair[0], pair[1]]));
            char::decode_utf16(units)
                .collect::<Result<String, _>>()
                .ok()
        }
        UNIVERSAL_STRING => {
            if !content.len().is_multiple_of(4) {
                return None;
            }
            content
                .chunks_exact(4)
                .map(|quad| {
                    char::from_u32(u32::from_be_bytes([quad[0], quad[1], quad[2], quad[3]]))
                })
                .collect()
        }
        _ => None,
    }
}

/// RFC 4514 section 2.4: the characters that would end or split a value
/// are escaped, and so are a leading `#` or space and a trailing space.
fn escape_value(value: &str, out: &mut String) {
    let last = value.chars().count().saturating_sub(1);
    for (index, c) in value.chars().enumerate() {
        let edge = (index == 0 && matches!(c, ' ' | '#')) || (index == last && c == ' ');
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\0' => out.push_str("\\00"),
            _ if edge => {
                out.push('\\');
                out.push(c);
            }
            _ => out.push(c),
        }
    }
}

fn write_dotted_oid(oid: &[u8], out: &mut String) -> Result<(), CertificateError> {
    let bad = CertificateError("malformed OID");
    let mut arcs = Vec::new();
    let mut value: u64 = 0;
    for &byte in oid {
        value = value
            .checked_mul(128)
            .and_then(|shifted| shifted.checked_add(u64::from(byte & 0x7f)))
            .ok_or(bad.clone())?;
        if byte & 0x80 == 0 {
            arcs.push(value);
            value = 0;
        }
    }
    let (&first, rest) = arcs.split_first().ok_or(bad.clone())?;
    if oid.last().is_some_and(|byte| byte & 0x80 != 0) {
        return Err(bad);
    }
    let (top, second) = match first {
        0..=39 => (0, first),
        40..=79 => (1, first - 40),
        _ => (2, first - 80),
    };
    let _ = write!(out, "{top}.{second}");
    for arc in rest {
        let _ = write!(out, ".{arc}");
    }
    Ok(())
}

/// The DNS names of the certificate's subject-alternative-name extension,
/// in order (empty if it has none).
pub fn dns_names(certificate: &[u8]) -> Result<Vec<String>, CertificateError> {
    let Some(extensions) = tbs(certificate)?.extensions else {
        return Ok(Vec::new());
    };
    let (mut rest, _) = expect(extensions, SEQUENCE, "extensions are not a SEQUENCE")?;
    while !rest.is_empty() {
        let (extension, after) = expect(rest, SEQUENCE, "an extension is not a SEQUENCE")?;
        rest = after;
        let (oid, mut fields) = expect(extension, OID, "an extension id is not an OID")?;
        if oid != SUBJECT_ALT_NAME {
            continue;
        }
        let (field, after) = element(fields)?;
        if field.tag == BOOLEAN {
            fields = after;
        }
        let (value, _) = expect(
            fields,
            OCTET_STRING,
            "an extension value is not an OCTET STRING",
        )?;
        let (mut general_names, _) = expect(value, SEQUENCE, "names are not a SEQUENCE")?;
        let mut names = Vec::new();
        while !general_names.is_empty() {
            let (name, after) = element(general_names)?;
            if name.tag == DNS_NAME {
                let name = std::str::from_utf8(name.content)
                    .map_err(|_| CertificateError("a DNS name is not text"))?;
                names.push(name.to_owned());
            }
            general_names = after;
        }
        return Ok(names);
    }
    Ok(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_as_rfc_4514_does() {
        let escaped = |value: &str| {
            let mut out = String::new();
            escape_value(value, &mut out);
            out
        };
        assert_eq!(escaped("alice"), "alice");
        assert_eq!(escaped("Smith, John"), "Smith\\, John");
        assert_eq!(escaped("#1 fan "), "\\#1 fan\\ ");
        assert_eq!(escaped(" a+b;c<d>\"e\\"), "\\ a\\+b\\;c\\<d\\>\\\"e\\\\");
        assert_eq!(escaped("mid#dle"), "mid#dle");
        assert_eq!(escaped(""), "");
    }

    #[test]
    fn dotted_oids_decode_every_arc() {
        let dotted = |oid: &[u8]| {
            let mut out = String::new();
            write_dotted_oid(oid, &mut out).map(|()| out)
        };
        assert_eq!(dotted(&[0x55, 0x04, 0x03]).as_deref(), Ok("2.5.4.3"));
        assert_eq!(
            dotted(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01]).as_deref(),
            Ok("1.2.840.113549.1.9.1")
        );
        assert!(dotted(&[]).is_err());
        assert!(dotted(&[0x2a, 0x86]).is_err());
        assert!(dotted(&[0xff; 12]).is_err());
    }

    fn certificate(subject: &[(rcgen::DnType, &str)], dns: &[&str]) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (kind, value) in subject {
            params.distinguished_name.push(kind.clone(), *value);
        }
        params.subject_alt_names = dns
            .iter()
            .map(|name| rcgen::SanType::DnsName((*name).try_into().expect("DNS name")))
            .chain([rcgen::SanType::IpAddress([10, 0, 0, 1].into())])
            .collect();
        let key = rcgen::KeyPair::generate().expect("key");
        params
            .self_signed(&key)
            .expect("certificate")
            .der()
            .to_vec()
    }

    #[test]
    fn reads_the_subject_most_specific_part_first_and_the_dns_names() {
        use rcgen::DnType;
        let der = certificate(
            &[
                (DnType::CountryName, "NL"),
                (DnType::OrganizationName, "Example, Inc."),
                (DnType::OrganizationalUnitName, "batch"),
                (DnType::CommonName, "alice"),
                (
                    DnType::CustomDnType(vec![1, 2, 840, 113_549, 1, 9, 1]),
                    "a@example.org",
                ),
            ],
            &["arbor-member-2", "node2.example"],
        );
        assert_eq!(
            subject_name(&der).as_deref(),
            Ok("1.2.840.113549.1.9.1=a@example.org,CN=alice,OU=batch,O=Example\\, Inc.,C=NL")
        );
        assert_eq!(
            dns_names(&der),
            Ok(vec![
                "arbor-member-2".to_owned(),
                "node2.example".to_owned()
            ])
        );
        let bare = certificate(&[(DnType::CommonName, "#1 ")], &[]);
        assert_eq!(subject_name(&bare).as_deref(), Ok("CN=\\#1\\ "));
        assert_eq!(dns_names(&bare), Ok(Vec::new()));
        // Every prefix of a real certificate is an error; a certificate with
        // any byte changed is read or refused, never a panic.
        for len in 0..der.len() {
            assert!(subject_name(&der[..len]).is_err());
        }
        for index in 0..der.len() {
            for byte in [0x00, 0x7f, 0x80, 0x84, 0xff] {
                let mut changed = der.clone();
                changed[index] = byte;
                let _ = (subject_name(&changed), dns_names(&changed));
            }
        }
    }

    #[test]
    fn truncated_and_forged_lengths_are_errors() {
        assert!(element(&[]).is_err());
        assert!(element(&[SEQUENCE]).is_err());
        assert!(element(&[SEQUENCE, 0x05, 1, 2]).is_err());
        assert!(element(&[SEQUENCE, 0x84, 0xff, 0xff, 0xff, 0xff, 0]).is_err());
        assert!(element(&[SEQUENCE, 0x85, 0, 0, 0, 0, 1]).is_err());
        assert!(element(&[0x1f, 0x01, 0x00]).is_err());
        let (found, rest) = element(&[SEQUENCE, 0x81, 0x02, 7, 8, 9]).expect("element");
        assert_eq!(
            (found.tag, found.content, rest),
            (SEQUENCE, &[7u8, 8][..], &[9u8][..])
        );
        assert!(subject_name(&[SEQUENCE, 0x00]).is_err());
        assert!(dns_names(b"not a certificate").is_err());
    }
}
