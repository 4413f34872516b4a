//! `[api]` and `[cluster]`: where the control plane listens, its token, and the peers that
//! configuration changes are pushed to (S-CL); `[cluster.etcd]` is read in [`super::etcd`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;

use serde_spanned::Spanned;

use super::etcd;
use super::names::Namespace;
use crate::config::issues::Issues;
use crate::config::model::{ApiSettings, ClusterPeer, ClusterSettings, ClusterStore};
use crate::config::raw::document::Entry;
use crate::config::raw::{RawApi, RawCluster};

/// Shortest token accepted: long enough that guessing it over the network is hopeless.
const MIN_TOKEN_LEN: usize = 16;

/// The validated `[api]` plus the span of `listen` (or 0..0 when defaulted), for the
/// listener-conflict check.
pub(in crate::config) struct Api {
    /// The settings.
    pub settings: ApiSettings,
    /// Where `api.listen` is written, if it is.
    pub listen_span: Option<Range<usize>>,
}

/// Validates `[api]`: a parseable `address:port`, a token of at least 16 visible ASCII
/// characters, and a token whenever the address is not loopback.
pub(in crate::config) fn api(raw: &RawApi, issues: &mut Issues) -> Api {
    let defaults = ApiSettings::default();
    let listen = match &raw.listen {
        Some(text) => socket_address(text, issues).unwrap_or(defaults.listen),
        None => defaults.listen,
    };
    let token = raw
        .token
        .as_ref()
        .filter(|token| check_token(token, "api.token", issues))
        .map(|token| token.get_ref().clone());
    if raw.token.is_none() && !listen.ip().is_loopback() {
        let span = raw.listen.as_ref().map(Spanned::span).unwrap_or(0..0);
        issues.error(
            &span,
            "api.token",
            format!(
                "api.listen {listen} is not a loopback address: set `api.token` (at least \
                 {MIN_TOKEN_LEN} characters) so that only holders of the token can use the API"
            ),
        );
    }
    Api {
        settings: ApiSettings { listen, token },
        listen_span: raw.listen.as_ref().map(Spanned::span),
    }
}

/// `api.listen`: `IP:PORT` (IPv6 in brackets), port above 0.
fn socket_address(text: &Spanned<String>, issues: &mut Issues) -> Option<SocketAddr> {
    let value = text.get_ref();
    let problem = match value.trim().parse::<SocketAddr>() {
        Ok(address) if address.port() != 0 => return Some(address),
        Ok(_) => format!("`{value}`: port 0 cannot be listened on, give a port 1..=65535"),
        Err(_) => format!("`{value}` is not an address:port (e.g. 127.0.0.1:9180 or [::1]:9180)"),
    };
    issues.error(&text.span(), "api.listen", problem);
    None
}

/// A bearer token: at least [`MIN_TOKEN_LEN`] characters, visible ASCII only (it travels in
/// an HTTP header). Reports and returns false when it is not.
pub(in crate::config) fn check_token(
    token: &Spanned<String>,
    field: &str,
    issues: &mut Issues,
) -> bool {
    let text = token.get_ref();
    let problem = if !text.chars().all(|c| c.is_ascii_graphic()) {
        "must contain only visible ASCII characters (no spaces)"
    } else if text.len() < MIN_TOKEN_LEN {
        "is too short"
    } else {
        return true;
    };
    issues.error(
        &token.span(),
        field,
        format!("the token {problem}: use at least {MIN_TOKEN_LEN} visible ASCII characters"),
    );
    false
}

