//! `[cluster] store` and `[cluster.etcd]`: where the shared configuration of N balancers
//! lives (S-CL3), and this node's name among them.

use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use serde_spanned::Spanned;

use super::control::valid_host;
use super::seconds::seconds;
use crate::config::issues::Issues;
use crate::config::model::{EtcdSettings, EtcdTls};
use crate::config::raw::RawEtcd;

/// The key prefix when `cluster.etcd.prefix` is not set.
pub const DEFAULT_PREFIX: &str = "/lb";

/// How long one etcd request may take when `cluster.etcd.timeout` is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// Which store `cluster.store` names: false for `"peers"`, true for `"etcd"`; None (reported)
/// for anything else.
pub(in crate::config) fn store_is_etcd(
    store: Option<&Spanned<String>>,
    issues: &mut Issues,
) -> Option<bool> {
    let Some(store) = store else {
        return Some(false);
    };
    match store.get_ref().as_str() {
        "peers" => Some(false),
        "etcd" => Some(true),
        other => {
            issues.error(
                &store.span(),
                "cluster.store",
                format!("unknown store `{other}`: write \"peers\" (push to [[cluster.peer]]) or \"etcd\" (shared through [cluster.etcd])"),
            );
            None
        }
    }
}

/// `cluster.node_name`: 1 to 63 letters, digits, `.`, `_` or `-` (it is part of an etcd
/// key); the host name when not set.
pub(in crate::config) fn node_name(raw: Option<&Spanned<String>>, issues: &mut Issues) -> String {
    let Some(name) = raw else {
        return host_name();
    };
    let text = name.get_ref();
    let fine = (1..=63).contains(&text.len())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !fine {
        issues.error(
            &name.span(),
            "cluster.node_name",
            format!("`{text}` is not a node name: use 1 to 63 letters, digits, `.`, `_` or `-`"),
        );
    }
    text.clone()
}

/// This machine's host name (what `hostname` prints), `lb` when it cannot be read.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "lb".to_owned())
}

/// Validates `[cluster.etcd]`: endpoints `http(s)://host:port`, a prefix `/name[/name...]`,
/// user and password together, TLS files only with `https://` endpoints (and a CA then).
pub(in crate::config) fn etcd(raw: &Spanned<RawEtcd>, issues: &mut Issues) -> Option<EtcdSettings> {
    let before = issues.error_count();
    let span = raw.span();
    let raw = raw.get_ref();
    let list = raw.endpoints.get_ref();
    if list.is_empty() {
        issues.error(
            &raw.endpoints.span(),
            "cluster.etcd.endpoints",
            "give at least one etcd client URL, e.g. [\"http://10.0.0.5:2379\"]",
        );
    }
    let endpoints: Vec<String> = list
        .iter()
        .enumerate()
        .filter_map(|(i, e)| endpoint(e, &format!("cluster.etcd.endpoints[{i}]"), issues))
        .collect();
    let https = endpoints
        .iter()
        .filter(|e| e.starts_with("https://"))
        .count();
    if https != 0 && https != endpoints.len() {
        issues.error(
            &raw.endpoints.span(),
            "cluster.etcd.endpoints",
            "mix of http:// and https:// endpoints: one etcd cluster speaks one of them",
        );
    }
    let prefix = match &raw.prefix {
        Some(p) => key_prefix(p, issues),
        None => DEFAULT_PREFIX.to_owned(),
    };
    let auth = match (&raw.username, &raw.password) {
        (Some(u), Some(p)) => Some((u.get_ref().clone(), p.get_ref().clone())),
        (None, None) => None,
        (Some(one), None) | (None, Some(one)) => {
            issues.error(
                &one.span(),
                "cluster.etcd.username",
                "set both `username` and `password` (etcd authentication), or neither",
            );
            None
        }
    };
    let tls = tls(raw, https != 0, &span, issues);
    let timeout = match &raw.timeout {
        Some(t) => match seconds(t, "cluster.etcd.timeout", issues) {
            Some(d) if d.is_zero() => {
                issues.error(&t.span(), "cluster.etcd.timeout", "must be above 0 seconds");
                DEFAULT_TIMEOUT
            }
            Some(d) => d,
            None => DEFAULT_TIMEOUT,
        },
        None => DEFAULT_TIMEOUT,
    };
    (issues.error_count() == before).then_some(EtcdSettings {
        endpoints,
        prefix,
        auth,
        tls,
        timeout,
    })
}

