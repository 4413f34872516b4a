//! The configuration reference (`docs/configuration.md`) and the annotated example
//! (`conf/example.toml`) against the schema the code reads, so that neither can drift from it.
//!
//! # Where the key set comes from
//!
//! Not from a list kept by hand: the configuration reader is asked. Every table of the file
//! is read by serde with `deny_unknown_fields`, and `lb::config::parse` reports an unknown
//! key as "unknown field `x`, expected one of `a`, `b`, ...". So [`schema`]:
//! - writes a top-level key `zz_probe`, which the reader answers with the list of sections;
//! - writes each section as `[name]` with a key `zz_probe`: the answer lists its keys, and
//!   "must be an array of tables" tells an array of tables (`[[name]]`) from a table;
//! - writes each key of a table once as an inline table `{ zz_probe = 1 }` and once as an
//!   array of them `[{ zz_probe = 1 }]`: when the reader answers with an unknown field
//!   `zz_probe` under that key, the key is a sub-table (or an array of tables) and the answer
//!   lists its keys. Every other key is a value.
//!
//! A key added to a `Raw*` struct is thereby in the schema at once, with no list to update.
//!
//! # Convention of docs/configuration.md
//!
//! - A heading (`##` or `###`) whose text holds a table header in backticks, such as
//!   ``## `[xdp]` `` or ``### `[[vservice.conditional_set]]` ``, opens the section of that
//!   table. The header is written as in TOML: `[[...]]` for an array of tables. Any other
//!   heading closes the section. Fenced code blocks are skipped.
//! - In a section, each Markdown table row whose first cell is one key in backticks
//!   (`` | `port` | integer | ... ``) documents that key of the table. Other rows (the header
//!   row, the separator) are skipped. A sub-table is a key of its parent too (`persistence`
//!   is a row of `[[vservice]]`) and has its own section.
//! - Every table of the schema has exactly one section, and the key rows of a section are
//!   exactly the keys of its table: a key missing, a key that does not exist, a key under
//!   the wrong table or a key row outside any section fails.
//!
//! # Convention of conf/example.toml
//!
//! - The file, as written, loads through `lb::config::load_with_warnings` with no error and
//!   no warning.
//! - Every key of the schema is shown under its table: as an active `key = value` line, or
//!   in a commented example line `# key = value` (any number of leading `#`), under the
//!   nearest table header above it, active or commented (`# [cluster]`). A sub-table counts
//!   as shown by its header. Every such line and header must name a key or table of the
//!   schema, so a typo in a commented example fails too.
//! - A key shown only in comments is not validated, so it must be one of
//!   [`COMMENTED_ONLY`], which says why it cannot be active in the shipped example.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use lb::config::{ConfigIssue, parse};

/// The unknown key written to make the reader list the keys it knows.
const PROBE: &str = "zz_probe";

/// The reference, as shipped in the repository.
const REFERENCE: &str = include_str!("../../docs/configuration.md");

/// The annotated example.
const EXAMPLE: &str = include_str!("../conf/example.toml");

/// Keys (or whole tables, by path: `cluster` stands for every key under `[cluster]`) that the
/// example shows only in comments, with the reason they cannot be active in it.
const COMMENTED_ONLY: &[(&str, &str)] = &[
    (
        "api.token",
        "the example keeps the API on loopback without a token, so it runs as shipped; a \
         token written in a file everyone can read would be a published secret",
    ),
    (
        "api.cert",
        "the certificate and key files are read when the file is loaded, and the example \
         ships no key pair",
    ),
    (
        "api.key",
        "the key of api.cert, which the example cannot show active (no key pair shipped)",
    ),
    (
        "api.client_ca",
        "needs api.cert and api.key, and the CA file is read when the file is loaded",
    ),
    (
        "api.socket",
        "the example keeps [api] at its defaults (a loopback listener only); a socket path \
         is a choice of each installation, and lb run would make the file",
    ),
    (
        "api.socket_mode",
        "only read with api.socket, which the example does not set",
    ),
    (
        "proxy.workers",
        "its default (one worker per CPU) suits almost every machine; a fixed count belongs to \
         one machine, not to an example",
    ),
    (
        "cluster",
        "[cluster] turns clustering on, which needs peers or an etcd cluster that exist; and \
         its two stores cannot share one file: store = \"peers\" needs [[cluster.peer]] and \
         rejects [cluster.etcd], store = \"etcd\" needs [cluster.etcd] and rejects peers (S-CL3)",
    ),
    (
        "vservice.tls",
        "the certificate and key files are read when the file is loaded, and the example \
         ships no key pair",
    ),
    (
        "vservice.error_page",
        "the page is read when the file is loaded, and the example ships no page",
    ),
];

