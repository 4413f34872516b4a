//! The answer for one query (S-GS1..3), decided from the latest statuses: the active sites
//! that can serve, ordered by the name's policy; the standbys only when no active can.
//! Pure: no I/O, no clock, so every rule is testable on its own.

use std::net::IpAddr;

use crate::config::{DnsPolicy, DnsRecord, SiteService, Unreachable};

use super::status::SiteState;

/// Address family asked for: A or AAAA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// A records.
    V4,
    /// AAAA records.
    V6,
}

/// What the policy knows about one site service at query time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    /// The status, already degraded to No Connection when stale.
    pub state: SiteState,
    /// Current sessions, when reported.
    pub sessions: Option<u64>,
}

/// The site's address of `family`, if it has one.
fn address(site: &SiteService, family: Family) -> Option<IpAddr> {
    match family {
        Family::V4 => site.ipv4.map(IpAddr::V4),
        Family::V6 => site.ipv6.map(IpAddr::V6),
    }
}

/// True when a site in this state may be handed out under `policy`. An unknown state
/// (No Metrics, No Connection) takes part only in plain round robin: nothing says the site
/// is down, but it cannot be weighed or ranked either.
pub fn can_serve(policy: DnsPolicy, view: View) -> bool {
    match view.state {
        SiteState::Ok => policy != DnsPolicy::LeastLoaded || view.sessions.is_some(),
        SiteState::NoServices => false,
        SiteState::NoMetrics | SiteState::NoConnection => policy == DnsPolicy::RoundRobin,
    }
}

/// The addresses to answer with, best first, at most `record.answers` of them.
///
/// `views[i]` belongs to `record.sites[i]`; `turn` counts the queries of this name and
/// rotates round robin, weighted slots and least-loaded ties.
pub fn choose(record: &DnsRecord, views: &[View], family: Family, turn: u64) -> Vec<IpAddr> {
    choose_sites(record, views, family, turn)
        .into_iter()
        .map(|(_, address)| address)
        .collect()
}

/// [`choose`] with the site of each address (its index in `record.sites`), so that answers
/// can be counted per site and standby answers told apart by site rather than by address.
pub fn choose_sites(
    record: &DnsRecord,
    views: &[View],
    family: Family,
    turn: u64,
) -> Vec<(usize, IpAddr)> {
    let usable = |standby: bool, unreachable: bool| -> Vec<(usize, IpAddr)> {
        record
            .sites
            .iter()
            .zip(views)
            .enumerate()
            .filter(|(_, (site, view))| {
                site.standby == standby
                    && can_serve(record.policy, **view)
                    && (unreachable || view.state != SiteState::NoConnection)
            })
            .filter_map(|(index, (site, _))| address(site, family).map(|a| (index, a)))
            .collect()
    };
    // S-GS1/S-GS2: standbys only while no active site can serve. Unreachable sites count
    // as able to serve only with `unreachable = "serve"`; otherwise they come last, when no
    // site of either tier is known to serve.
    let serve_unreachable = record.unreachable == Unreachable::Serve;
    let mut tiers = vec![(false, serve_unreachable), (true, serve_unreachable)];
    if !serve_unreachable {
        tiers.extend([(false, true), (true, true)]);
    }
    let Some(tier) = tiers
        .into_iter()
        .map(|(standby, unreachable)| usable(standby, unreachable))
        .find(|tier| !tier.is_empty())
    else {
        return Vec::new();
    };
    let ordered = match record.policy {
        DnsPolicy::RoundRobin => rotate(tier, turn),
        DnsPolicy::Weighted => weighted(record, tier, turn),
        DnsPolicy::LeastLoaded => least_loaded(views, tier, turn),
    };
    let limit = usize::try_from(record.answers).unwrap_or(usize::MAX);
    ordered.into_iter().take(limit).collect()
}

/// The list rotated left by `turn` places.
fn rotate<T>(mut items: Vec<T>, turn: u64) -> Vec<T> {
    let len = items.len() as u64;
    if len > 0 {
        items.rotate_left(usize::try_from(turn % len).unwrap_or(0));
    }
    items
}

/// Starts at the site owning slot `turn mod total weight` (each site owns as many slots as
/// its weight), so over one cycle each site comes first exactly `weight` times.
fn weighted(record: &DnsRecord, tier: Vec<(usize, IpAddr)>, turn: u64) -> Vec<(usize, IpAddr)> {
    let weight = |index: usize| u64::from(record.sites[index].weight.max(1));
    let total: u64 = tier.iter().map(|(index, _)| weight(*index)).sum();
    let mut slot = turn % total.max(1);
    let mut first = 0;
    for (position, (index, _)) in tier.iter().enumerate() {
        if slot < weight(*index) {
            first = position;
            break;
        }
        slot -= weight(*index);
    }
    rotate(tier, first as u64)
}

/// Fewest sessions first; ties (and the order among equals) rotate with `turn`.
fn least_loaded(views: &[View], tier: Vec<(usize, IpAddr)>, turn: u64) -> Vec<(usize, IpAddr)> {
    let mut ordered = rotate(tier, turn);
    ordered.sort_by_key(|(index, _)| views[*index].sessions.unwrap_or(u64::MAX));
    ordered
}