fn tls(raw: &RawEtcd, https: bool, span: &Range<usize>, issues: &mut Issues) -> Option<EtcdTls> {
    let path = |f: &Option<Spanned<String>>| f.as_ref().map(|f| PathBuf::from(f.get_ref()));
    let identity = match (&raw.cert_file, &raw.key_file) {
        (Some(c), Some(k)) => Some((PathBuf::from(c.get_ref()), PathBuf::from(k.get_ref()))),
        (None, None) => None,
        (Some(one), None) | (None, Some(one)) => {
            issues.error(
                &one.span(),
                "cluster.etcd.cert_file",
                "set both `cert_file` and `key_file` (a client certificate and its key), or neither",
            );
            None
        }
    };
    let ca_file = path(&raw.ca_file);
    if !https {
        if ca_file.is_some() || identity.is_some() {
            issues.error(
                span,
                "cluster.etcd.ca_file",
                "TLS files are set but the endpoints are http://: write https:// endpoints to use TLS",
            );
        }
        return None;
    }
    if ca_file.is_none() {
        issues.error(
            span,
            "cluster.etcd.ca_file",
            "https:// endpoints need `ca_file`: the CA certificate (PEM) that signed etcd's certificate",
        );
    }
    Some(EtcdTls { ca_file, identity })
}

/// An etcd client URL: `http://HOST:PORT` or `https://HOST:PORT`, no path.
fn endpoint(url: &Spanned<String>, field: &str, issues: &mut Issues) -> Option<String> {
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
            "`{}` is not an etcd client URL: write http://HOST:PORT or https://HOST:PORT (e.g. http://10.0.0.5:2379)",
            url.get_ref()
        ),
    );
    None
}

