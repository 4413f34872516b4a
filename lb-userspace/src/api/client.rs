//! A small JSON client for the REST API, used by the CLI and by cluster pushes to peers.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Method;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The URL could not be used.
    #[error("bad URL `{0}`")]
    Url(String),
    /// Connecting, sending or receiving failed.
    #[error("{url}: {message}")]
    Transport {
        /// The request URL.
        url: String,
        /// What failed.
        message: String,
    },
    /// No complete answer within the timeout.
    #[error("{0}: no answer within {1:?}")]
    Timeout(String, Duration),
}

/// An answer: its status and its body (JSON, or the text as a JSON string).
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status code.
    pub status: u16,
    /// The body.
    pub body: Value,
}

impl Answer {
    /// True for 2xx.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The `error` field of an error answer, or the status.
    pub fn error_text(&self) -> String {
        self.body.get("error").and_then(Value::as_str).map_or_else(
            || format!("HTTP {}", self.status),
            |e| format!("HTTP {}: {e}", self.status),
        )
    }
}

/// A client bound to one API base URL (`http://host:port`) and its token.
#[derive(Clone)]
pub struct ApiClient {
    base: String,
    token: Option<String>,
    timeout: Duration,
    http: Client<HttpConnector, Full<Bytes>>,
}

impl ApiClient {
    /// A client for `base` that sends `token` as a bearer token when given.
    pub fn new(base: &str, token: Option<String>, timeout: Duration) -> ApiClient {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timeout));
        ApiClient {
            base: base.trim_end_matches('/').to_string(),
            token,
            timeout,
            http: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// Sends one request with an optional JSON body and reads the whole answer.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, ClientError> {
        let url = format!("{}{}", self.base, path);
        let mut req = hyper::Request::builder().method(method).uri(&url);
        if let Some(t) = &self.token {
            req = req.header(AUTHORIZATION, format!("Bearer {t}"));
        }
        let payload = match body {
            Some(v) => {
                req = req.header(CONTENT_TYPE, "application/json");
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        let req = req
            .body(Full::new(payload))
            .map_err(|_| ClientError::Url(url.clone()))?;
        let transport = |e: &dyn std::fmt::Display| ClientError::Transport {
            url: url.clone(),
            message: e.to_string(),
        };
        let exchange = async {
            let resp = self.http.request(req).await.map_err(|e| {
                let mut msg = e.to_string();
                let mut src = std::error::Error::source(&e);
                while let Some(s) = src {
                    msg = format!("{msg}: {s}");
                    src = s.source();
                }
                transport(&msg)
            })?;
            let status = resp.status().as_u16();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| transport(&e))?
                .to_bytes();
            let body = serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
            Ok(Answer { status, body })
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| ClientError::Timeout(url.clone(), self.timeout))?
    }
}
