//! Whole Maglev tables without a system call per entry: a new inner array is memory-mapped
//! (BPF_F_MMAPABLE, Linux 5.5+) and filled with one copy; one entry per update made the
//! first write of 1,000 VIPs take seconds, and BPF_MAP_UPDATE_BATCH still copied and
//! checked each entry in the kernel. The table is filled before it is swapped in, so a
//! packet still never sees a half-written table. Backend slots and counter resets go in
//! one BPF_MAP_UPDATE_BATCH each (Linux 5.6+).
//!
//! The swaps themselves are batched too: every update of an array of maps waits for an RCU
//! grace period (so that no running program still reads the old table when the call
//! returns), several milliseconds each on a small VM, 10-17 s for 1,000 VIPs one by one. One
//! batch of all the changed VIPs waits once (Linux 6.8+; older kernels wait per element
//! inside the batch, which is no slower than before). Each VIP's slot still changes from one
//! whole table to another.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use anyhow::{Context, Result, bail};
use aya::maps::{Array, MapData};
use aya_obj::generated::bpf_cmd;
use lb_common::{BackendSlot, MAGLEV_TABLE_FLAGS};

use crate::network::tables::btf;
use crate::network::tables::sys;

/// The `batch` member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Runs BPF_MAP_UPDATE_BATCH of `keys` and `values` (each `count` long) on `map_fd`;
/// returns how many were written, or the error.
fn update_batch(
    map_fd: u32,
    keys: *const u32,
    values: *const u32,
    count: u32,
) -> std::io::Result<u32> {
    let mut attr = BatchAttr {
        keys: keys as u64,
        values: values as u64,
        count,
        map_fd,
        ..BatchAttr::default()
    };
    // SAFETY: `attr` is a valid bpf_attr prefix for BPF_MAP_UPDATE_BATCH; the caller's key
    // and value arrays hold `count` elements each and outlive the call, which only reads
    // them (and writes `count` back into `attr`).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            bpf_cmd::BPF_MAP_UPDATE_BATCH as libc::c_long,
            &mut attr as *mut BatchAttr,
            std::mem::size_of::<BatchAttr>() as libc::c_uint,
        )
    };
    if rc == 0 {
        Ok(attr.count)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether an error means "this kernel has no batch operation for this map".
fn unsupported(error: &std::io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP))
}

/// Swaps every `(vip id, table)` into MAGLEV (`maglev_fd`) in one batch, falling back to
/// one update each where batches are not supported.
pub(crate) fn swap_tables(maglev_fd: BorrowedFd<'_>, tables: &[(u32, Table)]) -> Result<()> {
    if tables.is_empty() {
        return Ok(());
    }
    let keys: Vec<u32> = tables.iter().map(|(id, _)| *id).collect();
    let fds: Vec<u32> = tables
        .iter()
        .map(|(_, t)| t.fd.as_raw_fd() as u32)
        .collect();
    let count = u32::try_from(keys.len()).context("number of tables")?;
    match update_batch(
        maglev_fd.as_raw_fd() as u32,
        keys.as_ptr(),
        fds.as_ptr(),
        count,
    ) {
        Ok(n) if n == count => Ok(()),
        Ok(n) => bail!("BPF_MAP_UPDATE_BATCH swapped {n} of {count} Maglev tables"),
        Err(e) if unsupported(&e) => {
            for ((id, _), fd) in tables.iter().zip(&fds) {
                sys::update_u32(maglev_fd, *id, *fd).with_context(|| {
                    format!(
                        "swapping in the Maglev table of VIP id {id} (a data path pinned by \
                         another version of lb may want other table flags: `lb unload` it, \
                         then load again)"
                    )
                })?;
            }
            Ok(())
        }
        Err(e) => Err(e).context("BPF_MAP_UPDATE_BATCH on MAGLEV"),
    }
}

