//! The runtime files an `lb run` leaves in `/run/lb`, and which of them are pruned.
//!
//! Per configuration file (named `<config path with / as ->.<suffix>`):
//! - `.states.json`: the health decisions, saved each second and at exit; the next start
//!   restores them when younger than `--restore-within`. Kept at a clean exit, since a
//!   restart (`systemctl restart`, stop then start) reads it; an upgrade's new process
//!   reads it too;
//! - `.handover`: the socket an `lb run --upgrade` connects to. Removed at a clean exit;
//!   after a hand-over the new process has bound its own at the same path;
//! - `.drained`: the node stays drained across restarts until `lb node resume`;
//! - `.owner` (this module): the absolute configuration path and the restore window of the
//!   processes running it. Each `lb run` holds a shared lock on it while it runs (the old
//!   and the new process of an upgrade both do), so a file nobody locks belongs to no
//!   running process.
//!
//! Without pruning these piled up, one set per configuration path ever run (every test's
//! temporary directory). At start `lb run` removes, for each `.owner` nobody locks: the
//! hand-over socket (nothing listens on it), the saved states once older than the owner's
//! restore window, and everything, the record included, when the configuration file is gone
//! (nothing can start with it again). Files of another version with no `.owner`: a hand-over
//! socket that refuses connections and saved states untouched for ten minutes. And the
//! temporary files of an interrupted atomic write (`<name>.<pid>-<n>.tmp`) whose process is
//! gone. The data path's files (named after a pin directory) belong to the pinned program,
//! which outlives every `lb run`, and are left alone.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};

use crate::network::run_file;

/// The directory of the runtime files.
const RUN_DIR: &str = "/run/lb";
/// Saved states of an older `lb run` (no `.owner`) are pruned after this long untouched; a
/// running one touches them each second.
const ORPHAN_AGE: Duration = Duration::from_secs(600);
/// A temporary file younger than this may still be renamed into place.
const TMP_AGE: Duration = Duration::from_secs(60);

/// What an `.owner` file says.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    /// The configuration file, absolute.
    config: PathBuf,
    /// The `--restore-within` of the last process that ran it, in milliseconds.
    restore_within_ms: u64,
}

/// This process's claim on its configuration's runtime files; the shared lock lasts as long
/// as the value (the descriptor is close-on-exec: a child does not inherit the claim).
pub(crate) struct Owner {
    _file: File,
}

/// The absolute form of `config_path`, as the runtime files are named after it.
fn absolute(config_path: &Path) -> PathBuf {
    std::fs::canonicalize(config_path).unwrap_or_else(|_| config_path.into())
}

