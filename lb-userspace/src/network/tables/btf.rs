//! The type information of the Maglev tables. The writer creates each VIP's table itself,
//! so the kernel knows nothing of its key and value unless told: without BTF,
//! `bpftool map dump` prints every entry as raw hex bytes. This is a minimal BTF of two
//! types, loaded once per data path: key `u32` (the index a flow hashes to) and value
//! `backend_slot` (a `u32`: the BACKENDS index of the backend at that entry).

use std::os::fd::OwnedFd;

use crate::network::tables::sys;

/// Type id of `u32` (the key).
pub(crate) const KEY_TYPE: u32 = 1;
/// Type id of `backend_slot` (the value).
pub(crate) const VALUE_TYPE: u32 = 2;

const BTF_MAGIC: u16 = 0xeb9f;
const BTF_KIND_INT: u32 = 1;
const BTF_KIND_TYPEDEF: u32 = 8;
/// The string section: offset 0 is the empty name, then the two type names.
const STRINGS: &[u8] = b"\0u32\0backend_slot\0";
const U32_NAME: u32 = 1;
const SLOT_NAME: u32 = 5;

/// The blob: header, `[1] INT u32 size 4 bits 32`, `[2] TYPEDEF backend_slot -> [1]`, strings.
fn blob() -> Vec<u8> {
    let mut types = Vec::new();
    for word in [
        U32_NAME,
        BTF_KIND_INT << 24,
        4,
        32, // encoding 0 (unsigned), offset 0, 32 bits
        SLOT_NAME,
        BTF_KIND_TYPEDEF << 24,
        KEY_TYPE,
    ] {
        types.extend_from_slice(&word.to_ne_bytes());
    }
    let header_len = 24u32;
    let mut out = Vec::with_capacity(24 + types.len() + STRINGS.len());
    out.extend_from_slice(&BTF_MAGIC.to_ne_bytes());
    out.push(1); // version
    out.push(0); // flags
    for word in [
        header_len,
        0,
        types.len() as u32,
        types.len() as u32,
        STRINGS.len() as u32,
    ] {
        out.extend_from_slice(&word.to_ne_bytes());
    }
    out.extend_from_slice(&types);
    out.extend_from_slice(STRINGS);
    out
}

/// Loads the BTF of the Maglev tables; `None` (tables without type information, printed
/// as hex by bpftool but otherwise the same) where the kernel refuses it.
pub(crate) fn load() -> Option<OwnedFd> {
    match sys::load_btf(&blob()) {
        Ok(fd) => Some(fd),
        Err(e) => {
            tracing::warn!(
                "the kernel refused the type information of the Maglev tables ({e}); \
                 bpftool will show their entries as hex"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blob's sections line up (what the kernel's BTF parser checks first).
    #[test]
    fn blob_sections_are_where_the_header_says() {
        let b = blob();
        let word = |at: usize| u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        assert_eq!(u16::from_ne_bytes([b[0], b[1]]), BTF_MAGIC);
        let (hdr, type_len, str_off, str_len) = (word(4), word(12), word(16), word(20));
        assert_eq!(hdr, 24);
        assert_eq!(type_len, 28, "INT (16 bytes) and TYPEDEF (12 bytes)");
        assert_eq!(b.len() as u32, hdr + str_off + str_len);
        let strings = &b[(hdr + str_off) as usize..];
        assert_eq!(&strings[U32_NAME as usize..][..3], b"u32");
        assert_eq!(&strings[SLOT_NAME as usize..][..12], b"backend_slot");
    }
}