/// One table of the schema.
#[derive(Debug)]
struct Table {
    /// True for an array of tables (`[[vservice]]`).
    array: bool,
    /// Its keys, sub-tables included.
    keys: BTreeSet<String>,
}

/// Every table of the schema, by dotted path (`vservice.conditional_set.header`).
type Schema = BTreeMap<String, Table>;

/// The problems `lb::config::parse` reports for `text` (none when it is accepted).
fn issues(text: &str) -> Vec<ConfigIssue> {
    match parse(text, "probe.toml") {
        Ok(_) => Vec::new(),
        Err(error) => error.errors,
    }
}

/// The names in backticks after the first one in `message`: what serde lists after
/// "unknown field `x`, expected ..." ("one of `a`, `b`", "`a` or `b`", "`a`").
fn listed_names(message: &str) -> BTreeSet<String> {
    message
        .split('`')
        .skip(1)
        .step_by(2)
        .skip(1)
        .map(str::to_owned)
        .collect()
}

/// A field path without its array indices: `vservice[0].tls.x` -> `vservice.tls.x`.
fn without_indices(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut depth = 0;
    for c in field.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The keys the reader lists for the table at `path` when `text` writes `PROBE` in it, or
/// None when it reports no unknown `PROBE` there (the value is not a table).
fn probe_keys(text: &str, path: &str) -> Option<BTreeSet<String>> {
    let unknown = format!("unknown field `{PROBE}`");
    let field = format!("{path}.{PROBE}");
    issues(text)
        .iter()
        .find(|i| i.message.starts_with(&unknown) && without_indices(&i.field) == field)
        .map(|i| listed_names(&i.message))
}

/// The TOML headers that open the table at `path` (each enclosing table first).
fn headers(schema: &Schema, path: &str) -> String {
    let mut text = String::new();
    let mut prefix = String::new();
    for part in path.split('.') {
        if !prefix.is_empty() {
            prefix.push('.');
        }
        prefix.push_str(part);
        let array = schema.get(&prefix).is_some_and(|t| t.array);
        let header = if array {
            format!("[[{prefix}]]\n")
        } else {
            format!("[{prefix}]\n")
        };
        text.push_str(&header);
    }
    text
}

/// The schema, asked from the reader (see the module comment).
fn schema() -> Schema {
    let top = issues(&format!("{PROBE} = 1\n"));
    let sections = top
        .iter()
        .find(|i| i.message.starts_with(&format!("unknown section `{PROBE}`")))
        .map(|i| listed_names(&i.message))
        .unwrap_or_else(|| panic!("the reader did not list its sections: {top:#?}"));
    assert!(sections.len() > 5, "too few sections: {sections:?}");
    let mut schema = Schema::new();
    let mut pending: Vec<String> = Vec::new();
    for section in sections {
        let text = format!("[{section}]\n{PROBE} = 1\n");
        let found = issues(&text);
        let array = found
            .iter()
            .any(|i| i.message.contains("must be an array of tables"));
        let keys = probe_keys(&text, &section)
            .unwrap_or_else(|| panic!("section `{section}` did not list its keys: {found:#?}"));
        assert!(!keys.is_empty(), "section `{section}` has no keys");
        schema.insert(section.clone(), Table { array, keys });
        pending.push(section);
    }
    while let Some(parent) = pending.pop() {
        let keys = schema[&parent].keys.clone();
        for key in keys {
            let path = format!("{parent}.{key}");
            let opened = headers(&schema, &parent);
            let as_table = format!("{opened}{key} = {{ {PROBE} = 1 }}\n");
            let as_array = format!("{opened}{key} = [{{ {PROBE} = 1 }}]\n");
            let table = match probe_keys(&as_table, &path) {
                Some(keys) => Some(Table { array: false, keys }),
                None => probe_keys(&as_array, &path).map(|keys| Table { array: true, keys }),
            };
            if let Some(table) = table {
                schema.insert(path.clone(), table);
                pending.push(path);
            }
        }
    }
    schema
}

/// Every key of the schema as (table path, key).
fn all_keys(schema: &Schema) -> BTreeSet<(String, String)> {
    schema
        .iter()
        .flat_map(|(path, table)| table.keys.iter().map(|k| (path.clone(), k.clone())))
        .collect()
}

/// A table header alone on a line (`[a.b]` or `[[a.b]]`, a comment after it allowed):
/// (path, array).
fn table_header(line: &str) -> Option<(String, bool)> {
    let line = match line.find(" #") {
        Some(at) => &line[..at],
        None => line,
    }
    .trim();
    let (inner, array) = match line.strip_prefix("[[") {
        Some(rest) => (rest.strip_suffix("]]")?, true),
        None => (line.strip_prefix('[')?.strip_suffix(']')?, false),
    };
    let plain = !inner.is_empty()
        && inner
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.');
    plain.then(|| (inner.to_owned(), array))
}

/// What `docs/configuration.md` documents, with the problems of its form.
struct Reference {
    /// Table path -> (array as written, keys in row order, line of the heading).
    sections: BTreeMap<String, (bool, Vec<String>, usize)>,
    /// Problems of form: a section twice, a key row outside a section.
    problems: Vec<String>,
}

/// Reads the reference by the convention in the module comment.
fn reference(text: &str) -> Reference {
    let mut sections: BTreeMap<String, (bool, Vec<String>, usize)> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut current: Option<String> = None;
    let mut fenced = false;
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if line.starts_with('#') {
            current = None;
            let header = line.split('`').skip(1).step_by(2).find_map(table_header);
            if let Some((path, array)) = header {
                if let Some((_, _, first)) = sections.get(&path) {
                    problems.push(format!(
                        "line {number}: a second section for `{path}` (the first is at line {first})"
                    ));
                } else {
                    sections.insert(path.clone(), (array, Vec::new(), number));
                }
                current = Some(path);
            }
            continue;
        }
        let Some(row) = line.trim().strip_prefix('|') else {
            continue;
        };
        let first = row.split('|').next().unwrap_or_default().trim();
        let Some(key) = first
            .strip_prefix('`')
            .and_then(|k| k.strip_suffix('`'))
            .filter(|k| !k.is_empty() && !k.contains('`'))
        else {
            continue;
        };
        match &current {
            Some(path) => {
                if let Some(section) = sections.get_mut(path) {
                    section.1.push(key.to_owned());
                }
            }
            None => problems.push(format!(
                "line {number}: key row `{key}` outside any table section"
            )),
        }
    }
    Reference { sections, problems }
}

