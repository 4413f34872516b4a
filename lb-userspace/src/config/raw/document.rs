//! Reads TOML text into the raw structs: syntax errors, then each section and each
//! `[[...]]` entry on its own, so one bad entry does not hide the problems of the others;
//! within a table, [`recover`] finds every problem, not only serde's first.

use std::collections::HashSet;
use std::ops::Range;

use serde::Deserialize;
use serde_spanned::Spanned;
use toml::de::{DeTable, DeValue};

use super::dns::RawDnsVService;
use super::recover::{self, Read};
use super::syntax::Taint;
use super::{
    RawApi, RawBackendGroup, RawBackendService, RawBgp, RawCluster, RawHealthCheck, RawProxy,
    RawReflection, RawVService, RawXdp,
};
use crate::config::issues::Issues;

/// The top-level sections the schema knows.
const SECTIONS: [&str; 11] = [
    "xdp",
    "reflection",
    "api",
    "proxy",
    "cluster",
    "bgp",
    "health_check",
    "backend_service",
    "backend_group",
    "vservice",
    "dns_vservice",
];

/// One readable `[[...]]` entry with where it is.
pub(in crate::config) struct Entry<T> {
    /// Field path of the entry, e.g. `vservice[2]` (its index in the file).
    pub path: String,
    /// Span of the entry's header (or inline table), used for "missing" problems.
    pub span: Range<usize>,
    /// The entry as written.
    pub raw: T,
    /// True when some of its values could not be read (reported): stand-ins took their
    /// place so its checks could run, but other entries must not rely on it as valid.
    pub partial: bool,
}

/// Names of entries that could not be read. References to them are not reported as
/// unknown: the entry's own error already explains the problem.
#[derive(Default)]
pub(in crate::config) struct Unreadable {
    /// `[[health_check]]` names.
    pub health_checks: HashSet<String>,
    /// `[[backend_service]]` and `[[backend_group]]` names (one namespace).
    pub backends: HashSet<String>,
}

/// The whole file as written, minus the entries that could not be read.
#[derive(Default)]
pub(in crate::config) struct RawDocument {
    pub xdp: RawXdp,
    pub reflection: RawReflection,
    pub api: RawApi,
    pub proxy: RawProxy,
    /// `[cluster]` when present (and readable); its span points at the table.
    pub cluster: Option<Entry<RawCluster>>,
    /// `[bgp]` (defaults: off).
    pub bgp: RawBgp,
    pub health_checks: Vec<Entry<RawHealthCheck>>,
    pub backend_services: Vec<Entry<RawBackendService>>,
    pub backend_groups: Vec<Entry<RawBackendGroup>>,
    pub vservices: Vec<Entry<RawVService>>,
    /// `[[dns_vservice]]` entries (S-GS).
    pub dns_vservices: Vec<Entry<RawDnsVService>>,
    pub unreadable: Unreadable,
}

