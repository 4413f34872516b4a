//! Where the agent's compiled XDP object is: found as `lb` finds its balancer's object
//! (`network::object`), beside the binary, in `<prefix>/lib/lb/`, in the repository's build
//! output, or where the Debian package installs it, unless `LB_DECAP_OBJECT` names it.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// File name of the object, beside the binary or in the package's library directory.
pub const OBJECT_NAME: &str = "lb-decap";
/// Where the Debian package installs the object.
pub const PACKAGED_OBJECT: &str = "/usr/lib/lb/lb-decap";
/// The variable that names the object, for tests and for a copy kept elsewhere.
pub const OBJECT_ENV: &str = "LB_DECAP_OBJECT";

/// The path `cargo xtask build` writes in this repository.
fn repo_object() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir
        .parent()
        .unwrap_or(crate_dir)
        .join("lb-ebpf/target/bpfel-unknown-none/release")
        .join(OBJECT_NAME)
}

/// The places looked at, in order, for a binary at `exe` when `LB_DECAP_OBJECT` is `env`:
/// the variable alone when set; else beside the binary, in `<prefix>/lib/lb/` of a
/// binary in `<prefix>/bin/`, the repository's build output, and last the package's place.
pub fn object_candidates(exe: Option<&Path>, env: Option<OsString>) -> Vec<PathBuf> {
    if let Some(p) = env.filter(|p| !p.is_empty()) {
        return vec![PathBuf::from(p)];
    }
    let mut out = Vec::new();
    if let Some(dir) = exe.and_then(Path::parent) {
        out.push(dir.join(OBJECT_NAME));
        if dir.file_name().is_some_and(|n| n == "bin")
            && let Some(prefix) = dir.parent()
        {
            out.push(prefix.join("lib/lb").join(OBJECT_NAME));
        }
    }
    out.push(repo_object());
    let packaged = PathBuf::from(PACKAGED_OBJECT);
    if !out.contains(&packaged) {
        out.push(packaged);
    }
    out
}

/// The candidates for the running binary and this process's environment.
fn candidates() -> Vec<PathBuf> {
    let exe = std::env::current_exe().ok();
    object_candidates(exe.as_deref(), std::env::var_os(OBJECT_ENV))
}

/// The first candidate that exists, else the first one looked at (for messages).
pub fn object_path() -> PathBuf {
    let all = candidates();
    all.iter()
        .find(|p| p.exists())
        .or(all.first())
        .cloned()
        .unwrap_or_else(repo_object)
}

/// Reads the object, with an error that lists every place looked at and how to get it.
pub fn read_object() -> Result<Vec<u8>> {
    let all = candidates();
    for path in &all {
        match fs::read(path) {
            Ok(bytes) => return Ok(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => bail!("cannot read the agent's XDP object {}: {e}", path.display()),
        }
    }
    let looked: Vec<String> = all.iter().map(|p| p.display().to_string()).collect();
    bail!(
        "cannot find the agent's XDP object {OBJECT_NAME} (looked at {}): install the lb \
         package, build it with `cargo xtask build`, or set {OBJECT_ENV} to its path",
        looked.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The packaged `/usr/bin/lb` finds `/usr/lib/lb/lb-decap`; the variable wins.
    #[test]
    fn packaged_binary_and_variable() {
        let all = object_candidates(Some(Path::new("/usr/bin/lb")), None);
        assert_eq!(all[0], PathBuf::from("/usr/bin/lb-decap"));
        assert_eq!(all[1], PathBuf::from(PACKAGED_OBJECT));
        assert_eq!(all[2], repo_object());
        let env = object_candidates(Some(Path::new("/usr/bin/lb")), Some("/tmp/d".into()));
        assert_eq!(env, vec![PathBuf::from("/tmp/d")]);
    }
}
