//! What each name of a DNS vService answers now, for the Live Stats page: the addresses the
//! next query would get (decided by the same code as the server), with the name's policy.

use serde::Serialize;

use crate::config::{DnsPolicy, Unreachable};

use super::server::Shared;

/// One name of a DNS vService as it stands now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NameNow {
    /// DNS vService name.
    pub dns_vservice: String,
    /// The name, absolute (`www.gslb.example.`).
    pub name: String,
    /// How sites are ordered: `round-robin`, `weighted` or `least-loaded`.
    pub policy: &'static str,
    /// Most addresses in one answer.
    pub answers: u32,
    /// What happens to a site whose daemon does not answer: `skip` or `serve`.
    pub unreachable: &'static str,
    /// The A records the next query would get (empty: NOERROR without records).
    pub a: Vec<String>,
    /// The AAAA records the next query would get.
    pub aaaa: Vec<String>,
}

/// The configuration spelling of a policy.
pub fn policy_name(policy: DnsPolicy) -> &'static str {
    match policy {
        DnsPolicy::RoundRobin => "round-robin",
        DnsPolicy::Weighted => "weighted",
        DnsPolicy::LeastLoaded => "least-loaded",
    }
}

/// Every name of one DNS vService, in configuration order.
pub(super) fn names_now(shared: &Shared) -> Vec<NameNow> {
    let zone = shared.zone.load();
    let cfg = &zone.cfg;
    cfg.records
        .iter()
        .enumerate()
        .map(|(index, record)| {
            let (a, aaaa) = shared.answers_now(index);
            NameNow {
                dns_vservice: cfg.name.clone(),
                name: record.name.clone(),
                policy: policy_name(record.policy),
                answers: record.answers,
                unreachable: match record.unreachable {
                    Unreachable::Skip => "skip",
                    Unreachable::Serve => "serve",
                },
                a: a.iter().map(ToString::to_string).collect(),
                aaaa: aaaa.iter().map(ToString::to_string).collect(),
            }
        })
        .collect()
}