/// Reads `text`. Syntax errors are reported and the items holding one left out (see
/// [`Taint`]); type and unknown-field errors are all reported, and an entry is kept for the
/// checks (marked partial) when its other keys can still be read.
pub(in crate::config) fn read(text: &str, issues: &mut Issues) -> RawDocument {
    let (root, syntax_errors) = DeTable::parse_recoverable(text);
    let mut starts = Vec::with_capacity(syntax_errors.len());
    for error in syntax_errors {
        let span = error.span().unwrap_or(0..0);
        starts.push(span.start);
        issues.error(&span, "", format!("TOML syntax: {}", error.message()));
    }
    starts.sort_unstable();
    let taint = Taint::new(root.get_ref(), &starts);
    let mut doc = RawDocument::default();
    for (key, value) in root.into_inner() {
        let name = key.get_ref().as_ref();
        let item = if value.get_ref().is_table() {
            value.span()
        } else {
            key.span()
        };
        if let Some(error) = taint.error_in(&item) {
            if value.get_ref().is_table() {
                skipped(name, value.get_ref(), &item, error, issues);
            }
            continue;
        }
        let reader = Reader {
            section: name,
            taint: &taint,
        };
        match name {
            "xdp" => doc.xdp = read_table(name, value, issues),
            "reflection" => doc.reflection = read_table(name, value, issues),
            "api" => doc.api = read_table(name, value, issues),
            "proxy" => doc.proxy = read_table(name, value, issues),
            "cluster" => doc.cluster = read_optional_table(name, value, issues),
            "bgp" => doc.bgp = read_table(name, value, issues),
            "health_check" => {
                doc.health_checks =
                    reader.entries(value, issues, &mut doc.unreadable.health_checks);
            }
            "backend_service" => {
                doc.backend_services = reader.entries(value, issues, &mut doc.unreadable.backends);
            }
            "backend_group" => {
                doc.backend_groups = reader.entries(value, issues, &mut doc.unreadable.backends);
            }
            "vservice" => {
                doc.vservices = reader.entries(value, issues, &mut HashSet::new());
            }
            "dns_vservice" => {
                doc.dns_vservices = reader.entries(value, issues, &mut HashSet::new());
            }
            _ => issues.error(
                &key.span(),
                name,
                format!(
                    "unknown section `{name}`, expected one of {}",
                    SECTIONS.map(|s| format!("`{s}`")).join(", ")
                ),
            ),
        }
    }
    doc
}

/// Says that the table at `span` (field path `path`) was not checked because of the
/// syntax error at byte `error`.
fn skipped(
    path: &str,
    table: &DeValue<'_>,
    span: &Range<usize>,
    error: usize,
    issues: &mut Issues,
) {
    let keys = table.as_table().map_or(0, |t| t.len());
    let line = issues.line_of(error);
    let noun = if keys == 1 { "key" } else { "keys" };
    issues.error(
        span,
        path,
        format!(
            "the checks of its {keys} {noun} were skipped: the TOML syntax error at line \
             {line} may have changed how this table reads"
        ),
    );
}

/// Reads a single-table section such as `[xdp]`; on error reports it and uses what could
/// be read (defaults for the rest).
fn read_table<'i, T>(section: &str, value: Spanned<DeValue<'i>>, issues: &mut Issues) -> T
where
    T: Deserialize<'i> + Default,
{
    if !value.get_ref().is_table() {
        issues.error(
            &value.span(),
            section,
            format!("`{section}` must be a table: write it as [{section}]"),
        );
        return T::default();
    }
    match recover::read(section, value, issues) {
        Read::Whole(raw) | Read::Partial(raw) => raw,
        Read::Unreadable => T::default(),
    }
}

/// Reads a single-table section whose presence matters, such as `[cluster]`; `None` when
/// it is not a readable table (reported).
fn read_optional_table<'i, T>(
    section: &str,
    value: Spanned<DeValue<'i>>,
    issues: &mut Issues,
) -> Option<Entry<T>>
where
    T: Deserialize<'i>,
{
    let span = value.span();
    if !value.get_ref().is_table() {
        issues.error(
            &span,
            section,
            format!("`{section}` must be a table: write it as [{section}]"),
        );
        return None;
    }
    let (raw, partial) = match recover::read(section, value, issues) {
        Read::Whole(raw) => (raw, false),
        Read::Partial(raw) => (raw, true),
        Read::Unreadable => return None,
    };
    Some(Entry {
        path: section.to_owned(),
        span,
        raw,
        partial,
    })
}

/// Reads the entries of one array-of-tables section.
struct Reader<'a> {
    /// The section, e.g. `vservice`.
    section: &'a str,
    /// Entries that hold a syntax error, left out.
    taint: &'a Taint,
}

