//! Each VIP's Maglev table pinned by VIP id, `<pin dir>/maps/maglev/<vip id>`, so an
//! operator can read the table a VIP uses (`bpftool map dump pinned .../maps/maglev/3`)
//! without walking MAGLEV's inner map ids. A pin always names the table MAGLEV holds for
//! that id: it is replaced (pinned beside, then renamed over) when a new table is swapped
//! in, removed with the table, and made to match MAGLEV again when a data path is
//! adopted, so a restart neither leaks a table nor leaves a stale one.

use std::fs;
use std::io::ErrorKind;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use tracing::warn;

use crate::network::tables::sys;

/// The directory of the per-VIP pins under a pin directory.
pub(crate) fn dir(pin_dir: &Path) -> PathBuf {
    pin_dir.join("maps").join("maglev")
}

/// Pins `table` as the table of VIP `id`, replacing the pin of the table before it in one
/// rename (a reader of the path sees the old table or the new one).
pub(crate) fn replace(dir: &Path, id: u32, table: BorrowedFd<'_>) -> Result<()> {
    let path = dir.join(id.to_string());
    // bpffs refuses names with a dot.
    let tmp = dir.join(format!("new_{id}"));
    let pinned = match sys::pin(table, &tmp) {
        // Left by a process that stopped between pinning and renaming.
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
            let _ = fs::remove_file(&tmp);
            sys::pin(table, &tmp)
        }
        other => other,
    };
    pinned.with_context(|| format!("pinning the Maglev table of VIP id {id}"))?;
    fs::rename(&tmp, &path).with_context(|| format!("renaming the pin to {}", path.display()))
}

/// Removes the pin of VIP `id` (there is none for a VIP without table).
pub(crate) fn remove(dir: &Path, id: u32) -> Result<()> {
    let path = dir.join(id.to_string());
    match fs::remove_file(&path) {
        Err(e) if e.kind() != ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Makes the pins under `dir` name exactly the tables MAGLEV (`maglev`) holds for `ids`:
/// each is pinned afresh from MAGLEV, and every other file (a removed VIP's, one left by a
/// process that died between a swap and its pin) is removed. Used once per process, on
/// its first write of an adopted or freshly loaded data path.
pub(crate) fn sync(dir: &Path, maglev: BorrowedFd<'_>, ids: &[u32]) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let wanted: std::collections::HashSet<String> = ids.iter().map(u32::to_string).collect();
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        if !wanted.contains(entry.file_name().to_string_lossy().as_ref()) {
            fs::remove_file(entry.path())
                .with_context(|| format!("removing the stale pin {}", entry.path().display()))?;
        }
    }
    for &id in ids {
        let inner = match sys::lookup_u32(maglev, id) {
            Ok(inner) => inner,
            // Nothing to pin: the next table of this VIP is pinned as it is swapped in.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                warn!(
                    vip_id = id,
                    "MAGLEV holds no table for this VIP id; not pinned"
                );
                continue;
            }
            Err(e) => {
                return Err(e).with_context(|| format!("reading MAGLEV's table of VIP id {id}"));
            }
        };
        let table = sys::map_fd_by_id(inner)
            .with_context(|| format!("opening the Maglev table of VIP id {id}"))?;
        replace(dir, id, table.as_fd())?;
    }
    Ok(())
}
