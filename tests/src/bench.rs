//! What the benchmark binaries share: a scratch directory, free loopback ports, log tails,
//! the workspace root and peers' version lines.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

/// A scratch directory under /tmp, removed with everything in it on drop.
pub struct Scratch {
    /// Its path.
    pub path: PathBuf,
}

impl Scratch {
    /// Creates a fresh directory named after `bench` and this process (0755, so that
    /// peers running as other users, such as nginx workers, can reach it).
    pub fn new(bench: &str) -> Result<Self> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let path = std::env::temp_dir().join(format!("{bench}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self { path })
    }

    /// Creates a subdirectory and returns its path.
    pub fn dir(&self, name: &str) -> Result<PathBuf> {
        let p = self.path.join(name);
        std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The last `lines` lines of a log file (for error messages).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A loopback TCP port nobody listens on right now.
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("finding a free loopback port")?;
    Ok(l.local_addr()?.port())
}

/// The workspace root (where `target/` is).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// First line a tool prints about its version (stdout or stderr), for a report's header.
pub fn version(bin: &str, arg: &str) -> String {
    Command::new(bin)
        .arg(arg)
        .output()
        .map(|o| {
            let mut all = String::from_utf8_lossy(&o.stdout).into_owned();
            all.push_str(&String::from_utf8_lossy(&o.stderr));
            all.lines().next().unwrap_or_default().trim().to_string()
        })
        .unwrap_or_else(|e| format!("{bin}: {e}"))
}