impl Reader<'_> {
    /// Reads an array-of-tables section such as `[[vservice]]`, entry by entry; the names
    /// of entries that cannot be read (or hold a syntax error) go to `unreadable`.
    fn entries<'i, T>(
        &self,
        value: Spanned<DeValue<'i>>,
        issues: &mut Issues,
        unreadable: &mut HashSet<String>,
    ) -> Vec<Entry<T>>
    where
        T: Deserialize<'i>,
    {
        let section = self.section;
        let span = value.span();
        let items = match value.into_inner() {
            DeValue::Array(items) => items,
            other => {
                issues.error(
                    &span,
                    section,
                    format!(
                        "`{section}` must be an array of tables: write each entry as [[{section}]]"
                    ),
                );
                // `[vservice]` for `[[vservice]]`: the table is still checked as the one
                // entry it was meant to be, so its own problems show in this run too.
                if !other.is_table() {
                    return Vec::new();
                }
                std::iter::once(Spanned::new(span, other)).collect()
            }
        };
        let mut entries = Vec::with_capacity(items.len());
        for (index, item) in items.into_iter().enumerate() {
            let path = format!("{section}[{index}]");
            let span = item.span();
            if let Some(error) = self.taint.error_in(&span) {
                skipped(&path, item.get_ref(), &span, error, issues);
                unreadable.extend(entry_name(item.get_ref()));
                continue;
            }
            let name = entry_name(item.get_ref());
            match recover::read(&path, item, issues) {
                Read::Whole(raw) => entries.push(Entry {
                    path,
                    span,
                    raw,
                    partial: false,
                }),
                Read::Partial(raw) => entries.push(Entry {
                    path,
                    span,
                    raw,
                    partial: true,
                }),
                Read::Unreadable => unreadable.extend(name),
            }
        }
        entries
    }
}

/// The `name` string of an entry, if it has one.
fn entry_name(value: &DeValue<'_>) -> Option<String> {
    let table = value.as_table()?;
    let (_, name) = table.iter().find(|(key, _)| key.get_ref() == "name")?;
    name.get_ref().as_str().map(str::to_owned)
}

/// serde names Rust types ("expected i64"); operators think in TOML types.
pub(super) fn plain_types(message: &str) -> String {
    let message = match message.find("expected struct ") {
        Some(at) => format!("{}expected a table", &message[..at]),
        None => message.to_owned(),
    };
    message
        .replace("expected i64", "expected an integer")
        .replace("expected f64", "expected a number (seconds)")
        .replace("expected a sequence", "expected an array")
}

/// The deepest key path under `value` whose key or value contains `span`.
pub(super) fn field_path(base: &str, value: &DeValue<'_>, span: &Range<usize>) -> String {
    find_path(base, value, span).unwrap_or_else(|| base.to_owned())
}

