//! `[[backend_service]]` and `[[backend_group]]`: one shared namespace, references to
//! health checks and group members.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv6Addr};

use serde_spanned::Spanned;

use super::names::Namespace;
use crate::config::issues::Issues;
use crate::config::model::{BackendGroup, BackendService, ipv6_health_key};
use crate::config::raw::document::{Entry, RawDocument};
use crate::config::raw::{RawBackendGroup, RawBackendService};

/// The validated backends plus every name defined in the file, valid or not, so later
/// steps can tell "unknown" from "defined but already reported".
pub(in crate::config) struct Backends {
    /// Backend Services without errors.
    pub services: Vec<BackendService>,
    /// Backend Groups without errors.
    pub groups: Vec<BackendGroup>,
    /// Names defined by any `[[backend_service]]`, readable or not.
    service_names: HashSet<String>,
    /// Names defined by any readable `[[backend_group]]`, valid or not.
    group_names: HashSet<String>,
    /// Names of entries of either section that could not be read.
    unreadable: HashSet<String>,
    /// Where each valid service and group is, so a lookup costs the same with 50,000 of
    /// them as with 5 (validation stays linear in the file's size).
    service_index: HashMap<String, usize>,
    group_index: HashMap<String, usize>,
}

/// What a name in a backends list refers to.
pub(in crate::config) enum Lookup<'a> {
    /// A valid Backend Service.
    Service(&'a BackendService),
    /// A valid Backend Group.
    Group(&'a BackendGroup),
    /// Defined, but invalid: its own error was reported already.
    Invalid,
    /// Not defined anywhere.
    Unknown,
}

impl Backends {
    /// Resolves a name of the shared service/group namespace.
    pub(in crate::config) fn lookup(&self, name: &str) -> Lookup<'_> {
        if let Some(&i) = self.service_index.get(name) {
            Lookup::Service(&self.services[i])
        } else if let Some(&i) = self.group_index.get(name) {
            Lookup::Group(&self.groups[i])
        } else if self.service_names.contains(name)
            || self.group_names.contains(name)
            || self.unreadable.contains(name)
        {
            Lookup::Invalid
        } else {
            Lookup::Unknown
        }
    }

    /// The valid Backend Services a list entry stands for (a group expands to its members).
    pub(in crate::config) fn expand(&self, name: &str) -> Vec<&BackendService> {
        match self.lookup(name) {
            Lookup::Service(service) => vec![service],
            Lookup::Group(group) => group
                .members
                .iter()
                .filter_map(|member| self.service_index.get(member).map(|&i| &self.services[i]))
                .collect(),
            Lookup::Invalid | Lookup::Unknown => Vec::new(),
        }
    }
}

/// Validates services then groups.
pub(in crate::config) fn backends(doc: &RawDocument, issues: &mut Issues) -> Backends {
    let health_names: HashSet<&str> = doc
        .health_checks
        .iter()
        .map(|e| e.raw.name.get_ref().as_str())
        .chain(doc.unreadable.health_checks.iter().map(String::as_str))
        .collect();
    let mut names = Namespace::default();
    let mut backends = Backends {
        services: Vec::new(),
        groups: Vec::new(),
        service_names: names_of(&doc.backend_services, |raw| &raw.name),
        group_names: names_of(&doc.backend_groups, |raw| &raw.name),
        unreadable: doc.unreadable.backends.clone(),
        service_index: HashMap::new(),
        group_index: HashMap::new(),
    };
    for entry in &doc.backend_services {
        let before = issues.error_count();
        let field = format!("{}.name", entry.path);
        names.define(&entry.raw.name, "backend service", &field, issues);
        if let Some(extra) = &entry.raw.address6 {
            let key = ipv6_health_key(entry.raw.name.get_ref());
            if backends.service_names.contains(&key) {
                issues.error(
                    &extra.span(),
                    &format!("{}.address6", entry.path),
                    format!(
                        "the IPv6 address of `{}` is checked and shown as `{key}`, which is \
                         also the name of another backend service: rename that one",
                        entry.raw.name.get_ref()
                    ),
                );
            }
        }
        let service = service(entry, &health_names, issues);
        // A partial entry (some value unreadable) is defined but not valid: lists that
        // name it are not checked against stand-in values.
        if issues.error_count() == before
            && !entry.partial
            && let Some(service) = service
        {
            let index = backends.services.len();
            backends
                .service_index
                .entry(service.name.clone())
                .or_insert(index);
            backends.services.push(service);
        }
    }
    for entry in &doc.backend_groups {
        let before = issues.error_count();
        let field = format!("{}.name", entry.path);
        names.define(&entry.raw.name, "backend group", &field, issues);
        let group = group(entry, &backends, issues);
        if issues.error_count() == before && !entry.partial {
            let index = backends.groups.len();
            backends
                .group_index
                .entry(group.name.clone())
                .or_insert(index);
            backends.groups.push(group);
        }
    }
    backends
}

fn names_of<T>(entries: &[Entry<T>], name: impl Fn(&T) -> &Spanned<String>) -> HashSet<String> {
    entries
        .iter()
        .map(|e| name(&e.raw).get_ref().clone())
        .collect()
}

