//! The file as written for `[[dns_vservice]]`, its `[[dns_vservice.record]]` names and
//! their `[[dns_vservice.record.site]]` site services.

use serde::Deserialize;
use serde_spanned::Spanned;

/// One `[[dns_vservice]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawDnsVService {
    pub name: Spanned<String>,
    pub address: Spanned<String>,
    pub port: Option<Spanned<i64>>,
    pub zone: Spanned<String>,
    pub ttl: Option<Spanned<i64>>,
    pub poll_period: Option<Spanned<f64>>,
    pub poll_timeout: Option<Spanned<f64>>,
    pub rate_limit: Option<Spanned<i64>>,
    pub record: Option<Spanned<Vec<Spanned<RawDnsRecord>>>>,
}

/// One `[[dns_vservice.record]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawDnsRecord {
    pub name: Spanned<String>,
    pub policy: Option<Spanned<RawDnsPolicy>>,
    pub answers: Option<Spanned<i64>>,
    pub unreachable: Option<Spanned<RawUnreachable>>,
    pub site: Option<Spanned<Vec<Spanned<RawSite>>>>,
}

/// `dns_vservice.record.unreachable`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(in crate::config) enum RawUnreachable {
    Skip,
    Serve,
}

/// `dns_vservice.record.policy`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(in crate::config) enum RawDnsPolicy {
    RoundRobin,
    Weighted,
    LeastLoaded,
}

/// One `[[dns_vservice.record.site]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawSite {
    pub name: Spanned<String>,
    pub address: Spanned<String>,
    pub address6: Option<Spanned<String>>,
    pub api: Spanned<String>,
    pub token: Option<Spanned<String>>,
    pub vservice: Spanned<String>,
    #[serde(default)]
    pub standby: bool,
    pub weight: Option<Spanned<i64>>,
}
