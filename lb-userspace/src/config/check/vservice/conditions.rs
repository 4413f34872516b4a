//! `[[vservice.conditional_set]]` of an HTTP vService: each set's name, conditions and own
//! list (with its own backups, S-BK6). Order is kept: the first matching set wins.

use serde_spanned::Spanned;

use super::lists::{ListSource, backend_list, check_l7_ports};
use super::matchers;
use crate::config::check::backends::Backends;
use crate::config::check::names::Namespace;
use crate::config::issues::Issues;
use crate::config::model::{Condition, ConditionalSet, StrMatch};
use crate::config::raw::{RawConditionalSet, RawHeader};

/// Validates the sets of the vService at `path` (`vservice[i]`); invalid sets are
/// reported and left out.
pub(in crate::config) fn conditional_sets(
    sets: &[Spanned<RawConditionalSet>],
    path: &str,
    backends: &Backends,
    issues: &mut Issues,
) -> Vec<ConditionalSet> {
    let mut names = Namespace::default();
    let mut valid = Vec::new();
    for (index, set) in sets.iter().enumerate() {
        let before = issues.error_count();
        let path = format!("{path}.conditional_set[{index}]");
        let raw = set.get_ref();
        names.define(
            &raw.name,
            "conditional set",
            &format!("{path}.name"),
            issues,
        );
        let unchecked = issues.error_count();
        let conditions = conditions(raw, &path, issues);
        // An invalid condition was reported already; only an absent one is reported here.
        if conditions.is_empty() && issues.error_count() == unchecked {
            issues.error(
                &set.span(),
                &path,
                format!(
                    "conditional set `{}` has no condition: give at least one of host, path, \
                     path_prefix, path_suffix, path_regex, method, source_cidr, header",
                    raw.name.get_ref()
                ),
            );
        }
        let source = ListSource {
            list: raw.backends.as_ref(),
            field: format!("{path}.backends"),
            owner_span: set.span(),
            owner: format!("conditional set `{}`", raw.name.get_ref()),
        };
        let list = backend_list(&source, backends, issues);
        check_l7_ports(&source, "http", backends, issues);
        if issues.error_count() == before {
            valid.push(ConditionalSet {
                name: raw.name.get_ref().clone(),
                conditions,
                backends: list,
            });
        }
    }
    valid
}

/// Every condition written in the set (all must match), in a fixed order.
fn conditions(raw: &RawConditionalSet, path: &str, issues: &mut Issues) -> Vec<Condition> {
    let field = |key: &str| format!("{path}.{key}");
    let mut found = Vec::new();
    if let Some(host) = &raw.host {
        found.extend(matchers::host(host, &field("host"), issues).map(Condition::Host));
    }
    let paths: [(&Option<Spanned<String>>, &str, PathKind); 4] = [
        (&raw.path, "path", PathKind::Exact),
        (&raw.path_prefix, "path_prefix", PathKind::Prefix),
        (&raw.path_suffix, "path_suffix", PathKind::Suffix),
        (&raw.path_regex, "path_regex", PathKind::Regex),
    ];
    for (value, key, kind) in paths {
        let Some(value) = value else { continue };
        let matched = match kind {
            PathKind::Exact => matchers::path(value, &field(key), issues).map(StrMatch::Exact),
            PathKind::Prefix => matchers::path(value, &field(key), issues).map(StrMatch::Prefix),
            PathKind::Suffix => {
                matchers::non_empty(value, &field(key), issues).map(StrMatch::Suffix)
            }
            PathKind::Regex => matchers::regex(value, &field(key), issues).map(StrMatch::Regex),
        };
        found.extend(matched.map(Condition::Path));
    }
    if let Some(list) = &raw.method {
        found.extend(matchers::methods(list, &field("method"), issues).map(Condition::Method));
    }
    if let Some(list) = &raw.source_cidr {
        let networks = matchers::networks(list, &field("source_cidr"), issues);
        found.extend(networks.map(Condition::SourceCidr));
    }
    if let Some(header) = &raw.header {
        found.extend(header_condition(header, &field("header"), issues));
    }
    found
}

/// How a path value is matched.
#[derive(Clone, Copy)]
enum PathKind {
    Exact,
    Prefix,
    Suffix,
    Regex,
}

/// `[vservice.conditional_set.header]`: a name and exactly one of exact, prefix, suffix,
/// regex.
fn header_condition(
    header: &Spanned<RawHeader>,
    path: &str,
    issues: &mut Issues,
) -> Option<Condition> {
    let raw = header.get_ref();
    let name = matchers::header_name(&raw.name, &format!("{path}.name"), issues);
    let written: Vec<(&str, &Spanned<String>)> = [
        ("exact", &raw.exact),
        ("prefix", &raw.prefix),
        ("suffix", &raw.suffix),
        ("regex", &raw.regex),
    ]
    .into_iter()
    .filter_map(|(key, value)| value.as_ref().map(|value| (key, value)))
    .collect();
    let [(key, value)] = written.as_slice() else {
        let (span, field) = match written.get(1) {
            Some((key, value)) => (value.span(), format!("{path}.{key}")),
            None => (header.span(), path.to_owned()),
        };
        issues.error(
            &span,
            &field,
            "set exactly one of `exact`, `prefix`, `suffix` or `regex` for the header value",
        );
        return None;
    };
    let field = format!("{path}.{key}");
    let value = match *key {
        "exact" => StrMatch::Exact(value.get_ref().clone()),
        "prefix" => StrMatch::Prefix(matchers::non_empty(value, &field, issues)?),
        "suffix" => StrMatch::Suffix(matchers::non_empty(value, &field, issues)?),
        _ => StrMatch::Regex(matchers::regex(value, &field, issues)?),
    };
    Some(Condition::Header { name: name?, value })
}