/// Validates `[cluster]`: with `store = "peers"` (the default) at least one peer, unique
/// names and URLs, `http://host:port` URLs, a peer without its own token getting this
/// node's API token; with `store = "etcd"` a valid `[cluster.etcd]` and no peers (S-CL3).
pub(in crate::config) fn cluster(
    entry: Option<&Entry<RawCluster>>,
    api: &ApiSettings,
    issues: &mut Issues,
) -> Option<ClusterSettings> {
    let entry = entry?;
    let raw = &entry.raw;
    let is_etcd = etcd::store_is_etcd(raw.store.as_ref(), issues);
    let node_name = etcd::node_name(raw.node_name.as_ref(), issues);
    let peers = raw.peer.as_ref().map(|p| p.get_ref().as_slice());
    let store = match (is_etcd, &raw.etcd) {
        (Some(true), Some(settings)) => etcd::etcd(settings, issues).map(ClusterStore::Etcd),
        (Some(true), None) => {
            issues.error(
                &entry.span,
                "cluster.etcd",
                "store = \"etcd\" needs [cluster.etcd] with `endpoints`, e.g. endpoints = [\"http://10.0.0.5:2379\"]",
            );
            None
        }
        (_, Some(settings)) => {
            issues.error(
                &settings.span(),
                "cluster.etcd",
                "[cluster.etcd] is read only with store = \"etcd\": set `store = \"etcd\"` in [cluster] or remove [cluster.etcd]",
            );
            None
        }
        (_, None) => Some(ClusterStore::Peers),
    };
    if is_etcd == Some(true) {
        if let Some(p) = raw.peer.as_ref().filter(|p| !p.get_ref().is_empty()) {
            issues.error(
                &p.span(),
                "cluster.peer",
                "[[cluster.peer]] is for store = \"peers\": with etcd every node finds the others through etcd, remove the peers",
            );
        }
        return store.map(|store| ClusterSettings {
            peers: Vec::new(),
            manual_sync: raw.manual_sync.as_ref().is_some_and(|m| *m.get_ref()),
            store,
            node_name,
        });
    }
    if peers.is_none_or(<[_]>::is_empty) {
        let span = raw.peer.as_ref().map_or(entry.span.clone(), Spanned::span);
        issues.error(
            &span,
            "cluster.peer",
            "[cluster] needs at least one [[cluster.peer]] (remove [cluster] to turn clustering off, or use store = \"etcd\")",
        );
    }
    let mut names = Namespace::default();
    // Normalised URL -> line of its first use.
    let mut urls: HashMap<String, usize> = HashMap::new();
    let mut valid = Vec::new();
    for (index, peer) in peers.unwrap_or_default().iter().enumerate() {
        let before = issues.error_count();
        let path = format!("cluster.peer[{index}]");
        let peer = peer.get_ref();
        names.define(&peer.name, "cluster peer", &format!("{path}.name"), issues);
        let url = peer_url(&peer.url, &format!("{path}.url"), issues);
        if let Some(url) = &url {
            let line = issues.line_of(peer.url.span().start);
            if let Some(first) = urls.get(&url.to_ascii_lowercase()) {
                issues.error(
                    &peer.url.span(),
                    &format!("{path}.url"),
                    format!("duplicate url `{url}`: already used by the peer at line {first}"),
                );
            } else {
                urls.insert(url.to_ascii_lowercase(), line);
            }
        }
        let own_token = peer
            .token
            .as_ref()
            .filter(|token| check_token(token, &format!("{path}.token"), issues))
            .map(|token| token.get_ref().clone());
        if issues.error_count() == before
            && let Some(url) = url
        {
            valid.push(ClusterPeer {
                name: peer.name.get_ref().clone(),
                url,
                token: own_token.or_else(|| api.token.clone()),
            });
        }
    }
    Some(ClusterSettings {
        peers: valid,
        manual_sync: raw.manual_sync.as_ref().is_some_and(|m| *m.get_ref()),
        store: store.unwrap_or(ClusterStore::Peers),
        node_name,
    })
}

/// A peer's API base URL: `http://HOST:PORT`, an optional trailing `/` (dropped), no path.
fn peer_url(url: &Spanned<String>, field: &str, issues: &mut Issues) -> Option<String> {
    let text = url.get_ref().trim();
    let authority = text
        .strip_prefix("http://")
        .map(|rest| rest.strip_suffix('/').unwrap_or(rest));
    let fine = authority.is_some_and(|authority| {
        let port = authority
            .rsplit_once(':')
            .map(|(host, port)| (host, port.parse::<u16>()));
        match port {
            Some((host, Ok(port))) => port != 0 && valid_host(host),
            _ => false,
        }
    });
    if fine {
        return authority.map(|authority| format!("http://{authority}"));
    }
    issues.error(
        &url.span(),
        field,
        format!(
            "`{}` is not a peer API URL: write http://HOST:PORT (e.g. http://10.0.0.2:9180)",
            url.get_ref()
        ),
    );
    None
}

/// A URL host: a bracketed IPv6 address, or a name / IPv4 address without odd characters.
pub(in crate::config) fn valid_host(host: &str) -> bool {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inner.parse::<std::net::Ipv6Addr>().is_ok();
    }
    !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Option<String> {
        let mut issues = Issues::new("t", "x = 1\n");
        let result = peer_url(&Spanned::new(0..1, text.to_owned()), "u", &mut issues);
        assert_eq!(result.is_none(), issues.has_errors());
        result
    }

    /// S-CL: peers are reached by `http://host:port`, nothing else.
    #[test]
    fn s_cl_peer_urls() {
        assert_eq!(
            url("http://10.0.0.2:9180").as_deref(),
            Some("http://10.0.0.2:9180")
        );
        assert_eq!(
            url("http://lb2.example:80/").as_deref(),
            Some("http://lb2.example:80")
        );
        assert_eq!(
            url("http://[fd00::2]:9180").as_deref(),
            Some("http://[fd00::2]:9180")
        );
        assert_eq!(url("https://10.0.0.2:9180"), None);
        assert_eq!(url("http://10.0.0.2"), None);
        assert_eq!(url("http://10.0.0.2:0"), None);
        assert_eq!(url("http://10.0.0.2:9180/api"), None);
        assert_eq!(url("http://:9180"), None);
        assert_eq!(url("http://[nope]:9180"), None);
        assert_eq!(url("10.0.0.2:9180"), None);
    }
}
