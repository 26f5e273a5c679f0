//! TLS: the certificates and keys a server loads, the acceptor of its TLS
//! client port, and what a verified client certificate proves (its subject,
//! the `x509` ACL id). The ensemble's peer TLS builds on the same loading
//! (see `crate::cluster::peer_tls`).
//!
//! rustls with the ring provider, TLS 1.3 only. The handshake runs in the
//! connection's own task, bounded by the handshake timeout, so a client
//! that opens a socket and says nothing holds up no one else.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tracing::info;

use crate::acl::x509;

/// The files of a TLS endpoint: its certificate chain and key (PEM), and,
/// for mutual TLS, the CA whose certificates it accepts from the other side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Clients must present a certificate issued by this CA (PEM, one or
    /// more); `None`: server-authenticated TLS only.
    pub client_ca: Option<PathBuf>,
}

/// Why TLS could not be set up, naming the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)")]
    NoKey { path: PathBuf },
    #[error("{path}: {reason}")]
    Pem { path: PathBuf, reason: String },
    #[error("the CA certificates of {path} cannot verify clients: {reason}")]
    ClientCa { path: PathBuf, reason: String },
    #[error("peer TLS is mutual: give the CA of the members' certificates with {cert}")]
    NoPeerCa { cert: PathBuf },
    #[error("certificate {cert} and key {key} do not make a TLS configuration: {source}")]
    Config {
        cert: PathBuf,
        key: PathBuf,
        source: rustls::Error,
    },
}

/// The crypto provider of every TLS configuration: ring.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Every certificate of a PEM file, in order (a chain: the end entity first).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| TlsError::Pem {
            path: path.to_owned(),
            reason: err.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// The first private key of a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|err| match err {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoKey {
            path: path.to_owned(),
        },
        other => TlsError::Pem {
            path: path.to_owned(),
            reason: other.to_string(),
        },
    })
}

/// The CA certificates of a PEM file, as trust roots.
pub fn load_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots.add(cert).map_err(|err| TlsError::Pem {
            path: path.to_owned(),
            reason: format!("not a usable CA certificate: {err}"),
        })?;
    }
    Ok(roots)
}

/// A server configuration presenting `cert`/`key`; with `client_ca`, every
/// client must present a certificate that CA issued.
pub fn server_config(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Config {
            cert: files.cert.clone(),
            key: files.key.clone(),
            source,
        })?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(load_roots(ca)?), provider())
                    .build()
                    .map_err(|err| TlsError::ClientCa {
                        path: ca.clone(),
                        reason: err.to_string(),
                    })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    builder
        .with_single_cert(load_certs(&files.cert)?, load_key(&files.key)?)
        .map_err(|source| TlsError::Config {
            cert: files.cert.clone(),
            key: files.key.clone(),
            source,
        })
}

/// Accepts TLS client connections with the server's certificate.
#[derive(Clone)]
pub struct TlsAcceptor {
    inner: tokio_rustls::TlsAcceptor,
}

/// A client connection after its TLS handshake.
pub struct Secured {
    pub stream: TlsStream<TcpStream>,
    /// The subject of the client's certificate (verified against the
    /// client CA), if it presented one: its `x509` id.
    pub subject: Option<String>,
}

impl TlsAcceptor {
    /// Loads the certificate, key and client CA of `files`.
    pub fn load(files: &TlsFiles) -> Result<Self, TlsError> {
        Ok(Self {
            inner: tokio_rustls::TlsAcceptor::from(Arc::new(server_config(files)?)),
        })
    }

    /// The TLS handshake of a new connection, within `timeout`. A client
    /// that fails it (no or a foreign certificate, not TLS at all, too slow)
    /// is logged once and dropped: it has no session to be told anything on.
    pub async fn accept(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        timeout: Duration,
    ) -> Option<Secured> {
        let stream = match tokio::time::timeout(timeout, self.inner.accept(stream)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(err)) => {
                info!(%peer, error = %err, "TLS handshake failed");
                return None;
            }
            Err(_) => {
                info!(%peer, timeout_ms = timeout.as_millis() as u64, "no TLS handshake in time");
                return None;
            }
        };
        let leaf = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first());
        let subject = match leaf.map(|cert| x509::subject_name(cert)) {
            None => None,
            Some(Ok(subject)) => Some(subject),
            Some(Err(err)) => {
                info!(%peer, error = %err, "client certificate has no readable subject");
                return None;
            }
        };
        Some(Secured { stream, subject })
    }
}
