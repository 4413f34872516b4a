//! Loading the TLS files of the configuration (`[api] cert`, `key`, `client_ca`, and the
//! client side of `[cluster]` and of the CLI): PEM files read as the L7 proxy reads its own
//! (`proxy::tls`), with the same ring provider. The configuration check loads them, so that
//! a file that cannot be used is an error of the file, and the API loads them again to
//! serve or to call.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use super::{ApiTls, ClientTls};

/// Which file of a TLS setting a problem is about, so that the configuration check can name
/// the key that points at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsPart {
    /// The certificate chain (`api.cert`, `cluster.cert`, `--cert`).
    Cert,
    /// Its private key (`api.key`, `cluster.key`, `--key`); also a key that does not match.
    Key,
    /// The CA certificates (`api.client_ca`, `cluster.ca`, `--ca`).
    Ca,
}

/// Why a TLS setting cannot be used: the file and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{what} `{path}`: {problem}", what = self.what(), path = self.path.display())]
pub struct TlsError {
    /// Which file.
    pub part: TlsPart,
    /// Its path.
    pub path: PathBuf,
    /// What is wrong.
    pub problem: String,
}

impl TlsError {
    fn new(part: TlsPart, path: &Path, problem: impl std::fmt::Display) -> TlsError {
        TlsError {
            part,
            path: path.to_owned(),
            problem: problem.to_string(),
        }
    }

    fn what(&self) -> &'static str {
        match self.part {
            TlsPart::Cert => "certificate",
            TlsPart::Key => "private key",
            TlsPart::Ca => "CA certificate",
        }
    }
}

/// The provider every TLS setting of the API is built with (as the L7 proxy's).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate of a PEM file; a file without one is an error, not an empty chain.
fn certificates(part: TlsPart, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::new(part, path, e))?;
    if certs.is_empty() {
        return Err(TlsError::new(part, path, "no PEM certificate in the file"));
    }
    Ok(certs)
}

/// The first private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::new(TlsPart::Key, path, e))
}

/// A trust store holding every certificate of the PEM file at `path`.
fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certificates(TlsPart::Ca, path)? {
        store
            .add(cert)
            .map_err(|e| TlsError::new(TlsPart::Ca, path, e))?;
    }
    Ok(store)
}

impl ApiTls {
    /// The API listener's TLS settings from its files: certificate chain and key (which must
    /// match), and with `client_ca` a client certificate signed by it required at the
    /// handshake. HTTP/1.1 only, as the API serves it. Read by the configuration check too, so
    /// that a file that cannot be used is refused with the rest of the configuration.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let certs = certificates(TlsPart::Cert, &self.cert)?;
        let key = private_key(&self.key)?;
        let provider = provider();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::new(TlsPart::Cert, &self.cert, e))?;
        let builder = match &self.client_ca {
            Some(ca) => {
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots(ca)?),
                    provider,
                )
                .build()
                .map_err(|e| TlsError::new(TlsPart::Ca, ca, e))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_single_cert(certs, key).map_err(|e| {
            TlsError::new(
                TlsPart::Key,
                &self.key,
                format!("{e} (with {})", self.cert.display()),
            )
        })?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ClientTls {
    /// The client side: servers verified against the CA file `ca` (the system's trust store
    /// without one), and with `identity` a client certificate and key for mutual TLS.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, TlsError> {
        let ca = self.ca.as_deref();
        let identity = self
            .identity
            .as_ref()
            .map(|(c, k)| (c.as_path(), k.as_path()));
        let store = match ca {
            Some(ca) => roots(ca)?,
            None => {
                let mut store = RootCertStore::empty();
                store.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
                store
            }
        };
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::new(TlsPart::Ca, ca.unwrap_or(Path::new("")), e))?
            .with_root_certificates(store);
        let mut config = match identity {
            Some((cert, key)) => {
                let certs = certificates(TlsPart::Cert, cert)?;
                let private = private_key(key)?;
                builder.with_client_auth_cert(certs, private).map_err(|e| {
                    TlsError::new(TlsPart::Key, key, format!("{e} (with {})", cert.display()))
                })?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}