/// A Maglev table this process made, with its memory mapping (`BPF_F_MMAPABLE`): written
/// with plain stores, no system call per entry. A table is filled before it is swapped
/// in, so a packet never sees a half-written one.
pub(crate) struct Table {
    /// The map (it lives while this descriptor, a pin or MAGLEV holds it).
    pub fd: OwnedFd,
    len: u32,
    base: *mut u8,
    bytes: usize,
}

// SAFETY: the mapping belongs to this value alone; moving it to another thread moves the
// only access to it.
unsafe impl Send for Table {}

/// Where entry i of a `u32` array sits in its memory mapping: the kernel rounds array
/// elements up to 8 bytes.
const MAPPED_STRIDE: usize = 8;

impl Table {
    /// A new, zeroed inner Maglev array of `len` entries for VIP `vip_id`. With `btf` (see
    /// `btf.rs`) bpftool prints its entries as numbers; a kernel that refuses it gets a
    /// table without.
    pub fn create(vip_id: u32, len: u32, btf: Option<BorrowedFd<'_>>) -> Result<Table> {
        let name = format!("maglev_{vip_id}");
        let spec = |btf| sys::ArraySpec {
            name: &name,
            value_size: 4,
            max_entries: len,
            flags: MAGLEV_TABLE_FLAGS,
            btf,
        };
        let typed = btf.map(|fd| (fd, btf::KEY_TYPE, btf::VALUE_TYPE));
        let fd = match sys::create_array(&spec(typed)) {
            Err(e) if typed.is_some() && e.raw_os_error() == Some(libc::EINVAL) => {
                sys::create_array(&spec(None))
            }
            other => other,
        }
        .context("creating the table")?;
        let (base, bytes) = sys::map_array(fd.as_fd(), len as usize * MAPPED_STRIDE)
            .context("mapping the table")?;
        Ok(Table {
            fd,
            len,
            base,
            bytes,
        })
    }

    /// Entries.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Kernel memory the table holds (its pages).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Makes the table hold `entries` (at most `len`), storing only the entries that
    /// differ; returns how many it stored. Only for a table no program reads: a new one,
    /// or one swapped out of MAGLEV (the swap returns once no program still reads it).
    pub fn write(&mut self, entries: impl Iterator<Item = u32>) -> usize {
        let mut stored = 0;
        for (i, slot) in entries.take(self.len as usize).enumerate() {
            // SAFETY: i < len, so i * 8 + 4 <= len * 8 <= bytes, and the page-aligned base
            // plus a multiple of 8 is aligned for u32.
            let entry = unsafe { self.base.add(i * MAPPED_STRIDE).cast::<u32>() };
            // SAFETY: as above; the mapping lives as long as `self`.
            unsafe {
                if entry.read() != slot {
                    entry.write(slot);
                    stored += 1;
                }
            }
        }
        stored
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `create` made; the map keeps its contents.
        unsafe { libc::munmap(self.base.cast(), self.bytes) };
    }
}

/// Writes backend slots into BACKENDS (`fd`) in one batch, falling back to one update each.
pub(crate) fn write_slots(
    backends: &mut Array<MapData, BackendSlot>,
    fd: BorrowedFd<'_>,
    slots: &[(u32, BackendSlot)],
) -> Result<()> {
    if slots.is_empty() {
        return Ok(());
    }
    let keys: Vec<u32> = slots.iter().map(|(k, _)| *k).collect();
    let values: Vec<BackendSlot> = slots.iter().map(|(_, v)| *v).collect();
    let count = u32::try_from(keys.len()).context("number of backend slots")?;
    match update_batch(
        fd.as_raw_fd() as u32,
        keys.as_ptr(),
        values.as_ptr().cast(),
        count,
    ) {
        Ok(n) if n == count => Ok(()),
        Ok(n) => bail!("BPF_MAP_UPDATE_BATCH wrote {n} of {count} backend slots"),
        Err(e) if unsupported(&e) => {
            for (slot, entry) in slots {
                backends.set(*slot, *entry, 0).context("writing BACKENDS")?;
            }
            Ok(())
        }
        Err(e) => Err(e).context("BPF_MAP_UPDATE_BATCH on BACKENDS"),
    }
}