/// The probes find the tables and keys of the reader: without this, a probe broken by a
/// change of message would find an empty schema and the other tests would pass vacuously.
#[test]
fn the_schema_is_found_in_the_reader() {
    let schema = schema();
    // A few tables and keys any reader of this file knows, so that a broken probe (one
    // that finds nothing) cannot make the other tests pass vacuously.
    for (path, array, key) in [
        ("xdp", false, "conn_table_size"),
        ("health_check", true, "type"),
        ("vservice", true, "address6"),
        ("vservice.persistence", false, "cookie_name"),
        ("vservice.conditional_set", true, "path_prefix"),
        ("vservice.conditional_set.header", false, "regex"),
        ("cluster.peer", true, "url"),
        ("dns_vservice.record.site", true, "standby"),
    ] {
        let table = schema
            .get(path)
            .unwrap_or_else(|| panic!("no table `{path}` in {schema:#?}"));
        assert_eq!(table.array, array, "`{path}`");
        assert!(table.keys.contains(key), "`{path}` has no `{key}`");
    }
}

/// An operator reads the reference, not the structs: a key it lacks is a key nobody knows
/// how to use, and a key it names that does not exist would be an error in their file.
#[test]
fn the_reference_documents_every_key_and_no_other() {
    let schema = schema();
    let found = reference(REFERENCE);
    let mut problems = found.problems;
    for (path, table) in &schema {
        let written = if table.array {
            format!("[[{path}]]")
        } else {
            format!("[{path}]")
        };
        let Some((array, keys, line)) = found.sections.get(path) else {
            problems.push(format!(
                "no section for `{written}` (keys: {:?})",
                table.keys
            ));
            continue;
        };
        if *array != table.array {
            problems.push(format!(
                "line {line}: the section must be headed `{written}`"
            ));
        }
        let documented: BTreeSet<String> = keys.iter().cloned().collect();
        if documented.len() != keys.len() {
            problems.push(format!(
                "line {line}: `{written}` lists a key twice: {keys:?}"
            ));
        }
        for key in table.keys.difference(&documented) {
            problems.push(format!("`{written}`: key `{key}` is not documented"));
        }
        for key in documented.difference(&table.keys) {
            problems.push(format!(
                "`{written}` documents `{key}`, which is not a key of that table"
            ));
        }
    }
    for (path, (_, _, line)) in &found.sections {
        if !schema.contains_key(path) {
            problems.push(format!(
                "line {line}: `{path}` is not a table of the schema"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/configuration.md does not match the schema:\n{}",
        problems.join("\n")
    );
}

/// The reference says how to check a file and that unknown keys are errors, the two facts an
/// operator needs before editing one.
#[test]
fn the_reference_names_the_checker_and_says_unknown_fields_are_errors() {
    let first = REFERENCE.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("# "),
        "the reference starts with its title"
    );
    assert!(REFERENCE.contains("lb check-config"));
    assert!(REFERENCE.contains("unknown"));
}

/// The example is copied as a starting point: it must load as shipped, through the same
/// public API as `lb check-config`.
#[test]
fn the_example_loads_without_errors_or_warnings() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/example.toml");
    let (config, warnings) = match lb::config::load_with_warnings(&path) {
        Ok(loaded) => loaded,
        Err(error) => panic!("conf/example.toml is not valid:\n{error}"),
    };
    assert!(warnings.is_empty(), "{warnings:#?}");
    // The dual-stack forms the example is there to show: a vService with an IPv6 VIP and
    // its backends with an IPv6 address.
    assert!(config.vservices.iter().any(|v| v.address6.is_some()));
    assert!(config.backend_services.iter().any(|s| s.address6.is_some()));
}

/// The keys `text` shows, active or in comments: (table path, key) -> shown active.
/// Problems: headers and keys the schema does not have, a header with the wrong brackets.
fn example_keys(text: &str, schema: &Schema) -> (BTreeMap<(String, String), bool>, Vec<String>) {
    let mut shown: BTreeMap<(String, String), bool> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut table: Option<String> = None;
    let mut show = |path: &str, key: &str, active: bool| {
        let seen = shown.entry((path.to_owned(), key.to_owned())).or_default();
        *seen |= active;
    };
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let active = !line.trim_start().starts_with('#');
        let code = line.trim_start_matches(|c: char| c == '#' || c.is_whitespace());
        if let Some((path, array)) = table_header(code) {
            match schema.get(&path) {
                None => problems.push(format!("line {number}: no table `{path}` in the schema")),
                Some(t) if t.array != array => problems.push(format!(
                    "line {number}: `{path}` is {} array of tables",
                    if t.array { "an" } else { "not an" }
                )),
                Some(_) => {}
            }
            if let Some((parent, key)) = path.rsplit_once('.') {
                show(parent, key, active);
            }
            table = Some(path);
            continue;
        }
        let Some((key, value)) = code.split_once('=') else {
            continue;
        };
        let key = key.trim();
        let is_key = !key.is_empty()
            && !value.trim().is_empty()
            && !value.starts_with('=')
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !is_key {
            continue;
        }
        let Some(path) = &table else {
            problems.push(format!("line {number}: `{key}` is outside any table"));
            continue;
        };
        if !schema.get(path).is_some_and(|t| t.keys.contains(key)) {
            problems.push(format!("line {number}: `{key}` is not a key of `{path}`"));
        }
        show(path, key, active);
    }
    (shown, problems)
}

