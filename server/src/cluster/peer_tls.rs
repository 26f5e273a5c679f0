//! Peer TLS: members prove who they are to each other.
//!
//! Every member has a certificate from the ensemble's CA that names it: a
//! DNS subject alternative name `arbor-member-<id>`. Both ends check both
//! ways. A member dialing member 3 accepts only a server certificate naming
//! `arbor-member-3` (rustls's own name check); a member accepting a peer
//! connection requires a client certificate from the CA (the TLS handshake
//! fails without one) and then that it names a member of the ensemble as
//! this member knows it. A certificate naming no member, a non-member, or
//! more than one member is refused: the identity must be there and be one
//! the membership lists, never skipped when absent (ZooKeeper's
//! CVE-2023-44981 let a quorum peer without the host part of its SASL id
//! skip exactly this check).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ServerConfig};
use tokio::net::TcpStream;
use tracing::{info, warn};

use super::records::MemberId;
use crate::acl::x509;
use crate::net::tls::{load_certs, load_key, load_roots, provider, TlsError, TlsFiles};

/// The DNS name a member's certificate carries: this, then its id.
pub const MEMBER_NAME_PREFIX: &str = "arbor-member-";

/// How long a peer's TLS handshake may take.
pub const PEER_TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The DNS name that identifies member `id`.
pub fn member_name(id: MemberId) -> String {
    format!("{MEMBER_NAME_PREFIX}{id}")
}

/// The member a certificate names, from its DNS names: `None` if it names
/// none, or more than one (a certificate is one member's).
pub fn named_member(certificate: &[u8]) -> Result<Option<MemberId>, x509::CertificateError> {
    let mut named = x509::dns_names(certificate)?
        .into_iter()
        .filter_map(|name| {
            name.strip_prefix(MEMBER_NAME_PREFIX)?
                .parse::<MemberId>()
                .ok()
        });
    Ok(match (named.next(), named.next()) {
        (Some(id), None) => Some(id),
        _ => None,
    })
}

/// Both sides of peer TLS, loaded once.
pub struct PeerTls {
    acceptor: tokio_rustls::TlsAcceptor,
    connector: tokio_rustls::TlsConnector,
}

