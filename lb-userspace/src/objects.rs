//! Where a compiled eBPF object of the package is: the balancer's `lb-xdp` and the backend
//! agent's `lb-decap` are found the same way. Beside the binary; in `<prefix>/lib/lb/` of
//! a binary in `<prefix>/bin/` (so `/usr/bin/lb` finds `/usr/lib/lb/`, and
//! `/usr/local/bin/lb` its own copy); the repository's build output; and last the Debian
//! package's place (a copied binary on a machine with the package installed). A variable
//! naming the object wins over all of them. Like `stats`, it imports nothing of the
//! library.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// One object file of the package and how it is looked for.
pub struct ObjectFile {
    /// Its file name, beside the binary or in the package's library directory.
    pub name: &'static str,
    /// The variable that names it, for tests and for a copy kept elsewhere.
    pub env: &'static str,
    /// What it is, for messages ("XDP object", "agent's XDP object").
    pub what: &'static str,
}

/// The package's library directory (FHS: private, architecture-dependent files of a
/// program under /usr/lib/<program>).
const PACKAGE_LIB: &str = "/usr/lib/lb";

impl ObjectFile {
    /// Where the Debian package installs it.
    pub fn packaged(&self) -> PathBuf {
        Path::new(PACKAGE_LIB).join(self.name)
    }

    /// The path `cargo xtask build` writes in this repository.
    pub fn in_repository(&self) -> PathBuf {
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        crate_dir
            .parent()
            .unwrap_or(crate_dir)
            .join("lb-ebpf/target/bpfel-unknown-none/release")
            .join(self.name)
    }

    /// The places looked at, in order, for a binary at `exe` when the variable is `env`:
    /// the variable alone when set and not empty, else the places the module names.
    pub fn candidates_for(&self, exe: Option<&Path>, env: Option<OsString>) -> Vec<PathBuf> {
        if let Some(p) = env.filter(|p| !p.is_empty()) {
            return vec![PathBuf::from(p)];
        }
        let mut out = Vec::new();
        if let Some(dir) = exe.and_then(Path::parent) {
            out.push(dir.join(self.name));
            if dir.file_name().is_some_and(|n| n == "bin")
                && let Some(prefix) = dir.parent()
            {
                out.push(prefix.join("lib/lb").join(self.name));
            }
        }
        out.push(self.in_repository());
        let packaged = self.packaged();
        if !out.contains(&packaged) {
            out.push(packaged);
        }
        out
    }

    /// The candidates for the running binary and this process's environment.
    fn candidates(&self) -> Vec<PathBuf> {
        let exe = std::env::current_exe().ok();
        self.candidates_for(exe.as_deref(), std::env::var_os(self.env))
    }

    /// The first candidate that exists; else the variable's path when set, or the
    /// repository's build path, which `cargo xtask build` fills.
    pub fn path(&self) -> PathBuf {
        let all = self.candidates();
        if let Some(found) = all.iter().find(|p| p.exists()) {
            return found.clone();
        }
        if std::env::var_os(self.env).is_some_and(|p| !p.is_empty()) {
            return all
                .into_iter()
                .next()
                .unwrap_or_else(|| self.in_repository());
        }
        self.in_repository()
    }

    /// Reads it, with an error that lists every place looked at and how to get it.
    pub fn read(&self) -> Result<Vec<u8>> {
        let all = self.candidates();
        for path in &all {
            match fs::read(path) {
                Ok(bytes) => return Ok(bytes),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => bail!("cannot read the {} {}: {e}", self.what, path.display()),
            }
        }
        let looked: Vec<String> = all.iter().map(|p| p.display().to_string()).collect();
        bail!(
            "cannot find the {} {} (looked at {}): install the lb package, build it with \
             `cargo xtask build`, or set {} to its path",
            self.what,
            self.name,
            looked.join(", "),
            self.env
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const XDP: ObjectFile = ObjectFile {
        name: "lb-xdp",
        env: "LB_XDP_OBJECT",
        what: "XDP object",
    };

    /// The packaged `/usr/bin/lb` finds `/usr/lib/lb/lb-xdp` before the repository's
    /// build path, and beside-the-binary still comes first.
    #[test]
    fn packaged_binary_looks_in_usr_lib_lb() {
        let all = XDP.candidates_for(Some(Path::new("/usr/bin/lb")), None);
        assert_eq!(
            all,
            vec![
                PathBuf::from("/usr/bin/lb-xdp"),
                PathBuf::from("/usr/lib/lb/lb-xdp"),
                XDP.in_repository(),
            ]
        );
    }

    /// A binary under another prefix looks in its own `lib/lb`, then the repository,
    /// then the package's place; one in a build tree, beside itself first.
    #[test]
    fn other_prefix_and_repository_binary() {
        let local = XDP.candidates_for(Some(Path::new("/usr/local/bin/lb")), None);
        assert_eq!(
            local,
            vec![
                PathBuf::from("/usr/local/bin/lb-xdp"),
                PathBuf::from("/usr/local/lib/lb/lb-xdp"),
                XDP.in_repository(),
                XDP.packaged(),
            ]
        );
        let dev = XDP.candidates_for(Some(Path::new("/src/lb/target/debug/lb")), None);
        assert_eq!(
            dev,
            vec![
                PathBuf::from("/src/lb/target/debug/lb-xdp"),
                XDP.in_repository(),
                XDP.packaged(),
            ]
        );
    }

    /// The variable, when set and not empty, is the only place looked at.
    #[test]
    fn the_variable_wins() {
        let all = XDP.candidates_for(
            Some(Path::new("/usr/bin/lb")),
            Some(OsString::from("/tmp/x.o")),
        );
        assert_eq!(all, vec![PathBuf::from("/tmp/x.o")]);
        let empty = XDP.candidates_for(Some(Path::new("/usr/bin/lb")), Some(OsString::new()));
        assert_eq!(empty[1], XDP.packaged());
    }
}
