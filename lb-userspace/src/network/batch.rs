//! Whole Maglev tables in one system call: a new inner array is filled with
//! BPF_MAP_UPDATE_BATCH (Linux 5.6+) instead of one update per entry, which made the first
//! write of 1,000 VIPs take seconds. The table is filled before it is swapped in, so a
//! packet still never sees a half-written table.
//!
//! The swaps themselves are batched too: every update of an array of maps waits for an RCU
//! grace period (so that no running program still reads the old table when the call
//! returns), several milliseconds each on a small VM, 10-17 s for 1,000 VIPs one by one. One
//! batch of all the changed VIPs waits once (Linux 6.8+; older kernels wait per element
//! inside the batch, which is no slower than before). Each VIP's slot still changes from one
//! whole table to another.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use anyhow::{Context, Result, bail};
use aya::maps::{Array, ArrayOfMaps, Map, MapData, PerCpuArray};
use aya_obj::generated::{bpf_cmd, bpf_map_type};
use lb_common::{BPF_F_INNER_MAP, BackendSlot, Counters};

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
pub(crate) fn swap_tables(
    maglev: &mut ArrayOfMaps<MapData, Array<MapData, u32>>,
    maglev_fd: BorrowedFd<'_>,
    tables: &[(u32, Table)],
) -> Result<()> {
    if tables.is_empty() {
        return Ok(());
    }
    let keys: Vec<u32> = tables.iter().map(|(id, _)| *id).collect();
    let fds: Vec<u32> = tables.iter().map(|(_, t)| t.fd as u32).collect();
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
            for (id, table) in tables {
                maglev
                    .set(*id, &table.array, 0)
                    .with_context(|| format!("swapping in the Maglev table of VIP id {id}"))?;
            }
            Ok(())
        }
        Err(e) => Err(e).context("BPF_MAP_UPDATE_BATCH on MAGLEV"),
    }
}

/// A filled Maglev table not yet in MAGLEV.
pub(crate) struct Table {
    /// The array (its descriptor closes with it).
    pub array: Array<MapData, u32>,
    /// The array's descriptor number, valid while `array` lives.
    fd: RawFd,
}

/// A new inner Maglev array holding `table` (entry i = backend slot of index i).
pub(crate) fn maglev_table(table: &[u32]) -> Result<Table> {
    let size = u32::try_from(table.len()).context("Maglev table size")?;
    let obj = aya_obj::Map::new_from_params(
        bpf_map_type::BPF_MAP_TYPE_ARRAY as u32,
        4,
        4,
        size,
        BPF_F_INNER_MAP,
    );
    let data = MapData::create(obj, "maglev_table", None).context("creating the table")?;
    let keys: Vec<u32> = (0..size).collect();
    let fd = data.fd().as_fd().as_raw_fd();
    let written = update_batch(fd as u32, keys.as_ptr(), table.as_ptr().cast(), size);
    let mut array: Array<MapData, u32> =
        Array::try_from(Map::Array(data)).context("the new table as an array")?;
    match written {
        Ok(n) if n == size => {}
        Ok(n) => bail!("BPF_MAP_UPDATE_BATCH wrote {n} of {size} entries"),
        // A kernel without batch operations: fill it one entry at a time.
        Err(e) if unsupported(&e) => {
            for (i, slot) in table.iter().enumerate() {
                array.set(i as u32, *slot, 0)?;
            }
        }
        Err(e) => bail!("BPF_MAP_UPDATE_BATCH on a new Maglev table: {e}"),
    }
    Ok(Table { array, fd })
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

/// Zeroes the per-CPU counters of `slots` in BACKEND_STATS (`fd`) in one batch (a per-CPU
/// value is one counter block per possible CPU), falling back to one update each.
pub(crate) fn reset_counters(
    stats: &mut PerCpuArray<MapData, Counters>,
    fd: BorrowedFd<'_>,
    slots: &[u32],
) -> Result<()> {
    if slots.is_empty() {
        return Ok(());
    }
    let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
    // Counters holds only u64s, so each CPU's block is already 8-byte aligned in size.
    let zeros = vec![Counters::default(); slots.len() * cpus];
    let count = u32::try_from(slots.len()).context("number of counter blocks")?;
    match update_batch(
        fd.as_raw_fd() as u32,
        slots.as_ptr(),
        zeros.as_ptr().cast(),
        count,
    ) {
        Ok(n) if n == count => Ok(()),
        Ok(n) => bail!("BPF_MAP_UPDATE_BATCH reset {n} of {count} counter blocks"),
        Err(e) if unsupported(&e) => {
            for slot in slots {
                super::maps::Maps::reset_counters(stats, *slot)?;
            }
            Ok(())
        }
        Err(e) => Err(e).context("BPF_MAP_UPDATE_BATCH on BACKEND_STATS"),
    }
}