/// `flock(2)` on `file`; false when `nonblocking` and another process holds a conflicting lock.
fn lock(file: &File, operation: i32, nonblocking: bool) -> std::io::Result<bool> {
    let flags = if nonblocking {
        operation | libc::LOCK_NB
    } else {
        operation
    };
    loop {
        // SAFETY: a descriptor this process owns; flock only reads the flags.
        if unsafe { libc::flock(file.as_raw_fd(), flags) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) if nonblocking => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// Claims the runtime files of `config_path` for this process: writes its `.owner` record
/// and holds a shared lock on it until the value is dropped (at exit).
pub(crate) fn claim(config_path: &Path, restore_within: Duration) -> Result<Owner> {
    let config = absolute(config_path);
    let path = run_file(&config, "owner");
    std::fs::create_dir_all(RUN_DIR).with_context(|| format!("creating {RUN_DIR}"))?;
    let record = Record {
        config,
        restore_within_ms: u64::try_from(restore_within.as_millis()).unwrap_or(u64::MAX),
    };
    let mut text = serde_json::to_vec(&record)?;
    text.push(b'\n');
    // A pruner may remove the file between our open and our lock: then the lock is on a
    // file nobody finds, and the claim is made again on a new one.
    for _ in 0..100 {
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        lock(&file, libc::LOCK_SH, false).with_context(|| format!("locking {}", path.display()))?;
        let same = match (file.metadata(), std::fs::metadata(&path)) {
            (Ok(held), Ok(named)) => held.ino() == named.ino() && held.dev() == named.dev(),
            _ => false,
        };
        if !same {
            continue;
        }
        // Written in place (a rename would leave the lock on the old file); the old and
        // the new process of an upgrade write the same text.
        use std::os::unix::fs::FileExt;
        file.set_len(0)?;
        file.write_all_at(&text, 0)
            .with_context(|| format!("writing {}", path.display()))?;
        return Ok(Owner { _file: file });
    }
    anyhow::bail!("{} kept being removed while claiming it", path.display())
}

/// Removes the stale runtime files of other configurations (see the module's comment) and
/// says how many went. Errors are logged: a file that cannot be read or removed stays.
pub(crate) fn prune() -> usize {
    let entries = match std::fs::read_dir(RUN_DIR) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return 0,
        Err(e) => {
            warn!("reading {RUN_DIR}: {e}");
            return 0;
        }
    };
    let names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    let mut removed = 0;
    for name in &names {
        if let Some(stem) = name.strip_suffix(".owner") {
            removed += prune_owned(stem);
        }
    }
    for name in &names {
        let path = Path::new(RUN_DIR).join(name);
        let owned = |stem: &str| Path::new(RUN_DIR).join(format!("{stem}.owner")).exists();
        let stale = if let Some(stem) = name.strip_suffix(".states.json") {
            !owned(stem) && older_than(&path, ORPHAN_AGE)
        } else if let Some(stem) = name.strip_suffix(".handover") {
            !owned(stem) && refuses(&path)
        } else if name.ends_with(".tmp") {
            tmp_is_stale(name, &path)
        } else {
            false
        };
        if stale && remove(&path) {
            removed += 1;
        }
    }
    if removed > 0 {
        info!(removed, "removed stale runtime files from {RUN_DIR}");
    }
    removed
}

/// The files of the configuration whose `.owner` is `<stem>.owner`, if no process holds it.
fn prune_owned(stem: &str) -> usize {
    let dir = Path::new(RUN_DIR);
    let owner_path = dir.join(format!("{stem}.owner"));
    let Ok(file) = File::options().read(true).write(true).open(&owner_path) else {
        return 0;
    };
    match lock(&file, libc::LOCK_EX, true) {
        Ok(true) => {}
        Ok(false) => return 0,
        Err(e) => {
            debug!("locking {}: {e}", owner_path.display());
            return 0;
        }
    }
    // Held exclusively: no `lb run` of this configuration runs, and one that starts now
    // waits for this lock and then claims a new file if this one is removed.
    let record: Option<Record> = std::fs::read(&owner_path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    let file_of = |suffix: &str| dir.join(format!("{stem}.{suffix}"));
    let mut removed = 0;
    let mut gone = |path: PathBuf| {
        if path.exists() && remove(&path) {
            removed += 1;
        }
    };
    gone(file_of("handover"));
    let config_gone = record.as_ref().is_none_or(|r| !r.config.exists());
    let window = record.as_ref().map_or(Duration::ZERO, |r| {
        Duration::from_millis(r.restore_within_ms)
    });
    let states = file_of("states.json");
    if config_gone || older_than(&states, window) {
        gone(states);
    }
    if config_gone {
        gone(file_of("drained"));
    }
    if !file_of("states.json").exists() && !file_of("drained").exists() {
        gone(owner_path);
    }
    removed
}

/// True when `path` exists and was last modified more than `age` ago.
fn older_than(path: &Path, age: Duration) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|elapsed| elapsed > age)
}

/// True when nothing listens on the Unix socket at `path` any more.
fn refuses(path: &Path) -> bool {
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => false,
        Err(e) => e.raw_os_error() == Some(libc::ECONNREFUSED),
    }
}

/// `<name>.<pid>-<n>.tmp` of a process that is gone, written more than a minute ago.
fn tmp_is_stale(name: &str, path: &Path) -> bool {
    let Some(pid) = name
        .strip_suffix(".tmp")
        .and_then(|rest| rest.rsplit_once('.'))
        .and_then(|(_, tag)| tag.split_once('-'))
        .and_then(|(pid, _)| pid.parse::<u32>().ok())
    else {
        return false;
    };
    !Path::new(&format!("/proc/{pid}")).exists() && older_than(path, TMP_AGE)
}

fn remove(path: &Path) -> bool {
    match std::fs::remove_file(path) {
        Ok(()) => {
            debug!("removed stale {}", path.display());
            true
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => {
            warn!("removing stale {}: {e}", path.display());
            false
        }
    }
}

/// Removes what a clean exit (SIGTERM, SIGINT) leaves no use for: the hand-over socket.
/// The saved health states stay for a restart within the restore window; the next start of
/// any `lb run` prunes them after it (or once the configuration file is gone).
pub(crate) fn clean_exit(config_path: &Path) {
    let _ = std::fs::remove_file(super::handover::socket_path(config_path));
}