/// Like [`field_path`], `None` when nothing under `value` contains `span`. Children are
/// searched even when their own span does not contain it: the span of a nested array of
/// tables (`[[a.b]]`) covers only part of its entries.
fn find_path(base: &str, value: &DeValue<'_>, span: &Range<usize>) -> Option<String> {
    let contains = |outer: Range<usize>| outer.start <= span.start && span.end <= outer.end;
    match value {
        DeValue::Table(table) => {
            for (key, item) in table.iter() {
                let here = format!("{base}.{}", key.get_ref());
                if contains(key.span()) {
                    return Some(here);
                }
                if let Some(deeper) = find_path(&here, item.get_ref(), span) {
                    return Some(deeper);
                }
                if contains(item.span()) {
                    return Some(here);
                }
            }
        }
        DeValue::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                let here = format!("{base}[{index}]");
                if let Some(deeper) = find_path(&here, item.get_ref(), span) {
                    return Some(deeper);
                }
                if contains(item.span()) {
                    return Some(here);
                }
            }
        }
        _ => {}
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_errors(text: &str) -> Vec<String> {
        let mut issues = Issues::new("t.toml", text);
        let _ = read(text, &mut issues);
        match issues.finish() {
            Ok(_) => Vec::new(),
            Err(e) => e.errors.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn serde_errors_name_the_nested_field() {
        let text = "[[vservice]]\nname = \"v\"\nkind = \"tcp-l4\"\naddress = \"10.0.0.1\"\n\
                    port = 80\nbackends = [\"a\", 3]\n";
        let errors = read_errors(text);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("t.toml:6:18: vservice[0].backends[1]: invalid type"),
            "{errors:?}"
        );
    }

    #[test]
    fn one_bad_entry_does_not_hide_the_next() {
        let text = "[[health_check]]\nname = \"a\"\ntype = \"tcp\"\nbogus = 1\n\n\
                    [[health_check]]\nname = \"b\"\ntype = \"icmp\"\n";
        let errors = read_errors(text);
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].starts_with("t.toml:4:1: health_check[0].bogus: unknown field `bogus`"));
        assert_eq!(
            errors[1],
            "t.toml:6:1: health_check[1]: without a readable `type`, the check of its other key \
             was skipped"
        );
        assert!(errors[2].starts_with("t.toml:8:8: health_check[1].type: unknown variant `icmp`"));
    }

    #[test]
    fn unknown_section_and_wrong_shape_are_reported() {
        let text = "[vservice]\nname = \"v\"\nkind = \"tcp-l4\"\naddress = \"192.0.2.1\"\n\
                    colour = 1\n\n[extra]\nx = 1\n";
        let errors = read_errors(text);
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].contains("t.toml:1:1: vservice: `vservice` must be an array of tables"));
        // `[vservice]` for `[[vservice]]`: the table is still read as the entry it was meant
        // to be, so its own problems show in the same run.
        assert!(errors[1].contains("t.toml:5:1: vservice[0].colour: unknown field `colour`"));
        assert!(errors[2].contains("t.toml:7:2: extra: unknown section `extra`"));
    }

    #[test]
    fn messages_use_toml_types() {
        let text = "vservice = [1]\n[[health_check]]\nname = \"h\"\ntype = \"tcp\"\n\
                    period = \"1s\"\nexpect_status = 200\n";
        let errors = read_errors(text);
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert_eq!(
            errors[0],
            "t.toml:1:13: vservice[0]: invalid type: integer `1`, expected a table"
        );
        assert!(
            errors[1].ends_with(
                "health_check[0].period: invalid type: string \"1s\", expected a number (seconds)"
            ),
            "{errors:?}"
        );
        assert!(
            errors[2].ends_with("expect_status: invalid type: integer `200`, expected an array"),
            "{errors:?}"
        );
    }

    /// A table with very many unreadable values reports a bounded number of them, then
    /// says the rest was not checked: each repair reads the table again, so the cost of a
    /// hostile file must stay bounded.
    #[test]
    fn very_many_bad_values_are_bounded() {
        let items: Vec<String> = (0..150).map(|i| i.to_string()).collect();
        let text = format!(
            "[[vservice]]\nname = \"v\"\nkind = \"tcp-l4\"\naddress = \"192.0.2.1\"\n\
             port = 80\nbackends = [{}]\n",
            items.join(", ")
        );
        let errors = read_errors(&text);
        assert_eq!(errors.len(), 101, "{errors:?}");
        assert_eq!(
            errors[0],
            "t.toml:1:1: vservice[0]: more than 100 values of this table could not be read: \
             the rest of it was not checked"
        );
        assert!(errors[100].contains("vservice[0].backends[99]: invalid type"));
    }

    /// A syntax error leaves out only the table holding it: the other tables are still
    /// checked, so one run reports every problem of the file.
    #[test]
    fn syntax_errors_skip_only_their_table() {
        let text = "[proxy]\nworkers = = 2\n[[health_check]]\nname = \"h\"\ntype = \"icmp\"\n";
        let errors = read_errors(text);
        assert_eq!(errors.len(), 5, "{errors:?}");
        assert_eq!(
            errors[0],
            "t.toml:1:1: proxy: the checks of its 1 key were skipped: the TOML syntax error at \
             line 2 may have changed how this table reads"
        );
        assert!(
            errors[1].starts_with("t.toml:2:11: TOML syntax: "),
            "{errors:?}"
        );
        assert!(
            errors[2].starts_with("t.toml:2:13: TOML syntax: "),
            "{errors:?}"
        );
        assert!(errors[4].starts_with("t.toml:5:8: health_check[0].type: unknown variant"));
    }
}
