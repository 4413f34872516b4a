//! `[api]` and `[cluster]`: where the control plane listens, its token, TLS and Unix socket,
//! and the peers that configuration changes are pushed to (S-CL), over TLS when they serve
//! it; `[cluster.etcd]` is read in [`super::etcd`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::PathBuf;

use serde_spanned::Spanned;

use super::etcd;
use super::names::Namespace;
use crate::config::issues::Issues;
use crate::config::model::{
    ApiSettings, ApiSocket, ApiTls, ClientTls, ClusterPeer, ClusterSettings, ClusterStore, TlsPart,
};
use crate::config::raw::document::Entry;
use crate::config::raw::{RawApi, RawCluster};

/// Shortest token accepted: long enough that guessing it over the network is hopeless.
const MIN_TOKEN_LEN: usize = 16;

/// Longest Unix socket path the kernel takes (108 bytes with the NUL).
const MAX_SOCKET_PATH: usize = 107;

/// The validated `[api]` plus the span of `listen` (or 0..0 when defaulted), for the
/// listener-conflict check.
pub(in crate::config) struct Api {
    /// The settings.
    pub settings: ApiSettings,
    /// Where `api.listen` is written, if it is.
    pub listen_span: Option<Range<usize>>,
}

/// Validates `[api]`: a parseable `address:port`, a token of at least 16 visible ASCII
/// characters, a token whenever the address is not loopback, and there TLS too unless
/// `insecure_plaintext` says plain HTTP is meant; TLS files that can be used (read now, so
/// that a reload with a bad one is refused and the running certificate kept); a Unix
/// socket path and mode.
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
    let listen_span = raw.listen.as_ref().map(Spanned::span).unwrap_or(0..0);
    if raw.token.is_none() && !listen.ip().is_loopback() {
        issues.error(
            &listen_span,
            "api.token",
            format!(
                "api.listen {listen} is not a loopback address: set `api.token` (at least \
                 {MIN_TOKEN_LEN} characters) so that only holders of the token can use the API"
            ),
        );
    }
    let tls = api_tls(raw, issues);
    let insecure_plaintext = raw
        .insecure_plaintext
        .as_ref()
        .is_some_and(|i| *i.get_ref());
    let has_tls = raw.cert.is_some() || raw.key.is_some();
    if !has_tls && !insecure_plaintext && !listen.ip().is_loopback() {
        issues.error(
            &listen_span,
            "api.insecure_plaintext",
            format!(
                "api.listen {listen} is not a loopback address and the API has no TLS: set \
                 `api.cert` and `api.key` so that the token and the configurations do not \
                 travel in clear, or `api.insecure_plaintext = true` to serve plain HTTP anyway"
            ),
        );
    }
    if let Some(flag) = raw
        .insecure_plaintext
        .as_ref()
        .filter(|f| *f.get_ref() && has_tls)
    {
        issues.warn(
            &flag.span(),
            "api.insecure_plaintext",
            "has no effect: the API is served over TLS (api.cert)",
        );
    }
    Api {
        settings: ApiSettings {
            listen,
            token,
            tls,
            insecure_plaintext,
            socket: api_socket(raw, issues),
        },
        listen_span: raw.listen.as_ref().map(Spanned::span),
    }
}

/// `api.cert`, `key` (both or neither) and `client_ca` (only with them), loaded as the
/// listener will load them.
fn api_tls(raw: &RawApi, issues: &mut Issues) -> Option<ApiTls> {
    let (cert, key) = match (&raw.cert, &raw.key) {
        (Some(cert), Some(key)) => (cert, key),
        (None, None) => {
            if let Some(ca) = &raw.client_ca {
                issues.error(
                    &ca.span(),
                    "api.client_ca",
                    "client certificates are checked only over TLS: set `api.cert` and `api.key` too",
                );
            }
            return None;
        }
        (Some(one), None) | (None, Some(one)) => {
            let field = match raw.cert.is_some() {
                true => "api.key",
                false => "api.cert",
            };
            issues.error(
                &one.span(),
                field,
                "set both `api.cert` and `api.key` (the API's certificate and its key), or neither",
            );
            return None;
        }
    };
    let tls = ApiTls {
        cert: PathBuf::from(cert.get_ref()),
        key: PathBuf::from(key.get_ref()),
        client_ca: raw.client_ca.as_ref().map(|ca| PathBuf::from(ca.get_ref())),
    };
    match tls.server_config() {
        Ok(_) => Some(tls),
        Err(e) => {
            let (field, span) = match e.part {
                TlsPart::Cert => ("api.cert", cert.span()),
                TlsPart::Key => ("api.key", key.span()),
                TlsPart::Ca => (
                    "api.client_ca",
                    raw.client_ca.as_ref().map_or(cert.span(), Spanned::span),
                ),
            };
            issues.error(&span, field, e.to_string());
            None
        }
    }
}

