//! The library's import graph, read from its sources: every `crate::` path names a top-level
//! module, and those imports run one way, from the layer that serves traffic and operators
//! down to the configuration. A new folder has to be given its place here, so that the next
//! feature cannot quietly import the layer above it.
//!
//! No rule of docs/behaviour.md covers the code's layering; this test keeps it readable.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of `lb-userspace/src` and its layer: a module may import only from
/// layers below its own (siblings in one layer do not import each other).
const LAYERS: &[(&str, u32)] = &[
    ("config", 0),
    ("stats", 0),
    ("ebpf_log", 0),
    ("objects", 0),
    ("bpffs", 0),
    ("health", 1),
    ("selection", 2),
    ("network", 3),
    ("proxy", 3),
    ("gslb", 3),
    ("routing", 3),
    ("agent", 3),
    ("daemon", 4),
    ("cluster", 5),
    ("api", 6),
    ("run", 7),
    ("command_line", 7),
];

/// (importing module, imported module) -> the files that make the import.
type Edges = BTreeMap<(String, String), BTreeSet<String>>;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules a source text names through `crate::` (grouped imports included).
fn imported(text: &str) -> BTreeSet<String> {
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        let preceded_by_ident = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !preceded_by_ident {
            if let Some(group) = after.strip_prefix('{') {
                // Names at depth 1 of `crate::{a::x, b, c::{..}}`.
                let mut depth = 1;
                let mut start_of_item = true;
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        ',' if depth == 1 => start_of_item = true,
                        c if c.is_whitespace() => {}
                        _ if start_of_item && depth == 1 => {
                            out.insert(ident(&group[i..]));
                            start_of_item = false;
                        }
                        _ => {}
                    }
                }
            } else {
                out.insert(ident(after));
            }
        }
        rest = after;
    }
    out.retain(|m| !m.is_empty() && m != "self");
    out
}

fn edges() -> Edges {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut edges = Edges::new();
    for file in files {
        let rel = file.strip_prefix(&src).expect("under src").to_path_buf();
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs").to_string())
            .expect("a file name");
        if top == "lib" || top == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a readable source");
        for module in imported(&text) {
            if module != top {
                edges
                    .entry((top.clone(), module))
                    .or_default()
                    .insert(rel.display().to_string());
            }
        }
    }
    edges
}

fn layer(module: &str) -> Option<u32> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

#[test]
fn every_top_level_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&src).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a UTF-8 name")
            .trim_end_matches(".rs")
            .to_string();
        if name != "lib" && name != "main" && layer(&name).is_none() {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "give {missing:?} a layer in LAYERS (tests/layering.rs)"
    );
}

#[test]
fn imports_only_run_down_the_layers() {
    let wrong: Vec<String> = edges()
        .into_iter()
        .filter(|((from, to), _)| match (layer(from), layer(to)) {
            (Some(f), Some(t)) => f <= t,
            _ => false,
        })
        .map(|((from, to), files)| format!("{from} -> {to} in {files:?}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "imports that run up (or across) the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_health_engine_imports_nothing_that_carries_traffic() {
    let above: Vec<String> = edges()
        .into_keys()
        .filter(|(from, _)| from == "health")
        .map(|(_, to)| to)
        // Besides the configuration, only the shared histograms (check durations).
        .filter(|to| to != "config" && to != "stats")
        .collect();
    assert!(above.is_empty(), "health/ imports {above:?}");
}

/// Inside `config/`: what serde reads (`raw/`) and the validated model (`model/`) know
/// nothing of each other or of the checks (`check/`) that turn one into the other.
#[test]
fn config_reads_then_checks_then_models() {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/config");
    let rules: &[(&str, &[&str])] = &[
        ("raw", &["config::check", "config::model"]),
        ("model", &["config::check", "config::raw"]),
    ];
    let mut wrong = Vec::new();
    for (folder, forbidden) in rules {
        let mut files = Vec::new();
        sources(&config.join(folder), &mut files);
        assert!(!files.is_empty(), "config/{folder}/ has no sources");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("a readable source");
            for f in forbidden.iter().filter(|f| text.contains(**f)) {
                wrong.push(format!("{} names {f}", file.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn grouped_and_plain_imports_are_both_read() {
    let text = "use crate::{config::Config, health::{A, B}};\n\
                // use crate::api::x;\n\
                fn f() { crate::selection::Health::Ok; my_crate::proxy::x(); }";
    let got: Vec<String> = imported(text).into_iter().collect();
    assert_eq!(got, ["config", "health", "selection"]);
}
