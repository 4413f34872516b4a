//! The bpf filesystem the pins live on, for the balancer's loader and the agent's alike.
//! Like `stats`, it imports nothing of the library.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result, bail};

/// Makes sure `dir` is on a mounted bpffs (mounting /sys/fs/bpf if nothing is there) and
/// exists. Refuses to mount one in a mount namespace of its own (`ip netns exec` makes one
/// and remounts /sys without the host's bpffs): the pins, and the program they keep
/// attached, would vanish with this process while the command reported success.
pub fn ensure(dir: &Path) -> Result<()> {
    let root = Path::new("/sys/fs/bpf");
    if dir.starts_with(root) && !is_bpffs(root) {
        if own_mount_namespace() {
            bail!(
                "/sys/fs/bpf is not the host's bpf filesystem in this mount namespace (as \
                 under `ip netns exec`, which remounts /sys): pins made here would vanish \
                 when lb exits, and the program with them. Run lb with \
                 `nsenter --net=/run/netns/NS lb ...` instead, or bind-mount the host's \
                 bpffs onto /sys/fs/bpf first"
            );
        }
        fs::create_dir_all(root).context("creating /sys/fs/bpf")?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "bpf", "bpf", "/sys/fs/bpf"])
            .status()
            .context("running mount -t bpf")?
            .success();
        if !ok {
            bail!("/sys/fs/bpf is not a bpf filesystem and mounting one failed");
        }
    }
    fs::create_dir_all(dir).with_context(|| format!("creating pin directory {}", dir.display()))
}

/// Whether this process runs in another mount namespace than the process that started it
/// (false when that cannot be read, so nothing that works is refused).
fn own_mount_namespace() -> bool {
    let parent = format!("/proc/{}/ns/mnt", std::os::unix::process::parent_id());
    match (fs::read_link("/proc/self/ns/mnt"), fs::read_link(parent)) {
        (Ok(me), Ok(parent)) => me != parent,
        _ => false,
    }
}

/// Whether `path` is on a bpf filesystem.
fn is_bpffs(path: &Path) -> bool {
    const BPF_FS_MAGIC: i64 = 0xcafe4a11;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a zeroed statfs is a valid out-parameter.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid NUL-terminated path and st a properly sized out-parameter.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type as i64 == BPF_FS_MAGIC
}
