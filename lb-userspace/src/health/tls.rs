//! TLS client settings for HTTPS checks (rustls with the ring provider).
//!
//! With `verify_tls = false` (the default) any certificate is accepted: operators check
//! backends that serve self-signed or internal certificates, and the check's question is "does
//! the service answer", not "is its certificate valid". The handshake signatures are still
//! verified, so the peer must hold the key of the certificate it presents. With
//! `verify_tls = true` the system trust store is used, so an internal CA added there works.

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_rustls::TlsConnector;

static VERIFYING: OnceLock<Result<Arc<ClientConfig>, String>> = OnceLock::new();
static ACCEPT_ANY: OnceLock<Result<Arc<ClientConfig>, String>> = OnceLock::new();

/// The connector for HTTPS checks; built once per process and shared by every probe.
pub(crate) fn connector(verify: bool) -> Result<TlsConnector, String> {
    let config = if verify {
        VERIFYING.get_or_init(verifying_config)
    } else {
        ACCEPT_ANY.get_or_init(accept_any_config)
    };
    config.clone().map(TlsConnector::from)
}

/// The name presented in SNI and checked against the certificate: the configured Host
/// (without a port) when it is a DNS name, else the backend's address.
pub(crate) fn server_name(host: Option<&str>, ip: IpAddr) -> ServerName<'static> {
    let host = host.map(strip_port);
    match host.and_then(|h| ServerName::try_from(h.to_string()).ok()) {
        Some(name) => name,
        None => ServerName::IpAddress(ip.into()),
    }
}

/// "example.com:8443" -> "example.com"; "[::1]:443" -> "::1".
fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn verifying_config() -> Result<Arc<ClientConfig>, String> {
    let loaded = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(loaded.certs);
    if added == 0 {
        return Err("TLS: no trusted root certificates in the system store".to_string());
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn accept_any_config() -> Result<Arc<ClientConfig>, String> {
    let provider = provider();
    let verifier = AcceptAnyCertificate {
        algorithms: provider.signature_verification_algorithms,
    };
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Accepts any server certificate but still checks handshake signatures (see module docs).
#[derive(Debug)]
struct AcceptAnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sni_uses_host_without_port_else_address() {
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        let name = server_name(Some("app.example:8443"), ip);
        assert_eq!(name.to_str(), "app.example");
        assert_eq!(server_name(None, ip).to_str(), "10.1.2.3");
        assert_eq!(server_name(Some("[fd00::1]:443"), ip).to_str(), "fd00::1");
    }
}
