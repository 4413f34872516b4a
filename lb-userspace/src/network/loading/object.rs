//! Where the compiled XDP object is, for a binary run from the repository and for one
//! installed by the Debian package (`/usr/bin/lb` with the object in `/usr/lib/lb/lb-xdp`).

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// File name of the object, beside the binary or in the package's library directory.
const OBJECT_NAME: &str = "lb-xdp";

/// Where the Debian package installs the object (FHS: private, architecture-dependent files
/// of a program under /usr/lib/<program>).
pub const PACKAGED_OBJECT: &str = "/usr/lib/lb/lb-xdp";

/// The path `cargo xtask build` writes in this repository.
fn repo_object() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir
        .parent()
        .unwrap_or(crate_dir)
        .join("lb-ebpf/target/bpfel-unknown-none/release")
        .join(OBJECT_NAME)
}

/// The places looked at, in order, for a binary at `exe` when `LB_XDP_OBJECT` is `env`:
/// the variable alone when set; else beside the binary, in `<prefix>/lib/lb/` of the
/// binary's `<prefix>/bin/` (so `/usr/bin/lb` finds `/usr/lib/lb/lb-xdp`, and
/// `/usr/local/bin/lb` its own copy), the repository's build output, and last the
/// package's place (a copied binary on a machine with the package installed).
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
    object_candidates(exe.as_deref(), std::env::var_os("LB_XDP_OBJECT"))
}

/// Where the compiled XDP object is: the first candidate that exists (see
/// [`object_candidates`]), else the repository's build path, which `cargo xtask build`
/// fills.
pub fn object_path() -> PathBuf {
    let all = candidates();
    if let Some(found) = all.iter().find(|p| p.exists()) {
        return found.clone();
    }
    if std::env::var_os("LB_XDP_OBJECT").is_some_and(|p| !p.is_empty()) {
        return all.into_iter().next().unwrap_or_else(repo_object);
    }
    repo_object()
}

/// Reads the object file, with an error that lists every place looked at and how to get it.
pub fn read_object() -> Result<Vec<u8>> {
    let all = candidates();
    for path in &all {
        match fs::read(path) {
            Ok(bytes) => return Ok(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => bail!("cannot read the XDP object {}: {e}", path.display()),
        }
    }
    let looked: Vec<String> = all.iter().map(|p| p.display().to_string()).collect();
    bail!(
        "cannot find the XDP object (looked at {}): install the lb package, build it with \
         `cargo xtask build`, or set LB_XDP_OBJECT to its path",
        looked.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The packaged `/usr/bin/lb` finds `/usr/lib/lb/lb-xdp` before the
    /// repository's build path, and beside-the-binary still comes first.
    #[test]
    fn packaged_binary_looks_in_usr_lib_lb() {
        let all = object_candidates(Some(Path::new("/usr/bin/lb")), None);
        assert_eq!(all[0], PathBuf::from("/usr/bin/lb-xdp"));
        assert_eq!(all[1], PathBuf::from(PACKAGED_OBJECT));
        assert_eq!(all[2], repo_object());
        assert_eq!(all.len(), 3, "{all:?}");
    }

    /// A binary under another prefix looks in its own `lib/lb`, then the
    /// repository, then the package's place.
    #[test]
    fn other_prefix_and_repository_binary() {
        let local = object_candidates(Some(Path::new("/usr/local/bin/lb")), None);
        assert_eq!(
            local,
            vec![
                PathBuf::from("/usr/local/bin/lb-xdp"),
                PathBuf::from("/usr/local/lib/lb/lb-xdp"),
                repo_object(),
                PathBuf::from(PACKAGED_OBJECT),
            ]
        );
        let dev = object_candidates(Some(Path::new("/src/lb/target/debug/lb")), None);
        assert_eq!(
            dev,
            vec![
                PathBuf::from("/src/lb/target/debug/lb-xdp"),
                repo_object(),
                PathBuf::from(PACKAGED_OBJECT),
            ]
        );
    }

    /// LB_XDP_OBJECT, when set and not empty, is the only place looked at.
    #[test]
    fn the_variable_wins() {
        let all = object_candidates(
            Some(Path::new("/usr/bin/lb")),
            Some(OsString::from("/tmp/x.o")),
        );
        assert_eq!(all, vec![PathBuf::from("/tmp/x.o")]);
        let empty = object_candidates(Some(Path::new("/usr/bin/lb")), Some(OsString::new()));
        assert_eq!(empty[1], PathBuf::from(PACKAGED_OBJECT));
    }
}
