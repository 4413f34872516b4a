//! TLS towards clients: certificate and key from PEM files, ALPN h2 then http/1.1.

use std::sync::Arc;

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::TlsSettings;

/// Loads the certificate chain and key and builds an acceptor (ring provider).
pub(crate) fn acceptor(tls: &TlsSettings) -> anyhow::Result<TlsAcceptor> {
    let certs = CertificateDer::pem_file_iter(&tls.cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading certificate {}", tls.cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(&tls.key)
        .with_context(|| format!("reading key {}", tls.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("TLS certificate and key do not match")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