/// Why a peer connection was refused.
#[derive(Debug, thiserror::Error)]
pub enum PeerRefusal {
    #[error("TLS handshake failed: {0}")]
    Handshake(std::io::Error),
    #[error("no TLS handshake within {0:?}")]
    Timeout(Duration),
    #[error("its certificate names no member (a DNS name {MEMBER_NAME_PREFIX}ID), or several")]
    Unnamed,
    #[error("its certificate names member {0}, which is not in the ensemble")]
    NotAMember(MemberId),
    #[error("its certificate is unreadable: {0}")]
    Certificate(#[from] x509::CertificateError),
}

impl PeerTls {
    /// Loads this member's certificate and key and the ensemble's CA
    /// (`files.client_ca`, required: peer TLS is always mutual).
    pub fn load(files: &TlsFiles) -> Result<PeerTls, TlsError> {
        let ca = files.client_ca.as_ref().ok_or_else(|| TlsError::NoPeerCa {
            cert: files.cert.clone(),
        })?;
        let roots = Arc::new(load_roots(ca)?);
        let config_error = |source| TlsError::Config {
            cert: files.cert.clone(),
            key: files.key.clone(),
            source,
        };
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|err| TlsError::ClientCa {
                path: ca.clone(),
                reason: err.to_string(),
            })?;
        let server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(config_error)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(load_certs(&files.cert)?, load_key(&files.key)?)
            .map_err(config_error)?;
        let client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(config_error)?
            .with_root_certificates(roots)
            .with_client_auth_cert(load_certs(&files.cert)?, load_key(&files.key)?)
            .map_err(config_error)?;
        Ok(PeerTls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
            connector: tokio_rustls::TlsConnector::from(Arc::new(client)),
        })
    }

    /// The TLS side of an accepted peer connection: the member it is, if
    /// `is_member` says its certificate names one. Refusals are logged
    /// here, once, with the peer's address.
    pub async fn accept(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        is_member: impl Fn(MemberId) -> bool,
    ) -> Option<(tokio_rustls::server::TlsStream<TcpStream>, MemberId)> {
        match self.try_accept(stream, is_member).await {
            Ok(accepted) => Some(accepted),
            Err(refusal) => {
                warn!(%peer, reason = %refusal, "peer connection refused");
                None
            }
        }
    }

    async fn try_accept(
        &self,
        stream: TcpStream,
        is_member: impl Fn(MemberId) -> bool,
    ) -> Result<(tokio_rustls::server::TlsStream<TcpStream>, MemberId), PeerRefusal> {
        let stream = tokio::time::timeout(PEER_TLS_HANDSHAKE_TIMEOUT, self.acceptor.accept(stream))
            .await
            .map_err(|_| PeerRefusal::Timeout(PEER_TLS_HANDSHAKE_TIMEOUT))?
            .map_err(PeerRefusal::Handshake)?;
        let leaf = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .ok_or(PeerRefusal::Unnamed)?;
        let member = named_member(leaf)?.ok_or(PeerRefusal::Unnamed)?;
        if !is_member(member) {
            return Err(PeerRefusal::NotAMember(member));
        }
        Ok((stream, member))
    }

    /// The TLS side of a connection to member `target`: its certificate
    /// must name it.
    pub async fn connect(
        &self,
        stream: TcpStream,
        target: MemberId,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let name = ServerName::try_from(member_name(target))
            .map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidInput, err))?;
        let connected = tokio::time::timeout(
            PEER_TLS_HANDSHAKE_TIMEOUT,
            self.connector.connect(name, stream),
        )
        .await
        .map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out")
        })?;
        if let Err(err) = &connected {
            info!(member = target, error = %err, "TLS handshake with a member failed");
        }
        connected
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, SanType,
    };
    use std::path::Path;

    struct Ca {
        issuer: CertifiedIssuer<'static, KeyPair>,
    }

    impl Ca {
        fn new() -> Ca {
            let mut params = CertificateParams::default();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let key = KeyPair::generate().expect("key");
            Ca {
                issuer: CertifiedIssuer::self_signed(params, key).expect("CA"),
            }
        }

        /// Writes a peer certificate with `names`, the CA, and the key into
        /// `dir`, as the files of a member's peer TLS.
        fn files(&self, dir: &Path, stem: &str, names: &[&str]) -> TlsFiles {
            let mut params = CertificateParams::default();
            params.distinguished_name.push(DnType::CommonName, stem);
            params.subject_alt_names = names
                .iter()
                .map(|name| SanType::DnsName((*name).try_into().expect("DNS name")))
                .collect();
            params.extended_key_usages = vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ];
            let key = KeyPair::generate().expect("key");
            let cert = params.signed_by(&key, &self.issuer).expect("certificate");
            let files = TlsFiles {
                cert: dir.join(format!("{stem}.pem")),
                key: dir.join(format!("{stem}.key")),
                client_ca: Some(dir.join(format!("{stem}-ca.pem"))),
            };
            std::fs::write(&files.cert, cert.pem()).expect("write");
            std::fs::write(&files.key, key.serialize_pem()).expect("write");
            std::fs::write(files.client_ca.as_ref().expect("ca"), self.issuer.pem())
                .expect("write");
            files
        }
    }

    /// Member 1 accepting a connection from `dialer`, which expects to
    /// reach member `expects`; members are 1, 2, 3.
    async fn accept_from(
        acceptor: &PeerTls,
        dialer: &PeerTls,
        expects: MemberId,
    ) -> (Result<MemberId, String>, bool) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let dial = async {
            let stream = TcpStream::connect(addr).await.expect("connect");
            dialer.connect(stream, expects).await.is_ok()
        };
        let accept = async {
            let (stream, _) = listener.accept().await.expect("accept");
            acceptor
                .try_accept(stream, |id| (1..=3).contains(&id))
                .await
                .map(|(_, member)| member)
                .map_err(|refusal| refusal.to_string())
        };
        let (dialed, accepted) = tokio::join!(dial, accept);
        (accepted, dialed)
    }

    #[tokio::test]
    async fn only_certificates_naming_one_current_member_are_accepted() {
        let dir = std::env::temp_dir().join(format!("arbor-peer-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let ca = Ca::new();
        let load = |stem: &str, names: &[&str]| {
            PeerTls::load(&ca.files(&dir, stem, names)).expect("loads")
        };
        let member_1 = load("m1", &["arbor-member-1"]);
        let member_2 = load("m2", &["arbor-member-2", "node2.example"]);

        let (accepted, dialed) = accept_from(&member_1, &member_2, 1).await;
        assert_eq!((accepted, dialed), (Ok(2), true));

        // Dialing member 3 at member 1's address: its certificate names 1.
        let (_, dialed) = accept_from(&member_1, &member_2, 3).await;
        assert!(!dialed, "accepted a certificate naming another member");

        let outsider = load("m9", &["arbor-member-9"]);
        let (accepted, _) = accept_from(&member_1, &outsider, 1).await;
        assert!(matches!(accepted, Err(reason) if reason.contains("member 9")));

        // CVE-2023-44981's case: an id without the member part is refused,
        // not waved through.
        let unnamed = load("eve", &["eve.example"]);
        let (accepted, _) = accept_from(&member_1, &unnamed, 1).await;
        assert!(matches!(accepted, Err(reason) if reason.contains("names no member")));
        let twice = load("both", &["arbor-member-2", "arbor-member-3"]);
        let (accepted, _) = accept_from(&member_1, &twice, 1).await;
        assert!(matches!(accepted, Err(reason) if reason.contains("names no member")));

        let rogue = Ca::new();
        let impostor =
            PeerTls::load(&rogue.files(&dir, "rogue2", &["arbor-member-2"])).expect("loads");
        let (accepted, dialed) = accept_from(&member_1, &impostor, 1).await;
        assert!(
            !dialed,
            "the impostor trusted member 1's CA it does not know"
        );
        assert!(matches!(accepted, Err(reason) if reason.contains("handshake")));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_file_is_named() {
        let files = TlsFiles {
            cert: "/nonexistent/member.pem".into(),
            key: "/nonexistent/member.key".into(),
            client_ca: Some("/nonexistent/ca.pem".into()),
        };
        let err = PeerTls::load(&files).err().expect("refused").to_string();
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
        let no_ca = TlsFiles {
            client_ca: None,
            ..files
        };
        assert!(matches!(
            PeerTls::load(&no_ca),
            Err(TlsError::NoPeerCa { .. })
        ));
    }
}