/// `cluster.etcd.prefix`: `/` then names of letters, digits, `.`, `_`, `-` separated by `/`,
/// no trailing `/` (the keys below it are `<prefix>/config` and `<prefix>/nodes/...`).
fn key_prefix(prefix: &Spanned<String>, issues: &mut Issues) -> String {
    let text = prefix.get_ref();
    let fine = text.strip_prefix('/').is_some_and(|rest| {
        rest.split('/').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        })
    });
    if !fine {
        issues.error(
            &prefix.span(),
            "cluster.etcd.prefix",
            format!("`{text}` is not a key prefix: write `/` and names separated by `/`, e.g. \"/lb/prod\""),
        );
    }
    text.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Option<String> {
        let mut issues = Issues::new("t", "x = 1\n");
        let result = endpoint(&Spanned::new(0..1, text.to_owned()), "u", &mut issues);
        assert_eq!(result.is_none(), issues.has_errors());
        result
    }

    /// S-CL3: etcd is reached by `http(s)://host:port`, nothing else.
    #[test]
    fn s_cl3_endpoint_urls() {
        assert_eq!(
            url("http://127.0.0.1:2379").as_deref(),
            Some("http://127.0.0.1:2379")
        );
        assert_eq!(
            url("https://etcd1.example:2379/").as_deref(),
            Some("https://etcd1.example:2379")
        );
        assert_eq!(
            url("http://[fd00::5]:2379").as_deref(),
            Some("http://[fd00::5]:2379")
        );
        assert_eq!(url("etcd1:2379"), None);
        assert_eq!(url("http://etcd1"), None);
        assert_eq!(url("unix://etcd1:2379"), None);
        assert_eq!(url("http://etcd1:2379/v3"), None);
    }

    fn errors(cluster: &str) -> String {
        let text = format!("[api]\nlisten = \"127.0.0.1:9180\"\n\n{cluster}");
        match crate::config::parse(&text, "c.toml") {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    /// S-CL3: a good `[cluster.etcd]` reads into the model with its defaults.
    #[test]
    fn s_cl3_etcd_settings_read() {
        let text = "[cluster]\nstore = \"etcd\"\nnode_name = \"lb-1\"\n[cluster.etcd]\nendpoints = [\"https://10.0.0.5:2379\", \"https://10.0.0.6:2379\"]\nusername = \"lb\"\npassword = \"secret\"\nca_file = \"/etc/lb/etcd-ca.pem\"\n";
        let cfg = crate::config::parse(text, "c.toml").expect("valid");
        let cluster = cfg.cluster.expect("cluster");
        assert_eq!(cluster.node_name, "lb-1");
        let crate::config::ClusterStore::Etcd(etcd) = cluster.store else {
            panic!("etcd store");
        };
        assert_eq!(etcd.prefix, DEFAULT_PREFIX);
        assert_eq!(etcd.timeout, DEFAULT_TIMEOUT);
        assert_eq!(etcd.auth, Some(("lb".into(), "secret".into())));
        assert!(
            !format!("{etcd:?}").contains("secret"),
            "the password is never printed"
        );
        assert_eq!(
            etcd.tls.and_then(|t| t.ca_file),
            Some(PathBuf::from("/etc/lb/etcd-ca.pem"))
        );
    }

    /// S-CL3, bad input: each wrong `[cluster]` / `[cluster.etcd]` gets an error naming the
    /// field and what to write instead.
    #[test]
    fn s_cl3_wrong_etcd_settings_are_named() {
        let etcd = "[cluster]\nstore = \"etcd\"\n[cluster.etcd]\n";
        let cases = [
            ("[cluster]\nstore = \"zookeeper\"\n", "cluster.store"),
            ("[cluster]\nstore = \"etcd\"\n", "needs [cluster.etcd]"),
            (
                &format!("{etcd}endpoints = []\n"),
                "at least one etcd client URL",
            ),
            (
                &format!("{etcd}endpoints = [\"10.0.0.5:2379\"]\n"),
                "not an etcd client URL",
            ),
            (
                &format!("{etcd}endpoints = [\"http://a:1\", \"https://b:1\"]\nca_file = \"x\"\n"),
                "mix of http:// and https://",
            ),
            (
                &format!("{etcd}endpoints = [\"https://a:1\"]\n"),
                "need `ca_file`",
            ),
            (
                &format!("{etcd}endpoints = [\"http://a:1\"]\nca_file = \"x\"\n"),
                "TLS files are set",
            ),
            (
                &format!("{etcd}endpoints = [\"http://a:1\"]\nusername = \"u\"\n"),
                "both `username` and `password`",
            ),
            (
                &format!("{etcd}endpoints = [\"http://a:1\"]\nprefix = \"lb/\"\n"),
                "not a key prefix",
            ),
            (
                &format!("{etcd}endpoints = [\"http://a:1\"]\ntimeout = 0\n"),
                "cluster.etcd.timeout",
            ),
            (
                &format!("{etcd}endpoints = [\"http://a:1\"]\nbogus = 1\n"),
                "bogus",
            ),
            (
                "[cluster]\nstore = \"etcd\"\nnode_name = \"a b\"\n[cluster.etcd]\nendpoints = [\"http://a:1\"]\n",
                "not a node name",
            ),
            (
                "[cluster]\nstore = \"etcd\"\n[[cluster.peer]]\nname = \"p\"\nurl = \"http://a:1\"\n[cluster.etcd]\nendpoints = [\"http://a:1\"]\n",
                "[[cluster.peer]] is for store = \"peers\"",
            ),
            (
                "[cluster]\n[[cluster.peer]]\nname = \"p\"\nurl = \"http://a:1\"\n[cluster.etcd]\nendpoints = [\"http://a:1\"]\n",
                "read only with store = \"etcd\"",
            ),
        ];
        for (cluster, expected) in cases {
            let found = errors(cluster);
            assert!(
                found.contains(expected),
                "{cluster}\nwanted `{expected}` in:\n{found}"
            );
        }
    }

    /// S-CL3: prefixes are absolute key paths without a trailing `/`.
    #[test]
    fn s_cl3_key_prefixes() {
        let check = |text: &str| {
            let mut issues = Issues::new("t", "x = 1\n");
            key_prefix(&Spanned::new(0..1, text.to_owned()), &mut issues);
            !issues.has_errors()
        };
        assert!(check("/lb"));
        assert!(check("/lb/prod-1"));
        assert!(!check("lb"));
        assert!(!check("/lb/"));
        assert!(!check("/"));
        assert!(!check("/lb//x"));
        assert!(!check("/lb x"));
    }
}
