//! TLS on the API's TCP listener, so that its bearer token and the configurations pushed by
//! peers do not travel in clear: the certificate and key are read when the API starts and
//! again after every reload, the running ones kept when the new files are bad. The files
//! are loaded by the configuration model ([`ApiTls::server_config`]), which the
//! configuration check uses too.

use std::sync::{Arc, Mutex, PoisonError};

use tokio_rustls::TlsAcceptor;
use tracing::{info, warn};

use crate::config::Config;
use crate::daemon::Daemon;

/// What to do with a connection the TCP listener just accepted.
pub(crate) enum Handshake {
    /// `[api]` has no TLS: serve plain HTTP.
    Plain,
    /// Complete a TLS handshake first.
    Tls(TlsAcceptor),
    /// TLS is configured but no certificate could ever be read: refuse rather than serve
    /// plain HTTP.
    Refuse,
}

/// The listener's TLS as the running configuration has it: read when the API starts and
/// again at the first connection after each reload (any change of the running
/// configuration), so that renewed files take effect on SIGHUP or `lb reload`. Files that
/// cannot be read then keep the running certificate; the configuration check has already
/// refused such a reload, so this only happens when a file changed in between.
pub(crate) struct ServerTls {
    daemon: Arc<Daemon>,
    current: Mutex<Current>,
}

struct Current {
    /// The configuration the acceptor was built for.
    seen: Arc<Config>,
    acceptor: Option<TlsAcceptor>,
}

impl ServerTls {
    /// Reads the files of the running configuration; fails when TLS is configured and they
    /// cannot be used.
    pub(crate) fn new(daemon: Arc<Daemon>) -> Result<ServerTls, crate::config::TlsError> {
        let seen = daemon.config();
        let acceptor = match &seen.api.tls {
            Some(tls) => Some(TlsAcceptor::from(tls.server_config()?)),
            None => None,
        };
        Ok(ServerTls {
            daemon,
            current: Mutex::new(Current { seen, acceptor }),
        })
    }

    /// True when the API is served over TLS now.
    pub(crate) fn is_on(&self) -> bool {
        self.daemon.config().api.tls.is_some()
    }

    /// How to serve a new connection, after re-reading the files if the configuration
    /// changed since the last one.
    pub(crate) fn handshake(&self) -> Handshake {
        let config = self.daemon.config();
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if !Arc::ptr_eq(&config, &current.seen) {
            match &config.api.tls {
                Some(tls) => match tls.server_config() {
                    Ok(server) => {
                        if current.acceptor.is_some() {
                            info!("API TLS files re-read after a configuration change");
                        }
                        current.acceptor = Some(TlsAcceptor::from(server));
                    }
                    Err(e) => warn!(
                        "the API's TLS files could not be re-read, the running certificate stays: {e}"
                    ),
                },
                None => current.acceptor = None,
            }
            current.seen = config.clone();
        }
        match (&config.api.tls, &current.acceptor) {
            (None, _) => Handshake::Plain,
            (Some(_), Some(acceptor)) => Handshake::Tls(acceptor.clone()),
            (Some(_), None) => Handshake::Refuse,
        }
    }
}
