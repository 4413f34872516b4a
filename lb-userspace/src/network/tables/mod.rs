//! Each VIP's Maglev table in the kernel: made whole with one mapping, typed for bpftool, pinned, kept spare, read back.

pub(in crate::network) mod batch;
pub(in crate::network) mod btf;
pub(in crate::network) mod pins;
pub(in crate::network) mod spare;
pub(in crate::network) mod sys;
pub(in crate::network) mod table;
