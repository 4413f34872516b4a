//! Writing configuration changes back to the file (S-MT8): flags are edited in place with
//! `toml_edit` so the operator's comments and layout survive, and the file is replaced
//! atomically so a crash or a failed write never leaves half a configuration behind.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item, Table, Value};

/// Why a change could not be written back.
#[derive(Debug, thiserror::Error)]
pub enum WriteBackError {
    /// The file on disk is not valid TOML.
    #[error("the configuration file is not valid TOML: {0}")]
    Parse(#[from] toml_edit::TomlError),
    /// The running configuration has the name but the file no longer does.
    #[error("no [[{table}]] named `{name}` in the configuration file (was it edited?)")]
    NotInFile {
        /// `backend_service` or `backend_group`.
        table: String,
        /// The name looked for.
        name: String,
    },
    /// Reading or writing the file failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Sets `key = on` in the `[[table]]` entry whose `name` is `name`, adding the key when it
/// is absent and keeping the comment that follows an existing value.
pub fn set_flag(
    text: &str,
    table: &str,
    name: &str,
    key: &str,
    on: bool,
) -> Result<String, WriteBackError> {
    set_value(text, table, name, key, Value::from(on))
}

/// Sets `key = value` in the `[[table]]` entry whose `name` is `name`, like [`set_flag`]
/// (a weight, say).
pub fn set_value(
    text: &str,
    table: &str,
    name: &str,
    key: &str,
    value: Value,
) -> Result<String, WriteBackError> {
    let mut doc: DocumentMut = text.parse()?;
    let not_found = || WriteBackError::NotInFile {
        table: table.into(),
        name: name.into(),
    };
    let item = doc.get_mut(table).ok_or_else(not_found)?;
    if let Some(tables) = item.as_array_of_tables_mut() {
        let entry = tables
            .iter_mut()
            .find(|t| t.get("name").and_then(Item::as_str) == Some(name))
            .ok_or_else(not_found)?;
        set_in_table(entry, key, value);
    } else if let Some(array) = item.as_array_mut() {
        let entry = array
            .iter_mut()
            .filter_map(Value::as_inline_table_mut)
            .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
            .ok_or_else(not_found)?;
        match entry.get_mut(key) {
            Some(v) => replace_keeping_decor(v, value),
            None => {
                entry.insert(key, value);
            }
        }
    } else {
        return Err(not_found());
    }
    Ok(doc.to_string())
}

fn set_in_table(table: &mut Table, key: &str, value: Value) {
    match table.get_mut(key).and_then(Item::as_value_mut) {
        Some(v) => replace_keeping_decor(v, value),
        None => {
            table.insert(key, toml_edit::value(value));
        }
    }
}

fn replace_keeping_decor(v: &mut Value, value: Value) {
    let decor = v.decor().clone();
    *v = value;
    *v.decor_mut() = decor;
}

/// Tables that belong to one node and never travel between cluster nodes (in etcd or
/// pushed to a peer).
pub const NODE_LOCAL: [&str; 4] = ["xdp", "api", "cluster", "bgp"];

/// The shared configuration: `text` without its [`NODE_LOCAL`] tables, as etcd holds it.
pub fn shared_part(text: &str) -> Result<String, WriteBackError> {
    let mut doc: DocumentMut = text.parse()?;
    for key in NODE_LOCAL {
        doc.remove(key);
    }
    Ok(doc.to_string())
}

/// A peer's shared configuration with this node's own [`NODE_LOCAL`] tables kept (S-CL).
pub fn merge_shared(own: &str, incoming: &str) -> Result<String, WriteBackError> {
    let own: DocumentMut = own.parse()?;
    let mut merged: DocumentMut = incoming.parse()?;
    for key in NODE_LOCAL {
        merged.remove(key);
        if let Some(item) = own.get(key) {
            merged.insert(key, item.clone());
        }
    }
    Ok(merged.to_string())
}

/// The file a configuration path really names (a symlink is followed so that it stays one).
pub fn target_of(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The temporary file written beside `path` before it replaces `path`.
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.lb-tmp"))
}

/// Replaces `path` with `text` atomically: the text goes to a temporary file in the same
/// directory, is flushed to disk, then renamed over `path` (and the directory is flushed).
/// On any failure the old file is untouched.
pub fn atomic_write(path: &Path, text: &str) -> Result<(), WriteBackError> {
    let path = target_of(path);
    let tmp = temp_path(&path);
    let io = |action, p: &Path| {
        let p = p.to_path_buf();
        move |source| WriteBackError::Io {
            action,
            path: p,
            source,
        }
    };
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(io("creating", &tmp))?;
        f.write_all(text.as_bytes()).map_err(io("writing", &tmp))?;
        if let Ok(meta) = std::fs::metadata(&path) {
            let _ = f.set_permissions(meta.permissions());
        }
        f.sync_all().map_err(io("flushing", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(io("renaming the new file over", &path))
    })();
    if written.is_err() && tmp.is_file() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // The rename is durable once the directory is.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Reads the whole file.
pub fn read(path: &Path) -> Result<String, WriteBackError> {
    std::fs::read_to_string(path).map_err(|source| WriteBackError::Io {
        action: "reading",
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# top\n[[backend_service]]\nname = \"a\" # first\naddress = \"127.0.0.1\"\nport = 1\nmaintenance = false # keep me\n\n[[backend_service]]\nname = \"b\"\naddress = \"127.0.0.1\"\nport = 2\n";

    /// S-MT8: the flag is written in the right table, comments stay.
    #[test]
    fn s_mt8_sets_existing_and_missing_keys() {
        let out = set_flag(TEXT, "backend_service", "a", "maintenance", true).unwrap();
        assert!(out.contains("maintenance = true # keep me"), "{out}");
        assert!(out.contains("# top") && out.contains("# first"));
        let out = set_flag(&out, "backend_service", "b", "backup", true).unwrap();
        let doc: DocumentMut = out.parse().unwrap();
        let b = &doc["backend_service"]
            .as_array_of_tables()
            .unwrap()
            .get(1)
            .unwrap()
            .clone();
        assert_eq!(b.get("backup").and_then(Item::as_bool), Some(true));
        assert!(matches!(
            set_flag(TEXT, "backend_service", "zz", "backup", true),
            Err(WriteBackError::NotInFile { .. })
        ));
    }

    #[test]
    fn inline_array_entries_are_edited() {
        let text = "backend_group = [{ name = \"g\", members = [\"a\"] }]\n";
        let out = set_flag(text, "backend_group", "g", "maintenance", true).unwrap();
        assert!(out.contains("maintenance = true"), "{out}");
    }

    /// S-CL: node-local tables stay, everything else comes from the peer.
    #[test]
    fn s_cl_merge_keeps_node_local_tables() {
        let own = "[api]\nlisten = \"127.0.0.1:1\"\n\n[[backend_service]]\nname = \"old\"\naddress = \"127.0.0.1\"\nport = 1\n\n[cluster]\n[[cluster.peer]]\nname = \"p\"\nurl = \"http://127.0.0.1:2\"\n";
        let incoming = "[api]\nlisten = \"127.0.0.1:2\"\n\n[[backend_service]]\nname = \"new\"\naddress = \"127.0.0.1\"\nport = 1\n";
        let out = merge_shared(own, incoming).unwrap();
        let doc: DocumentMut = out.parse().unwrap();
        assert_eq!(doc["api"]["listen"].as_str(), Some("127.0.0.1:1"));
        assert!(out.contains("\"new\"") && !out.contains("\"old\""));
        assert_eq!(
            doc["cluster"]["peer"].as_array_of_tables().map(|a| a.len()),
            Some(1)
        );
    }

    /// S-CL, S-AN: a node's `[bgp]` (its routing table, whether it announces) is its own.
    #[test]
    fn s_cl_merge_keeps_this_nodes_bgp_table() {
        let own = "[bgp]\nenabled = true\ntable = 100\n";
        let incoming = "[bgp]\nenabled = false\ntable = 7\n";
        let out = merge_shared(own, incoming).unwrap();
        let doc: DocumentMut = out.parse().unwrap();
        assert_eq!(doc["bgp"]["table"].as_integer(), Some(100), "{out}");
        assert_eq!(doc["bgp"]["enabled"].as_bool(), Some(true), "{out}");
        let out = merge_shared("", incoming).unwrap();
        assert!(
            !out.contains("[bgp]"),
            "a peer's [bgp] does not travel: {out}"
        );
    }

    /// S-CL3: the text kept in etcd has no node-local table, and merging it back into a
    /// node's file gives that node's own tables back.
    #[test]
    fn s_cl3_shared_part_drops_node_local_tables() {
        let own = "[xdp]\ninterfaces = [\"eth0\"]\n\n[api]\nlisten = \"127.0.0.1:1\"\n\n[bgp]\nasn = 1\n\n# the pool\n[[backend_service]]\nname = \"a\"\naddress = \"127.0.0.1\"\nport = 1\n\n[cluster]\nstore = \"etcd\"\n";
        let shared = shared_part(own).unwrap();
        for table in ["[xdp]", "[api]", "[bgp]", "[cluster]"] {
            assert!(!shared.contains(table), "{table} in {shared}");
        }
        assert!(shared.contains("# the pool") && shared.contains("name = \"a\""));
        let back = merge_shared(own, &shared).unwrap();
        assert_eq!(shared_part(&back).unwrap(), shared);
        assert!(back.contains("[bgp]") && back.contains("store = \"etcd\""));
    }
}
