//! Writing a plan into the data path's maps, and the bookkeeping that keeps a restarted daemon writing the same way.

pub(in crate::network) mod counters;
pub(in crate::network) mod filter;
pub(in crate::network) mod hops;
pub(in crate::network) mod index_set;
pub(in crate::network) mod maps;
pub(in crate::network) mod nat;
pub(in crate::network) mod state;
pub(in crate::network) mod tunnel;
pub(in crate::network) mod writer;