/// `api.socket` (an absolute path short enough for a Unix socket address) and
/// `api.socket_mode` (octal permission bits, only with a socket).
fn api_socket(raw: &RawApi, issues: &mut Issues) -> Option<ApiSocket> {
    let Some(path) = &raw.socket else {
        if let Some(text) = &raw.socket_mode {
            issues.error(
                &text.span(),
                "api.socket_mode",
                "is the mode of `api.socket`, which is not set: set it, or remove socket_mode",
            );
        }
        return None;
    };
    let mode = match &raw.socket_mode {
        Some(text) => {
            let value = text.get_ref().trim();
            let digits = value.strip_prefix("0o").unwrap_or(value);
            match u32::from_str_radix(digits, 8) {
                Ok(mode) if mode <= 0o777 && !digits.is_empty() && digits.len() <= 4 => mode,
                _ => {
                    issues.error(
                        &text.span(),
                        "api.socket_mode",
                        format!(
                            "`{value}` is not a file mode: write octal permission bits, e.g. \"0660\" \
                             (owner and group) or \"0600\" (owner only)"
                        ),
                    );
                    ApiSocket::DEFAULT_MODE
                }
            }
        }
        None => ApiSocket::DEFAULT_MODE,
    };
    let value = path.get_ref();
    let problem = if !value.starts_with('/') {
        "must be an absolute path (e.g. /run/lb/api.sock)"
    } else if value.len() > MAX_SOCKET_PATH {
        "is longer than a Unix socket address may be (107 bytes)"
    } else if value.ends_with('/') {
        "names a directory: add the socket's file name (e.g. /run/lb/api.sock)"
    } else {
        return Some(ApiSocket {
            path: PathBuf::from(value),
            mode,
        });
    };
    issues.error(&path.span(), "api.socket", format!("`{value}` {problem}"));
    None
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
/// names and URLs, `https://host:port` URLs (`http://` only on loopback or with
/// `api.insecure_plaintext`), TLS files that can be used, a peer without its own token
/// getting this node's API token; with `store = "etcd"` a valid `[cluster.etcd]` and no
/// peers (S-CL3).
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
        if let Some(file) = [&raw.ca, &raw.cert, &raw.key].into_iter().flatten().next() {
            issues.error(
                &file.span(),
                "cluster.ca",
                "`ca`, `cert` and `key` of [cluster] are for https:// peers (store = \"peers\"): \
                 with etcd, set `ca_file`, `cert_file` and `key_file` in [cluster.etcd]",
            );
        }
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
            peer_tls: ClientTls::default(),
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
        if url.as_deref().is_some_and(plaintext_off_loopback) && !api.insecure_plaintext {
            issues.error(
                &peer.url.span(),
                &format!("{path}.url"),
                format!(
                    "`{}` would carry the token and every pushed configuration in clear: write \
                     https:// (the peer's API with `api.cert`), or set `api.insecure_plaintext = \
                     true` to push plain HTTP anyway",
                    peer.url.get_ref()
                ),
            );
        }
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
    let https = peers
        .unwrap_or_default()
        .iter()
        .any(|p| p.get_ref().url.get_ref().trim().starts_with("https://"));
    Some(ClusterSettings {
        peer_tls: peer_tls(raw, https, &entry.span, issues),
        peers: valid,
        manual_sync: raw.manual_sync.as_ref().is_some_and(|m| *m.get_ref()),
        store: store.unwrap_or(ClusterStore::Peers),
        node_name,
    })
}

