//! Lists of Backend Services (a vService's Default list or a Conditional set's list): names
//! defined, each backend once, and for L7 vServices a port the proxy can connect to.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use serde_spanned::Spanned;

use crate::config::check::backends::{Backends, Lookup};
use crate::config::issues::Issues;

/// One list as written, with what to say when it is missing.
pub(in crate::config) struct ListSource<'a> {
    /// The list, if written.
    pub list: Option<&'a Spanned<Vec<Spanned<String>>>>,
    /// Field path of the list, e.g. `vservice[0].backends`.
    pub field: String,
    /// Where to point when the list is missing (the owning table).
    pub owner_span: Range<usize>,
    /// What owns the list, for messages, e.g. "vservice `web`".
    pub owner: String,
}

/// Checks one list: present, non-empty, names defined, no backend twice (also through
/// groups, which would double its share and blur the backup rules). Returns the names.
pub(in crate::config) fn backend_list(
    source: &ListSource<'_>,
    backends: &Backends,
    issues: &mut Issues,
) -> Vec<String> {
    let field = &source.field;
    let no_list = format!("{} has no backends list", source.owner);
    let Some(list) = source.list else {
        issues.error(&source.owner_span, field, no_list);
        return Vec::new();
    };
    if list.get_ref().is_empty() {
        issues.error(&list.span(), field, no_list);
    }
    // Backend Service name -> the list entry that brought it in.
    let mut seen: HashMap<&str, &str> = HashMap::new();
    // The list's own entries, so "listed twice" is one lookup, not a scan of `seen`.
    let mut entries: HashSet<&str> = HashSet::new();
    for (index, item) in list.get_ref().iter().enumerate() {
        let field = format!("{field}[{index}]");
        let name = item.get_ref().as_str();
        let members: Vec<&str> = match backends.lookup(name) {
            Lookup::Unknown => {
                issues.error(
                    &item.span(),
                    &field,
                    format!("unknown backend service or group `{name}`"),
                );
                continue;
            }
            Lookup::Service(_) | Lookup::Invalid => vec![name],
            Lookup::Group(group) => group.members.iter().map(String::as_str).collect(),
        };
        if !entries.insert(name) {
            issues.error(&item.span(), &field, format!("`{name}` is listed twice"));
            continue;
        }
        for member in members {
            let Some(first) = seen.get(member) else {
                seen.insert(member, name);
                continue;
            };
            let before = if *first == member {
                String::new()
            } else {
                format!(" through `{first}`")
            };
            let now = if member == name {
                String::new()
            } else {
                format!(" (member of `{name}`)")
            };
            issues.error(
                &item.span(),
                &field,
                format!("backend service `{member}`{now} is already in this list{before}"),
            );
        }
    }
    list.get_ref()
        .iter()
        .map(|item| item.get_ref().clone())
        .collect()
}

/// L7 vServices: the proxy opens its own connection to each backend, so port 0 ("the
/// port the client asked for", a Network vService notion) cannot be used.
pub(in crate::config) fn check_l7_ports(
    source: &ListSource<'_>,
    kind: &str,
    backends: &Backends,
    issues: &mut Issues,
) {
    let Some(list) = source.list else {
        return;
    };
    for (index, item) in list.get_ref().iter().enumerate() {
        for service in backends.expand(item.get_ref()) {
            if service.port == 0 {
                issues.error(
                    &item.span(),
                    &format!("{}[{index}]", source.field),
                    format!(
                        "backend service `{}` has port 0: an {kind} vservice connects to the \
                         backend's own port, give it one (1..=65535)",
                        service.name
                    ),
                );
            }
        }
    }
}
