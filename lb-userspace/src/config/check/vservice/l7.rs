//! The proxy settings of an HTTP or L7 TCP vService ([`L7Settings`]), with their
//! defaults; files they name (TLS, error page) are checked or read at load, so a bad path
//! fails the load rather than the first request.

use std::path::{Path, PathBuf};

use serde_spanned::Spanned;

use super::conditions::conditional_sets;
use super::persistence::{persistence, timeouts};
use crate::config::check::backends::{Backends, ranged};
use crate::config::issues::Issues;
use crate::config::model::{Algorithm, L7Settings, RetryPolicy, TlsSettings};
use crate::config::raw::document::Entry;
use crate::config::raw::{RawAlgorithm, RawTls, RawVService, RawVServiceKind};

/// Default queue size per backend.
const DEFAULT_QUEUE: usize = 1024;
/// Most retries a vService may ask for: each one is another server's connect timeout.
const MAX_RETRIES: i64 = 10;
/// Largest error page accepted: it is held in memory and sent on every 503.
const MAX_ERROR_PAGE: u64 = 1 << 20;

/// Builds the settings of an L7 vService; `None` for Network kinds. Keys that do not
/// apply to the kind were reported by the kind rules and are not read here.
pub(in crate::config) fn l7_settings(
    entry: &Entry<RawVService>,
    backends: &Backends,
    issues: &mut Issues,
) -> Option<L7Settings> {
    let raw = &entry.raw;
    let path = &entry.path;
    let kind = *raw.kind.get_ref();
    if !kind.is_l7() {
        return None;
    }
    let http = kind == RawVServiceKind::Http;
    let queue_size = match &raw.queue_size {
        Some(size) => ranged(
            size,
            1,
            u32::MAX.into(),
            &format!("{path}.queue_size"),
            issues,
        )
        .and_then(|size| usize::try_from(size).ok())
        .unwrap_or(DEFAULT_QUEUE),
        None => DEFAULT_QUEUE,
    };
    let retry = retry_policy(raw, path, http, issues);
    let sets = raw.conditional_set.as_ref().filter(|_| http);
    Some(L7Settings {
        algorithm: algorithm(raw.algorithm.as_ref().map(|a| *a.get_ref())),
        persistence: persistence(raw.persistence.as_ref(), path, issues),
        timeouts: timeouts(raw.timeouts.as_ref(), path, issues),
        queue_size,
        retry,
        tls: raw
            .tls
            .as_ref()
            .filter(|_| http)
            .and_then(|tls| tls_settings(tls.get_ref(), path, issues)),
        error_page: raw
            .error_page
            .as_ref()
            .filter(|_| http)
            .and_then(|page| error_page(page, &format!("{path}.error_page"), issues)),
        forwarded_headers: raw.forwarded_headers.as_ref().is_none_or(|f| *f.get_ref()),
        conditional_sets: sets
            .map(|sets| conditional_sets(sets.get_ref(), path, backends, issues))
            .unwrap_or_default(),
    })
}

/// `retries`, `retry_on` and `retry_budget`. The kinds of failure after the request went
/// (`empty-response`, `response-timeout`) exist only for HTTP: an L7 TCP connection has
/// already carried client bytes by then.
fn retry_policy(raw: &RawVService, path: &str, http: bool, issues: &mut Issues) -> RetryPolicy {
    let mut policy = RetryPolicy::default();
    if let Some(n) = &raw.retries {
        let field = format!("{path}.retries");
        policy.retries = ranged(n, 0, MAX_RETRIES, &field, issues).unwrap_or(policy.retries);
    }
    if let Some(n) = &raw.retry_budget {
        let field = format!("{path}.retry_budget");
        policy.budget_percent = ranged(n, 0, 100, &field, issues).unwrap_or(policy.budget_percent);
    }
    if let Some(list) = &raw.retry_on {
        policy.on_connect_failure = false;
        policy.on_empty_response = false;
        for (i, item) in list.get_ref().iter().enumerate() {
            let field = format!("{path}.retry_on[{i}]");
            let flag = match item.get_ref().as_str() {
                "connect-failure" => &mut policy.on_connect_failure,
                "empty-response" if http => &mut policy.on_empty_response,
                "response-timeout" if http => &mut policy.on_response_timeout,
                "empty-response" | "response-timeout" => {
                    let message = format!(
                        "`{}` applies only to http vServices (an l7-tcp connection retries only a failed connect)",
                        item.get_ref()
                    );
                    issues.error(&item.span(), &field, message);
                    continue;
                }
                other => {
                    let message = format!(
                        "unknown retry condition `{other}`; expected connect-failure, empty-response or response-timeout"
                    );
                    issues.error(&item.span(), &field, message);
                    continue;
                }
            };
            *flag = true;
        }
    }
    policy
}

fn algorithm(raw: Option<RawAlgorithm>) -> Algorithm {
    match raw {
        Some(RawAlgorithm::RoundRobin) | None => Algorithm::RoundRobin,
        Some(RawAlgorithm::WeightedRoundRobin) => Algorithm::WeightedRoundRobin,
        Some(RawAlgorithm::LeastConnections) => Algorithm::LeastConnections,
        Some(RawAlgorithm::WeightedLeastConnections) => Algorithm::WeightedLeastConnections,
        Some(RawAlgorithm::SourceIpHash) => Algorithm::SourceIpHash,
        Some(RawAlgorithm::First) => Algorithm::First,
        Some(RawAlgorithm::WeightedRandom) => Algorithm::WeightedRandom,
        Some(RawAlgorithm::LeastRequest) => Algorithm::LeastRequest,
        Some(RawAlgorithm::PeakEwma) => Algorithm::PeakEwma,
    }
}

/// `[vservice.tls]`: both files must be readable now.
fn tls_settings(raw: &RawTls, path: &str, issues: &mut Issues) -> Option<TlsSettings> {
    let cert = readable_file(&raw.cert, &format!("{path}.tls.cert"), issues);
    let key = readable_file(&raw.key, &format!("{path}.tls.key"), issues);
    Some(TlsSettings {
        cert: cert?,
        key: key?,
    })
}

/// A path to a regular file this process can open; reported with the path otherwise.
fn readable_file(value: &Spanned<String>, field: &str, issues: &mut Issues) -> Option<PathBuf> {
    let path = PathBuf::from(value.get_ref());
    let problem = match std::fs::File::open(&path).and_then(|f| f.metadata()) {
        Ok(meta) if meta.is_file() => return Some(path),
        Ok(_) => "not a regular file".to_owned(),
        Err(error) => error.to_string(),
    };
    issues.error(
        &value.span(),
        field,
        format!("cannot read `{}`: {problem}", path.display()),
    );
    None
}

/// `error_page`: the file's text, read now (at most 1 MiB, UTF-8).
fn error_page(value: &Spanned<String>, field: &str, issues: &mut Issues) -> Option<String> {
    let path = Path::new(value.get_ref());
    let read = std::fs::metadata(path).and_then(|meta| {
        if meta.len() > MAX_ERROR_PAGE {
            Err(std::io::Error::other(format!(
                "larger than {MAX_ERROR_PAGE} bytes"
            )))
        } else {
            std::fs::read_to_string(path)
        }
    });
    match read {
        Ok(text) => Some(text),
        Err(error) => {
            issues.error(
                &value.span(),
                field,
                format!("cannot read error page `{}`: {error}", path.display()),
            );
            None
        }
    }
}