/// An integer field that must lie in `min..=max`.
pub(in crate::config) fn ranged(
    value: &Spanned<i64>,
    min: i64,
    max: i64,
    field: &str,
    issues: &mut Issues,
) -> Option<u32> {
    let number = *value.get_ref();
    if (min..=max).contains(&number) {
        u32::try_from(number).ok()
    } else {
        issues.error(
            &value.span(),
            field,
            format!("{number} is out of range {min}..={max}"),
        );
        None
    }
}

/// An IP address written as text.
pub(in crate::config) fn address(
    value: &Spanned<String>,
    field: &str,
    issues: &mut Issues,
) -> Option<IpAddr> {
    let text = value.get_ref().trim();
    let parsed = text.parse().ok();
    if parsed.is_none() && text.contains('%') && text.contains(':') {
        issues.error(
            &value.span(),
            field,
            format!(
                "`{text}` has a zone index: zone-scoped (link-local) addresses are not \
                 supported; use a global or unique-local address"
            ),
        );
    } else if parsed.is_none() {
        issues.error(
            &value.span(),
            field,
            format!("`{}` is not an IPv4 or IPv6 address", value.get_ref()),
        );
    }
    parsed
}

/// The optional `address6` beside an `address`: an IPv6 address, allowed only when
/// `address` is IPv4 (one address per family). `main` is `address` as parsed (None when it
/// was unusable, already reported).
pub(in crate::config) fn address6(
    main: Option<IpAddr>,
    value: Option<&Spanned<String>>,
    field: &str,
    issues: &mut Issues,
) -> Option<Ipv6Addr> {
    let value = value?;
    match address(value, field, issues)? {
        IpAddr::V6(_) if main.is_some_and(|m| m.is_ipv6()) => {
            issues.error(
                &value.span(),
                field,
                "`address` is already IPv6: put the IPv4 address in `address`, the IPv6 one here",
            );
            None
        }
        IpAddr::V6(v6) => Some(v6),
        IpAddr::V4(_) => {
            issues.error(
                &value.span(),
                field,
                format!("`{}` is not an IPv6 address", value.get_ref()),
            );
            None
        }
    }
}

fn service(
    entry: &Entry<RawBackendService>,
    health: &HashSet<&str>,
    issues: &mut Issues,
) -> Option<BackendService> {
    let raw = &entry.raw;
    let path = &entry.path;
    let address = address(&raw.address, &format!("{path}.address"), issues);
    let before = issues.error_count();
    let address6 = address6(
        address,
        raw.address6.as_ref(),
        &format!("{path}.address6"),
        issues,
    );
    let address6_fine = issues.error_count() == before;
    let port = ranged(&raw.port, 0, 65535, &format!("{path}.port"), issues);
    let weight = match &raw.weight {
        Some(w) => ranged(w, 0, 65535, &format!("{path}.weight"), issues),
        None => Some(1),
    };
    let max_connections = match &raw.max_connections {
        Some(m) => ranged(
            m,
            1,
            u32::MAX.into(),
            &format!("{path}.max_connections"),
            issues,
        )
        .map(Some),
        None => Some(None),
    };
    if let Some(check) = &raw.health_check
        && !health.contains(check.get_ref().as_str())
    {
        issues.error(
            &check.span(),
            &format!("{path}.health_check"),
            format!("unknown health check `{}`", check.get_ref()),
        );
    }
    if !address6_fine {
        return None;
    }
    Some(BackendService {
        name: raw.name.get_ref().clone(),
        address: address?,
        address6,
        port: u16::try_from(port?).ok()?,
        weight: weight?,
        health_check: raw.health_check.as_ref().map(|c| c.get_ref().clone()),
        maintenance: raw.maintenance,
        backup: raw.backup,
        max_connections: max_connections?,
        tunnel_check: None,
    })
}

fn group(entry: &Entry<RawBackendGroup>, backends: &Backends, issues: &mut Issues) -> BackendGroup {
    let raw = &entry.raw;
    let path = &entry.path;
    if raw.members.get_ref().is_empty() {
        issues.error(
            &raw.members.span(),
            &format!("{path}.members"),
            format!("backend group `{}` has no members", raw.name.get_ref()),
        );
    }
    let mut seen = HashSet::new();
    for (index, member) in raw.members.get_ref().iter().enumerate() {
        let field = format!("{path}.members[{index}]");
        let name = member.get_ref();
        if !seen.insert(name.as_str()) {
            issues.error(&member.span(), &field, format!("`{name}` is listed twice"));
        } else if backends.service_names.contains(name) || backends.unreadable.contains(name) {
            // A service (valid, or with its own error reported already).
        } else if backends.group_names.contains(name) {
            issues.error(
                &member.span(),
                &field,
                format!("`{name}` is a backend group: groups contain backend services only"),
            );
        } else {
            issues.error(
                &member.span(),
                &field,
                format!("unknown backend service `{name}`"),
            );
        }
    }
    BackendGroup {
        name: raw.name.get_ref().clone(),
        members: raw
            .members
            .get_ref()
            .iter()
            .map(|m| m.get_ref().clone())
            .collect(),
        backup: raw.backup,
        maintenance: raw.maintenance,
    }
}
