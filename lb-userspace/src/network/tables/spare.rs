//! The Maglev tables this process made: the one each VIP uses, and the one it used before
//! (its spare). A change of a VIP's backends rewrites the spare, where it differs, and
//! swaps it in, instead of creating, mapping and later freeing a new table: for 1,000
//! VIPs changed by one failing backend that was a fifth of the time from the decision to
//! every table swapped. A spare is written only once the swap that took it out of MAGLEV
//! has returned, and that swap returns only when no program still reads it, so a packet
//! still never sees a half-written table.
//!
//! Spares double the tables' kernel memory, so they are kept up to [`SPARE_BUDGET`]
//! bytes; beyond it, VIPs get new tables as before.

use std::collections::HashMap;
use std::os::fd::BorrowedFd;

use anyhow::Result;

use crate::network::tables::batch::Table;

/// Most kernel memory kept in spare tables (1,000 tables of 1,021 entries take 12 MiB,
/// 100 of 65,537 entries 50 MiB).
pub(crate) const SPARE_BUDGET: usize = 64 << 20;

/// The tables in use (made by this process; an adopted data path's are not here) and the
/// spares.
#[derive(Default)]
pub(crate) struct Pool {
    active: HashMap<u32, Table>,
    spares: HashMap<u32, Table>,
    spare_bytes: usize,
}

impl Pool {
    /// A table of `len` entries for VIP `vip_id` holding `entries`, not yet in MAGLEV: the
    /// VIP's spare rewritten where it differs, else a new one.
    pub fn fill(
        &mut self,
        vip_id: u32,
        len: u32,
        entries: impl Iterator<Item = u32>,
        btf: Option<BorrowedFd<'_>>,
    ) -> Result<Table> {
        let mut table = match self.spares.remove(&vip_id) {
            Some(spare) => {
                self.spare_bytes -= spare.bytes();
                if spare.len() == len {
                    spare
                } else {
                    Table::create(vip_id, len, btf)?
                }
            }
            None => Table::create(vip_id, len, btf)?,
        };
        table.write(entries);
        Ok(table)
    }

    /// `tables` are in MAGLEV now: the tables they replaced become spares, within the
    /// budget.
    pub fn swapped(&mut self, tables: Vec<(u32, Table)>) {
        for (vip_id, table) in tables {
            if let Some(old) = self.active.insert(vip_id, table)
                && self.spare_bytes + old.bytes() <= SPARE_BUDGET
            {
                self.spare_bytes += old.bytes();
                self.spares.insert(vip_id, old);
            }
        }
    }

    /// VIP `vip_id` has no table any more (removed from MAGLEV): both of its go.
    pub fn forget(&mut self, vip_id: u32) {
        self.active.remove(&vip_id);
        if let Some(spare) = self.spares.remove(&vip_id) {
            self.spare_bytes -= spare.bytes();
        }
    }
}
