//! TLS for a client's connections: which CA the servers' certificates must
//! come from, and, for a server that asks (mutual TLS), the client's own
//! certificate, whose subject the server takes as the session's `x509` id.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

/// Why TLS options could not be made, naming the file at fault.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path} holds no usable PEM private key: {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("{path}: {reason}")]
    Certificate { path: PathBuf, reason: String },
    #[error("{name:?} is not a DNS name or IP address to check a server certificate against")]
    ServerName { name: String },
    #[error("cannot make a TLS configuration: {0}")]
    Config(String),
}

/// TLS settings for [`ClientOptions::with_tls`](crate::ClientOptions::with_tls).
///
/// Each server's certificate is checked against the CA and against the host
/// of its address in the connect string (an IP address or a DNS name),
/// unless [`TlsOptions::with_server_name`] names the one to expect.
///
/// ```no_run
/// use arbor_client::{Client, ClientOptions, TlsOptions};
///
/// # async fn example() -> Result<(), arbor_client::Error> {
/// let tls = TlsOptions::new("ca.pem")?
///     .with_client_certificate("alice.pem", "alice.key")?;
/// let client = Client::connect("127.0.0.1:7183", ClientOptions::default().with_tls(tls)).await?;
/// println!("I am {:?}", client.who_am_i().await?);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct TlsOptions {
    roots: Arc<RootCertStore>,
    config: Arc<ClientConfig>,
    server_name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsOptions")
            .field("roots", &self.roots.len())
            .field(
                "client_certificate",
                &self.config.client_auth_cert_resolver.has_certs(),
            )
            .field("server_name", &self.server_name)
            .finish()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|err| TlsError::Read {
        path: path.to_owned(),
        reason: err.to_string(),
    })
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(&read(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| TlsError::Certificate {
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

fn builder() -> Result<rustls::ConfigBuilder<ClientConfig, rustls::WantsVerifier>, TlsError> {
    ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|err| TlsError::Config(err.to_string()))
}

impl TlsOptions {
    /// Trusts the CA certificates of the PEM file at `ca`, and presents no
    /// certificate of its own.
    pub fn new(ca: impl AsRef<Path>) -> Result<TlsOptions, TlsError> {
        let ca = ca.as_ref();
        let mut roots = RootCertStore::empty();
        for cert in certificates(ca)? {
            roots.add(cert).map_err(|err| TlsError::Certificate {
                path: ca.to_owned(),
                reason: format!("not a usable CA certificate: {err}"),
            })?;
        }
        let roots = Arc::new(roots);
        let config = builder()?
            .with_root_certificates(roots.clone())
            .with_no_client_auth();
        Ok(TlsOptions {
            roots,
            config: Arc::new(config),
            server_name: None,
        })
    }

    /// Presents the certificate chain at `cert` (PEM, its own first) with
    /// the private key at `key`, for servers that require mutual TLS.
    pub fn with_client_certificate(
        mut self,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<TlsOptions, TlsError> {
        let chain = certificates(cert.as_ref())?;
        let key_path = key.as_ref();
        let key = PrivateKeyDer::from_pem_slice(&read(key_path)?).map_err(|err| TlsError::Key {
            path: key_path.to_owned(),
            reason: err.to_string(),
        })?;
        let config = builder()?
            .with_root_certificates(self.roots.clone())
            .with_client_auth_cert(chain, key)
            .map_err(|err| TlsError::Key {
                path: key_path.to_owned(),
                reason: err.to_string(),
            })?;
        self.config = Arc::new(config);
        Ok(self)
    }

    /// Expects every server's certificate to name `name` (a DNS name or an
    /// IP address) instead of the host of its address.
    pub fn with_server_name(mut self, name: &str) -> Result<TlsOptions, TlsError> {
        let parsed = ServerName::try_from(name.to_owned()).map_err(|_| TlsError::ServerName {
            name: name.to_owned(),
        })?;
        self.server_name = Some(parsed);
        Ok(self)
    }

    /// Uses a rustls configuration made elsewhere (other roots, a custom
    /// verifier, session resumption settings). Put a client certificate in
    /// that configuration: [`TlsOptions::with_client_certificate`] builds a
    /// new one from the roots of [`TlsOptions::new`], which this has none of.
    pub fn from_config(config: Arc<ClientConfig>) -> TlsOptions {
        TlsOptions {
            roots: Arc::new(RootCertStore::empty()),
            config,
            server_name: None,
        }
    }

    pub(crate) fn connector(&self) -> tokio_rustls::TlsConnector {
        tokio_rustls::TlsConnector::from(self.config.clone())
    }

    /// The name the certificate of the server at `addr` (`host:port`) must
    /// carry.
    pub(crate) fn server_name_for(&self, addr: &str) -> Result<ServerName<'static>, TlsError> {
        if let Some(name) = &self.server_name {
            return Ok(name.clone());
        }
        let host = addr.rsplit_once(':').map_or(addr, |(host, _port)| host);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        ServerName::try_from(host.to_owned()).map_err(|_| TlsError::ServerName {
            name: host.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_name_is_the_host_of_the_address() {
        let options = TlsOptions::from_config(Arc::new(
            builder()
                .expect("builder")
                .with_root_certificates(RootCertStore::empty())
                .with_no_client_auth(),
        ));
        let name = |addr: &str| {
            options
                .server_name_for(addr)
                .map(|name| name.to_str().into_owned())
                .ok()
        };
        assert_eq!(name("127.0.0.1:7183").as_deref(), Some("127.0.0.1"));
        assert_eq!(name("[::1]:7183").as_deref(), Some("::1"));
        assert_eq!(name("arbor.example:7183").as_deref(), Some("arbor.example"));
        assert!(name("not a host:1").is_none());
        let fixed = options
            .with_server_name("arbor-1.internal")
            .expect("a DNS name");
        assert_eq!(
            fixed
                .server_name_for("10.0.0.1:7183")
                .map(|name| name.to_str().into_owned())
                .ok()
                .as_deref(),
            Some("arbor-1.internal")
        );
        assert!(matches!(
            TlsOptions::new("/nonexistent/ca.pem"),
            Err(TlsError::Read { .. })
        ));
    }
}
