//! The few bpf(2) commands aya does not offer in the form the writer needs: creating a
//! Maglev table with its own BTF and name, loading that BTF, pinning a descriptor, and
//! updating one element of a map given by descriptor.

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use aya_obj::generated::bpf_cmd;

/// Runs bpf(2) `cmd` with `attr` (a `union bpf_attr` prefix the caller filled).
fn bpf<T>(cmd: bpf_cmd, attr: &mut T) -> std::io::Result<i64> {
    // SAFETY: `attr` is a valid, fully initialized bpf_attr prefix for `cmd` whose pointers
    // (if any) the caller keeps alive for the call; its size is passed along.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut T,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// A descriptor the kernel just returned, owned from now on.
fn owned(fd: i64) -> std::io::Result<OwnedFd> {
    let fd = i32::try_from(fd).map_err(|_| std::io::Error::other("descriptor out of range"))?;
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The BPF_MAP_CREATE member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
    map_ifindex: u32,
    btf_fd: u32,
    btf_key_type_id: u32,
    btf_value_type_id: u32,
    btf_vmlinux_value_type_id: u32,
    map_extra: u64,
}

/// What a new array map looks like.
pub(crate) struct ArraySpec<'a> {
    /// Name shown by `bpftool map list` (at most 15 bytes; longer is cut).
    pub name: &'a str,
    pub value_size: u32,
    pub max_entries: u32,
    pub flags: u32,
    /// BTF describing key and value: (BTF descriptor, key type id, value type id).
    pub btf: Option<(BorrowedFd<'a>, u32, u32)>,
}

/// Maps the values of a memory-mappable BPF array (`fd`), at least `bytes` of them rounded
/// up to whole pages, shared and writable: returns the page-aligned base and the length
/// mapped (for `munmap`). The kernel refuses a length beyond the array's values.
pub(crate) fn map_array(fd: BorrowedFd<'_>, bytes: usize) -> std::io::Result<(*mut u8, usize)> {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let len = bytes.div_ceil(page) * page;
    // SAFETY: a new shared mapping of the array's values; nothing else aliases it.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok((base.cast(), len))
}

/// Creates a BPF_MAP_TYPE_ARRAY (u32 keys).
pub(crate) fn create_array(spec: &ArraySpec<'_>) -> std::io::Result<OwnedFd> {
    let mut attr = MapCreateAttr {
        map_type: aya_obj::generated::bpf_map_type::BPF_MAP_TYPE_ARRAY as u32,
        key_size: 4,
        value_size: spec.value_size,
        max_entries: spec.max_entries,
        map_flags: spec.flags,
        ..MapCreateAttr::default()
    };
    let name = spec.name.as_bytes();
    let n = name.len().min(attr.map_name.len() - 1);
    attr.map_name[..n].copy_from_slice(&name[..n]);
    if let Some((fd, key, value)) = spec.btf {
        attr.btf_fd = fd.as_raw_fd() as u32;
        attr.btf_key_type_id = key;
        attr.btf_value_type_id = value;
    }
    owned(bpf(bpf_cmd::BPF_MAP_CREATE, &mut attr)?)
}

/// The BPF_BTF_LOAD member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct BtfLoadAttr {
    btf: u64,
    btf_log_buf: u64,
    btf_size: u32,
    btf_log_size: u32,
    btf_log_level: u32,
}

/// Loads a BTF blob into the kernel.
pub(crate) fn load_btf(blob: &[u8]) -> std::io::Result<OwnedFd> {
    let mut attr = BtfLoadAttr {
        btf: blob.as_ptr() as u64,
        btf_size: u32::try_from(blob.len()).map_err(std::io::Error::other)?,
        ..BtfLoadAttr::default()
    };
    owned(bpf(bpf_cmd::BPF_BTF_LOAD, &mut attr)?)
}

/// The BPF_OBJ_PIN member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct PinAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
}

/// Pins the object `fd` at `path` (on a bpffs; fails if the path exists).
pub(crate) fn pin(fd: BorrowedFd<'_>, path: &Path) -> std::io::Result<()> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::other("a pin path with a NUL byte"))?;
    let mut attr = PinAttr {
        pathname: c.as_ptr() as u64,
        bpf_fd: fd.as_raw_fd() as u32,
        ..PinAttr::default()
    };
    bpf(bpf_cmd::BPF_OBJ_PIN, &mut attr).map(drop)
}

/// The BPF_MAP_*_ELEM member of `union bpf_attr` (lookup, update, delete).
#[repr(C)]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// Sets element `key` of the map `map` to `value` (BPF_MAP_UPDATE_ELEM, any flags 0).
pub(crate) fn update_u32(map: BorrowedFd<'_>, key: u32, value: u32) -> std::io::Result<()> {
    let mut attr = ElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        ..ElemAttr::default()
    };
    bpf(bpf_cmd::BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
}

/// Deletes element `key` of the map `map` (BPF_MAP_DELETE_ELEM).
pub(crate) fn delete_u32(map: BorrowedFd<'_>, key: u32) -> std::io::Result<()> {
    let mut attr = ElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        ..ElemAttr::default()
    };
    bpf(bpf_cmd::BPF_MAP_DELETE_ELEM, &mut attr).map(drop)
}

/// Element `key` of a map whose values are u32 (the inner map id, for an array of maps).
pub(crate) fn lookup_u32(map: BorrowedFd<'_>, key: u32) -> std::io::Result<u32> {
    let mut value = 0u32;
    let mut attr = ElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        value: &mut value as *mut u32 as u64,
        ..ElemAttr::default()
    };
    bpf(bpf_cmd::BPF_MAP_LOOKUP_ELEM, &mut attr)?;
    Ok(value)
}

/// The BPF_MAP_GET_FD_BY_ID member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct GetByIdAttr {
    id: u32,
    next_id: u32,
    open_flags: u32,
}

/// A descriptor of the map with kernel id `id`.
pub(crate) fn map_fd_by_id(id: u32) -> std::io::Result<OwnedFd> {
    let mut attr = GetByIdAttr {
        id,
        ..GetByIdAttr::default()
    };
    owned(bpf(bpf_cmd::BPF_MAP_GET_FD_BY_ID, &mut attr)?)
}
