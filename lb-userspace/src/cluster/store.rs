//! The etcd side of the shared configuration: one connection with request timeouts and
//! HTTP/2 keep-alive (a frozen etcd must fail calls, not hang them), and the few key
//! operations the cluster needs: read the configuration, compare-and-swap it, list nodes.

use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, Identity, TlsOptions, Txn,
    TxnOp, TxnOpResponse,
};

use crate::config::EtcdSettings;

// The gRPC status codes with which etcd refuses a call it received (standard gRPC numbers):
// a too large request, a missing permission or login. Any other failure is "unreachable".
const REFUSED_INVALID_ARGUMENT: i32 = 3;
const REFUSED_PERMISSION_DENIED: i32 = 7;
const REFUSED_RESOURCE_EXHAUSTED: i32 = 8;
const REFUSED_FAILED_PRECONDITION: i32 = 9;
const REFUSED_UNAUTHENTICATED: i32 = 16;

/// Why a call to etcd failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// etcd did not answer (down, frozen, unreachable, refused the call).
    #[error("etcd at {endpoints} is unreachable: {message}")]
    Unreachable {
        /// The configured endpoints, for the message.
        endpoints: String,
        /// What the client said.
        message: String,
    },
    /// etcd answered but refused the call (authentication, permission, a configuration
    /// larger than its request limit).
    #[error("etcd at {endpoints} refused the call: {message}")]
    Refused {
        /// The configured endpoints, for the message.
        endpoints: String,
        /// What etcd said.
        message: String,
    },
    /// A TLS file could not be read.
    #[error("reading {path} (cluster.etcd TLS file): {source}")]
    TlsFile {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The shared configuration as etcd holds it: its text and the revision that last changed it.
#[derive(Clone, Debug, PartialEq)]
pub struct Stored {
    /// The shared part of a configuration file (no node-local tables).
    pub text: String,
    /// The key's mod_revision.
    pub revision: i64,
}

/// What a compare-and-swap found.
#[derive(Debug)]
pub enum Swap {
    /// Written: the new revision.
    Done(i64),
    /// The key had moved on: its current revision (0 when it is absent).
    Moved(i64),
}

/// A connected (lazily: etcd may be down at start) etcd client and the keys under the prefix.
#[derive(Clone)]
pub struct Store {
    client: Client,
    endpoints: String,
    /// `<prefix>/config`.
    pub config_key: String,
    /// `<prefix>/nodes/`.
    pub nodes_prefix: String,
    /// How long one call may take.
    pub timeout: Duration,
}

impl Store {
    /// Builds the client. etcd need not be up: the first call says whether it answers.
    pub async fn connect(settings: &EtcdSettings) -> Result<Store, StoreError> {
        let endpoints = settings.endpoints.join(", ");
        let t = settings.timeout;
        let mut options = ConnectOptions::new()
            .with_timeout(t)
            .with_connect_timeout(t)
            .with_keep_alive(t, t)
            .with_keep_alive_while_idle(true);
        if let Some((user, password)) = &settings.auth {
            options = options.with_user(user.clone(), password.clone());
        }
        if let Some(tls) = &settings.tls {
            let read = |p: &std::path::Path| {
                std::fs::read(p).map_err(|source| StoreError::TlsFile {
                    path: p.display().to_string(),
                    source,
                })
            };
            let mut config = TlsOptions::new();
            if let Some(ca) = &tls.ca_file {
                config = config.ca_certificate(Certificate::from_pem(read(ca)?));
            }
            if let Some((cert, key)) = &tls.identity {
                config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            options = options.with_tls(config);
        }
        let client = Client::connect(&settings.endpoints, Some(options))
            .await
            .map_err(|e| StoreError::Unreachable {
                endpoints: endpoints.clone(),
                message: e.to_string(),
            })?;
        Ok(Store {
            client,
            endpoints,
            config_key: format!("{}/config", settings.prefix),
            nodes_prefix: format!("{}/nodes/", settings.prefix),
            timeout: t,
        })
    }

    /// The client, for watches and leases.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Turns a client error into [`StoreError::Unreachable`].
    pub fn unreachable(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Unreachable {
            endpoints: self.endpoints.clone(),
            message: e.to_string(),
        }
    }

    /// A client error as an operator reads it: gRPC's message and code, not its source chain.
    pub fn failed(&self, e: &etcd_client::Error) -> StoreError {
        match e {
            etcd_client::Error::GRpcStatus(status) => {
                let message = format!("{} ({:?})", status.message(), status.code());
                match i32::from(status.code()) {
                    REFUSED_INVALID_ARGUMENT
                    | REFUSED_PERMISSION_DENIED
                    | REFUSED_RESOURCE_EXHAUSTED
                    | REFUSED_FAILED_PRECONDITION
                    | REFUSED_UNAUTHENTICATED => StoreError::Refused {
                        endpoints: self.endpoints.clone(),
                        message,
                    },
                    _ => self.unreachable(message),
                }
            }
            other => self.unreachable(other),
        }
    }

    /// Bounds a call by the timeout, whatever the client does (a stream may not have one).
    pub async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout + Duration::from_millis(500), call).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.failed(&e)),
            Err(_) => Err(self.unreachable(format!("no answer within {:?}", self.timeout))),
        }
    }

    /// The configuration key now (None when absent) and the store's revision at the read.
    pub async fn read(&self) -> Result<(Option<Stored>, i64), StoreError> {
        let mut c = self.client.clone();
        let r = self.bounded(c.get(self.config_key.as_str(), None)).await?;
        let header = r.header().map_or(0, |h| h.revision());
        let stored = r.kvs().first().map(|kv| Stored {
            text: String::from_utf8_lossy(kv.value()).into_owned(),
            revision: kv.mod_revision(),
        });
        Ok((stored, header))
    }

    /// Writes `text` if the key's mod_revision is still `base` (0: the key is absent).
    pub async fn swap(&self, base: i64, text: &str) -> Result<Swap, StoreError> {
        let key = self.config_key.as_str();
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, base)])
            .and_then([TxnOp::put(key, text, None)])
            .or_else([TxnOp::get(key, None)]);
        let mut c = self.client.clone();
        let r = self.bounded(c.txn(txn)).await?;
        if r.succeeded() {
            return Ok(Swap::Done(r.header().map_or(0, |h| h.revision())));
        }
        let current = r
            .op_responses()
            .into_iter()
            .find_map(|op| match op {
                TxnOpResponse::Get(g) => Some(g.kvs().first().map_or(0, |kv| kv.mod_revision())),
                _ => None,
            })
            .unwrap_or(0);
        Ok(Swap::Moved(current))
    }

    /// Every node record (`<prefix>/nodes/*`) as (name, JSON text).
    pub async fn nodes(&self) -> Result<Vec<(String, String)>, StoreError> {
        let mut c = self.client.clone();
        let options = GetOptions::new().with_prefix();
        let r = self
            .bounded(c.get(self.nodes_prefix.as_str(), Some(options)))
            .await?;
        Ok(r.kvs()
            .iter()
            .map(|kv| {
                let key = String::from_utf8_lossy(kv.key());
                let name = key.strip_prefix(&self.nodes_prefix).unwrap_or(&key);
                (
                    name.to_owned(),
                    String::from_utf8_lossy(kv.value()).into_owned(),
                )
            })
            .collect())
    }
}