/// The reason `path.key` may be shown only in comments, if it may.
fn excused(path: &str, key: &str) -> Option<&'static str> {
    let full = format!("{path}.{key}");
    COMMENTED_ONLY
        .iter()
        .find(|(entry, _)| full == *entry || full.starts_with(&format!("{entry}.")))
        .map(|(_, why)| *why)
}

/// The example is documented as showing every key: a key it lacks, or one it shows only in
/// an unchecked comment without a reason, breaks that promise.
#[test]
fn the_example_shows_every_key() {
    let schema = schema();
    let (shown, mut problems) = example_keys(EXAMPLE, &schema);
    for (path, key) in all_keys(&schema) {
        let full = format!("{path}.{key}");
        match (
            shown.get(&(path.clone(), key.clone())),
            excused(&path, &key),
        ) {
            (None, _) => problems.push(format!("`{full}` is not shown")),
            (Some(false), None) => problems.push(format!(
                "`{full}` is shown only in a comment, so nothing checks it: make it active, or \
                 say in COMMENTED_ONLY why it cannot be"
            )),
            (Some(true), Some(_)) => problems.push(format!(
                "`{full}` is active although COMMENTED_ONLY says it cannot be: update the list"
            )),
            (Some(_), _) => {}
        }
    }
    for (entry, _) in COMMENTED_ONLY {
        let known = schema.contains_key(*entry)
            || all_keys(&schema)
                .iter()
                .any(|(path, key)| format!("{path}.{key}") == *entry);
        if !known {
            problems.push(format!(
                "COMMENTED_ONLY names `{entry}`, which is not in the schema"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "conf/example.toml does not show the schema:\n{}",
        problems.join("\n")
    );
}

/// The example scanner itself: active and commented keys under active and commented
/// headers, prose with `=` ignored, and a misspelt key reported.
#[test]
fn the_example_scanner_reads_comments_and_tables() {
    let schema = schema();
    let text = "[api]\nlisten = \"127.0.0.1:1\" # a comment\n# token = \"x\"\n\
                # [cluster]\n# # manual_sync = false\n# [[cluster.peer]]\n# name = \"b\"\n\
                # prose with words = but not a key line\n[[vservice]]\nnme = \"v\"\n";
    let (shown, problems) = example_keys(text, &schema);
    let get = |p: &str, k: &str| shown.get(&(p.to_owned(), k.to_owned())).copied();
    assert_eq!(get("api", "listen"), Some(true));
    assert_eq!(get("api", "token"), Some(false));
    assert_eq!(get("cluster", "manual_sync"), Some(false));
    assert_eq!(get("cluster", "peer"), Some(false));
    assert_eq!(get("cluster.peer", "name"), Some(false));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("`nme` is not a key of `vservice`"));
}
