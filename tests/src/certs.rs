//! Test certificates, made when a test runs (no key is ever committed): a
//! CA, and the server, client and ensemble-member certificates it issues,
//! written as PEM files into a directory removed with the CA.

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};

use crate::TempDir;

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A certificate authority of its own, for one test.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: TempDir,
    name: String,
}

impl TestCa {
    /// A new CA whose subject is `CN=<name>`.
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("CA certificate");
        let ca = TestCa {
            issuer,
            dir: TempDir::new(),
            name: name.to_owned(),
        };
        std::fs::write(ca.ca(), ca.issuer.pem()).expect("write CA");
        ca
    }

    /// The CA's certificate (PEM): what both sides trust.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join(format!("{}-ca.pem", self.name))
    }

    /// A server certificate for 127.0.0.1 and `localhost`.
    pub fn server(&self, stem: &str) -> CertFiles {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .expect("names");
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, stem);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(stem, params)
    }

    /// A client certificate whose subject is `subject`, in the order given
    /// (the most general part first, as in the certificate's DER).
    pub fn client(&self, stem: &str, subject: &[(DnType, &str)]) -> CertFiles {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        for (kind, value) in subject {
            params.distinguished_name.push(kind.clone(), *value);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(stem, params)
    }

    /// A member's peer certificate: it names `arbor-member-<id>` (and
    /// 127.0.0.1), for both ends of a peer connection.
    pub fn member(&self, id: u64) -> CertFiles {
        self.peer(&format!("member-{id}"), &[&format!("arbor-member-{id}")])
    }

    /// A peer certificate with the DNS names `names` (and 127.0.0.1): for
    /// members, and for impostors with the wrong names.
    pub fn peer(&self, stem: &str, names: &[&str]) -> CertFiles {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, stem);
        params.subject_alt_names = names
            .iter()
            .map(|name| SanType::DnsName((*name).try_into().expect("a DNS name")))
            .chain([SanType::IpAddress([127, 0, 0, 1].into())])
            .collect();
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        self.issue(stem, params)
    }

    fn issue(&self, stem: &str, params: CertificateParams) -> CertFiles {
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("certificate");
        let files = CertFiles {
            cert: self.dir.path().join(format!("{stem}.pem")),
            key: self.dir.path().join(format!("{stem}.key")),
        };
        std::fs::write(&files.cert, cert.pem()).expect("write certificate");
        std::fs::write(&files.key, key.serialize_pem()).expect("write key");
        files
    }
}
