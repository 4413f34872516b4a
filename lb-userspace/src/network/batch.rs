//! Whole Maglev tables in one system call: a new inner array is filled with
//! BPF_MAP_UPDATE_BATCH (Linux 5.6+) instead of one update per entry, which made the first
//! write of 1,000 VIPs take seconds. The table is filled before it is swapped in, so a
//! packet still never sees a half-written table.

use std::os::fd::{AsFd, AsRawFd};

use anyhow::{Context, Result, bail};
use aya::maps::{Array, Map, MapData};
use aya_obj::generated::{bpf_cmd, bpf_map_type};
use lb_common::BPF_F_INNER_MAP;

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

/// A new inner Maglev array holding `table` (entry i = backend slot of index i).
pub(crate) fn maglev_table(table: &[u32]) -> Result<Array<MapData, u32>> {
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
    let mut attr = BatchAttr {
        keys: keys.as_ptr() as u64,
        values: table.as_ptr() as u64,
        count: size,
        map_fd: data.fd().as_fd().as_raw_fd() as u32,
        ..BatchAttr::default()
    };
    // SAFETY: `attr` is a valid bpf_attr prefix for BPF_MAP_UPDATE_BATCH; the key and value
    // arrays hold `count` elements each and outlive the call, which only reads them (and
    // writes `count` back into `attr`).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            bpf_cmd::BPF_MAP_UPDATE_BATCH as libc::c_long,
            &mut attr as *mut BatchAttr,
            std::mem::size_of::<BatchAttr>() as libc::c_uint,
        )
    };
    let mut array: Array<MapData, u32> =
        Array::try_from(Map::Array(data)).context("the new table as an array")?;
    if rc != 0 {
        let error = std::io::Error::last_os_error();
        // A kernel without batch operations: fill it one entry at a time.
        if !matches!(error.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) {
            bail!("BPF_MAP_UPDATE_BATCH on a new Maglev table: {error}");
        }
        for (i, slot) in table.iter().enumerate() {
            array.set(i as u32, *slot, 0)?;
        }
    } else if attr.count != size {
        bail!(
            "BPF_MAP_UPDATE_BATCH wrote {} of {size} entries",
            attr.count
        );
    }
    Ok(array)
}