/// `cluster.ca`, `cert` and `key`: for `https://` peers only (`https` tells whether there
/// is one), the certificate and key both or neither, every file loaded as a push loads it.
fn peer_tls(raw: &RawCluster, https: bool, span: &Range<usize>, issues: &mut Issues) -> ClientTls {
    let path = |f: &Option<Spanned<String>>| f.as_ref().map(|f| PathBuf::from(f.get_ref()));
    let identity = match (&raw.cert, &raw.key) {
        (Some(c), Some(k)) => Some((PathBuf::from(c.get_ref()), PathBuf::from(k.get_ref()))),
        (None, None) => None,
        (Some(one), None) | (None, Some(one)) => {
            let field = match raw.cert.is_some() {
                true => "cluster.key",
                false => "cluster.cert",
            };
            issues.error(
                &one.span(),
                field,
                "set both `cert` and `key` (this node's client certificate and its key), or neither",
            );
            None
        }
    };
    let tls = ClientTls {
        ca: path(&raw.ca),
        identity,
    };
    if tls == ClientTls::default() {
        return tls;
    }
    if !https {
        let first = [&raw.ca, &raw.cert, &raw.key].into_iter().flatten().next();
        issues.error(
            &first.map_or(span.clone(), Spanned::span),
            "cluster.ca",
            "TLS files are set but no peer URL is https://: write https://HOST:PORT to use TLS",
        );
        return ClientTls::default();
    }
    if let Err(e) = tls.client_config() {
        let (field, at) = match e.part {
            TlsPart::Ca => ("cluster.ca", &raw.ca),
            TlsPart::Cert => ("cluster.cert", &raw.cert),
            TlsPart::Key => ("cluster.key", &raw.key),
        };
        issues.error(
            &at.as_ref().map_or(span.clone(), Spanned::span),
            field,
            e.to_string(),
        );
    }
    tls
}

/// A peer's API base URL: `http://HOST:PORT` or `https://HOST:PORT`, an optional trailing
/// `/` (dropped), no path.
fn peer_url(url: &Spanned<String>, field: &str, issues: &mut Issues) -> Option<String> {
    let text = url.get_ref().trim();
    let (scheme, rest) = match text.split_once("://") {
        Some((s @ ("http" | "https"), rest)) => (s, rest.strip_suffix('/').unwrap_or(rest)),
        _ => ("", ""),
    };
    let fine = rest
        .rsplit_once(':')
        .is_some_and(|(host, port)| valid_host(host) && port.parse::<u16>().is_ok_and(|p| p != 0));
    if fine {
        return Some(format!("{scheme}://{rest}"));
    }
    issues.error(
        &url.span(),
        field,
        format!(
            "`{}` is not a peer API URL: write https://HOST:PORT or http://HOST:PORT (e.g. \
             https://10.0.0.2:9180)",
            url.get_ref()
        ),
    );
    None
}

/// True when `url` (as [`peer_url`] returns it) is `http://` to a host that is not
/// loopback: the token and the configuration would cross the network in clear.
fn plaintext_off_loopback(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let host = rest.rsplit_once(':').map_or(rest, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    !loopback
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

    /// S-CL: peers are reached by `http://host:port` or `https://host:port`, nothing else.
    #[test]
    fn plaintext_is_told_apart_from_loopback() {
        assert!(plaintext_off_loopback("http://10.0.0.2:9180"));
        assert!(plaintext_off_loopback("http://lb2.example:9180"));
        assert!(!plaintext_off_loopback("http://127.0.0.1:9180"));
        assert!(!plaintext_off_loopback("http://[::1]:9180"));
        assert!(!plaintext_off_loopback("http://localhost:9180"));
        assert!(!plaintext_off_loopback("https://10.0.0.2:9180"));
    }

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
        assert_eq!(
            url("https://10.0.0.2:9180/").as_deref(),
            Some("https://10.0.0.2:9180")
        );
        assert_eq!(url("ftp://10.0.0.2:9180"), None);
        assert_eq!(url("http://10.0.0.2"), None);
        assert_eq!(url("http://10.0.0.2:0"), None);
        assert_eq!(url("http://10.0.0.2:9180/api"), None);
        assert_eq!(url("http://:9180"), None);
        assert_eq!(url("http://[nope]:9180"), None);
        assert_eq!(url("10.0.0.2:9180"), None);
    }
}
