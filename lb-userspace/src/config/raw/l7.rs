//! The L7 tables of a `[[vservice]]` as written: persistence, timeouts, TLS and the
//! Conditional Backend Services sets. Kept apart from `raw/mod.rs` so each file stays short.

use serde::Deserialize;
use serde_spanned::Spanned;

/// `vservice.algorithm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(in crate::config) enum RawAlgorithm {
    RoundRobin,
    WeightedRoundRobin,
    LeastConnections,
    WeightedLeastConnections,
    SourceIpHash,
    First,
    WeightedRandom,
    LeastRequest,
    PeakEwma,
}

/// `[vservice.persistence]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawPersistence {
    #[serde(rename = "type")]
    pub kind: Spanned<RawPersistenceType>,
    pub cookie_name: Option<Spanned<String>>,
    pub http_only: Option<Spanned<bool>>,
    pub secure: Option<Spanned<bool>>,
    pub same_site: Option<Spanned<RawSameSite>>,
    pub idle_timeout: Option<Spanned<f64>>,
}

/// `vservice.persistence.type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(in crate::config) enum RawPersistenceType {
    None,
    Cookie,
    SourceIp,
}

/// `vservice.persistence.same_site`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(in crate::config) enum RawSameSite {
    Strict,
    Lax,
    None,
}

/// `[vservice.timeouts]`: seconds.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawTimeouts {
    pub connect: Option<Spanned<f64>>,
    pub client: Option<Spanned<f64>>,
    pub server: Option<Spanned<f64>>,
    pub queue: Option<Spanned<f64>>,
    pub keep_alive: Option<Spanned<f64>>,
}

/// `[vservice.tls]`: PEM file paths.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawTls {
    pub cert: Spanned<String>,
    pub key: Spanned<String>,
}

/// One `[[vservice.conditional_set]]`: its list and its conditions.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawConditionalSet {
    pub name: Spanned<String>,
    pub backends: Option<Spanned<Vec<Spanned<String>>>>,
    pub host: Option<Spanned<String>>,
    pub path: Option<Spanned<String>>,
    pub path_prefix: Option<Spanned<String>>,
    pub path_suffix: Option<Spanned<String>>,
    pub path_regex: Option<Spanned<String>>,
    pub method: Option<Spanned<Vec<Spanned<String>>>>,
    pub source_cidr: Option<Spanned<Vec<Spanned<String>>>>,
    pub header: Option<Spanned<RawHeader>>,
}

/// `[vservice.conditional_set.header]`: a header name and one way to match its value.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawHeader {
    pub name: Spanned<String>,
    pub exact: Option<Spanned<String>>,
    pub prefix: Option<Spanned<String>>,
    pub suffix: Option<Spanned<String>>,
    pub regex: Option<Spanned<String>>,
}
