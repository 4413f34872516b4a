//! Per-vService settings derived from one Config: what a request needs besides the snapshot.
//!
//! Rebuilt whole on every reload and swapped in with `ArcSwap`, so a request sees one
//! consistent configuration from start to end.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, bail};

use super::balance::BackendInfo;
use super::conditions::Conditions;
use super::upstream::{Upstream, new_upstream};
use crate::config::{ByName, HeaderLimits, L7Settings, PortSpec, VService, VServiceKind};
use crate::stats::Histogram;

/// Backend Services of one list by name, with their effective maintenance in that list.
pub(crate) type InfoMap = HashMap<String, BackendInfo>;

/// Everything about one vService that may change on reload without a listener restart.
pub(crate) struct VsSettings {
    /// Proxy settings (algorithm, persistence, timeouts, ...).
    pub(crate) l7: L7Settings,
    /// Backends of the Default list.
    pub(crate) default_info: InfoMap,
    /// Backends of each Conditional set's list, by set name.
    pub(crate) set_info: HashMap<String, InfoMap>,
    /// Compiled Conditional sets.
    pub(crate) conditions: Conditions,
    /// HTTP only: the pooled upstream client (rebuilt when its timeouts change).
    pub(crate) upstream: Option<Upstream>,
    /// HTTP only: TLS towards clients.
    pub(crate) tls: Option<tokio_rustls::TlsAcceptor>,
    /// HTTP only: how large a request head and each of its lines may be (`[proxy]`).
    pub(crate) header_limits: HeaderLimits,
    /// How long connects to its backends take; handed from settings to settings on reload,
    /// so the histogram lives as long as the vService.
    pub(crate) connect_time: Arc<Histogram>,
}

impl VsSettings {
    /// Builds the settings of `vs`; `previous` lends its upstream client and TLS acceptor when
    /// their inputs did not change, so pooled connections survive a reload.
    pub(crate) fn build(
        names: &ByName<'_>,
        vs: &VService,
        header_limits: HeaderLimits,
        previous: Option<&VsSettings>,
    ) -> anyhow::Result<VsSettings> {
        let l7 = vs
            .l7
            .clone()
            .with_context(|| format!("vService {}: no L7 settings", vs.name))?;
        let port = listen_addr(vs)?.port();
        let default_info = list_info(names, &vs.backends, port);
        let set_info = l7
            .conditional_sets
            .iter()
            .map(|s| (s.name.clone(), list_info(names, &s.backends, port)))
            .collect();
        let conditions = Conditions::compile(&l7.conditional_sets);
        let is_http = vs.kind == VServiceKind::Http;
        let connect_time = previous.map_or_else(Default::default, |p| p.connect_time.clone());
        let same = |p: &&VsSettings| p.l7.timeouts == l7.timeouts;
        let upstream = match previous.filter(same).and_then(|p| p.upstream.clone()) {
            Some(u) if is_http => Some(u),
            _ if is_http => Some(new_upstream(&l7.timeouts, connect_time.clone())),
            _ => None,
        };
        let tls = match (&l7.tls, is_http) {
            (Some(t), true) => match previous
                .filter(|p| p.l7.tls == l7.tls)
                .and_then(|p| p.tls.clone())
            {
                Some(acceptor) => Some(acceptor),
                None => {
                    Some(super::tls::acceptor(t).with_context(|| format!("vService {}", vs.name))?)
                }
            },
            _ => None,
        };
        Ok(VsSettings {
            l7,
            default_info,
            set_info,
            conditions,
            upstream,
            tls,
            header_limits,
            connect_time,
        })
    }

    /// The info map of a list: the Default list (`None`) or a Conditional set.
    pub(crate) fn info(&self, set: Option<&str>) -> &InfoMap {
        set.and_then(|s| self.set_info.get(s))
            .unwrap_or(&self.default_info)
    }
}

/// The address an L7 vService listens on (one port: Port Ranges are Network-only).
pub(crate) fn listen_addr(vs: &VService) -> anyhow::Result<SocketAddr> {
    match vs.ports {
        PortSpec::Single(port) => Ok(SocketAddr::new(vs.address, port)),
        _ => bail!("vService {}: an L7 vService listens on one port", vs.name),
    }
}

/// Resolves a list's members (Backend Services and Groups) to backend infos. Maintenance is
/// the service's own flag OR that of a Group of this list that contains it (S-MT6); port 0
/// ("the client's port") means the vService's own port.
fn list_info(names: &ByName<'_>, members: &[String], vs_port: u16) -> InfoMap {
    let mut out = InfoMap::new();
    let mut add = |name: &str, group_maintenance: bool| {
        let Some(svc) = names.service(name) else {
            return;
        };
        let port = if svc.port == 0 { vs_port } else { svc.port };
        let entry = out.entry(svc.name.clone()).or_insert_with(|| BackendInfo {
            name: svc.name.clone(),
            addr: SocketAddr::new(svc.address, port),
            weight: svc.weight,
            max_connections: svc.max_connections,
            maintenance: svc.maintenance,
            passive_failures: svc
                .health_check
                .as_deref()
                .and_then(|profile| names.health_check(profile))
                .and_then(|profile| profile.passive_failures),
        });
        entry.maintenance |= group_maintenance;
    };
    for member in members {
        match names.group(member) {
            Some(group) => group.members.iter().for_each(|m| add(m, group.maintenance)),
            None => add(member, false),
        }
    }
    out
}
